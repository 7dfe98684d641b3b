//! `/admin/api/outbox`: rows waiting for the relay, given up on, and recorded; handing the
//! ones given up on back to the relay.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection},
        Path, State,
    },
    Json,
};
use contract::{Actor, OpsReason, OutboxRetryReport, OutboxSummary, Source};

use crate::{
    orders::{outbox_retry, relay},
    SaleState,
};
use base::error::ApiResult;

pub async fn summary(
    State(state): State<SaleState>,
    actor: Actor,
) -> ApiResult<Json<OutboxSummary>> {
    Ok(Json(relay::summary(&state, &actor).await?))
}

pub async fn retry(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<OpsReason>, JsonRejection>,
) -> ApiResult<Json<OutboxRetryReport>> {
    let (Path(id), Json(body)) = (id?, body?);
    Ok(Json(
        outbox_retry::retry(&state, &actor, Source::Api, Some(id), &body.reason).await?,
    ))
}

pub async fn retry_all(
    State(state): State<SaleState>,
    actor: Actor,
    body: Result<Json<OpsReason>, JsonRejection>,
) -> ApiResult<Json<OutboxRetryReport>> {
    let Json(body) = body?;
    Ok(Json(
        outbox_retry::retry(&state, &actor, Source::Api, None, &body.reason).await?,
    ))
}
