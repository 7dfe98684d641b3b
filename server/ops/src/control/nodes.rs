//! Proof of propagation: every instance keeps `{prefix}/nodes/{node_id}` under a
//! lease, holding what it has applied; a flip is confirmed when every live instance's
//! report shows its revision. The report is rewritten every heartbeat and at once after
//! the watcher applies a change, so a confirmation does not wait for the next beat.

use contract::{BuyAnswers, NodeApplied, StagedValue, BUY_ROUTES};
use etcd_client::{Client, EventType, GetOptions, PutOptions, WatchOptions};
use prometheus::core::Collector;
use serde::{Deserialize, Serialize};
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

use crate::control::{
    layout::{now_us, Layout},
    status::{Complaint, RecentApply},
};
use crate::state::AppState;
use base::etcd::EtcdCall;
use sale::buy::traffic::Rates;

/// The JSON under `{prefix}/nodes/{node_id}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct NodeReport {
    pub(crate) node_id: String,
    /// Where the instance serves HTTP.
    pub(crate) address: String,
    /// Wall-clock microseconds since the epoch when this report was written.
    pub(crate) heartbeat_at_us: i64,
    /// Wall-clock microseconds since the epoch when the process started; absent from the
    /// reports of instances built before it was reported.
    #[serde(default)]
    pub(crate) started_at_us: Option<i64>,
    /// Every change up to this revision is applied.
    pub(crate) applied_revision: i64,
    /// The instance's watch is open.
    pub(crate) connected: bool,
    pub(crate) synced_ago_ms: Option<u64>,
    pub(crate) leader: bool,
    /// The switch keys it applied lately, with their revision and when.
    pub(crate) recent: Vec<RecentApply>,
    /// The staged values it applies in place of etcd's.
    #[serde(default)]
    pub(crate) staged: Vec<StagedValue>,
    /// Its buy answers: a stage's error rate, a flip's impact.
    #[serde(default)]
    pub(crate) buys: BuyAnswers,
}

impl NodeReport {
    /// This node's view of the write of `path` at `revision`, made at `written_at_us`.
    pub(crate) fn applied(
        &self,
        path: &str,
        revision: i64,
        written_at_us: Option<i64>,
    ) -> NodeApplied {
        let took_ms = written_at_us.and_then(|written| {
            self.recent
                .iter()
                .find(|apply| apply.path == path && apply.mod_revision == revision)
                .map(|apply| (apply.applied_at_us - written).max(0) as f64 / 1000.0)
        });
        NodeApplied {
            node_id: self.node_id.clone(),
            applied: self.applied_revision >= revision,
            applied_revision: self.applied_revision,
            took_ms,
        }
    }
}

/// Buy answers since the process started, and how many of them were 5xx, from the HTTP
/// request counters of the buy routes.
fn buy_answers(metrics: &base::metrics::Metrics) -> (u64, u64) {
    let mut answered = 0;
    let mut server_errors = 0;
    for family in metrics.http_requests.collect() {
        for metric in family.get_metric() {
            let label = |name: &str| crate::dashboard::sample::label(metric, name);
            if !label("route").is_some_and(|route| BUY_ROUTES.contains(&route)) {
                continue;
            }
            let count = metric.get_counter().get_value() as u64;
            answered += count;
            if label("status").is_some_and(|status| status.starts_with('5')) {
                server_errors += count;
            }
        }
    }
    (answered, server_errors)
}

/// This instance's report as of now.
fn current_report(state: &AppState, address: &str, rates: &mut Rates) -> NodeReport {
    let (answered, server_errors) = buy_answers(&state.metrics);
    let (rate_per_s, activities) = rates.per_s(Instant::now(), answered, state.funnel.traffic());
    let buys = BuyAnswers {
        answered,
        server_errors,
        rate_per_s,
        in_flight: state.funnel.in_flight(),
        activities,
    };
    let sync = state.control.sync();
    NodeReport {
        node_id: state.control.node_id().to_owned(),
        address: address.to_owned(),
        heartbeat_at_us: now_us(),
        started_at_us: Some(state.control.started_at_us()),
        applied_revision: sync.applied_revision,
        connected: sync.connected,
        synced_ago_ms: sync.synced_ago().map(|ago| ago.as_millis() as u64),
        leader: state.leadership.is_leader(),
        recent: sync.recent.iter().cloned().collect(),
        staged: sync.staged.clone(),
        buys,
    }
}

/// Keeps the node key alive for the life of the task; gives it up on `stop`.
pub(super) async fn heartbeat(
    state: AppState,
    layout: Layout,
    address: String,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let key = layout.node_key(state.control.node_id());
    let period = Duration::from_millis(state.settings.control.heartbeat_ms.max(10));
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut lease: Option<i64> = None;
    let mut complaint = Complaint::new(Duration::from_secs(30));
    let mut rates = Rates::default();
    loop {
        let keep_alive = tokio::select! {
            _ = tick.tick() => true,
            () = state.control.report_requested() => false,
            _ = stop.changed() => break,
        };
        let report = current_report(&state, &address, &mut rates);
        match beat(&state, &key, &mut lease, keep_alive, &report).await {
            Ok(()) => complaint.recovered("node heartbeat back in etcd"),
            Err(error) => {
                // The lease may have expired meanwhile: take a new one next time.
                lease = None;
                complaint.complain("node heartbeat failed", &error);
            }
        }
    }
    if let (Some(lease), Ok(mut client)) = (lease, state.etcd.client().await) {
        // Revoking deletes the node key: the others stop waiting for this instance at once.
        let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
    }
}

