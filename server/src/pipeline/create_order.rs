//! The create-order consumer (SPEC §4): per batch of deliveries, ONE database transaction
//! completes the new orders (`storage::completions`), then the pay timeouts of the
//! completed orders are published with confirms, then the batch is acked with one
//! multiple-ack.
//!
//! Failure handling:
//! * an unparsable message, or one whose own transaction fails again and again, is
//!   returned to the queue; the quorum queue's delivery limit then dead-letters it, so a
//!   poison message never loops forever;
//! * a database outage does not burn deliveries: the batch waits and retries while the
//!   messages stay unacked;
//! * if the pay timeouts cannot be published, the batch goes back to the queue; its events
//!   are processed already, so the redelivery only schedules their timeouts again.

use lapin::message::Delivery;
use std::{collections::HashSet, time::Duration};
use uuid::Uuid;

use crate::{
    pipeline::{
        batch::{ack_all, requeue, requeue_all},
        consume::{consume_forever, BatchHandler, ConsumerSpec, QuietWarnings},
        message::OrderCreated,
        pay_timeout::give_back_to_redis,
    },
    state::AppState,
    storage::completions::{self, BatchOutcome},
};

/// The consumer's name in `processed_events`.
pub const CONSUMER: &str = "create-order";

/// Starts a create-order consumer; it runs until the task is aborted.
pub fn spawn(state: &AppState) -> tokio::task::JoinHandle<()> {
    let settings = &state.settings.pipeline;
    let spec = ConsumerSpec {
        name: CONSUMER,
        queue: state.pipeline.topology.create_queue.clone(),
        prefetch: settings.prefetch,
        batch_max: settings.batch_max.max(1),
        batch_wait: Duration::from_millis(settings.batch_wait_ms),
        open_timeout: Duration::from_millis(settings.confirm_timeout_ms),
    };
    tokio::spawn(consume_forever(
        state.amqp.clone(),
        state.pipeline.topology.clone(),
        spec,
        CreateOrders {
            state: state.clone(),
        },
    ))
}

struct CreateOrders {
    state: AppState,
}

impl BatchHandler for CreateOrders {
    async fn handle(&self, batch: Vec<Delivery>) {
        let metrics = &self.state.metrics;
        metrics
            .pipeline
            .order_batch_size
            .observe(batch.len() as f64);
        let mut events: Vec<(Uuid, &Delivery)> = Vec::with_capacity(batch.len());
        for delivery in &batch {
            match serde_json::from_slice::<OrderCreated>(&delivery.data) {
                Ok(event) => events.push((event.order_id, delivery)),
                Err(error) => {
                    tracing::debug!(error = %error, "unparsable create-order message; returned towards the dead-letter queue");
                    requeue(delivery).await;
                }
            }
        }
        if events.is_empty() {
            return;
        }
        // Sorted: concurrent batches claim their processed_events rows in one order.
        let mut ids: Vec<Uuid> = events.iter().map(|(id, _)| *id).collect();
        ids.sort_unstable();
        ids.dedup();
        let (outcome, poisoned) = complete_resiliently(&self.state, &ids).await;
        let mut settled = Vec::with_capacity(events.len());
        for (id, delivery) in &events {
            if poisoned.contains(id) {
                requeue(delivery).await;
            } else {
                settled.push(*delivery);
            }
        }
        for owed in &outcome.failed {
            give_back_to_redis(&self.state, owed).await;
        }
        for completed in &outcome.completed {
            metrics
                .pipeline
                .consumer_lag_seconds
                .observe(completed.lag_s);
        }
        metrics
            .pipeline
            .orders_completed
            .with_label_values(&["unpaid"])
            .inc_by(outcome.completed.len() as u64);
        metrics
            .pipeline
            .orders_completed
            .with_label_values(&["failed"])
            .inc_by(outcome.failed.len() as u64);
        // Repeated within the batch, or processed before: the idempotency at work.
        let duplicates = events.len() - ids.len() + outcome.skipped.len();
        metrics
            .pipeline
            .orders_completed
            .with_label_values(&["duplicate"])
            .inc_by(duplicates as u64);
        if settled.is_empty() {
            return;
        }
        if self.schedule_timeouts(&outcome, &events).await {
            ack_all(&settled).await;
        } else {
            requeue_all(&settled).await;
        }
    }
}

