//! The activity form's lottery part (docs/lottery.md): how the activity sells, and for a lottery
//! its registration window and its codes' lifetime. The server's rules decide (their codes
//! `REGISTRATION_WINDOW_INVALID`, `CODE_TTL_OUT_OF_RANGE` come back under the form); this
//! only turns the fields into the wire's values.

use chrono::{DateTime, Utc};
use contract::{ActivityInput, SaleMode, DEFAULT_CODE_TTL_S};
use leptos::prelude::*;

use super::{time_for_input, time_from_input, ZonedTimeField};

/// The fields, one signal each, seeded from the activity being edited (or first come).
#[derive(Clone, Copy)]
pub(super) struct LotteryFields {
    mode: RwSignal<SaleMode>,
    opens: RwSignal<String>,
    closes: RwSignal<String>,
    code_ttl: RwSignal<String>,
}

/// What the save sends of them: the mode, the window and the code lifetime.
pub(super) struct LotteryTerms {
    pub(super) mode: SaleMode,
    pub(super) registration_opens_at: Option<DateTime<Utc>>,
    pub(super) registration_closes_at: Option<DateTime<Utc>>,
    pub(super) code_ttl_s: Option<i64>,
}

impl LotteryFields {
    pub(super) fn new(initial: Option<&ActivityInput>) -> Self {
        let time = |pick: fn(&ActivityInput) -> Option<DateTime<Utc>>| {
            RwSignal::new(
                initial
                    .and_then(pick)
                    .map(time_for_input)
                    .unwrap_or_default(),
            )
        };
        Self {
            mode: RwSignal::new(initial.map_or(SaleMode::FirstCome, |a| a.mode)),
            opens: time(|a| a.registration_opens_at),
            closes: time(|a| a.registration_closes_at),
            code_ttl: RwSignal::new(
                initial
                    .and_then(|a| a.code_ttl_s)
                    .unwrap_or(DEFAULT_CODE_TTL_S)
                    .to_string(),
            ),
        }
    }

    /// The time fields, which the form turns to the viewer's wall clock once live.
    pub(super) fn times(self) -> [RwSignal<String>; 2] {
        [self.opens, self.closes]
    }

    /// The terms as the wire wants them, or the first field that does not parse; a
    /// first-come activity sends none of them.
    pub(super) fn to_terms(self, local: bool) -> Result<LotteryTerms, String> {
        let mode = self.mode.get_untracked();
        if mode == SaleMode::FirstCome {
            return Ok(LotteryTerms {
                mode,
                registration_opens_at: None,
                registration_closes_at: None,
                code_ttl_s: None,
            });
        }
        Ok(LotteryTerms {
            mode,
            registration_opens_at: Some(time_from_input(
                &self.opens.get_untracked(),
                local,
                "Registration opens",
            )?),
            registration_closes_at: Some(time_from_input(
                &self.closes.get_untracked(),
                local,
                "Registration closes",
            )?),
            code_ttl_s: Some(
                self.code_ttl.get_untracked().trim().parse().map_err(|_| {
                    "Code lifetime (s): enter a whole number of seconds".to_string()
                })?,
            ),
        })
    }
}

/// The mode select, and the lottery's fields while the mode is lottery.
#[component]
pub(super) fn LotteryFieldset(fields: LotteryFields, local: RwSignal<bool>) -> impl IntoView {
    let LotteryFields {
        mode,
        opens,
        closes,
        code_ttl,
    } = fields;
    view! {
        <div class="row">
            <label>"Mode"
                <select name="mode" on:change=move |ev| {
                    mode.set(if event_target_value(&ev) == "lottery" {
                        SaleMode::Lottery
                    } else {
                        SaleMode::FirstCome
                    })
                }>
                    <option value="first_come" selected=move || mode.get() == SaleMode::FirstCome>"first come"</option>
                    <option value="lottery" selected=move || mode.get() == SaleMode::Lottery>"lottery (registration, draw, codes)"</option>
                </select>
            </label>
            {move || (mode.get() == SaleMode::Lottery).then(|| view! {
                <ZonedTimeField label="Registration opens" name="registration_opens_at" text=opens local/>
                <ZonedTimeField label="Registration closes" name="registration_closes_at" text=closes local/>
                <label>"Code lifetime (s)"
                    <input type="number" name="code_ttl_s" min="60" max="86400" bind:value=code_ttl/>
                </label>
            })}
        </div>
    }
}