async fn beat(
    state: &AppState,
    key: &str,
    lease: &mut Option<i64>,
    keep_alive: bool,
    report: &NodeReport,
) -> anyhow::Result<()> {
    let mut client = state.etcd.client().await?;
    let id = match *lease {
        Some(id) if keep_alive => {
            // One keep-alive per beat; an error or a TTL of 0 means the lease is gone.
            state
                .etcd
                .timed(EtcdCall::Lease, client.lease_keep_alive(id))
                .await?;
            id
        }
        Some(id) => id,
        None => {
            let ttl_s = state.settings.control.lease_ttl_s.max(1);
            let granted = state
                .etcd
                .timed(EtcdCall::Lease, client.lease_grant(ttl_s, None))
                .await?;
            *lease = Some(granted.id());
            granted.id()
        }
    };
    let value = serde_json::to_vec(report)?;
    let options = PutOptions::new().with_lease(id);
    state
        .etcd
        .timed(EtcdCall::Put, client.put(key, value, Some(options)))
        .await?;
    Ok(())
}

/// The live instances' reports (their leases alive), by node id, and the read's revision.
pub(crate) async fn live(
    client: &mut Client,
    layout: &Layout,
) -> anyhow::Result<(BTreeMap<String, NodeReport>, i64)> {
    let response = client
        .get(layout.nodes(), Some(GetOptions::new().with_prefix()))
        .await?;
    let revision = response.header().map_or(0, |header| header.revision());
    let nodes = response
        .kvs()
        .iter()
        .filter_map(|kv| serde_json::from_slice::<NodeReport>(kv.value()).ok())
        .map(|report| (report.node_id.clone(), report))
        .collect();
    Ok((nodes, revision))
}

/// Waits until every live instance has applied `revision` (a write of `path` made at
/// `written_at_us`), or `wait` runs out; instances that die meanwhile are not waited for.
pub(crate) async fn await_applied(
    client: &mut Client,
    layout: &Layout,
    path: &str,
    revision: i64,
    written_at_us: i64,
    wait: Duration,
) -> anyhow::Result<contract::Propagation> {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + wait;
    let (mut nodes, read_at) = live(client, layout).await?;
    let done = |nodes: &BTreeMap<String, NodeReport>| {
        nodes.values().all(|node| node.applied_revision >= revision)
    };
    if !done(&nodes) {
        let options = WatchOptions::new()
            .with_prefix()
            .with_start_revision(read_at + 1);
        let mut stream = client.watch(layout.nodes(), Some(options)).await?;
        while !done(&nodes) {
            let response = tokio::select! {
                response = stream.message() => response?,
                () = tokio::time::sleep_until(deadline) => break,
            };
            let Some(response) = response else { break };
            for event in response.events() {
                let Some(kv) = event.kv() else { continue };
                let node_id = kv
                    .key_str()
                    .ok()
                    .and_then(|key| layout.relative(key))
                    .and_then(|path| path.strip_prefix("nodes/"))
                    .unwrap_or_default()
                    .to_owned();
                match event.event_type() {
                    EventType::Put => {
                        if let Ok(report) = serde_json::from_slice::<NodeReport>(kv.value()) {
                            nodes.insert(report.node_id.clone(), report);
                        }
                    }
                    EventType::Delete => {
                        nodes.remove(&node_id);
                    }
                }
            }
        }
    }
    Ok(contract::Propagation {
        complete: done(&nodes),
        waited_ms: started.elapsed().as_secs_f64() * 1000.0,
        nodes: nodes
            .values()
            .map(|node| node.applied(path, revision, Some(written_at_us)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(applied_revision: i64, recent: Vec<RecentApply>) -> NodeReport {
        NodeReport {
            node_id: "n1".into(),
            address: "127.0.0.1:1".into(),
            heartbeat_at_us: 0,
            started_at_us: None,
            applied_revision,
            connected: true,
            synced_ago_ms: Some(5),
            leader: false,
            recent,
            staged: Vec::new(),
            buys: BuyAnswers::default(),
        }
    }

    #[test]
    fn a_node_reports_whether_and_how_fast_it_applied_a_write() {
        let node = report(
            12,
            vec![RecentApply {
                path: "switches/entry".into(),
                mod_revision: 10,
                applied_at_us: 1_003_500,
            }],
        );
        let seen = node.applied("switches/entry", 10, Some(1_000_000));
        assert!(seen.applied);
        assert_eq!(seen.took_ms, Some(3.5));
        let unknown_time = node.applied("switches/entry", 10, None);
        assert_eq!(unknown_time.took_ms, None);
        let later = node.applied("switches/entry", 13, Some(1_000_000));
        assert!(!later.applied);
        assert_eq!(later.took_ms, None);
        let loaded = node.applied("limits/max_in_flight", 11, Some(1_000_000));
        assert!(loaded.applied, "applied by a read, not an event");
        assert_eq!(loaded.took_ms, None);
    }

    #[test]
    fn the_report_is_plain_json() {
        let node = report(3, Vec::new());
        let text = serde_json::to_string(&node).expect("json");
        assert!(text.contains("\"applied_revision\":3"));
        assert_eq!(
            serde_json::from_str::<NodeReport>(&text).expect("parse"),
            node
        );
    }
}
