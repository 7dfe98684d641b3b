//! The changes that wait (scheduled, pending approval, staged), each with the decisions its
//! state allows, and the latest decided ones.

use crate::api::DecideChange;
use crate::pages::maybe_time_cell;
use contract::{ChangeState, SwitchChangeRow};
use leptos::prelude::*;

/// The console's words for where a change stands.
pub(super) fn state_words(state: ChangeState) -> &'static str {
    match state {
        ChangeState::Scheduled => "scheduled",
        ChangeState::PendingApproval => "waiting for a second person's approval",
        ChangeState::Staged => "staged on its instances",
        ChangeState::Applied => "applied",
        ChangeState::Reverted => "reverted",
        ChangeState::Cancelled => "cancelled",
        ChangeState::Rejected => "rejected",
        ChangeState::Aborted => "aborted",
    }
}

/// The latest changes: those that wait first, each with the decisions it allows.
#[component]
pub(super) fn Changes(
    changes: Vec<SwitchChangeRow>,
    may_flip: bool,
    decide: ServerAction<DecideChange>,
) -> AnyView {
    let (open, done): (Vec<_>, Vec<_>) = changes.into_iter().partition(|change| {
        matches!(
            change.state,
            ChangeState::Scheduled | ChangeState::PendingApproval | ChangeState::Staged
        )
    });
    let done: Vec<_> = done.into_iter().take(10).collect();
    view! {
        <h2>"Changes"</h2>
        {crate::pages::listing(Ok(open), "No change waits: nothing scheduled, pending approval or staged.", move |open| view! {
            <table class="grid" tabindex="0" id="change-list">
                <thead><tr>
                    <th>"Change"</th><th>"Key"</th><th>"Value"</th><th>"State"</th><th>"When"</th>
                    <th>"Proposed by"</th>{may_flip.then(|| view! { <th>"Decide"</th> })}
                </tr></thead>
                <tbody>
                    {open.into_iter().map(|change| view! { <ChangeLine change may_flip decide/> }).collect_view()}
                </tbody>
            </table>
        }.into_any())}
        {(!done.is_empty()).then(|| view! {
            <details class="change" id="recent-changes">
                <summary>"Recent changes"</summary>
                <table class="grid" tabindex="0">
                    <thead><tr><th>"Change"</th><th>"Key"</th><th>"Value"</th><th>"State"</th><th>"Decided by"</th></tr></thead>
                    <tbody>
                        {done.into_iter().map(|change| view! {
                            <tr data-change=change.id.to_string() data-state=change.state.as_str()>
                                <td class="num">{format!("#{}", change.id)}</td>
                                <td class="mono">{change.path}</td>
                                <td class="value">{change.value}</td>
                                <td>{state_words(change.state)}{change.revert_dropped.map(|why| format!(" (revert dropped: {why})"))}</td>
                                <td>{change.decided_by.unwrap_or_default()}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            </details>
        })}
    }
    .into_any()
}

/// The decisions a waiting change allows, by its state.
fn decisions(state: ChangeState) -> &'static [(&'static str, &'static str)] {
    match state {
        ChangeState::PendingApproval => &[("approve", "Approve"), ("reject", "Reject")],
        ChangeState::Scheduled => &[("cancel", "Cancel")],
        ChangeState::Staged => &[("promote", "Promote to every instance"), ("abort", "Abort")],
        _ => &[],
    }
}

#[component]
fn ChangeLine(
    change: SwitchChangeRow,
    may_flip: bool,
    decide: ServerAction<DecideChange>,
) -> AnyView {
    let when = match change.state {
        ChangeState::Staged => {
            let on = change.stage_instances.clone().unwrap_or_default().join(", ");
            view! { "on " {on} " since " {maybe_time_cell(change.staged_at)} }.into_any()
        }
        _ => view! {
            {maybe_time_cell(change.apply_at)}
            {change.revert_after_s.map(|s| format!(", set back {s} s after"))}
            {change.stage_percent.map(|p| format!(", staged on {p} % of the instances"))}
            {change.stage_instances.clone().filter(|_| change.state != ChangeState::Staged).map(|on| format!(", staged on {}", on.join(", ")))}
        }
        .into_any(),
    };
    let id = change.id;
    let forms = may_flip.then(|| {
        decisions(change.state)
            .iter()
            .map(|(decision, label)| {
                let label = *label;
                let field = format!("reason-{decision}-{id}");
                view! {
                    <ActionForm action=decide attr:class="row decide-form" attr:data-decision=*decision>
                        <input type="hidden" name="id" value=id.to_string()/>
                        <input type="hidden" name="decision" value=*decision/>
                        <label for=field.clone()>{format!("Reason to {}", label.to_lowercase())}</label>
                        <input type="text" id=field name="reason" required maxlength="500"/>
                        <button type="submit" disabled=move || decide.pending().get()>{label}</button>
                    </ActionForm>
                }
            })
            .collect_view()
    });
    view! {
        <tr data-change=id.to_string() data-state=change.state.as_str() data-path=change.path.clone()>
            <td class="num">{format!("#{id}")}</td>
            <td class="mono">{change.path.clone()}</td>
            <td class="value">{change.value.clone()}</td>
            <td>{state_words(change.state)}</td>
            <td>{when}</td>
            <td>{change.proposer.clone()} ": " {change.reason.clone()}</td>
            {forms.map(|forms| view! { <td class="decide">{forms}</td> })}
        </tr>
    }
    .into_any()
}
