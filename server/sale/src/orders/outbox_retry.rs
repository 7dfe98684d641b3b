//! An operator's retry of outbox rows the relay gave up on (`failed` after
//! `relay_max_attempts`): once the cause is fixed (RabbitMQ back, the exchange declared
//! again), ops hand one failed row, or every one, back to the relay, which publishes them on
//! its next pass. Audited in `ops_audit` with the reason and how many rows went back.
//!
//! The console and the admin API call the same [`retry`].

use contract::{Actor, OutboxRetryReport, Permission, Source};
use serde_json::json;

use crate::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    orders::outbox,
    SaleState,
};
use base::error::{ApiError, ApiResult};

/// Hands failed outbox rows back to the relay: the row `row`, or every failed row when it is
/// `None`. A row that is not `failed` answers 409 `NOT_FAILED` (the relay or the publisher
/// still owns a `pending` row, a `sent` one is done, a `recorded` one waits for the replay),
/// an unknown one 404; neither changes anything.
///
/// Retrying a row whose order completed meanwhile (its first publish did arrive and only
/// the confirm was lost, or a reconciliation sent its event again) or was failed by a
/// reconciliation is harmless: the create-order consumer applies an event once and completes
/// only `PRE_CREATED` orders, so it records the event and changes nothing.
pub async fn retry(
    state: &SaleState,
    actor: &Actor,
    source: Source,
    row: Option<i64>,
    reason: &str,
) -> ApiResult<OutboxRetryReport> {
    crate::identity::authorize(actor, Permission::OperatePipeline)?;
    let reason = audited_reason(reason)?;
    let mut tx = state.db.begin().await?;
    if let Some(id) = row {
        match outbox::lock_status(&mut tx, id).await?.as_deref() {
            None => return Err(ApiError::NotFound("outbox row")),
            Some("failed") => {}
            Some(status) => {
                return Err(ApiError::Conflict {
                    code: "NOT_FAILED",
                    message: format!(
                        "outbox row {id} is `{status}`: only rows the relay gave up on are retried"
                    ),
                })
            }
        }
    }
    let retried = outbox::retry_failed(&mut tx, row).await? as i64;
    let (action, target) = match row {
        Some(id) => ("outbox.retry", format!("outbox:{id}")),
        None => ("outbox.retry_all", "outbox:failed".to_owned()),
    };
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action,
            target: &target,
            detail: json!({ "reason": reason, "retried": retried }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(OutboxRetryReport { retried })
}
