//! `/admin/api/activities`.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection},
        Path, State,
    },
    http::StatusCode,
    Json,
};
use contract::Actor;
use contract::{ActivityDetail, ActivityInput, ActivitySummary, Written};

use crate::{catalog::service as catalog, SaleState};
use base::error::ApiResult;

pub async fn create(
    State(state): State<SaleState>,
    actor: Actor,
    input: Result<Json<ActivityInput>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Written>)> {
    let Json(input) = input?;
    let id = catalog::create_activity(&state, &actor, input).await?;
    Ok((StatusCode::CREATED, Json(Written { id })))
}

pub async fn update(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    input: Result<Json<ActivityInput>, JsonRejection>,
) -> ApiResult<Json<Written>> {
    let (Path(id), Json(input)) = (id?, input?);
    catalog::update_activity(&state, &actor, id, input).await?;
    Ok(Json(Written { id }))
}

pub async fn list(
    State(state): State<SaleState>,
    actor: Actor,
) -> ApiResult<Json<Vec<ActivitySummary>>> {
    Ok(Json(catalog::list_activities(&state, &actor).await?))
}

pub async fn read(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<ActivityDetail>> {
    let Path(id) = id?;
    Ok(Json(catalog::get_activity(&state, &actor, id).await?))
}
