//! A key's change form: the value in a field fitted to its shape, a reason, the optional
//! time, revert and stage, the impact of the flip, and the confirmation.

use crate::api::{preview_impact, FlipSwitch};
use crate::error::ConsoleFnError;
use crate::pages::{error_box, viewer_wall_clock};
use contract::SwitchRow;
use leptos::prelude::*;

/// A value, a required reason and a required confirmation of `current → new`. The value's
/// field fits its shape: a list for a switch with what the chosen value does beside it, a
/// number field bounded by the limit's range, a text box for a value written as JSON (a
/// hot-key rule), which a number field would mangle.
#[component]
pub(super) fn ChangeForm(
    path: String,
    current: String,
    row: SwitchRow,
    flip: ServerAction<FlipSwitch>,
    /// The form is shown: its impact is worth reading.
    open: RwSignal<bool>,
    nodes: Vec<String>,
) -> AnyView {
    let SwitchRow {
        choices,
        choice_notes,
        range,
        accepts,
        ..
    } = row;
    // A switch offers its other value first; a limit starts from its current one.
    let first_other = choices
        .iter()
        .find(|choice| **choice != current)
        .cloned()
        .unwrap_or_else(|| current.clone());
    let chosen = RwSignal::new(first_other);
    let value_input = if let Some([min, max]) = range {
        view! {
            <label>"New value (" {min} " to " {max} ")"
                <input type="number" name="value" required min=min max=max step="1" bind:value=chosen/>
            </label>
        }
        .into_any()
    } else if choices.is_empty() {
        view! {
            <label>"New value (off, or a JSON rule)"
                <textarea name="value" rows="3" required class="mono" placeholder=accepts
                    prop:value=move || chosen.get()
                    on:input=move |ev| chosen.set(event_target_value(&ev))>{chosen.get_untracked()}</textarea>
            </label>
        }
        .into_any()
    } else {
        let notes: Vec<(String, String)> = choices.iter().cloned().zip(choice_notes).collect();
        let note = move || {
            let chosen = chosen.get();
            notes
                .iter()
                .find(|(choice, _)| *choice == chosen)
                .map(|(_, note)| note.clone())
                .unwrap_or_default()
        };
        view! {
            <label>"New value"
                <select name="value" on:change=move |ev| chosen.set(event_target_value(&ev))>
                    {choices.into_iter().map(|choice| {
                        let selected = choice == chosen.get_untracked();
                        view! { <option value=choice.clone() selected=selected>{choice.clone()}</option> }
                    }).collect_view()}
                </select>
            </label>
            <p class="meta choice-note" aria-live="polite">{note}</p>
        }
        .into_any()
    };
    let confirm_text = {
        let path = path.clone();
        move || format!("Set {path} from {current} to {}", chosen.get())
    };
    let impact = {
        let path = path.clone();
        Resource::new(
            move || open.get().then(|| chosen.get()),
            move |value| {
                let path = path.clone();
                async move {
                    match value {
                        Some(value) => Some(preview_impact(path, value).await),
                        None => None,
                    }
                }
            },
        )
    };
    view! {
        <ActionForm action=flip attr:class="card change-form">
            <input type="hidden" name="path" value=path/>
            {value_input}
            <label>"Reason (audited)"
                <textarea name="reason" rows="2" required maxlength="500" placeholder="why, for the audit log"></textarea>
            </label>
            <WhenFields nodes/>
            <Transition fallback=|| ()>
                {move || Suspend::new(async move { impact.await.map(impact_note) })}
            </Transition>
            <label class="confirm">
                <input type="checkbox" required/>
                <span>{confirm_text}</span>
            </label>
            <button type="submit" disabled=move || flip.pending().get()>"Flip"</button>
        </ActionForm>
    }
    .into_any()
}

/// Whether a `toggle` event's `<details>` is open now.
pub(super) fn details_open(event: &leptos::ev::Event) -> bool {
    use leptos::wasm_bindgen::JsCast;
    event
        .target()
        .and_then(|target| target.dyn_into::<leptos::web_sys::Element>().ok())
        .is_some_and(|details| details.has_attribute("open"))
}

