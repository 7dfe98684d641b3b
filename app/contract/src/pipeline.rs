//! The order pipeline's operator views: dead letters, the outbox, recorded pre-orders.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Page;

/// A message the order pipeline's dead-letter queue received, kept for inspection and requeue.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterView {
    pub id: i64,
    /// The queue it died in, e.g. `seckill.order.create`.
    pub source_queue: String,
    /// The routing key a requeue publishes it with on the order exchange.
    pub routing_key: String,
    pub message_id: Option<String>,
    /// The body as text for reading (invalid UTF-8 replaced); a requeue sends the stored bytes.
    pub payload: String,
    /// Why the broker dead-lettered it: `delivery_limit`, `rejected`, `expired`, ...
    pub reason: String,
    /// How many times it died in that queue.
    pub death_count: i64,
    pub received_at: DateTime<Utc>,
    /// Set once it was sent back; a dead letter is requeued at most once.
    pub requeued_at: Option<DateTime<Utc>>,
    pub requeued_by: Option<String>,
}

/// `GET /admin/api/dead-letters`: one page, the ones still waiting first, newest first.
pub type DeadLetterPage = Page<DeadLetterRows>;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterRows {
    pub dead_letters: Vec<DeadLetterView>,
    /// Dead letters not requeued yet, on every page.
    pub waiting: i64,
}

/// Body of an ops action on the order pipeline (requeue, replay, outbox retry): the reason
/// is audited.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpsReason {
    pub reason: String,
}

/// `POST /admin/api/dead-letters/requeue-all`: how many were sent back.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeueReport {
    pub requeued: i64,
}

/// `POST /admin/api/recordings/replay`: recorded pre-orders handed to the pipeline, and how
/// many of them RabbitMQ confirmed at once (the relay resends the rest).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    pub replayed: i64,
    pub published: i64,
}

/// `POST /admin/api/outbox/{id}/retry` and `POST /admin/api/outbox/retry`: failed outbox
/// rows handed back to the relay (`pending`, attempts from zero, due now).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxRetryReport {
    pub retried: i64,
}

/// An outbox row the relay gave up on.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedOutboxRow {
    pub id: i64,
    pub event_id: String,
    pub topic: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// `GET /admin/api/outbox`: rows waiting for the relay, given up on, and recorded for replay.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxSummary {
    pub pending: i64,
    pub failed: i64,
    pub recorded: i64,
    /// The newest failed rows (at most 100).
    pub failed_rows: Vec<FailedOutboxRow>,
}
