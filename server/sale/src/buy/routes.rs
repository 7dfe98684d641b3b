//! The buyer API under `/api` (docs/buyer-api.md): activity info, live status, challenge
//! and buy. The buyer's own orders are `orders::buyer`'s, paying them `payment::routes`'.

use axum::extract::{FromRef, FromRequestParts};
use axum::{
    body::Body,
    extract::{Path, Query, State},
    http::{header, HeaderMap, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use contract::Actor;
use contract::{ItemUnits, SaleItem};
use serde::{Deserialize, Serialize};

use crate::{
    buy::{
        activity_cache::{CachedActivity, LookupError},
        challenge::Challenge,
        funnel::{Answer, Ask},
        rules::{phase, Phase},
    },
    SaleState,
};
use base::{
    client_address::ClientAddress,
    error::{ApiError, ApiResult},
    route_table::{DescribesAnswer, RequestShape, RouteTable, Success},
};
use utoipa::openapi::{KnownFormat, ObjectBuilder, SchemaFormat, Type};

pub fn routes<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
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

/// A read's caching header, beside its body.
type Headers = [(header::HeaderName, &'static str); 1];

// The winner's body as `funnel::ordered` writes it (bytes, not a serialised struct: one
// per successful buy); every refusal is the error body the document describes anyway.
impl DescribesAnswer for Answer {
    fn describe_answer(shape: &mut RequestShape) {
        let order_id = ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Uuid)));
        let status = ObjectBuilder::new()
            .schema_type(Type::String)
            .enum_values(Some(["PRE_CREATED"]));
        shape.success = Some(Success {
            status: "200",
            body: Some(
                ObjectBuilder::new()
                    .property("order_id", order_id)
                    .required("order_id")
                    .property("status", status)
                    .required("status")
                    .into(),
            ),
        });
    }
}

// The body is handed over unread: admission comes first, and only an admitted request
// reads it.
async fn buy(
    State(state): State<SaleState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    state.funnel.buy(Ask::Units, &headers, client, body).await
}

async fn seats(
    State(state): State<SaleState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    body: Body,
) -> Answer {
    state.funnel.buy(Ask::Seats, &headers, client, body).await
}

/// The activity as the caller may see it: a rehearsal's shadow copy is absent to everyone
/// but its own synthetic buyers (`caller_rehearsal`, from their tokens).
pub async fn cached_activity(
    state: &SaleState,
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

#[derive(Serialize, utoipa::ToSchema)]
struct PublicItem {
    id: i64,
    name: String,
    price_cents: i64,
    per_user_limit: i64,
    total_stock: i64,
    kind: &'static str,
}

/// `GET /api/activities/{id}`. A lottery's terms are there for a lottery only.
#[derive(Serialize, utoipa::ToSchema)]
struct PublicActivity {
    id: i64,
    title: String,
    kind: &'static str,
    /// `first_come` or `lottery`.
    mode: &'static str,
    starts_at_ms: i64,
    ends_at_ms: i64,
    items: Vec<PublicItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    registration_opens_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    registration_closes_at_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code_ttl_s: Option<i64>,
    /// The SHA-256 of the draw's seed, lowercase hex, from the moment the lottery exists.
    #[serde(skip_serializing_if = "Option::is_none")]
    draw_commitment: Option<String>,
    /// The seed itself, once every item is drawn.
    #[serde(skip_serializing_if = "Option::is_none")]
    draw_seed: Option<String>,
}

/// Static facts of an activity; cacheable by a CDN for a few seconds.
async fn activity(
    State(state): State<SaleState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<(Headers, Json<PublicActivity>)> {
    let Path(id) = id?;
    let activity = cached_activity(&state, id, None).await?;
    sample_read(&state, &activity);
    let items = activity
        .items
        .iter()
        .map(|item| PublicItem {
            id: item.item_id,
            name: item.name.clone(),
            price_cents: item.price_cents,
            per_user_limit: item.per_user_limit,
            total_stock: item.total_stock,
            kind: activity.kind.as_str(),
        })
        .collect();
    // A lottery's terms, its commitment from the start, and its seed once drawn.
    let lottery = activity.lottery.as_ref();
    let terms = lottery.map(|lottery| lottery.terms);
    let body = PublicActivity {
        id: activity.id,
        title: activity.title.clone(),
        kind: activity.kind.as_str(),
        mode: if lottery.is_some() {
            contract::SaleMode::Lottery
        } else {
            contract::SaleMode::FirstCome
        }
        .as_str(),
        starts_at_ms: activity.starts_at.timestamp_millis(),
        ends_at_ms: activity.ends_at.timestamp_millis(),
        items,
        registration_opens_at_ms: terms.map(|terms| terms.registration_opens_at.timestamp_millis()),
        registration_closes_at_ms: terms
            .map(|terms| terms.registration_closes_at.timestamp_millis()),
        code_ttl_s: terms.map(|terms| terms.code_ttl_s),
        draw_commitment: lottery.map(|lottery| lottery.commitment.clone()),
        draw_seed: lottery.and_then(|lottery| lottery.revealed_seed.clone()),
    };
    Ok(([(header::CACHE_CONTROL, "public, max-age=5")], Json(body)))
}

#[derive(Serialize, utoipa::ToSchema)]
struct Status {
    server_time_ms: i64,
    starts_at_ms: i64,
    ends_at_ms: i64,
    phase: Phase,
    items: Vec<ItemUnits>,
    challenge_required: bool,
}

/// The live state the activity page syncs its countdown with; never cached.
async fn status(
    State(state): State<SaleState>,
    id: Result<Path<i64>, axum::extract::rejection::PathRejection>,
) -> ApiResult<(Headers, Json<Status>)> {
    let Path(id) = id?;
    let activity = cached_activity(&state, id, None).await?;
    sample_read(&state, &activity);
    let now = chrono::Utc::now();
    let items = units_left(&state, &activity).await?;
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
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(body)))
}

/// Each item's units left, as `/status` says them and the event streams push them.
pub async fn units_left(state: &SaleState, activity: &CachedActivity) -> ApiResult<Vec<ItemUnits>> {
    let keys: Vec<String> = activity
        .items
        .iter()
        .map(|item| {
            state
                .redis
                .stock_key(SaleItem::new(activity.id, item.item_id))
        })
        .collect();
    let catalogue = &state.catalogue;
    let stock = if catalogue.is_hot(activity) {
        catalogue.hot_stock(activity.id, keys).await?
    } else {
        std::sync::Arc::new(state.redis.get_integers(&keys).await?)
    };
    Ok(activity
        .items
        .iter()
        .zip(stock.iter().copied())
        .map(|(item, stock)| ItemUnits {
            item_id: item.item_id,
            // Either layer's word: Redis's stock moves first on the Redis path; on the
            // database path only PostgreSQL's does (as of the activity copy, a second old).
            sold_out: stock.is_some_and(|left| left <= 0) || item.units_left <= 0,
            units_left: stock
                .map_or(item.units_left, |left| left.min(item.units_left))
                .max(0),
        })
        .collect())
}

/// Counts a read of the activity's items for hot keys until its sale is over: a read names
/// no buyer, and its address is the client's to choose, so only the items count (an
/// anonymous reader must not heat an address, nor an item whose sale has ended).
fn sample_read(state: &SaleState, activity: &CachedActivity) {
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
    State(state): State<SaleState>,
    headers: HeaderMap,
    query: Result<Query<ChallengeQuery>, axum::extract::rejection::QueryRejection>,
) -> ApiResult<(Headers, Json<Challenge>)> {
    let Query(query) = query?;
    let caller = state.buyer_tokens.bearer(&headers)?;
    cached_activity(&state, query.activity_id, caller.rehearsal).await?;
    let challenge: Challenge = state.funnel.challenges.issue(caller.id).await?;
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(challenge)))
}
