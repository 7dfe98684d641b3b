//! Dead letters: the DLQ sink copies every message of the dead-letter queue
//! into `dead_letters` (payload, source queue, reason, death count) and acks it; ops list
//! them and send them back to the order exchange with their routing key, each at most once,
//! audited in `ops_audit`.
//!
//! The console and the admin API call the same [`list`], [`requeue`] and [`requeue_all`].

pub mod store;

use base::quiet_log::quiet;
use contract::Actor;
use contract::Source;
use contract::{DeadLetterPage, DeadLetterView, RequeueReport};
use lapin::{message::Delivery, types::FieldTable};
use serde_json::json;
use std::time::Duration;

use store::{Lookup, NewDeadLetter, Waiting};

use crate::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    orders::mq::{
        batch::{ack_all, requeue_all as return_all},
        consume::{consume_forever, BatchHandler, ConsumerSpec},
        topology::{field, header_integer, header_text},
    },
    SaleState,
};
use base::{
    error::{ApiError, ApiResult},
    paging::PageWindow,
};

/// Dead letters per page of the listing.
pub const PER_PAGE: i64 = 50;
/// Dead letters sent back per transaction by a requeue-all.
const REQUEUE_CHUNK: i64 = 200;
/// How long the sink waits before returning a batch it could not store.
const STORE_RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Starts the DLQ sink; it runs until the task is aborted.
pub fn spawn_sink(state: &SaleState) -> tokio::task::JoinHandle<()> {
    let settings = &state.settings.pipeline;
    let spec = ConsumerSpec {
        name: "dlq-sink",
        queue: state.pipeline.topology.dead_queue.clone(),
        prefetch: 256,
        batch_max: 128,
        batch_wait: Duration::from_millis(settings.batch_wait_ms),
        open_timeout: Duration::from_millis(settings.confirm_timeout_ms),
    };
    tokio::spawn(consume_forever(
        state.amqp.clone(),
        state.pipeline.topology.clone(),
        spec,
        Sink {
            state: state.clone(),
        },
    ))
}

struct Sink {
    state: SaleState,
}

impl BatchHandler for Sink {
    async fn handle(&self, batch: Vec<Delivery>) {
        let letters: Vec<NewDeadLetter> = batch.iter().map(dead_letter).collect();
        let deliveries: Vec<&Delivery> = batch.iter().collect();
        match store::insert_many(&self.state.db, &letters).await {
            Ok(()) => ack_all(&deliveries).await,
            Err(error) => {
                quiet!(warn, "orders.dead_letters_unstored", error = %error, size = letters.len(), "dead letters not stored; returning them");
                tokio::time::sleep(STORE_RETRY_PAUSE).await;
                return_all(&deliveries).await;
            }
        }
    }
}

/// Where and why a message died, from its `x-death` headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Death {
    pub queue: String,
    pub reason: String,
    pub count: i64,
}

/// The latest death (`x-death` is most recent first), else the `x-first-death-*` headers.
pub fn death(headers: Option<&FieldTable>) -> Death {
    let unknown = || "unknown".to_owned();
    let Some(headers) = headers else {
        return Death {
            queue: unknown(),
            reason: unknown(),
            count: 1,
        };
    };
    let latest = field(headers, "x-death")
        .and_then(|deaths| deaths.as_array())
        .and_then(|deaths| deaths.as_slice().first())
        .and_then(|death| death.as_field_table());
    let from_latest = |name: &str| latest.and_then(|d| field(d, name)).and_then(header_text);
    let first = |name: &str| field(headers, name).and_then(header_text);
    Death {
        queue: from_latest("queue")
            .or_else(|| first("x-first-death-queue"))
            .unwrap_or_else(unknown),
        reason: from_latest("reason")
            .or_else(|| first("x-first-death-reason"))
            .unwrap_or_else(unknown),
        count: latest
            .and_then(|d| field(d, "count"))
            .and_then(header_integer)
            .unwrap_or(1),
    }
}

fn dead_letter(delivery: &Delivery) -> NewDeadLetter {
    let death = death(delivery.properties.headers().as_ref());
    NewDeadLetter {
        source_queue: death.queue,
        routing_key: delivery.routing_key.to_string(),
        message_id: delivery
            .properties
            .message_id()
            .as_ref()
            .map(|id| id.to_string()),
        payload: delivery.data.clone(),
        reason: death.reason,
        death_count: death.count,
    }
}

/// One page (1-based) of dead letters, the waiting ones first.
pub async fn list(state: &SaleState, actor: &Actor, page: i64) -> ApiResult<DeadLetterPage> {
    crate::identity::authorize(actor, contract::Permission::WatchOperations)?;
    let window = PageWindow::new(page, PER_PAGE).map_err(ApiError::BadRequest)?;
    let (dead_letters, has_more) =
        window.split(store::list(&state.db, window.fetch_limit(), window.offset).await?);
    Ok(DeadLetterPage {
        rows: contract::DeadLetterRows {
            dead_letters,
            waiting: store::waiting_count(&state.db).await?,
        },
        page,
        per_page: PER_PAGE,
        has_more,
    })
}