/// What a flip would touch, in the confirmation: each live and upcoming activity with its
/// buy traffic, then the totals.
fn impact_note(impact: Result<contract::SwitchImpact, ConsoleFnError>) -> AnyView {
    let impact = match impact {
        Ok(impact) => impact,
        Err(error) => return error_box(error),
    };
    if !impact.changes_anything {
        return view! {
            <div class="impact" aria-live="polite" data-value=impact.value.clone() data-live="0">
                <strong>"Impact: "</strong>
                "This value is the one in force: the flip changes nothing."
                <p class="meta">{impact.effect}</p>
            </div>
        }
        .into_any();
    }
    let live = impact
        .activities
        .iter()
        .filter(|activity| activity.window == "live")
        .count();
    let upcoming = impact.activities.len() - live;
    let text = format!(
        "Touches {live} live sale(s) and {upcoming} upcoming; {:.1} buy requests/s over the last minute and {} in flight on {} instance(s).",
        impact.buy_rate_per_s,
        impact.in_flight,
        impact.instances.len(),
    );
    let activities = impact
        .activities
        .into_iter()
        .map(|activity| {
            let line = format!(
                "#{} {} ({}): {:.1} buy requests/s, {} in flight",
                activity.id,
                activity.title,
                activity.window,
                activity.buy_rate_per_s,
                activity.in_flight,
            );
            view! {
                <li
                    data-activity=activity.id.to_string()
                    data-rate=activity.buy_rate_per_s.to_string()
                    data-in-flight=activity.in_flight.to_string()
                >
                    {line}
                </li>
            }
        })
        .collect_view();
    view! {
        <div class="impact" aria-live="polite" data-value=impact.value.clone() data-live=live.to_string()>
            <strong>"Impact: "</strong> {text}
            <ul class="impact-activities">{activities}</ul>
            <p class="meta">{impact.effect}</p>
        </div>
    }
    .into_any()
}

/// The optional fields of a change that waits: a time in the operator's zone (the UTC
/// instant beside it, sent as `at`), a revert, a stage.
#[component]
fn WhenFields(nodes: Vec<String>) -> impl IntoView {
    let wall = RwSignal::new(String::new());
    let local = RwSignal::new(false);
    Effect::new(move |_| local.set(true));
    let instant = move || {
        let typed = chrono::NaiveDateTime::parse_from_str(&wall.get(), "%Y-%m-%dT%H:%M").ok()?;
        if local.get() {
            crate::pages::from_viewer_wall_clock(typed)
        } else {
            Some(typed.and_utc())
        }
    };
    let caption = move || match (local.get(), instant()) {
        (true, Some(time)) => format!("Apply at (your time, {})", viewer_wall_clock(time).1),
        (true, None) => "Apply at (your time)".to_owned(),
        (false, _) => "Apply at (UTC)".to_owned(),
    };
    let utc = move || instant().map(|time| format!("= {} UTC", time.format("%Y-%m-%d %H:%M")));
    let at = move || {
        instant()
            .filter(|_| local.get())
            .map(|time| time.to_rfc3339())
            .unwrap_or_default()
    };
    let hint = if nodes.is_empty() {
        "node ids separated by commas, or a share such as 25%".to_owned()
    } else {
        format!("node ids ({}), or a share such as 25%", nodes.join(", "))
    };
    view! {
        <details class="when">
            <summary>"Schedule, revert or stage…"</summary>
            <label>{caption}
                <input type="datetime-local" name="at_wall" bind:value=wall/>
                <small class="utc-beside">{utc}</small>
            </label>
            <input type="hidden" name="at" prop:value=at/>
            <label>"Set back after (seconds, optional)"
                <input type="number" name="revert_after_s" min="1" step="1"/>
            </label>
            <label>"Stage on (optional: try it on some instances first)"
                <input type="text" name="stage" placeholder=hint.clone() title=hint/>
            </label>
        </details>
    }
}
