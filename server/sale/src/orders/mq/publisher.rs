//! The buy path's fast publish (funnel step 12): [`Publisher::offer`] never blocks and
//! never fails the buyer. The pre-order writer offers each outbox row it committed, with
//! its orders' events; a background task gathers offered rows for a moment, publishes them
//! with confirms, several rows' orders per message (a row never split), and marks the rows
//! of the confirmed messages `sent` with one UPDATE per batch.
//!
//! RabbitMQ's work is per message (its quorum queue's log write, the confirm, the delivery
//! and the ack), whatever the message carries: about three quarters of a millisecond of the
//! broker's CPU per create-order message on a 2-core box, more than a pre-order batch costs
//! PostgreSQL. So the first row offered waits [`LINGER`] for the rows of the batches
//! committed after it. Nobody waits for that: the buyers were answered at the commit, and
//! the consumer gathers messages for longer than that anyway before it completes them.
//!
//! Only committed pre-orders are offered, so what a batch costs (its publishes, its one
//! UPDATE) is counted to the successful buys' path as a whole (`baselines::path`).
//!
//! Whatever is not confirmed (queue full, broker away, confirm late) stays `pending` in the
//! outbox, and the relay resends it after its grace period; the create-order consumer is
//! idempotent, so a message sent twice completes its order once.

use sqlx::PgPool;
use std::{sync::Arc, time::Duration};
use tokio::sync::{mpsc, Semaphore};
use uuid::Uuid;

use crate::orders::{
    mq::{broker::Broker, message::OrderCreated},
    outbox,
};
use base::{
    metrics::Metrics,
    quiet_log::quiet,
    tally::{Call, PathTotals},
};

/// Batches whose confirms may be awaited at once; more would only queue on the broker.
const BATCHES_IN_FLIGHT: usize = 4;
/// Orders one create-order message gathers from several rows at most. A row with more
/// orders goes out alone, as one message: its `sent` says every order of it went out.
const ORDERS_PER_MESSAGE: usize = 256;
/// How long the first row offered waits for others to share its message.
const LINGER: Duration = Duration::from_millis(20);

/// A committed outbox row of create-order events: its event id and its orders' events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutboxRow {
    pub event_id: Uuid,
    pub orders: Vec<OrderCreated>,
}

/// The buy path's handle on the background publisher. Cheap to clone.
#[derive(Clone)]
pub struct Publisher {
    queue: mpsc::Sender<OutboxRow>,
    metrics: Metrics,
}

impl Publisher {
    /// Starts the background task; it holds at most `capacity` rows not yet published.
    pub fn spawn(
        broker: Broker,
        db: PgPool,
        metrics: Metrics,
        capacity: usize,
        batch_max: usize,
    ) -> Self {
        let (queue, offers) = mpsc::channel(capacity.max(1));
        tokio::spawn(run(broker, db, metrics.clone(), offers, batch_max.max(1)));
        Self { queue, metrics }
    }

    /// Hands a committed outbox row to the background publisher, or drops it when the
    /// publisher is behind (the relay resends it from the outbox).
    pub fn offer(&self, row: OutboxRow) {
        let orders = row.orders.len() as u64;
        if self.queue.try_send(row).is_err() {
            self.metrics
                .pipeline
                .published
                .with_label_values(&["offer", "dropped"])
                .inc_by(orders);
        }
    }
}

async fn run(
    broker: Broker,
    db: PgPool,
    metrics: Metrics,
    mut offers: mpsc::Receiver<OutboxRow>,
    batch_max: usize,
) {
    let permits = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    let path = PathTotals::of(&metrics);
    while let Some(first) = offers.recv().await {
        let deadline = tokio::time::Instant::now() + LINGER;
        let mut orders = first.orders.len();
        let mut batch = vec![first];
        while batch.len() < batch_max && orders < ORDERS_PER_MESSAGE {
            match tokio::time::timeout_at(deadline, offers.recv()).await {
                Ok(Some(next)) => {
                    orders += next.orders.len();
                    batch.push(next);
                }
                Ok(None) | Err(_) => break,
            }
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let (rows, orders) = (
            batch.len(),
            batch.iter().map(|row| row.orders.len()).sum::<usize>(),
        );
        let packed = pack(batch, ORDERS_PER_MESSAGE);
        let messages: Vec<_> = packed
            .iter()
            .map(|rows| {
                let events: Vec<OrderCreated> =
                    rows.iter().flat_map(|row| row.orders.clone()).collect();
                broker.topology().orders_created(&events)
            })
            .collect();
        match broker.send(&messages).await {
            Ok(confirms) => {
                path.after_success(Call::MqPublish, messages.len() as u64);
                let (db, path) = (db.clone(), path.clone());
                tokio::spawn(async move {
                    let confirmed: Vec<Uuid> = confirms
                        .wait()
                        .await
                        .into_iter()
                        .zip(packed)
                        .filter(|(ok, _)| *ok)
                        .flat_map(|(_, rows)| rows.into_iter().map(|row| row.event_id))
                        .collect();
                    if !confirmed.is_empty() {
                        path.after_success(Call::DbStatement, 1);
                        path.after_success(Call::DbTransaction, 1);
                    }
                    if let Err(error) = outbox::mark_sent(&db, &confirmed).await {
                        // The relay resends them; the consumer skips the duplicates.
                        quiet!(warn, "publish.mark_sent", error = %error, "could not mark published outbox rows as sent");
                    }
                    drop(permit);
                });
            }
            Err(error) => {
                tracing::debug!(error = %error, rows, "offers not published; the relay resends them");
                metrics
                    .pipeline
                    .published
                    .with_label_values(&["offer", "dropped"])
                    .inc_by(orders as u64);
            }
        }
    }
}

/// The rows of each message, in order: consecutive rows while their orders fit in
/// `max_orders`; a larger row is a message alone.
fn pack(rows: Vec<OutboxRow>, max_orders: usize) -> Vec<Vec<OutboxRow>> {
    let mut messages: Vec<Vec<OutboxRow>> = Vec::new();
    let mut orders = 0;
    for row in rows {
        match messages.last_mut() {
            Some(message) if orders + row.orders.len() <= max_orders => {
                orders += row.orders.len();
                message.push(row);
            }
            _ => {
                orders = row.orders.len();
                messages.push(vec![row]);
            }
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(orders: u8) -> OutboxRow {
        OutboxRow {
            event_id: Uuid::new_v4(),
            orders: (0..orders)
                .map(|n| OrderCreated {
                    order_id: Uuid::from_bytes([n; 16]),
                    activity_id: 1,
                    item_id: 1,
                    user_id: i64::from(n),
                    quantity: 1,
                    amount_cents: 100,
                })
                .collect(),
        }
    }

    #[test]
    fn rows_share_messages_up_to_the_limit_and_are_never_split() {
        let rows = vec![row(3), row(2), row(4), row(9), row(1), row(1)];
        let expected: Vec<Uuid> = rows.iter().map(|r| r.event_id).collect();
        let packed = pack(rows, 5);
        let sizes: Vec<Vec<usize>> = packed
            .iter()
            .map(|message| message.iter().map(|row| row.orders.len()).collect())
            .collect();
        assert_eq!(sizes, vec![vec![3, 2], vec![4], vec![9], vec![1, 1]]);
        let ids: Vec<Uuid> = packed.concat().iter().map(|r| r.event_id).collect();
        assert_eq!(ids, expected, "every row once, in order");
        assert!(pack(Vec::new(), 5).is_empty());
    }
}
