//! The switch board (docs/control-plane.md): every switch and limit with its value and
//! etcd revision, who wrote it last and why, and which instance has applied it. Ops and
//! admins flip from here: a reason is required and the flip must be confirmed; then the
//! page follows the flip live (every second) until every instance has applied it, with the
//! time each one took. A banner says when etcd is unreachable or this instance is stale.
//!
//! A flip may also wait (docs/control-plane.md, "Changes that wait"): for a time typed in
//! the operator's zone (UTC shown beside), with a revert, for a second person (a key that
//! needs four eyes), or staged on some instances first. The changes list shows what waits
//! with its buttons: approve or reject, cancel, promote or abort; the live panel shows
//! each staged key's value per instance. Each key has its history, with a rollback button
//! per revision, and a flip's confirmation shows what it would touch (its impact).
//!
//! The change forms are plain forms (`<details>` and a required confirmation box), so they
//! work before hydration too (a time typed then is read as UTC, as its label says); the
//! live panel, the impact and the history need the hydrated page.

use super::{error_box, maybe_time_cell, reason_field, ticker, time_cell, viewer_wall_clock, when};
use crate::api::{
    get_switch_board, list_changes, preview_impact, switch_history, whoami, DecideChange,
    FlipSwitch, RollbackSwitch,
};
use crate::error::ConsoleFnError;
use contract::{
    ChangeState, FlipOutcome, NodeState, SwitchBoard, SwitchChange, SwitchChangeRow, SwitchRow,
};
use leptos::prelude::*;
use std::time::Duration;

/// An instance whose last confirmed sync is older than this is called stale.
const STALE_AFTER_MS: u64 = 3_000;

