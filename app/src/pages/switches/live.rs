//! The switch board's live panel, read every second: etcd's and this instance's state (a
//! banner when etcd is unreachable or this instance is stale), the latest flip followed until
//! every instance has applied it, each staged key's value per instance, and every instance.

use super::changes::state_words;
use crate::error::ConsoleFnError;
use crate::pages::{error_box, time_cell};
use contract::{FlipOutcome, NodeState, SwitchBoard, SwitchChange, SwitchRow};
use leptos::prelude::*;

/// An instance whose last confirmed sync is older than this is called stale.
const STALE_AFTER_MS: u64 = 3_000;

/// Where etcd and this instance stand, the latest flip's propagation, and every instance.
#[component]
pub(super) fn LivePanel(
    board: SwitchBoard,
    flipped: Option<Result<FlipOutcome, ConsoleFnError>>,
) -> AnyView {
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

/// How far one flip has got: per instance, applied or not and how long it took.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct Progress {
    /// (node, applied, milliseconds from the write to the apply)
    nodes: Vec<(String, bool, Option<f64>)>,
    /// A later write to the same key replaced this one.
    superseded: bool,
}

impl Progress {
    pub(super) fn of(board: &SwitchBoard, change: &SwitchChange) -> Self {
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

    pub(super) fn complete(&self) -> bool {
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
        {crate::pages::listing(Ok(nodes), "No live instance has a heartbeat in etcd.", |nodes| view! {
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
