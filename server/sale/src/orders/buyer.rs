//! A buyer's own orders: `GET /api/orders/{id}` (anyone else's order answers 404, like one
//! that does not exist), and the query the pay route finds the order it pays with.

use axum::extract::{FromRef, FromRequestParts};
use axum::{
    extract::{Path, State},
    http::HeaderMap,
    Json,
};
use base::client_address::ClientAddress;
use contract::Actor;
use sqlx::PgPool;
use uuid::Uuid;

use crate::SaleState;
use base::{
    error::{ApiError, ApiResult},
    route_table::RouteTable,
};

pub fn routes<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes.get("/orders/{id}", order)
}

/// The buyer's own order; anyone else's answers 404.
async fn order(
    State(state): State<SaleState>,
    headers: HeaderMap,
    id: Result<Path<Uuid>, axum::extract::rejection::PathRejection>,
) -> ApiResult<Json<OrderView>> {
    let user_id = state.buyer_tokens.bearer(&headers)?.id;
    let Path(id) = id?;
    owned_order(&state.db, id, user_id)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound("order"))
}

/// An order as its owner sees it.
#[derive(Debug, sqlx::FromRow, serde::Serialize, utoipa::ToSchema)]
pub struct OrderView {
    pub order_id: Uuid,
    pub activity_id: i64,
    pub item_id: i64,
    pub quantity: i32,
    pub amount_cents: i64,
    pub status: String,
    pub pay_deadline_ms: Option<i64>,
}

/// The order if `user_id` owns it.
pub async fn owned_order(
    pool: &PgPool,
    id: Uuid,
    user_id: i64,
) -> Result<Option<OrderView>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id AS order_id, activity_id, item_id, quantity, amount_cents, status,
                (EXTRACT(EPOCH FROM pay_deadline) * 1000)::BIGINT AS pay_deadline_ms
         FROM orders WHERE id = $1 AND user_id = $2",
    )
    .bind(id)
    .bind(user_id)
    .fetch_optional(pool)
    .await
}
