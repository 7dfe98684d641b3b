//! Paying an order: `POST /api/orders/{id}/pay` starts a trade with the payment
//! center for the buyer's own unpaid order; `POST /api/pay/notify` takes the center's
//! signed callback. Served under `/api` beside the buyer API.

use axum::extract::{FromRef, FromRequestParts};
use axum::{
    body::Bytes,
    extract::{
        rejection::{BytesRejection, PathRejection},
        Path, State,
    },
    http::{HeaderMap, StatusCode},
    Json,
};
use base::client_address::ClientAddress;
use contract::Actor;
use serde::Serialize;
use uuid::Uuid;

use crate::{
    payment::{
        notice::{self, Accepted, Refused},
        signature, Payable, Settled, StartError,
    },
    SaleState,
};
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
    routes
        .post("/orders/{id}/pay", pay)
        .post("/pay/notify", notify)
}

#[derive(Serialize, utoipa::ToSchema)]
struct TradeStarted {
    trade_no: String,
}

/// Starts paying the caller's order; paying again returns the same open trade. Anyone
/// else's order answers 404, like one that does not exist. Whether the order can be paid
/// (`UNPAID`, before its deadline) is decided where the trade is opened, under the order
/// row: a check here first would be a check then an insert, open to the pay timeout
/// cancelling in between.
async fn pay(
    State(state): State<SaleState>,
    headers: HeaderMap,
    id: Result<Path<Uuid>, PathRejection>,
) -> ApiResult<Json<TradeStarted>> {
    let user_id = state.buyer_tokens.bearer(&headers)?.id;
    let Path(id) = id?;
    let order = crate::orders::buyer::owned_order(&state.db, id, user_id)
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    let trade_no = state
        .payment
        .start_trade(Payable {
            order_id: order.order_id,
            amount_cents: order.amount_cents,
        })
        .await
        .map_err(|error| match error {
            StartError::Unpayable(unpayable) => ApiError::Conflict {
                code: unpayable.code(),
                message: unpayable.to_string(),
            },
            StartError::Gateway(error) => ApiError::Unavailable(error.into()),
        })?;
    Ok(Json(TradeStarted { trade_no }))
}

#[derive(Serialize, utoipa::ToSchema)]
struct NoticeTaken {
    code: &'static str,
    /// What the notice did: `paid`, `refund_pending`, `already_applied` or `trade_failed`.
    result: &'static str,
}

/// The payment center's callback. The signature is checked over the raw bytes, so the
/// body is read as bytes, never re-serialised.
async fn notify(
    State(state): State<SaleState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<NoticeTaken>> {
    let body = body.map_err(|rejection| match rejection.status() {
        StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge,
        _ => ApiError::BadRequest(rejection.body_text()),
    })?;
    let signature_header = headers
        .get(signature::HEADER)
        .and_then(|value| value.to_str().ok());
    let accepted = notice::receive(
        &state.db,
        &state.settings.pay_secret,
        &state.metrics,
        &state.events,
        &body,
        signature_header,
    )
    .await
    .map_err(refusal)?;
    let result = match accepted {
        Accepted::Settled(Settled::Paid) => "paid",
        Accepted::Settled(Settled::RefundPending) => "refund_pending",
        Accepted::Settled(Settled::AlreadyApplied) => "already_applied",
        Accepted::TradeFailed => "trade_failed",
    };
    Ok(Json(NoticeTaken { code: "OK", result }))
}

fn refusal(refused: Refused) -> ApiError {
    let message = refused.to_string();
    match refused {
        Refused::BadSignature => ApiError::BadSignature,
        Refused::Malformed(_) => ApiError::BadRequest(message),
        Refused::UnknownTrade => ApiError::NotFound("trade"),
        Refused::AmountMismatch { .. } => ApiError::Conflict {
            code: "AMOUNT_MISMATCH",
            message,
        },
        Refused::NotPayable(_) => ApiError::Conflict {
            code: "ORDER_NOT_PAYABLE",
            message,
        },
        Refused::Database(error) => error.into(),
    }
}
