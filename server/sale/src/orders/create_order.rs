//! The create-order consumer: per batch of deliveries (each one message of one or more
//! orders), ONE database transaction completes the new orders (`orders::completions`),
//! then the pay timeouts of the completed orders are published with confirms (one message
//! per delay), then the batch is acked with one multiple-ack. A few batches are worked on at once (one's transaction while another
//! waits for its confirms); they are settled in arrival order.
//!
//! Failure handling:
//! * an unparsable message, or one whose own transaction fails again and again, is
//!   returned to the queue; the quorum queue's delivery limit then dead-letters it, so a
//!   poison message never loops forever;
//! * a database outage does not burn deliveries: the batch waits and retries while the
//!   messages stay unacked;
//! * if the pay timeouts cannot be published, the batch goes back to the queue; its orders
//!   are completed already, so the redelivery only schedules their timeouts again.

use base::{db::is_outage, quiet_log::quiet};
use lapin::message::Delivery;
use std::{collections::HashMap, future::Future, time::Duration};
use uuid::Uuid;

use crate::{
    orders::{
        completions::{self, BatchOutcome},
        mq::{
            consume::{consume_pipelined, ConsumerSpec, PipelinedHandler, QuietWarnings, Verdict},
            message,
        },
        pay_timeout::give_back_to_redis,
        status::OrderStatus,
    },
    SaleState,
};
use base::db::MeteredPool;

/// The consumer's name in `processed_events`.
pub const CONSUMER: &str = "create-order";

/// Batches worked on at once: enough to overlap a transaction with the previous batch's
/// confirms; more would only queue on the item row and the WAL flush.
const BATCHES_IN_FLIGHT: usize = 2;

/// Starts a create-order consumer; it runs until the task is aborted.
pub fn spawn(state: &SaleState) -> tokio::task::JoinHandle<()> {
    let settings = &state.settings.pipeline;
    let spec = ConsumerSpec {
        name: CONSUMER,
        queue: state.pipeline.topology.create_queue.clone(),
        prefetch: settings.prefetch,
        batch_max: settings.batch_max.max(1),
        batch_wait: Duration::from_millis(settings.batch_wait_ms),
        open_timeout: Duration::from_millis(settings.confirm_timeout_ms),
    };
    tokio::spawn(consume_pipelined(
        state.amqp.clone(),
        state.pipeline.topology.clone(),
        spec,
        CreateOrders {
            state: state.clone(),
        },
    ))
}

struct CreateOrders {
    state: SaleState,
}

/// A delivery's orders and whether the broker delivered it before; `None` when it did not
/// parse.
struct Event {
    order_ids: Vec<Uuid>,
    /// Each order's (activity, buyer), as the pre-order batch wrote them: whom to tell.
    owners: Vec<(i64, i64)>,
    redelivered: bool,
}

impl Event {
    fn has(&self, order_id: &Uuid) -> bool {
        self.order_ids.contains(order_id)
    }
}

impl PipelinedHandler for CreateOrders {
    fn in_flight(&self) -> usize {
        BATCHES_IN_FLIGHT
    }

    fn work(&self, batch: &[Delivery]) -> impl Future<Output = Verdict> + Send + 'static {
        self.state
            .metrics
            .pipeline
            .order_batch_size
            .observe(batch.len() as f64);
        let events: Vec<Option<Event>> = batch
            .iter()
            .map(|delivery| match serde_json::from_slice::<message::CreateOrders>(&delivery.data) {
                Ok(message) => Some(Event {
                    order_ids: message.order_ids(),
                    owners: message
                        .orders()
                        .iter()
                        .map(|order| (order.activity_id, order.user_id))
                        .collect(),
                    redelivered: delivery.redelivered,
                }),
                Err(error) => {
                    tracing::debug!(error = %error, "unparsable create-order message; returned towards the dead-letter queue");
                    None
                }
            })
            .collect();
        let state = self.state.clone();
        async move { work(&state, &events).await }
    }
}

/// One batch: its transaction, the Redis give-backs of failed orders, the metrics, and the
/// pay timeouts; the verdict acks what is done and returns the rest.
async fn work(state: &SaleState, events: &[Option<Event>]) -> Verdict {
    let mut returned: Vec<usize> = indexes(events, |event| event.is_none());
    // Sorted and distinct: one key order for every batch, and each order once.
    let mut ids: Vec<Uuid> = events
        .iter()
        .flatten()
        .flat_map(|e| e.order_ids.iter().copied())
        .collect();
    let carried = ids.len();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return Verdict {
            returned,
            ack_rest: true,
        };
    }
    let (outcome, poisoned) = complete_resiliently(state, &ids).await;
    // A message goes back with any of its orders that could not be completed; the others
    // it carries were, and its redelivery skips them.
    returned.extend(indexes(events, |event| {
        event.is_some_and(|e| poisoned.iter().any(|id| e.has(id)))
    }));
    tell_buyers(state, &outcome, events);
    for owed in &outcome.failed {
        give_back_to_redis(state, owed).await;
    }
    let metrics = &state.metrics.pipeline;
    for completed in &outcome.completed {
        metrics.consumer_lag_seconds.observe(completed.lag_s);
    }
    // Repeated within the batch, or completed before: the idempotency at work.
    let duplicates = carried - ids.len() + outcome.skipped.len();
    for (label, count) in [
        ("unpaid", outcome.completed.len()),
        ("failed", outcome.failed.len()),
        ("duplicate", duplicates),
    ] {
        metrics
            .orders_completed
            .with_label_values(&[label])
            .inc_by(count as u64);
    }
    let ack_rest = schedule_timeouts(state, &outcome, events).await;
    Verdict { returned, ack_rest }
}

