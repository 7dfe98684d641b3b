//! `/admin/api/items`.

use axum::{
    extract::{rejection::JsonRejection, Path, State},
    http::StatusCode,
    Json,
};
use contract::Actor;
use contract::{Item, ItemInput, Written};

use crate::{catalog::service as catalog, SaleState};
use base::error::ApiResult;

pub async fn create(
    State(state): State<SaleState>,
    actor: Actor,
    input: Result<Json<ItemInput>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<Written>)> {
    let Json(input) = input?;
    let id = catalog::create_item(&state, &actor, input).await?;
    Ok((StatusCode::CREATED, Json(Written { id })))
}

pub async fn update(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
    input: Result<Json<ItemInput>, JsonRejection>,
) -> ApiResult<Json<Written>> {
    let (Path(id), Json(input)) = (id?, input?);
    catalog::update_item(&state, &actor, id, input).await?;
    Ok(Json(Written { id }))
}

pub async fn list(State(state): State<SaleState>, actor: Actor) -> ApiResult<Json<Vec<Item>>> {
    Ok(Json(catalog::list_items(&state, &actor).await?))
}

pub async fn read(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<Json<Item>> {
    let Path(id) = id?;
    Ok(Json(catalog::get_item(&state, &actor, id).await?))
}