impl CreateOrders {
    /// Publishes the pay timeouts of the completed orders, and again those of redelivered
    /// events that were processed before and are still unpaid. Whether all were confirmed.
    async fn schedule_timeouts(
        &self,
        outcome: &BatchOutcome,
        events: &[(Uuid, &Delivery)],
    ) -> bool {
        let mut due: Vec<(Uuid, u32)> = outcome
            .completed
            .iter()
            .map(|c| (c.order_id, seconds(c.pay_timeout_s)))
            .collect();
        let redelivered: HashSet<Uuid> = events
            .iter()
            .filter(|(_, delivery)| delivery.redelivered)
            .map(|(id, _)| *id)
            .collect();
        let rescheduled: Vec<Uuid> = outcome
            .skipped
            .iter()
            .filter(|id| redelivered.contains(id))
            .copied()
            .collect();
        match completions::unpaid_timeouts(&self.state.db, &rescheduled).await {
            Ok(unpaid) => due.extend(unpaid.into_iter().map(|(id, s)| (id, seconds(s)))),
            Err(error) => {
                tracing::warn!(error = %error, "could not look up redelivered orders; returning the batch");
                return false;
            }
        }
        if due.is_empty() {
            return true;
        }
        match self
            .state
            .pipeline
            .scheduler
            .schedule_pay_timeouts(&due)
            .await
        {
            Ok(confirmed) => confirmed.iter().all(|ok| *ok),
            Err(error) => {
                tracing::warn!(error = %error, "pay timeouts not scheduled; returning the batch");
                false
            }
        }
    }
}

fn seconds(pay_timeout_s: i32) -> u32 {
    u32::try_from(pay_timeout_s).unwrap_or(1).max(1)
}

/// Completes the batch; if its transaction fails for a reason of its own (not an outage),
/// completes the orders one by one so only the bad ones are returned. Returns the outcome
/// and the ids that could not be completed.
async fn complete_resiliently(state: &AppState, ids: &[Uuid]) -> (BatchOutcome, Vec<Uuid>) {
    match complete_retrying(state, ids).await {
        Ok(outcome) => (outcome, Vec::new()),
        Err(error) if ids.len() == 1 => {
            tracing::warn!(error = %error, order = %ids[0], "order could not be completed; returned towards the dead-letter queue");
            (BatchOutcome::default(), ids.to_vec())
        }
        Err(error) => {
            tracing::warn!(error = %error, size = ids.len(), "batch failed; completing its orders one by one");
            let mut outcome = BatchOutcome::default();
            let mut poisoned = Vec::new();
            for id in ids {
                match complete_retrying(state, std::slice::from_ref(id)).await {
                    Ok(single) => outcome.absorb(single),
                    Err(error) => {
                        tracing::warn!(error = %error, order = %id, "order could not be completed; returned towards the dead-letter queue");
                        poisoned.push(*id);
                    }
                }
            }
            (outcome, poisoned)
        }
    }
}

/// Retries while the database is unreachable (as long as it takes) and a few times on a
/// serialization failure or deadlock; any other error is the batch's own.
async fn complete_retrying(state: &AppState, ids: &[Uuid]) -> Result<BatchOutcome, sqlx::Error> {
    const CONFLICT_RETRIES: u32 = 5;
    let mut pause = Duration::from_millis(100);
    let mut conflicts = 0;
    let mut warnings = QuietWarnings::new("create-order transaction");
    loop {
        match completions::complete(&state.db, CONSUMER, ids).await {
            Ok(outcome) => {
                warnings.recovered();
                return Ok(outcome);
            }
            Err(error) if is_outage(&error) => {
                warnings.failed(&error);
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(error) if is_conflict(&error) && conflicts < CONFLICT_RETRIES => {
                conflicts += 1;
                tokio::time::sleep(Duration::from_millis(10 * u64::from(conflicts))).await;
            }
            Err(error) => return Err(error),
        }
    }
}

/// The database is unreachable or refusing connections: nothing about the message.
fn is_outage(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // connection exceptions, operator intervention (shutdown), too many connections
            code.starts_with("08") || code.starts_with("57P") || code == "53300"
        }),
        _ => false,
    }
}

/// Serialization failure or deadlock: worth trying again as is.
fn is_conflict(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().is_some_and(|code| code == "40001" || code == "40P01"))
}
