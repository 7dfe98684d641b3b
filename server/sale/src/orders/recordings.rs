//! Replaying recorded pre-orders (`switches/async` = `record`, for when RabbitMQ is sick):
//! while the switch is on `record`, the buy path writes outbox rows `recorded` and
//! publishes nothing; this ops action turns them into `pending` and publishes them.
//!
//! Exactly once: each recorded row is claimed by one replay (`FOR UPDATE SKIP LOCKED`),
//! a row RabbitMQ does not confirm stays `pending` for the relay, and the create-order
//! consumer completes an order once however often its message arrives.

use contract::Actor;
use contract::ReplayReport;
use contract::Source;
use serde_json::json;

use crate::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    orders::{outbox, relay},
    SaleState,
};
use base::error::ApiResult;

/// Recorded rows claimed and published per round.
const REPLAY_CHUNK: i64 = 500;

/// Replays every recorded pre-order; audited with the reason and the figures.
pub async fn replay(
    state: &SaleState,
    actor: &Actor,
    source: Source,
    reason: &str,
) -> ApiResult<ReplayReport> {
    crate::identity::authorize(actor, contract::Permission::OperatePipeline)?;
    let reason = audited_reason(reason)?;
    let (mut replayed, mut published) = (0_i64, 0_i64);
    loop {
        let claimed = outbox::claim_recorded(&state.db, relay::lease(state), REPLAY_CHUNK).await?;
        if claimed.is_empty() {
            break;
        }
        replayed += claimed.iter().map(outbox::Claimed::orders).sum::<usize>() as i64;
        published += relay::publish_claimed(state, &state.pipeline.control, &claimed).await? as i64;
    }
    ops_audit::record(
        &state.db,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "recordings.replay",
            target: "outbox:recorded",
            detail: json!({ "reason": reason, "replayed": replayed, "published": published }),
        },
    )
    .await?;
    Ok(ReplayReport {
        replayed,
        published,
    })
}