/// Sends one dead letter back to its routing key, once: a second requeue answers 409
/// `ALREADY_REQUEUED`. Returns the dead letter as it is now.
pub async fn requeue(
    state: &SaleState,
    actor: &Actor,
    source: Source,
    id: i64,
    reason: &str,
) -> ApiResult<DeadLetterView> {
    crate::identity::authorize(actor, contract::Permission::OperatePipeline)?;
    let reason = audited_reason(reason)?;
    let mut tx = state.db.begin().await?;
    let waiting = match store::lock(&mut tx, id).await? {
        Lookup::Missing => return Err(ApiError::NotFound("dead letter")),
        Lookup::Requeued { by, at } => {
            return Err(ApiError::Conflict {
                code: "ALREADY_REQUEUED",
                message: format!(
                    "dead letter {id} was requeued at {at} by {}",
                    by.as_deref().unwrap_or("someone")
                ),
            })
        }
        Lookup::Waiting(waiting) => waiting,
    };
    let confirmed = publish(state, std::slice::from_ref(&waiting)).await?;
    if !confirmed.first().copied().unwrap_or(false) {
        return Err(ApiError::Unavailable(anyhow::anyhow!(
            "RabbitMQ did not take dead letter {id} (routing key `{}`)",
            waiting.routing_key
        )));
    }
    store::mark_requeued(&mut tx, &[id], &actor.username).await?;
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "dead_letter.requeue",
            target: &format!("dead_letter:{id}"),
            detail: json!({ "reason": reason, "routing_key": waiting.routing_key }),
        },
    )
    .await?;
    tx.commit().await?;
    store::get(&state.db, id)
        .await?
        .ok_or(ApiError::NotFound("dead letter"))
}

/// Sends every waiting dead letter back (in chunks, each its own transaction); returns how
/// many went. Ones RabbitMQ does not take stay waiting and are not retried by this call.
pub async fn requeue_all(
    state: &SaleState,
    actor: &Actor,
    source: Source,
    reason: &str,
) -> ApiResult<RequeueReport> {
    crate::identity::authorize(actor, contract::Permission::OperatePipeline)?;
    let reason = audited_reason(reason)?;
    let mut requeued = 0_i64;
    let mut refused = 0_i64;
    let mut after = 0_i64;
    loop {
        let mut tx = state.db.begin().await?;
        let chunk = store::lock_waiting(&mut tx, after, REQUEUE_CHUNK).await?;
        let Some(last) = chunk.last() else {
            break;
        };
        after = last.id;
        let confirmed = publish(state, &chunk).await?;
        let sent: Vec<i64> = chunk
            .iter()
            .zip(&confirmed)
            .filter(|(_, ok)| **ok)
            .map(|(letter, _)| letter.id)
            .collect();
        store::mark_requeued(&mut tx, &sent, &actor.username).await?;
        tx.commit().await?;
        requeued += sent.len() as i64;
        refused += (chunk.len() - sent.len()) as i64;
    }
    ops_audit::record(
        &state.db,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "dead_letter.requeue_all",
            target: "dead_letters",
            detail: json!({ "reason": reason, "requeued": requeued, "not_taken": refused }),
        },
    )
    .await?;
    Ok(RequeueReport { requeued })
}

/// Publishes dead letters to the order exchange with their routing keys; per letter,
/// whether RabbitMQ confirmed it.
async fn publish(state: &SaleState, letters: &[Waiting]) -> ApiResult<Vec<bool>> {
    let topology = &state.pipeline.topology;
    let messages: Vec<_> = letters
        .iter()
        .map(|letter| {
            topology.requeued(
                &letter.routing_key,
                letter.payload.clone(),
                letter
                    .message_id
                    .clone()
                    .unwrap_or_else(|| format!("dead-letter-{}", letter.id)),
            )
        })
        .collect();
    state
        .pipeline
        .control
        .publish(&messages)
        .await
        .map_err(|error| ApiError::Unavailable(error.into()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::{AMQPValue, FieldArray, LongString};

    fn text(value: &str) -> AMQPValue {
        AMQPValue::LongString(LongString::from(value))
    }

    #[test]
    fn the_latest_death_names_queue_reason_and_count() {
        let mut latest = FieldTable::default();
        latest.insert("queue".into(), text("t.order.pay-timeout"));
        latest.insert("reason".into(), text("delivery_limit"));
        latest.insert("count".into(), AMQPValue::LongLongInt(1));
        let mut earlier = FieldTable::default();
        earlier.insert("queue".into(), text("t.order.pay-delay.60s"));
        earlier.insert("reason".into(), text("expired"));
        earlier.insert("count".into(), AMQPValue::LongLongInt(1));
        let mut headers = FieldTable::default();
        headers.insert(
            "x-death".into(),
            AMQPValue::FieldArray(FieldArray::from(vec![
                AMQPValue::FieldTable(latest),
                AMQPValue::FieldTable(earlier),
            ])),
        );
        headers.insert("x-first-death-queue".into(), text("t.order.pay-delay.60s"));
        assert_eq!(
            death(Some(&headers)),
            Death {
                queue: "t.order.pay-timeout".into(),
                reason: "delivery_limit".into(),
                count: 1
            }
        );
    }

    #[test]
    fn without_x_death_the_first_death_headers_or_unknown_are_used() {
        let mut headers = FieldTable::default();
        headers.insert("x-first-death-queue".into(), text("t.order.create"));
        headers.insert("x-first-death-reason".into(), text("rejected"));
        let found = death(Some(&headers));
        assert_eq!(found.queue, "t.order.create");
        assert_eq!(found.reason, "rejected");
        assert_eq!(found.count, 1);
        assert_eq!(death(None).reason, "unknown");
    }
}