/// Tells each buyer his order's new state, now that the batch is committed: `UNPAID` for
/// the completed, `FAILED` for those the stock no longer covered. A skipped order changed
/// nothing here, so nothing is told twice by a redelivery.
fn tell_buyers(state: &SaleState, outcome: &BatchOutcome, events: &[Option<Event>]) {
    let owners: HashMap<Uuid, (i64, i64)> = events
        .iter()
        .flatten()
        .flat_map(|event| {
            event
                .order_ids
                .iter()
                .copied()
                .zip(event.owners.iter().copied())
        })
        .collect();
    for completed in &outcome.completed {
        if let Some(&(activity_id, user_id)) = owners.get(&completed.order_id) {
            state.events.order(
                activity_id,
                user_id,
                completed.order_id,
                OrderStatus::Unpaid,
            );
        }
    }
    for failed in &outcome.failed {
        state.events.order(
            failed.activity_id,
            failed.user_id,
            failed.order_id,
            OrderStatus::Failed,
        );
    }
}

fn indexes(events: &[Option<Event>], wanted: impl Fn(Option<&Event>) -> bool) -> Vec<usize> {
    events
        .iter()
        .enumerate()
        .filter(|(_, event)| wanted(event.as_ref()))
        .map(|(index, _)| index)
        .collect()
}

/// Publishes the pay timeouts of the completed orders, and again those of orders of
/// redelivered messages that were completed before and are still unpaid (the first delivery
/// may have died between its commit and its schedule). Whether all were confirmed.
async fn schedule_timeouts(
    state: &SaleState,
    outcome: &BatchOutcome,
    events: &[Option<Event>],
) -> bool {
    let mut due: Vec<(Uuid, u32)> = outcome
        .completed
        .iter()
        .map(|c| (c.order_id, seconds(c.pay_timeout_s)))
        .collect();
    let rescheduled: Vec<Uuid> = outcome
        .skipped
        .iter()
        .filter(|id| events.iter().flatten().any(|e| e.redelivered && e.has(id)))
        .copied()
        .collect();
    match completions::unpaid_timeouts(&state.db, &rescheduled).await {
        Ok(unpaid) => due.extend(unpaid.into_iter().map(|(id, s)| (id, seconds(s)))),
        Err(error) => {
            quiet!(warn, "orders.redelivered_lookup", error = %error, "could not look up redelivered orders; returning the batch");
            return false;
        }
    }
    if due.is_empty() {
        return true;
    }
    match state.pipeline.scheduler.schedule_pay_timeouts(&due).await {
        Ok(confirmed) => confirmed,
        Err(error) => {
            quiet!(warn, "orders.pay_timeouts_unscheduled", error = %error, "pay timeouts not scheduled; returning the batch");
            false
        }
    }
}

fn seconds(pay_timeout_s: i32) -> u32 {
    u32::try_from(pay_timeout_s).unwrap_or(1).max(1)
}

/// Completes the batch; if its transaction fails for a reason of its own (not an outage),
/// completes the orders one by one so only the bad ones are returned. Returns the outcome
/// and the ids that could not be completed.
async fn complete_resiliently(state: &SaleState, ids: &[Uuid]) -> (BatchOutcome, Vec<Uuid>) {
    match complete_retrying(state, ids).await {
        Ok(outcome) => (outcome, Vec::new()),
        Err(error) if ids.len() == 1 => {
            quiet!(warn, "orders.order_failed", error = %error, order = %ids[0], "order could not be completed; returned towards the dead-letter queue");
            (BatchOutcome::default(), ids.to_vec())
        }
        Err(error) => {
            quiet!(warn, "orders.batch_failed", error = %error, size = ids.len(), "batch failed; completing its orders one by one");
            let mut outcome = BatchOutcome::default();
            let mut poisoned = Vec::new();
            for id in ids {
                match complete_retrying(state, std::slice::from_ref(id)).await {
                    Ok(single) => outcome.absorb(single),
                    Err(error) => {
                        quiet!(warn, "orders.order_failed", error = %error, order = %id, "order could not be completed; returned towards the dead-letter queue");
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
async fn complete_retrying(state: &SaleState, ids: &[Uuid]) -> Result<BatchOutcome, sqlx::Error> {
    const CONFLICT_RETRIES: u32 = 5;
    let mut pause = Duration::from_millis(100);
    let mut conflicts = 0;
    let mut warnings = QuietWarnings::new("create-order transaction");
    loop {
        match completions::complete(
            &MeteredPool::new(state.db.clone(), &state.metrics, CONSUMER),
            CONSUMER,
            ids,
        )
        .await
        {
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

/// Serialization failure or deadlock: worth trying again as is.
fn is_conflict(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(db) if db.code().is_some_and(|code| code == "40001" || code == "40P01"))
}