#[component]
pub fn SwitchBoardPage() -> impl IntoView {
    let user = Resource::new(|| (), |_| whoami());
    let flip = ServerAction::<FlipSwitch>::new();
    let decide = ServerAction::<DecideChange>::new();
    let rollback = ServerAction::<RollbackSwitch>::new();
    let beat = ticker(Duration::from_secs(1));
    let live = Resource::new(move || beat.get(), |_| get_switch_board());
    // Whether the live panel has seen the latest flip applied by every instance. The table
    // reloads when a flip lands and once more when it is applied everywhere (else its
    // Applied column keeps the count read right after the write), never on the beat, so an
    // open change form keeps what was typed.
    let flip_applied = Memo::new(move |_| {
        let change = flipped(flip.value().get()?.ok()?)?;
        let board = live.get()?.ok()?;
        Some((change.revision, Progress::of(&board, &change).complete()))
    });
    // What etcd holds of the keys and stages: a change the leader applied, a stage it
    // aborted or a decision elsewhere moves it, and the table and the changes reload. Read
    // in an effect: the browser follows the live board, the server renders once.
    let landed = RwSignal::new(0_u64);
    let board = Resource::new(
        move || (flip.version().get(), flip_applied.get(), landed.get()),
        |_| get_switch_board(),
    );
    // The table reloads when the live board shows a key or a stage the table does not
    // (once per such sight); a decision that writes nothing (a cancel) reloads the changes.
    Effect::new(move |asked: Option<Option<Landmarks>>| {
        let asked = asked.flatten();
        let live_marks = live
            .get()
            .and_then(Result::ok)
            .map(|board| landmarks(&board));
        let shown = board
            .get()
            .and_then(Result::ok)
            .map(|board| landmarks(&board));
        match (live_marks, shown) {
            (Some(now), Some(shown)) if now != shown && asked.as_ref() != Some(&now) => {
                landed.update(|moves| *moves += 1);
                Some(now)
            }
            _ => asked,
        }
    });
    let changes = Resource::new(
        move || {
            (
                flip.version().get(),
                decide.version().get(),
                rollback.version().get(),
                landed.get(),
            )
        },
        |_| list_changes(),
    );
    view! {
        <h1>"Switch board"</h1>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let flipped = flip.value().get();
                let outcome = decide.value().get().or_else(|| rollback.value().get().map(|done| done.map(|_| ())));
                match live.await {
                    Ok(board) => view! { <LivePanel board flipped/> {decision_note(outcome)} }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_flip = user.await.is_ok_and(|user| user.role.may(contract::Permission::FlipSwitch));
                match changes.await {
                    Ok(list) => view! { <Changes changes=list.changes may_flip decide/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_flip = user.await.is_ok_and(|user| user.role.may(contract::Permission::FlipSwitch));
                match board.await {
                    Ok(board) => view! { <Switches board may_flip flip rollback/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

/// Where etcd and this instance stand, the latest flip's propagation, and every instance.
#[component]
fn LivePanel(board: SwitchBoard, flipped: Option<Result<FlipOutcome, ConsoleFnError>>) -> AnyView {
    let etcd_banner = (!board.etcd.reachable).then(|| {
        let error = board.etcd.error.clone().unwrap_or_default();
        view! {
            <p class="error" role="alert" id="etcd-banner">
                "etcd is unreachable (" {error} "). Every instance keeps the last values it saw; "
                "the values below are this instance's last accepted ones, and flips are refused until etcd is back."
            </p>
        }
    });
    let stale_banner = board.instance.as_ref().and_then(|instance| {
        let stale = !instance.connected
            || instance.synced_ago_ms.is_none_or(|ago| ago > STALE_AFTER_MS);
        stale.then(|| {
            let ago = instance
                .synced_ago_ms
                .map(|ms| format!("{:.1} s ago", ms as f64 / 1000.0))
                .unwrap_or_else(|| "never".into());
            view! {
                <p class="error" role="alert" id="stale-banner">
                    "This instance (" {instance.node_id.clone()} ") may be stale: last confirmed in sync with etcd "
                    {ago} "; its values come from " {instance.values_from.as_str()} "."
                </p>
            }
        })
    });
    let progress = match flipped {
        Some(Ok(FlipOutcome::Flipped(change))) => {
            Some(view! { <FlipProgress board=board.clone() change/> }.into_any())
        }
        Some(Ok(FlipOutcome::Waiting(accepted))) => Some(
            view! {
                <p class="card flip-result" id="change-accepted" role="status" data-state=accepted.state.as_str()>
                    {format!(
                        "Change #{} is {}: it is listed under Changes below.",
                        accepted.change_id,
                        state_words(accepted.state),
                    )}
                </p>
            }
            .into_any(),
        ),
        Some(Err(error)) => Some(error_box(error)),
        None => None,
    };
    let stages = board
        .switches
        .iter()
        .filter(|row| row.staged.is_some())
        .cloned()
        .collect::<Vec<_>>();
    view! {
        {etcd_banner}
        {stale_banner}
        <p class="meta" id="board-meta">
            "etcd prefix " <span class="mono">{board.prefix.clone()}</span>
            {board.etcd.revision.map(|revision| format!(" · etcd revision {revision}"))}
            {board.instance.as_ref().map(|instance| format!(
                " · answered by {} (applied revision {}{})",
                instance.node_id,
                instance.applied_revision,
                if instance.leader { ", leader" } else { "" },
            ))}
        </p>
        {progress}
        {(!stages.is_empty()).then(|| view! { <Stages rows=stages nodes=board.nodes.clone()/> })}
        <Nodes nodes=board.nodes/>
    }
    .into_any()
}

/// The console's words for where a change stands.
fn state_words(state: ChangeState) -> &'static str {
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

/// The change a flip wrote at once, if it did.
fn flipped(outcome: FlipOutcome) -> Option<SwitchChange> {
    match outcome {
        FlipOutcome::Flipped(change) => Some(change),
        FlipOutcome::Waiting(_) => None,
    }
}

/// Every key's revision and the change staged on it, if any.
type Landmarks = Vec<(String, Option<i64>, Option<i64>)>;

/// What moves when a change lands or a stage ends: every key's revision and every stage.
fn landmarks(board: &SwitchBoard) -> Landmarks {
    board
        .switches
        .iter()
        .map(|row| {
            let stage = row.staged.as_ref().map(|stage| stage.change_id);
            (row.path.clone(), row.mod_revision, stage)
        })
        .collect()
}

/// The outcome of the latest decision or rollback: an error, or a note that it was done.
fn decision_note(outcome: Option<Result<(), ConsoleFnError>>) -> Option<AnyView> {
    match outcome? {
        Ok(()) => Some(view! { <p class="meta saved" role="status" id="decision-done">"Done; the changes below are current."</p> }.into_any()),
        Err(error) => Some(error_box(error)),
    }
}

/// Every staged key: its value, the staged one, and each live instance's, as their
/// heartbeats report them.
#[component]
fn Stages(rows: Vec<SwitchRow>, nodes: Vec<NodeState>) -> AnyView {
    view! {
        <h2>"Staged values"</h2>
        <table class="grid" tabindex="0" id="stage-list">
            <thead><tr>
                <th>"Change"</th><th>"Key"</th><th>"Key's value"</th><th>"Staged value"</th><th>"Each instance"</th>
            </tr></thead>
            <tbody>
                {rows.into_iter().filter_map(|row| {
                    let stage = row.staged.clone()?;
                    let own = row.etcd_value.clone().unwrap_or_else(|| format!("{} (default)", row.default_value));
                    let per_node = nodes.iter().map(|node| {
                        let staged = node.staged.iter().find(|value| value.path == row.path);
                        let value = staged.map_or_else(|| own.clone(), |value| value.value.clone());
                        let class = if staged.is_some() { "staged" } else { "own" };
                        view! { <li class=class data-node=node.node_id.clone()>{format!("{}: {value}", node.node_id)}</li> }
                    }).collect_view();
                    Some(view! {
                        <tr data-change=stage.change_id.to_string() data-path=row.path.clone()>
                            <td class="num">{format!("#{}", stage.change_id)}</td>
                            <td class="mono">{row.path.clone()}</td>
                            <td class="value">{own.clone()}</td>
                            <td class="value">{stage.value.clone()}</td>
                            <td><ul class="instance-values">{per_node}</ul></td>
                        </tr>
                    })
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// The latest changes: those that wait first, each with the decisions it allows.
#[component]
fn Changes(
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
        {super::listing(Ok(open), "No change waits: nothing scheduled, pending approval or staged.", move |open| view! {
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

/// How far one flip has got: per instance, applied or not and how long it took.
#[derive(Clone, Debug, PartialEq)]
struct Progress {
    /// (node, applied, milliseconds from the write to the apply)
    nodes: Vec<(String, bool, Option<f64>)>,
    /// A later write to the same key replaced this one.
    superseded: bool,
}

impl Progress {
    fn of(board: &SwitchBoard, change: &SwitchChange) -> Self {
        let row = board.switches.iter().find(|row| row.path == change.path);
        let current = row.and_then(|row| row.mod_revision);
        let superseded = current.is_some_and(|revision| revision > change.revision);
        let timed = row
            .filter(|row| row.mod_revision == Some(change.revision))
            .map(|row| row.applied.as_slice())
            .unwrap_or_default();
        let nodes = board
            .nodes
            .iter()
            .map(|node| {
                let took_ms = timed
                    .iter()
                    .find(|applied| applied.node_id == node.node_id)
                    .and_then(|applied| applied.took_ms);
                (
                    node.node_id.clone(),
                    node.applied_revision >= change.revision,
                    took_ms,
                )
            })
            .collect();
        Progress { nodes, superseded }
    }

    fn complete(&self) -> bool {
        !self.nodes.is_empty() && self.nodes.iter().all(|(_, applied, _)| *applied)
    }

    /// The slowest instance's time, once every instance has applied and reported it.
    fn slowest_ms(&self) -> Option<f64> {
        if !self.complete() {
            return None;
        }
        self.nodes
            .iter()
            .map(|(_, _, took)| *took)
            .try_fold(0.0_f64, |slowest, took| took.map(|took| slowest.max(took)))
    }
}

#[component]
fn FlipProgress(board: SwitchBoard, change: SwitchChange) -> AnyView {
    let progress = Progress::of(&board, &change);
    let applied = progress
        .nodes
        .iter()
        .filter(|(_, applied, _)| *applied)
        .count();
    let total = progress.nodes.len();
    let summary = if progress.superseded {
        "A later write to this key has replaced this flip.".to_owned()
    } else if total == 0 {
        "No live instance reports its state (no heartbeat in etcd).".to_owned()
    } else if let Some(ms) = progress.slowest_ms() {
        format!("Applied by all {total} instance(s); the slowest took {ms:.0} ms.")
    } else if progress.complete() {
        format!("Applied by all {total} instance(s).")
    } else {
        format!("Applied by {applied} of {total} instance(s); waiting…")
    };
    let state = if progress.complete() {
        "complete"
    } else {
        "waiting"
    };
    view! {
        <div class="card flip-result" id="flip-progress" data-state=state>
            <strong>
                <span class="mono">{change.path.clone()}</span> ": "
                {change.old_value.clone().unwrap_or_else(|| "(default)".into())} " → " {change.new_value.clone()}
            </strong>
            <span class="meta">"In etcd at revision " {change.revision} ", audit #" {change.audit_id} "."</span>
            <span id="flip-summary">{summary}</span>
            <ul class="applied">
                {progress.nodes.into_iter().map(|(node, applied, took)| {
                    let took = took.map(|ms| format!(" in {ms:.0} ms")).unwrap_or_default();
                    let state = if applied { "applied" } else { "pending" };
                    let label = format!("{node}: {state}{took}");
                    view! { <li class=state data-node=node>{label}</li> }
                }).collect_view()}
            </ul>
        </div>
    }
    .into_any()
}

#[component]
fn Nodes(nodes: Vec<NodeState>) -> AnyView {
    view! {
        <h2>"Instances"</h2>
        {super::listing(Ok(nodes), "No live instance has a heartbeat in etcd.", |nodes| view! {
            <table class="grid" tabindex="0" id="node-list">
                <thead><tr>
                    <th>"Node"</th><th>"Address"</th><th>"Applied revision"</th><th>"etcd"</th>
                    <th>"Last in sync"</th><th>"Heartbeat"</th><th>"Leader"</th>
                </tr></thead>
                <tbody>
                    {nodes.into_iter().map(|node| view! {
                        <tr>
                            <td class="mono">{node.node_id}</td>
                            <td class="mono">{node.address}</td>
                            <td class="num">{node.applied_revision}</td>
                            <td>{if node.connected { "connected" } else { "disconnected" }}</td>
                            <td>{node.synced_ago_ms.map(|ms| format!("{:.1} s ago", ms as f64 / 1000.0)).unwrap_or_else(|| "never".into())}</td>
                            <td>{time_cell(node.heartbeat_at)}</td>
                            <td>{if node.leader { "yes" } else { "" }}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        }.into_any())}
    }
    .into_any()
}

#[component]
fn Switches(
    board: SwitchBoard,
    may_flip: bool,
    flip: ServerAction<FlipSwitch>,
    rollback: ServerAction<RollbackSwitch>,
) -> AnyView {
    let nodes: Vec<String> = board
        .nodes
        .iter()
        .map(|node| node.node_id.clone())
        .collect();
    view! {
        <h2>"Switches and limits"</h2>
        {(!may_flip).then(|| view! {
            <p class="meta">"Read-only: only ops and admins flip switches."</p>
        })}
        <table class="grid" tabindex="0" id="switch-list">
            <thead><tr>
                <th>"Key"</th><th>"Value"</th><th>"In force here"</th><th>"Revision"</th>
                <th>"Last write"</th><th>"Applied"</th>{may_flip.then(|| view! { <th></th> })}
                <th>"History"</th>
            </tr></thead>
            <tbody>
                // Keyed by what a line shows: a line whose key changed (a flip landed) is
                // built afresh, which also closes and clears its change form; the others keep
                // whatever an operator is typing.
                <For each=move || board.switches.clone() key=line_key let:row>
                    <SwitchLine row may_flip flip rollback nodes=nodes.clone()/>
                </For>
            </tbody>
        </table>
        {may_flip.then(|| view! { <OtherKey flip/> })}
    }
    .into_any()
}

fn line_key(row: &SwitchRow) -> String {
    let applied = row.applied.iter().filter(|node| node.applied).count();
    format!(
        "{}|{:?}|{:?}|{:?}|{}/{}",
        row.path,
        row.mod_revision,
        row.etcd_value,
        row.in_force,
        applied,
        row.applied.len()
    )
}

#[component]
fn SwitchLine(
    row: SwitchRow,
    may_flip: bool,
    flip: ServerAction<FlipSwitch>,
    rollback: ServerAction<RollbackSwitch>,
    nodes: Vec<String>,
) -> AnyView {
    let editing = RwSignal::new(false);
    let reading = RwSignal::new(false);
    let history_path = row.path.clone();
    let in_force_revision = row.mod_revision;
    let value = row
        .etcd_value
        .clone()
        .unwrap_or_else(|| format!("{} (default)", row.default_value));
    let current = row
        .etcd_value
        .clone()
        .unwrap_or_else(|| row.default_value.clone());
    let applied_count = row.applied.iter().filter(|node| node.applied).count();
    let applied = if row.mod_revision.is_none() {
        "—".to_owned()
    } else {
        format!("{applied_count} / {}", row.applied.len())
    };
    let write = row.written.clone().map(|write| {
        format!(
            "{} via {} at {}: {}",
            write.actor,
            write.source.as_str(),
            when(write.at),
            write.reason
        )
    });
    view! {
        <tr data-path=row.path.clone()>
            <td class="key">
                <span class="mono">{row.path.clone()}</span>
                <p class="meaning">{row.meaning.clone()}</p>
                <span class="meta accepts">"Accepts: " {row.accepts.clone()}</span>
            </td>
            <td class="value">
                {value}
                {(!row.valid).then(|| view! { <span class="error-inline">" malformed: ignored"</span> })}
            </td>
            <td class="value">{row.in_force.clone().unwrap_or_else(|| "—".into())}</td>
            <td class="num">{row.mod_revision.map(|r| r.to_string()).unwrap_or_else(|| "—".into())}</td>
            <td class="meta">{write.unwrap_or_else(|| "—".into())}</td>
            <td class="num">{applied}</td>
            {may_flip.then(|| view! {
                <td>
                    <details class="change" on:toggle=move |ev| editing.set(details_open(&ev))>
                        <summary>"Change…"</summary>
                        <ChangeForm path=row.path.clone() current row=row.clone() flip open=editing nodes/>
                    </details>
                </td>
            })}
            // After the change form: a keyboard user tabbing along a row meets "Change…" first.
            <td>
                <details class="change history" on:toggle=move |ev| reading.set(details_open(&ev))>
                    <summary>"History…"</summary>
                    <Show when=move || reading.get()>
                        <History path=history_path.clone() current=in_force_revision may_flip rollback/>
                    </Show>
                </details>
            </td>
        </tr>
    }
    .into_any()
}

/// A value, a required reason and a required confirmation of `current → new`. The value's
/// field fits its shape: a list for a switch with what the chosen value does beside it, a
/// number field bounded by the limit's range, a text box for a value written as JSON (a
/// hot-key rule), which a number field would mangle.
#[component]
fn ChangeForm(
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
fn details_open(event: &leptos::ev::Event) -> bool {
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
            super::from_viewer_wall_clock(typed)
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

/// A key's values, newest first, each older one with a rollback.
#[component]
fn History(
    path: String,
    current: Option<i64>,
    may_flip: bool,
    rollback: ServerAction<RollbackSwitch>,
) -> impl IntoView {
    let revisions = {
        let path = path.clone();
        Resource::new(
            move || rollback.version().get(),
            move |_| switch_history(path.clone()),
        )
    };
    view! {
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || {
                let path = path.clone();
                Suspend::new(async move {
                    super::listing(revisions.await, "No value was ever written.", move |revisions| view! {
                        <ol class="history-list">
                            {revisions.into_iter().map(|revision| {
                                let now = current == Some(revision.revision);
                                let field = format!("rollback-{}-{}", path.replace('/', "-"), revision.revision);
                                let key = path.clone();
                                view! {
                                    <li data-revision=revision.revision.to_string()>
                                        <span class="mono">{revision.value.clone()}</span>
                                        {format!(" · revision {} · {} via {} · ", revision.revision, revision.by, revision.source.as_str())}
                                        {time_cell(revision.at)}
                                        <p class="meta">{revision.reason.clone()}</p>
                                        {now.then(|| view! { <span class="meta">"(in force)"</span> })}
                                        {(may_flip && !now).then(|| view! {
                                            <ActionForm action=rollback attr:class="row rollback-form">
                                                <input type="hidden" name="path" value=key/>
                                                <input type="hidden" name="revision" value=revision.revision.to_string()/>
                                                <label for=field.clone()>"Reason to roll back"</label>
                                                <input type="text" id=field name="reason" required maxlength="500"/>
                                                <button type="submit" disabled=move || rollback.pending().get()>
                                                    {format!("Roll back to {}", revision.value)}
                                                </button>
                                            </ActionForm>
                                        })}
                                    </li>
                                }
                            }).collect_view()}
                        </ol>
                    }.into_any())
                })
            }}
        </Transition>
    }
}

/// A key not listed yet, such as one activity's entry switch (`switches/entry/42`).
#[component]
fn OtherKey(flip: ServerAction<FlipSwitch>) -> AnyView {
    view! {
        <details class="change" id="other-key">
            <summary>"Set another key (e.g. close one activity: switches/entry/ID)"</summary>
            <ActionForm action=flip attr:class="card change-form">
                <label>"Key" <input type="text" name="path" required placeholder="switches/entry/42"/></label>
                <label>"Value" <input type="text" name="value" required placeholder="closed"/></label>
                {reason_field()}
                <label class="confirm"><input type="checkbox" required/> "I confirm this flip"</label>
                <button type="submit" disabled=move || flip.pending().get()>"Flip"</button>
            </ActionForm>
        </details>
    }
    .into_any()
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::{EtcdReach, NodeApplied};

    fn node(id: &str, applied_revision: i64) -> NodeState {
        NodeState {
            node_id: id.into(),
            address: "127.0.0.1:1".into(),
            applied_revision,
            connected: true,
            leader: false,
            heartbeat_at: chrono::Utc::now(),
            started_at: None,
            synced_ago_ms: Some(10),
            staged: Vec::new(),
            buys: Default::default(),
        }
    }

    fn board(mod_revision: i64, nodes: Vec<NodeState>, applied: Vec<NodeApplied>) -> SwitchBoard {
        SwitchBoard {
            prefix: "/seckill".into(),
            etcd: EtcdReach {
                reachable: true,
                revision: Some(mod_revision),
                error: None,
            },
            instance: None,
            switches: vec![SwitchRow {
                path: "switches/entry".into(),
                meaning: "Whether buyers may buy at all.".into(),
                choice_notes: vec!["buyers may buy".into(), "every buy is refused".into()],
                range: None,
                accepts: "open | closed".into(),
                choices: vec!["open".into(), "closed".into()],
                default_value: "open".into(),
                etcd_value: Some("closed".into()),
                valid: true,
                in_force: Some("closed".into()),
                mod_revision: Some(mod_revision),
                written: None,
                applied,
                staged: None,
            }],
            nodes,
        }
    }

    fn change(revision: i64) -> SwitchChange {
        SwitchChange {
            path: "switches/entry".into(),
            old_value: Some("open".into()),
            new_value: "closed".into(),
            revision,
            audit_id: 1,
            propagation: None,
        }
    }

    fn applied(id: &str, took_ms: f64) -> NodeApplied {
        NodeApplied {
            node_id: id.into(),
            applied: true,
            applied_revision: 9,
            took_ms: Some(took_ms),
        }
    }

    #[test]
    fn a_flip_is_complete_once_every_instance_reached_its_revision() {
        let waiting = Progress::of(
            &board(9, vec![node("a", 9), node("b", 8)], vec![]),
            &change(9),
        );
        assert!(!waiting.complete());
        assert_eq!(waiting.slowest_ms(), None);

        let done = Progress::of(
            &board(
                9,
                vec![node("a", 9), node("b", 12)],
                vec![applied("a", 3.0), applied("b", 41.0)],
            ),
            &change(9),
        );
        assert!(done.complete() && !done.superseded);
        assert_eq!(done.slowest_ms(), Some(41.0));
    }

    #[test]
    fn a_later_write_supersedes_a_flip_and_no_instance_is_no_completion() {
        let later = Progress::of(
            &board(15, vec![node("a", 15)], vec![applied("a", 2.0)]),
            &change(9),
        );
        assert!(later.superseded);
        assert!(later.complete());
        assert_eq!(
            later.slowest_ms(),
            None,
            "times of another write are not this flip's"
        );
        assert!(!Progress::of(&board(9, vec![], vec![]), &change(9)).complete());
    }
}
