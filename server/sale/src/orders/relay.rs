//! The outbox relay (leader only): resends outbox rows still `pending` after the
//! grace period, counts attempts, waits longer after each failure, and marks a row
//! `failed` (with its last error, shown in the console) after `relay_max_attempts`, until an
//! operator hands it back (`outbox_retry`).
//!
//! It runs only while this instance leads, and is safe even if two run: each batch is
//! claimed with `FOR UPDATE SKIP LOCKED` and leased before it is published.

use contract::Actor;
use contract::{FailedOutboxRow, OutboxSummary};
use std::time::Duration;
use uuid::Uuid;

use crate::{
    orders::{
        mq::{broker::Broker, consume::QuietWarnings},
        outbox::{self, Claimed, Failure},
        rules::relay_backoff,
    },
    SaleState,
};
use base::error::ApiResult;

/// Rows published per claim.
const RELAY_BATCH: i64 = 500;

/// Starts the relay in the background; aborting the handle stops it.
pub fn spawn(state: &SaleState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(state.clone()))
}

/// Runs the relay for as long as the task runs, while this instance leads.
async fn run(state: SaleState) {
    let interval = Duration::from_millis(state.settings.pipeline.relay_interval_ms.max(10));
    let mut leadership = state.leadership.clone();
    let mut warnings = QuietWarnings::new("outbox relay");
    loop {
        leadership.until_leader().await;
        match relay_due(&state).await {
            Ok(_) => warnings.recovered(),
            Err(error) => warnings.failed(&error),
        }
        // Counted whatever the pass found: a pass that left a row alone is the proof that
        // the row was not the relay's to send.
        state.metrics.pipeline.relay_passes.inc();
        tokio::time::sleep(interval).await;
    }
}

/// Publishes every row due now; returns how many pre-orders the confirmed rows carry.
pub async fn relay_due(state: &SaleState) -> Result<usize, sqlx::Error> {
    let settings = &state.settings.pipeline;
    let grace = Duration::from_millis(settings.relay_grace_ms);
    let mut relayed = 0;
    loop {
        // While the publisher waits out a failed connect, a claim would spend the rows'
        // attempts on publishes that never reach RabbitMQ: `failed` would come after fewer
        // tries than `relay_max_attempts`.
        if state.pipeline.control.paused().await {
            return Ok(relayed);
        }
        let claimed = outbox::claim_due(&state.db, grace, lease(state), RELAY_BATCH).await?;
        let full = claimed.len() as i64 == RELAY_BATCH;
        relayed += publish_claimed(state, &state.pipeline.control, &claimed).await?;
        if !full {
            return Ok(relayed);
        }
    }
}

/// How long a claimed row is left alone by other relays: long enough for its confirm.
pub fn lease(state: &SaleState) -> Duration {
    Duration::from_millis(state.settings.pipeline.confirm_timeout_ms) * 2
}

/// Publishes claimed rows with confirms; confirmed ones become `sent`, the others get their
/// error, their next attempt's time, or `failed` once out of attempts. Returns how many
/// pre-orders the confirmed rows carry.
pub async fn publish_claimed(
    state: &SaleState,
    broker: &Broker,
    claimed: &[Claimed],
) -> Result<usize, sqlx::Error> {
    if claimed.is_empty() {
        return Ok(0);
    }
    let settings = &state.settings.pipeline;
    let mut failures = Vec::new();
    let mut routed = Vec::with_capacity(claimed.len());
    for row in claimed {
        match broker
            .topology()
            .outbox_message(&row.topic, row.event_id, &row.payload)
        {
            Some(message) => routed.push((row, message)),
            None => failures.push(failure(
                state,
                row,
                format!("no route for topic `{}`", row.topic),
            )),
        }
    }
    let messages: Vec<_> = routed.iter().map(|(_, message)| message.clone()).collect();
    let outcome = broker.publish(&messages).await;
    let mut confirmed: Vec<Uuid> = Vec::with_capacity(routed.len());
    let mut orders = 0;
    match outcome {
        Ok(results) => {
            for ((row, _), ok) in routed.iter().zip(results) {
                if ok {
                    confirmed.push(row.event_id);
                    orders += row.orders();
                } else {
                    failures.push(failure(state, row, "not confirmed by RabbitMQ".into()));
                }
            }
        }
        Err(error) => {
            let error = error.to_string();
            failures.extend(
                routed
                    .iter()
                    .map(|(row, _)| failure(state, row, error.clone())),
            );
        }
    }
    outbox::mark_sent(&state.db, &confirmed).await?;
    outbox::record_failures(&state.db, &failures, settings.relay_max_attempts).await?;
    if !failures.is_empty() {
        tracing::debug!(failed = failures.len(), "outbox rows not relayed this time");
    }
    Ok(orders)
}

fn failure(state: &SaleState, row: &Claimed, error: String) -> Failure {
    let base = Duration::from_millis(state.settings.pipeline.relay_interval_ms.max(10));
    Failure {
        id: row.id,
        retry_in: relay_backoff(row.attempts, base),
        error,
    }
}

/// Rows the failed list shows at most.
const FAILED_ROWS_SHOWN: i64 = 100;

/// What the relay is up to, for the console and `GET /admin/api/outbox` (ops, SRE, admin).
pub async fn summary(state: &SaleState, actor: &Actor) -> ApiResult<OutboxSummary> {
    crate::identity::authorize(actor, contract::Permission::WatchOperations)?;
    let counts = outbox::counts(&state.db).await?;
    let failed_rows = outbox::failed_rows(&state.db, FAILED_ROWS_SHOWN)
        .await?
        .into_iter()
        .map(|row| FailedOutboxRow {
            id: row.id,
            event_id: row.event_id.to_string(),
            topic: row.topic,
            attempts: i64::from(row.attempts),
            last_error: row.last_error,
            created_at: row.created_at,
        })
        .collect();
    Ok(OutboxSummary {
        pending: counts.pending,
        failed: counts.failed,
        recorded: counts.recorded,
        failed_rows,
    })
}
