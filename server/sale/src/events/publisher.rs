//! Publishing a buyer event: whoever changed something a buyer waits for (an order's state,
//! a registration's) calls [`BuyerEvents::publish`] after its commit. The call only queues
//! the event: a writer task appends it to the buyer's log and announces it on the events
//! channel (`log::EventLog::append`), so a sale's hot paths never wait on it and a Redis
//! outage costs them nothing. An event is a notice, not the truth: the page reads the
//! order (or registration) itself whenever it has no stream, so an event lost to a full
//! queue or a Redis outage delays a page, never misleads it.

use base::{config::EventsSettings, metrics::Metrics, redis::RedisStore};
use contract::{ActivityId, BuyerEvent, OrderEvent, OrderStatus, UserId};
use futures::future::join_all;
use std::{collections::HashMap, sync::Arc};
use tokio::sync::mpsc::{self, error::TrySendError};
use uuid::Uuid;

use crate::events::log::EventLog;

/// Events the writer sends to Redis at once (each a script call on the multiplexed
/// connection, so they share round trips).
const WRITE_BATCH: usize = 256;

/// The handle every capability publishes buyer events through. Cheap to clone.
#[derive(Clone)]
pub struct BuyerEvents {
    queue: mpsc::Sender<Outgoing>,
    metrics: Metrics,
}

/// One event on its way to Redis.
struct Outgoing {
    activity: ActivityId,
    user: UserId,
    event: BuyerEvent,
}

impl BuyerEvents {
    /// Starts the writer task; it ends when every handle is dropped.
    pub fn spawn(redis: RedisStore, settings: &EventsSettings, metrics: Metrics) -> Self {
        let (queue, outgoing) = mpsc::channel(settings.queue_capacity.max(1));
        tokio::spawn(write(
            outgoing,
            redis,
            Arc::new(settings.clone()),
            metrics.clone(),
        ));
        Self { queue, metrics }
    }

    /// Queues `event` for `user`'s stream of `activity`, without waiting. Publish after the
    /// change is committed: the page that hears it reads nothing older.
    pub fn publish(&self, activity: ActivityId, user: UserId, event: BuyerEvent) {
        match self.queue.try_send(Outgoing {
            activity,
            user,
            event,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(lost) | TrySendError::Closed(lost)) => {
                count(&self.metrics, &lost.event, "dropped");
            }
        }
    }

    /// Queues an `order` event: order `order_id` of `user` in `activity` is now `status`.
    pub fn order(&self, activity: i64, user: i64, order_id: Uuid, status: OrderStatus) {
        self.publish(
            ActivityId(activity),
            UserId(user),
            BuyerEvent::Order(OrderEvent {
                order_id: order_id.to_string(),
                status,
            }),
        );
    }
}

fn count(metrics: &Metrics, event: &BuyerEvent, outcome: &str) {
    metrics
        .events
        .published
        .with_label_values(&[event.name(), outcome])
        .inc();
}

/// The writer: takes what is queued (up to [`WRITE_BATCH`] at once) and writes it, each
/// buyer's events one after another in the order they were published (so his log, whose
/// ids are the stream's, has them in that order), different buyers' at once.
async fn write(
    mut outgoing: mpsc::Receiver<Outgoing>,
    redis: RedisStore,
    settings: Arc<EventsSettings>,
    metrics: Metrics,
) {
    let mut batch = Vec::with_capacity(WRITE_BATCH);
    while outgoing.recv_many(&mut batch, WRITE_BATCH).await > 0 {
        let mut by_buyer: HashMap<(ActivityId, UserId), Vec<BuyerEvent>> = HashMap::new();
        for one in batch.drain(..) {
            by_buyer
                .entry((one.activity, one.user))
                .or_default()
                .push(one.event);
        }
        let log = EventLog {
            redis: &redis,
            settings: &settings,
        };
        join_all(by_buyer.into_iter().map(|((activity, user), events)| {
            let metrics = &metrics;
            async move {
                for event in events {
                    let outcome = match append(log, activity, user, &event).await {
                        Ok(_) => "published",
                        Err(error) => {
                            tracing::debug!(%activity, %user, error = %error, "a buyer event was not published");
                            "failed"
                        }
                    };
                    count(metrics, &event, outcome);
                }
            }
        }))
        .await;
    }
}

async fn append(
    log: EventLog<'_>,
    activity: ActivityId,
    user: UserId,
    event: &BuyerEvent,
) -> anyhow::Result<String> {
    let data = match event {
        BuyerEvent::Order(order) => serde_json::to_string(order)?,
        BuyerEvent::Registration(registration) => serde_json::to_string(registration)?,
    };
    Ok(log.append(activity, user, event.name(), &data).await?)
}
