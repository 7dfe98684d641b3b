//! The activity page's lottery part (docs/lottery.md). The form's fields: how the activity
//! sells, and for a lottery its registration window and its codes' lifetime. The server's
//! rules decide (their codes `REGISTRATION_WINDOW_INVALID`, `CODE_TTL_OUT_OF_RANGE` come back
//! under the form); this only turns the fields into the wire's values. And for those who
//! watch operations, whether buyers can register: a lottery's registration opens long before
//! anyone pre-warms it, and a registration the buyer API cannot take must not go unnoticed.

use chrono::{DateTime, Utc};
use contract::{
    ActivityInput, Permission, RegistrationPhase, RegistrationReach, SaleMode, DEFAULT_CODE_TTL_S,
};
use leptos::prelude::*;

use super::{time_for_input, time_from_input, ZonedTimeField};
use crate::{
    api::{get_activity, get_draw},
    error::ConsoleFnError,
    pages::{error_box, my_role, ticker, time_cell},
};

/// How often the page reads again whether buyers can register: the window opening is
/// what changes it.
const REACH_REFRESH: std::time::Duration = std::time::Duration::from_secs(10);

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

/// Whether buyers can register for the activity; `None` for a first-come activity or a role
/// that does not watch operations.
pub(super) type ReachResource = Resource<Result<Option<RegistrationReach>, ConsoleFnError>>;

/// Made by the page at its top and shown beside its other boundaries (see
/// `ledger_resource`), read again every [`REACH_REFRESH`].
pub(super) fn reach_resource(
    id: impl Fn() -> Option<i64> + Send + Sync + 'static,
) -> ReachResource {
    let reach = Resource::new(id, |id| async move {
        let id = id.ok_or_else(ConsoleFnError::not_found)?;
        if !my_role().await?.may(Permission::WatchOperations) {
            return Ok(None);
        }
        if get_activity(id).await?.mode != SaleMode::Lottery {
            return Ok(None);
        }
        Ok(Some(get_draw(id).await?.registration))
    });
    let beat = ticker(REACH_REFRESH);
    Effect::new(move |_| {
        if beat.get() > 0 {
            reach.refetch();
        }
    });
    reach
}

/// One line on the lottery's registration; a notice when it is open or about to open and
/// buyers cannot register.
#[component]
pub(super) fn RegistrationReachLine(reach: ReachResource) -> impl IntoView {
    view! {
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match reach.await {
                    Ok(Some(reach)) => reach_line(reach),
                    Ok(None) => ().into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

fn reach_line(reach: RegistrationReach) -> AnyView {
    let ahead_min = RegistrationReach::PREPARED_AHEAD_MS / 60_000;
    let (opens, closes) = (reach.opens_at, reach.closes_at);
    if reach.blocked() {
        let when = if reach.phase() == RegistrationPhase::Open {
            view! { "Registration has been open since " {time_cell(opens)} }.into_any()
        } else {
            view! { "Registration opens at " {time_cell(opens)} }.into_any()
        };
        return view! {
            <p class="notice" id="registration" data-state="blocked" role="alert">
                {when} ", and buyers cannot register: the buyer API does not know this activity yet and answers them 404. "
                {format!("The leader makes it known {ahead_min} min before registration opens: see the readiness page for why it has not; a pre-warm lets buyers in at once.")}
            </p>
        }
        .into_any();
    }
    let text = match reach.phase() {
        RegistrationPhase::Later => view! {
            "Registration opens at " {time_cell(opens)} " and closes at " {time_cell(closes)}
            {format!(". The leader makes it known to the buyer API {ahead_min} min before.")}
        }
        .into_any(),
        RegistrationPhase::Soon => view! {
            "Registration opens at " {time_cell(opens)} "; buyers will be able to register."
        }
        .into_any(),
        RegistrationPhase::Open => view! {
            "Registration is open until " {time_cell(closes)} ": buyers can register."
        }
        .into_any(),
        RegistrationPhase::Closed => view! {
            "Registration closed at " {time_cell(closes)} "."
        }
        .into_any(),
    };
    let state = match reach.phase() {
        RegistrationPhase::Later | RegistrationPhase::Soon => "upcoming",
        RegistrationPhase::Open => "open",
        RegistrationPhase::Closed => "closed",
    };
    view! { <p class="meta" id="registration" data-state=state>{text}</p> }.into_any()
}
