//! The lottery's routes: on the buyer API, `POST /api/activities/{id}/registrations` and
//! `GET /api/activities/{id}/registrations/me`; on the admin API,
//! `GET /admin/api/activities/{id}/draw` and
//! `POST /admin/api/activities/{id}/registrations/{user_id}/revoke`.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection},
        Path, State,
    },
    http::{header, HeaderMap},
    response::{IntoResponse, Response},
    Json,
};
use contract::{Actor, Permission, SaleItem, Source};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::{
    admin::{
        authorize,
        ops_audit::{self, OpsAction},
        reason::audited_reason,
    },
    buy::activity_cache::{CachedActivity, LookupError},
    catalog::store::StoredLottery,
    lottery::{
        registration_changed,
        rules::{self, Grant, Status},
        scripts::{LotteryClient, Registered, Registration},
        store,
    },
    prewarm::expiry::keys_expire_at,
    state::AppState,
};
use base::{
    client_address::{self, ClientAddress},
    error::{ApiError, ApiResult},
    route_table::RouteTable,
};

pub(crate) fn buyer(routes: RouteTable<AppState>) -> RouteTable<AppState> {
    routes
        .post("/activities/{id}/registrations", register)
        .get("/activities/{id}/registrations/me", mine)
}

pub(crate) fn admin(
    routes: crate::admin::routes::AdminRoutes,
) -> crate::admin::routes::AdminRoutes {
    routes
        .get("/activities/{id}/draw", draw)
        .post("/activities/{id}/registrations/{user_id}/revoke", revoke)
}

/// A lottery activity as a buyer may see it, with its terms.
async fn lottery_activity(
    state: &AppState,
    id: i64,
) -> ApiResult<(Arc<CachedActivity>, StoredLottery)> {
    let activity = match state.catalogue.activity(id).await {
        Ok(activity) if activity.shown_to(None) => activity,
        Ok(_) | Err(LookupError::Missing) => return Err(ApiError::NotFound("activity")),
        Err(LookupError::Redis(error)) => return Err(error.into()),
        Err(LookupError::Database(error)) => return Err(error.into()),
    };
    let lottery = activity.lottery.clone().ok_or_else(|| ApiError::Invalid {
        code: "NOT_A_LOTTERY",
        message: "this activity sells to whoever comes first: there is nothing to register for"
            .into(),
    })?;
    Ok((activity, lottery))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RegistrationRequest {
    item_id: i64,
}

#[derive(Serialize)]
struct RegistrationAnswer {
    item_id: i64,
    status: Status,
}

fn registration_closed() -> ApiError {
    ApiError::Refused {
        code: "REGISTRATION_CLOSED",
        message: "registration for this lottery is not open now".into(),
    }
}

async fn register(
    State(state): State<AppState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<RegistrationRequest>, JsonRejection>,
) -> ApiResult<Response> {
    let Path(id) = id?;
    let buyer = state.buyer_tokens.bearer(&headers)?;
    let Json(body) = body.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    let (activity, lottery) = lottery_activity(&state, id).await?;
    if activity.item(body.item_id).is_none() {
        return Err(ApiError::NotFound("item"));
    }
    let counted = &state.metrics.lottery.registrations;
    let now = state.lottery.now_ms();
    let terms = lottery.terms;
    if now < terms.registration_opens_at.timestamp_millis()
        || now >= terms.registration_closes_at.timestamp_millis()
    {
        counted.with_label_values(&["closed"]).inc();
        return Err(registration_closed());
    }
    let switches = state.switches.current();
    let address = client_address::counted(client).to_string();
    let registered = LotteryClient(&state.redis)
        .register(
            SaleItem::new(id, body.item_id),
            &Registration {
                buyer: buyer.id,
                address: &address,
                window_s: switches.limits.rate_window_s,
                per_address: switches.limits.registrations_per_ip_per_window,
                expires_at_ms: keys_expire_at(activity.ends_at).timestamp_millis(),
            },
        )
        .await?;
    match registered {
        Registered::Listed(entry) if entry == "x" => Err(ApiError::Refused {
            code: "REGISTRATION_REVOKED",
            message: "your registration for this item was revoked".into(),
        }),
        Registered::Listed(entry) => {
            let outcome = if entry == "r" { "registered" } else { "again" };
            counted.with_label_values(&[outcome]).inc();
            let answer = RegistrationAnswer {
                item_id: body.item_id,
                status: Status::Registered,
            };
            Ok(([(header::CACHE_CONTROL, "no-store")], Json(answer)).into_response())
        }
        Registered::WindowFull => {
            counted.with_label_values(&["rate_limited"]).inc();
            Err(ApiError::RateLimited {
                retry_after_s: switches.limits.rate_window_s.max(1),
            })
        }
        Registered::Sealed => {
            counted.with_label_values(&["closed"]).inc();
            Err(registration_closed())
        }
    }
}

/// One item's line of `GET /api/activities/{id}/registrations/me`.
#[derive(Serialize)]
struct MyRegistration {
    item_id: i64,
    status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code_valid_from_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code_expires_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    waitlist_position: Option<i64>,
}

async fn mine(
    State(state): State<AppState>,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Response> {
    let Path(id) = id?;
    let buyer = state.buyer_tokens.bearer(&headers)?;
    let (activity, _) = lottery_activity(&state, id).await?;
    let sales: Vec<SaleItem> = activity
        .items
        .iter()
        .map(|item| SaleItem::new(id, item.item_id))
        .collect();
    let held = LotteryClient(&state.redis).held(&sales, buyer.id).await?;
    let now = state.lottery.now_ms();
    let ended = now >= activity.ends_at.timestamp_millis();
    let lines: Vec<MyRegistration> = activity
        .items
        .iter()
        .zip(held)
        .filter_map(|(item, held)| {
            let standing = rules::standing(&held, now, ended)?;
            // A code is shown while it can buy; after, its outcome says enough.
            let live = (standing.status == Status::Won)
                .then_some(standing.grant)
                .flatten();
            Some(MyRegistration {
                item_id: item.item_id,
                status: standing.status,
                code: live.as_ref().map(|grant| grant.code.clone()),
                code_valid_from_ms: live.as_ref().map(|grant| grant.valid_from_ms),
                code_expires_ms: live.as_ref().map(|grant| grant.expires_ms),
                waitlist_position: standing.waitlist_position,
            })
        })
        .collect();
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(lines)).into_response())
}

