//! The buyer API under `/api` (docs/buyer-api.md): activity info, live status, challenge
//! and buy. The buyer's own orders are `orders::buyer`'s, paying them `payment::routes`'.

use axum::{
    body::Body,
    extract::{Path, Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use contract::SaleItem;
use serde::{Deserialize, Serialize};

use crate::{
    buy::{
        activity_cache::{CachedActivity, LookupError},
        challenge::Challenge,
        funnel::{Answer, Ask},
        rules::{phase, Phase},
    },
    state::AppState,
};
use base::{
    client_address::ClientAddress,
    error::{ApiError, ApiResult},
    route_table::RouteTable,
};

pub(crate) fn routes(routes: RouteTable<AppState>) -> RouteTable<AppState> {
    routes
        .get("/activities/{id}", activity)
        .get("/activities/{id}/status", status)
        .get("/challenge", challenge)
        .post("/seckill/buy", buy)
        .post("/seckill/seats", seats)
}

impl IntoResponse for Answer {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = (
            status,
            [(header::CONTENT_TYPE, "application/json")],
            self.body,
        )
            .into_response();
        if let Some(seconds) = self.retry_after_s {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}

// The body is handed over unread: admission comes first, and only an admitted request
// reads it.
async fn buy(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    state.funnel.buy(Ask::Units, &headers, client, body).await
}

async fn seats(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    state.funnel.buy(Ask::Seats, &headers, client, body).await
}

/// The activity as the caller may see it: a rehearsal's shadow copy is absent to everyone
/// but its own synthetic buyers (`caller_rehearsal`, from their tokens).
pub(crate) async fn cached_activity(
    state: &AppState,
    id: i64,
    caller_rehearsal: Option<i64>,
) -> ApiResult<std::sync::Arc<CachedActivity>> {
    match state.catalogue.activity(id).await {
        Ok(activity) if activity.shown_to(caller_rehearsal) => Ok(activity),
        Ok(_) | Err(LookupError::Missing) => Err(ApiError::NotFound("activity")),
        Err(LookupError::Redis(error)) => Err(error.into()),
        Err(LookupError::Database(error)) => Err(error.into()),
    }
}

#[derive(Serialize)]
struct PublicItem<'a> {
    id: i64,
    name: &'a str,
    price_cents: i64,
    per_user_limit: i64,
    total_stock: i64,
    kind: &'static str,
}

/// Static facts of an activity; cacheable by a CDN for a few seconds.
async fn activity(
    State(state): State<AppState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<Response> {
    let Path(id) = id?;
    let activity = cached_activity(&state, id, None).await?;
    sample_read(&state, &activity);
    let items: Vec<PublicItem> = activity
        .items
        .iter()
        .map(|item| PublicItem {
            id: item.item_id,
            name: &item.name,
            price_cents: item.price_cents,
            per_user_limit: item.per_user_limit,
            total_stock: item.total_stock,
            kind: activity.kind.as_str(),
        })
        .collect();
    let mut body = serde_json::json!({
        "id": activity.id,
        "title": activity.title,
        "kind": activity.kind.as_str(),
        "mode": contract::SaleMode::FirstCome.as_str(),
        "starts_at_ms": activity.starts_at.timestamp_millis(),
        "ends_at_ms": activity.ends_at.timestamp_millis(),
        "items": items,
    });
    // A lottery's terms, its commitment from the start, and its seed once drawn.
    if let Some(lottery) = &activity.lottery {
        let terms = lottery.terms;
        body["mode"] = contract::SaleMode::Lottery.as_str().into();
        body["registration_opens_at_ms"] = terms.registration_opens_at.timestamp_millis().into();
        body["registration_closes_at_ms"] = terms.registration_closes_at.timestamp_millis().into();
        body["code_ttl_s"] = terms.code_ttl_s.into();
        body["draw_commitment"] = lottery.commitment.clone().into();
        if let Some(seed) = &lottery.revealed_seed {
            body["draw_seed"] = seed.clone().into();
        }
    }
    Ok(([(header::CACHE_CONTROL, "public, max-age=5")], Json(body)).into_response())
}

#[derive(Serialize)]
struct ItemStatus {
    item_id: i64,
    sold_out: bool,
    /// Units left to sell, by the same word as `sold_out`: the sale page shows it moving.
    units_left: i64,
}

#[derive(Serialize)]
struct Status {
    server_time_ms: i64,
    starts_at_ms: i64,
    ends_at_ms: i64,
    phase: Phase,
    items: Vec<ItemStatus>,
    challenge_required: bool,
}

/// The live state the activity page syncs its countdown with; never cached.
async fn status(
    State(state): State<AppState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<Response> {
    let Path(id) = id?;
    let activity = cached_activity(&state, id, None).await?;
    sample_read(&state, &activity);
    let now = chrono::Utc::now();
    let keys: Vec<String> = activity
        .items
        .iter()
        .map(|item| state.redis.stock_key(SaleItem::new(id, item.item_id)))
        .collect();
    let catalogue = &state.catalogue;
    let stock = if catalogue.is_hot(&activity) {
        catalogue.hot_stock(id, keys).await?
    } else {
        std::sync::Arc::new(state.redis.get_integers(&keys).await?)
    };
    let items = activity
        .items
        .iter()
        .zip(stock.iter().copied())
        .map(|(item, stock)| ItemStatus {
            item_id: item.item_id,
            // Either layer's word: Redis's stock moves first on the Redis path; on the
            // database path only PostgreSQL's does (as of the activity copy, a second old).
            sold_out: stock.is_some_and(|left| left <= 0) || item.units_left <= 0,
            units_left: stock
                .map_or(item.units_left, |left| left.min(item.units_left))
                .max(0),
        })
        .collect();
    let switches = state.switches.current();
    let body = Status {
        server_time_ms: now.timestamp_millis(),
        starts_at_ms: activity.starts_at.timestamp_millis(),
        ends_at_ms: activity.ends_at.timestamp_millis(),
        phase: phase(
            activity.starts_at,
            activity.ends_at,
            now,
            switches.entry_open_for(id),
        ),
        items,
        challenge_required: switches.challenge_required,
    };
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)).into_response())
}

/// Counts a read of the activity's items for hot keys until its sale is over: a read names
/// no buyer, and its address is the client's to choose, so only the items count (an
/// anonymous reader must not heat an address, nor an item whose sale has ended).
fn sample_read(state: &AppState, activity: &CachedActivity) {
    if chrono::Utc::now() < activity.ends_at {
        for item in &activity.items {
            state.hotkeys.sample(Some(item.item_id), None, None);
        }
    }
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
struct ChallengeQuery {
    activity_id: i64,
}

async fn challenge(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<ChallengeQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<Response> {
    let Query(query) = query?;
    let caller = state.buyer_tokens.bearer(&headers)?;
    cached_activity(&state, query.activity_id, caller.rehearsal).await?;
    let challenge: Challenge = state.funnel.challenges.issue(caller.id).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(challenge)).into_response())
}
