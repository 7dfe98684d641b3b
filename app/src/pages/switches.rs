//! The switch board (docs/control-plane.md): every switch and limit with its value and
//! etcd revision, who wrote it last and why, and which instance has applied it. Ops and
//! admins flip from here: a reason is required and the flip must be confirmed; then the
//! page follows the flip live (every second) until every instance has applied it, with the
//! time each one took. A banner says when etcd is unreachable or this instance is stale.
//!
//! The change forms are plain forms (`<details>` and a required confirmation box), so they
//! work before hydration too; the live panel needs the hydrated page.

use super::{error_box, reason_field, ticker, time_cell, when};
use crate::api::{get_switch_board, whoami, FlipSwitch};
use crate::error::ConsoleFnError;
use contract::{NodeState, SwitchBoard, SwitchChange, SwitchRow};
use leptos::prelude::*;
use std::time::Duration;

/// An instance whose last confirmed sync is older than this is called stale.
const STALE_AFTER_MS: u64 = 3_000;

#[component]
pub fn SwitchBoardPage() -> impl IntoView {
    let user = Resource::new(|| (), |_| whoami());
    let flip = ServerAction::<FlipSwitch>::new();
    let beat = ticker(Duration::from_secs(1));
    let live = Resource::new(move || beat.get(), |_| get_switch_board());
    // Whether the live panel has seen the latest flip applied by every instance. The table
    // reloads when a flip lands and once more when it is applied everywhere (else its
    // Applied column keeps the count read right after the write), never on the beat, so an
    // open change form keeps what was typed.
    let flip_applied = Memo::new(move |_| {
        let change = flip.value().get()?.ok()?;
        let board = live.get()?.ok()?;
        Some((change.revision, Progress::of(&board, &change).complete()))
    });
    let board = Resource::new(
        move || (flip.version().get(), flip_applied.get()),
        |_| get_switch_board(),
    );
    view! {
        <h1>"Switch board"</h1>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                let flipped = flip.value().get();
                match live.await {
                    Ok(board) => view! { <LivePanel board flipped/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let may_flip = user.await.is_ok_and(|user| user.role.may(contract::Permission::FlipSwitch));
                match board.await {
                    Ok(board) => view! { <Switches board may_flip flip/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Transition>
    }
}

/// Where etcd and this instance stand, the latest flip's propagation, and every instance.
#[component]
fn LivePanel(board: SwitchBoard, flipped: Option<Result<SwitchChange, ConsoleFnError>>) -> AnyView {
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
        Some(Ok(change)) => Some(view! { <FlipProgress board=board.clone() change/> }.into_any()),
        Some(Err(error)) => Some(error_box(error)),
        None => None,
    };
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
        <Nodes nodes=board.nodes/>
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
fn Switches(board: SwitchBoard, may_flip: bool, flip: ServerAction<FlipSwitch>) -> AnyView {
    view! {
        <h2>"Switches and limits"</h2>
        {(!may_flip).then(|| view! {
            <p class="meta">"Read-only: only ops and admins flip switches."</p>
        })}
        <table class="grid" tabindex="0" id="switch-list">
            <thead><tr>
                <th>"Key"</th><th>"Value"</th><th>"In force here"</th><th>"Revision"</th>
                <th>"Last write"</th><th>"Applied"</th>{may_flip.then(|| view! { <th></th> })}
            </tr></thead>
            <tbody>
                // Keyed by what a line shows: a line whose key changed (a flip landed) is
                // built afresh, which also closes and clears its change form; the others keep
                // whatever an operator is typing.
                <For each=move || board.switches.clone() key=line_key let:row>
                    <SwitchLine row may_flip flip/>
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
fn SwitchLine(row: SwitchRow, may_flip: bool, flip: ServerAction<FlipSwitch>) -> AnyView {
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
                    <details class="change">
                        <summary>"Change…"</summary>
                        <ChangeForm path=row.path.clone() current row=row.clone() flip/>
                    </details>
                </td>
            })}
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
    view! {
        <ActionForm action=flip attr:class="card change-form">
            <input type="hidden" name="path" value=path/>
            {value_input}
            <label>"Reason (audited)"
                <textarea name="reason" rows="2" required maxlength="500" placeholder="why, for the audit log"></textarea>
            </label>
            <label class="confirm">
                <input type="checkbox" required/>
                <span>{confirm_text}</span>
            </label>
            <button type="submit" disabled=move || flip.pending().get()>"Flip"</button>
        </ActionForm>
    }
    .into_any()
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
