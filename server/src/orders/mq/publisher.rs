//! The buy path's fast publish (funnel step 12): [`Publisher::offer`] never blocks and
//! never fails the buyer. A background task gathers offered events, publishes them with
//! confirms, several orders per message, and marks their outbox rows `sent` with one
//! UPDATE per batch.
//!
//! Only committed pre-orders are offered, so what a batch costs (its publishes, its one
//! UPDATE) is counted to the successful buys' path as a whole (`baselines::path`).
//!
//! Whatever is not confirmed (queue full, broker away, confirm late) stays `pending` in the
//! outbox, and the relay resends it after its grace period; the create-order consumer is
//! idempotent, so a message sent twice completes its order once.

use sqlx::PgPool;
use std::sync::Arc;
use tokio::sync::{mpsc, Semaphore};
use uuid::Uuid;

use crate::{
    baselines::path::{Call, PathTotals},
    infra::{metrics::Metrics, quiet_log::quiet},
    orders::{
        mq::{broker::Broker, message::OrderCreated},
        outbox,
    },
};

/// Batches whose confirms may be awaited at once; more would only queue on the broker.
const BATCHES_IN_FLIGHT: usize = 4;
/// Orders one create-order message carries at most. A pre-order batch commits its members
/// together, so their offers arrive together and go out as one message: the broker's work
/// (queue write, confirm, delivery, ack) is per message, whatever it carries.
const ORDERS_PER_MESSAGE: usize = 64;

/// The buy path's handle on the background publisher. Cheap to clone.
#[derive(Clone)]
pub(crate) struct Publisher {
    queue: mpsc::Sender<OrderCreated>,
    metrics: Metrics,
}

impl Publisher {
    /// Starts the background task; it holds at most `capacity` offers not yet published.
    pub(crate) fn spawn(
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

    /// Hands a committed pre-order's event to the background publisher, or drops it when
    /// the publisher is behind (the relay resends it from the outbox).
    pub(crate) fn offer(&self, event: OrderCreated) {
        if self.queue.try_send(event).is_err() {
            self.metrics
                .pipeline
                .published
                .with_label_values(&["offer", "dropped"])
                .inc();
        }
    }
}

async fn run(
    broker: Broker,
    db: PgPool,
    metrics: Metrics,
    mut offers: mpsc::Receiver<OrderCreated>,
    batch_max: usize,
) {
    let permits = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    let path = PathTotals::of(&metrics);
    while let Some(first) = offers.recv().await {
        // No waiting for company: what queued up while the last batch went out is the batch.
        let mut batch = vec![first];
        while batch.len() < batch_max {
            match offers.try_recv() {
                Ok(next) => batch.push(next),
                Err(_) => break,
            }
        }
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        let messages: Vec<_> = batch
            .chunks(ORDERS_PER_MESSAGE)
            .map(|events| broker.topology().orders_created(events))
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
                        .zip(batch.chunks(ORDERS_PER_MESSAGE))
                        .filter(|(ok, _)| *ok)
                        .flat_map(|(_, events)| events.iter().map(|event| event.order_id))
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
                tracing::debug!(error = %error, size = batch.len(), "offers not published; the relay resends them");
                metrics
                    .pipeline
                    .published
                    .with_label_values(&["offer", "dropped"])
                    .inc_by(batch.len() as u64);
            }
        }
    }
}
