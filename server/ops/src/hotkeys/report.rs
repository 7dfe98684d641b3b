//! The two tasks of every serving instance: the counter, which counts the samples and
//! publishes its top keys on the Redis channel `{prefix}hotkeys:reports` every eighth of a
//! second, and the aggregator, which listens on that channel, adds up the latest report of
//! every instance, keeps the cluster-wide top for the console and, on the leader, hands the
//! sum to the [`Publisher`](super::publish::Publisher) at once, so that a key is published
//! one report after its summed rate crossed the threshold.

use futures::StreamExt;
use redis::AsyncCommands;
use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    control::status::Backoff,
    hotkeys::{
        cluster::{top_keys, ClusterCounts, Report},
        publish::Publisher,
        window::{Window, QUARTER_MS, REPORT_MS, WINDOW_MS},
        Samples,
    },
    state::AppState,
};

fn channel(state: &AppState) -> String {
    state.redis.key("hotkeys:reports")
}

/// Starts the counter (when detection is on) and the aggregator, for the process's life.
pub fn spawn(state: &AppState) {
    spawn_aggregator(state);
    if let Some(samples) = state.hotkeys.samples() {
        tokio::spawn(count(state.clone(), samples));
    }
}

/// The aggregator alone, for a process that serves no requests (`seckill worker`), which
/// has nothing to count but may be the leader that publishes.
pub fn spawn_aggregator(state: &AppState) {
    tokio::spawn(aggregate(state.clone()));
}

/// How often the counting task takes the waiting samples.
const DRAIN: Duration = Duration::from_millis(10);

async fn count(state: AppState, waiting: Arc<Samples>) {
    let mut window = Window::new();
    let bound = i64::try_from(window.bound_bytes()).unwrap_or(i64::MAX);
    state.metrics.hotkeys.sketch_bytes.set(bound);
    let mut tick = tokio::time::interval(Duration::from_millis(REPORT_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let channel = channel(&state);
    // Every other report ends a quarter.
    let mut ends_quarter = false;
    let mut drain = tokio::time::interval(DRAIN);
    drain.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut samples = Vec::new();
    loop {
        tokio::select! {
            _ = drain.tick() => {
                waiting.take(&mut samples);
                for sample in samples.drain(..) {
                    window.record(sample);
                }
            }
            _ = tick.tick() => {
                // What arrived since the last drain belongs to the quarter ending now.
                waiting.take(&mut samples);
                for sample in samples.drain(..) {
                    window.record(sample);
                }
                ends_quarter = !ends_quarter;
                let covered = if ends_quarter { WINDOW_MS } else { WINDOW_MS - REPORT_MS };
                let report = Report {
                    node: state.control.node_id().to_owned(),
                    tops: window.report(covered),
                };
                if ends_quarter {
                    window.rotate();
                }
                let sent = match serde_json::to_vec(&report) {
                    Ok(payload) => state
                        .redis
                        .connection()
                        .publish::<_, _, ()>(&channel, payload)
                        .await
                        .is_ok(),
                    Err(_) => false,
                };
                let outcome = if sent { "sent" } else { "failed" };
                state.metrics.hotkeys.reports.with_label_values(&[outcome]).inc();
            }
        }
    }
}

async fn aggregate(state: AppState) {
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut cluster = ClusterCounts::default();
    let mut publisher = Publisher::new(state.clone());
    loop {
        if let Err(error) = listen(&state, &mut cluster, &mut publisher, &mut backoff).await {
            tracing::debug!(error = %error, "hot-key reports unavailable; subscribing again");
        }
        tokio::time::sleep(backoff.next_delay()).await;
    }
}

/// One subscription's life.
async fn listen(
    state: &AppState,
    cluster: &mut ClusterCounts,
    publisher: &mut Publisher,
    backoff: &mut Backoff,
) -> redis::RedisResult<()> {
    let mut subscription = state.redis.subscription().await?;
    subscription.subscribe(channel(state)).await?;
    backoff.reset();
    let mut messages = subscription.on_message();
    let mut tick = tokio::time::interval(Duration::from_millis(QUARTER_MS));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let reports = &state.metrics.hotkeys.reports;
    loop {
        tokio::select! {
            message = messages.next() => {
                let Some(message) = message else {
                    return Ok(());
                };
                match serde_json::from_slice::<Report>(message.get_payload_bytes()) {
                    Ok(report) => {
                        reports.with_label_values(&["received"]).inc();
                        cluster.receive(report, Instant::now());
                    }
                    Err(_) => {
                        reports.with_label_values(&["malformed"]).inc();
                        continue;
                    }
                }
            }
            // Also without reports: a silent instance's counts fade out, and lapsed keys'
            // history is closed.
            _ = tick.tick() => {}
        }
        let (summed, nodes) = cluster.sum(Instant::now());
        state
            .hotkeys
            .set_top(top_keys(&summed), u32::try_from(nodes).unwrap_or(u32::MAX));
        if state.leadership.is_leader() {
            publisher.evaluate(&summed).await;
        } else {
            publisher.step_down();
        }
    }
}