/// One item's draw as ops see it.
#[derive(Serialize)]
struct DrawItem {
    item_id: i64,
    drawn: bool,
    registrants: Option<i32>,
    winners: Option<i32>,
    codes_issued: i64,
    codes_used: usize,
    codes_expired: usize,
    codes_revoked: i64,
    /// Ranks that have had their turn: the waitlist reached rank `waitlist_reached`.
    waitlist_reached: Option<i64>,
}

#[derive(Serialize)]
struct DrawReport {
    activity_id: i64,
    commitment: String,
    /// The seed in hex, once every item is drawn.
    seed: Option<String>,
    items: Vec<DrawItem>,
}

async fn draw(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<DrawReport>> {
    let Path(id) = id?;
    authorize(&actor, Permission::WatchOperations)?;
    let (commitment, seed) = store::seed_state(&state.db, id)
        .await?
        .ok_or(ApiError::NotFound("lottery activity"))?;
    let now = state.lottery.now_ms();
    let mut items = Vec::new();
    for row in store::draw_rows(&state.db, id).await? {
        let live = LotteryClient(&state.redis)
            .live_state(SaleItem::new(id, row.item_id))
            .await?;
        let expired = live
            .codes
            .iter()
            .filter(|(buyer, grant): &&(i64, Grant)| {
                !live.used.contains(buyer) && grant.expires_ms < now
            })
            .count();
        items.push(DrawItem {
            item_id: row.item_id,
            drawn: row.drawn_at.is_some(),
            registrants: row.registrants,
            winners: row.winners,
            codes_issued: row.codes_issued,
            codes_used: live.used.len(),
            codes_expired: expired,
            codes_revoked: row.revoked,
            waitlist_reached: live.turns,
        });
    }
    Ok(Json(DrawReport {
        activity_id: id,
        commitment,
        seed: seed.map(hex::encode),
        items,
    }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
struct RevokeRequest {
    reason: String,
}

async fn revoke(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<(i64, i64)>, PathRejection>,
    body: Result<Json<RevokeRequest>, JsonRejection>,
) -> ApiResult<Json<serde_json::Value>> {
    let Path((id, user)) = path?;
    authorize(&actor, Permission::RevokeRegistration)?;
    let Json(body) = body.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    let reason = audited_reason(&body.reason)?;
    let stored = crate::catalog::store::get_activity(&state.db, id, None)
        .await?
        .filter(|stored| stored.lottery.is_some())
        .ok_or(ApiError::NotFound("lottery activity"))?;
    let mut revoked = Vec::new();
    for line in &stored.lines {
        let sale = SaleItem::new(id, line.item_id);
        if LotteryClient(&state.redis).revoke(sale, user).await? {
            registration_changed(sale, &[(user, Status::Revoked)]);
            revoked.push(line.item_id);
        }
    }
    if revoked.is_empty() {
        return Err(ApiError::NotFound("registration"));
    }
    store::record_revoked(&state.db, id, user, reason).await?;
    ops_audit::record(
        &state.db,
        &OpsAction {
            actor: &actor.username,
            source: Source::Api,
            action: "lottery.revoke",
            target: &format!("activity:{id}/user:{user}"),
            detail: serde_json::json!({ "reason": reason, "items": revoked }),
        },
    )
    .await?;
    Ok(Json(
        serde_json::json!({ "user_id": user, "items": revoked, "status": "revoked" }),
    ))
}
