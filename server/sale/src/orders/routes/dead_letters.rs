//! `/admin/api/dead-letters`: the dead-letter queue's messages, and sending them back.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        Path, Query, State,
    },
    Json,
};
use contract::Actor;
use contract::Source;
use contract::{DeadLetterPage, DeadLetterView, OpsReason, RequeueReport};
use serde::Deserialize;

use crate::{orders::dead_letters, SaleState};
use base::error::ApiResult;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct PageParams {
    page: Option<i64>,
}

pub async fn list(
    State(state): State<SaleState>,
    actor: Actor,
    params: Result<Query<PageParams>, QueryRejection>,
) -> ApiResult<Json<DeadLetterPage>> {
    let Query(params) = params?;
    Ok(Json(
        dead_letters::list(&state, &actor, params.page.unwrap_or(1)).await?,
    ))
}

pub async fn requeue(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<OpsReason>, JsonRejection>,
) -> ApiResult<Json<DeadLetterView>> {
    let (Path(id), Json(body)) = (id?, body?);
    Ok(Json(
        dead_letters::requeue(&state, &actor, Source::Api, id, &body.reason).await?,
    ))
}

pub async fn requeue_all(
    State(state): State<SaleState>,
    actor: Actor,
    body: Result<Json<OpsReason>, JsonRejection>,
) -> ApiResult<Json<RequeueReport>> {
    let Json(body) = body?;
    Ok(Json(
        dead_letters::requeue_all(&state, &actor, Source::Api, &body.reason).await?,
    ))
}
