//! Orders after the buy: the RabbitMQ order pipeline (`mq/`: topology, publishing with
//! confirms, the batch consumer), the create-order consumer, the pay timeout and its
//! scanner, the outbox relay and the operator's retry of what it gave up on
//! (`outbox_retry`), recorded-order replay, the dead-letter sink (`dead_letters/`, its
//! table in `dead_letters/store.rs`), the order state machine (`status`), order admin for
//! the console and `/admin/api/orders` (`admin/`, its reads in `admin/store.rs`), and the
//! buyer's own order (`buyer`).
//!
//! A pre-order reaches `UNPAID` like this: the buy path commits it with its outbox row and
//! [`Publisher::offer`]s the event; the publisher confirms it and marks the row `sent`
//! (or the relay resends it later); the create-order consumer completes it and schedules its
//! pay timeout in the delay queue; the pay-timeout consumer (`pay_timeout`) takes it from there.
//!
//! For another consumer of the pipeline's queues: the names are in [`Pipeline::topology`],
//! `mq::consume::consume_forever` keeps a batch consumer alive on its own channel, and
//! [`Pipeline::scheduler`] publishes (re-)delays with confirms.

pub mod admin;
pub mod buyer;
pub mod cancellations;
pub mod completions;
pub mod create_order;
pub mod dead_letters;
pub mod gauges;
pub mod mq;
pub mod outbox;
pub mod outbox_retry;
pub mod pay_timeout;
pub mod recordings;
pub mod relay;
pub mod release;
pub mod release_scripts;
pub mod routes;
pub mod rules;
pub mod status;
pub mod stuck;
pub mod workers;

use contract::{SaleItem, UserId};
use sqlx::PgPool;
use std::{sync::Arc, time::Duration};

use base::{amqp::AmqpLink, config::Settings, metrics::Metrics};
use mq::broker::Broker;
use mq::publisher::Publisher;
use mq::topology::Topology;

/// Units one buyer takes of (or holds in) one sale item: what an order is of, as the stock
/// scripts take them and the release scripts give them back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holding {
    pub sale: SaleItem,
    pub buyer: UserId,
    pub quantity: i64,
}

/// Offers the buy path may queue ahead of the publisher before new ones are dropped (the
/// relay resends dropped ones).
const OFFER_CAPACITY: usize = 16_384;
/// Messages per published batch of offers.
const OFFER_BATCH: usize = 512;

/// The pipeline's handles in the shared state. Cheap to clone.
#[derive(Clone)]
pub struct Pipeline {
    /// This deployment's exchange and queue names.
    pub topology: Arc<Topology>,
    /// The buy path's non-blocking publisher of create-order events.
    pub publisher: Publisher,
    /// Publishes pay timeouts into their delay queues, with confirms.
    pub scheduler: Broker,
    /// Publishes for the relay, the replay and dead-letter requeues, with confirms.
    pub control: Broker,
}

impl Pipeline {
    /// Prepares the publishers; nothing connects until the first publish.
    pub fn new(link: &AmqpLink, settings: &Settings, db: &PgPool, metrics: &Metrics) -> Self {
        let topology = Arc::new(Topology::new(&settings.amqp_prefix, &settings.pipeline));
        let confirm_timeout = Duration::from_millis(settings.pipeline.confirm_timeout_ms);
        let broker = |role| {
            Broker::new(
                link.clone(),
                topology.clone(),
                role,
                confirm_timeout,
                metrics.clone(),
            )
        };
        Self {
            publisher: Publisher::spawn(
                broker("offer"),
                db.clone(),
                metrics.clone(),
                OFFER_CAPACITY,
                OFFER_BATCH,
            ),
            scheduler: broker("scheduler"),
            control: broker("relay"),
            topology,
        }
    }
}
