//! The lottery's routes: on the buyer API, `POST /api/activities/{id}/registrations` and
//! `GET /api/activities/{id}/registrations/me`; on the admin API,
//! `GET /admin/api/activities/{id}/draw` and
//! `POST /admin/api/activities/{id}/registrations/{user_id}/revoke`.

use axum::extract::{FromRef, FromRequestParts};
use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection},
        Path, State,
    },
    http::{header, HeaderMap},
    Json,
};
use contract::{Actor, DrawReport, Permission, RevokeRegistration, Revoked, SaleItem, Source};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

use crate::{
    buy::activity_cache::{CachedActivity, LookupError},
    catalog::expiry::keys_expire_at,
    catalog::store::StoredLottery,
    identity::authorize,
    lottery::{
        ops,
        rules::{self, Status},
        scripts::{LotteryClient, Registered, Registration, RegistrationTerms},
    },
    SaleState,
};
use base::{
    client_address::{self, ClientAddress},
    error::{ApiError, ApiResult},
    route_table::RouteTable,
};

pub fn buyer<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes
        .post("/activities/{id}/registrations", register)
        .get("/activities/{id}/registrations/me", mine)
}

pub fn admin<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes
        .get("/activities/{id}/draw", draw)
        .post("/activities/{id}/registrations/{user_id}/revoke", revoke)
}

/// A lottery activity as a buyer may see it, with its terms.
async fn lottery_activity(
    state: &SaleState,
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
    /// The human challenge's id and answer (`GET /api/challenge`), needed while the
    /// `challenge` switch is on, as for a buy: a bot farm registering thousands of buyers
    /// meets the question the buy path asks.
    #[serde(default)]
    challenge_id: Option<String>,
    #[serde(default)]
    answer: Option<i64>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct RegistrationAnswer {
    item_id: i64,
    status: Status,
}

/// A buyer's answer is his alone: never cached.
type NoStore = [(header::HeaderName, &'static str); 1];

fn registration_closed() -> ApiError {
    ApiError::Refused {
        code: "REGISTRATION_CLOSED",
        message: "registration for this lottery is not open now".into(),
    }
}

async fn register(
    State(state): State<SaleState>,
    ClientAddress(client): ClientAddress,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<RegistrationRequest>, JsonRejection>,
) -> ApiResult<(NoStore, Json<RegistrationAnswer>)> {
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
    if switches.challenge_required {
        let passed = match (body.challenge_id.as_deref(), body.answer) {
            (Some(challenge), Some(answer)) => {
                state
                    .funnel
                    .challenges
                    .check(challenge, buyer.id, answer)
                    .await?
            }
            _ => false,
        };
        if !passed {
            counted.with_label_values(&["challenge_failed"]).inc();
            return Err(ApiError::Refused {
                code: "CHALLENGE_FAILED",
                message: "the challenge answer is wrong, too fast or expired".into(),
            });
        }
    }
    let registered = state
        .lottery
        .intake
        .register(
            SaleItem::new(id, body.item_id),
            RegistrationTerms {
                window_s: switches.limits.rate_window_s,
                per_address: switches.limits.registrations_per_ip_per_window,
                expires_at_ms: keys_expire_at(activity.ends_at).timestamp_millis(),
            },
            Registration {
                buyer: buyer.id,
                address: client_address::counted(client).to_string(),
            },
        )
        .await
        .map_err(|error| ApiError::Unavailable(error.into()))?;
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
            Ok(([(header::CACHE_CONTROL, "no-store")], Json(answer)))
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
#[derive(Serialize, utoipa::ToSchema)]
struct MyRegistration {
    item_id: i64,
    status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code_valid_from_ms: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    code_expires_ms: Option<i64>,
    /// 1 for the next in line (revoked buyers ahead not counted).
    #[serde(skip_serializing_if = "Option::is_none")]
    waitlist_position: Option<i64>,
    /// While waitlisted: the turns the waitlist has had since the draw.
    #[serde(skip_serializing_if = "Option::is_none")]
    waitlist_turns_passed: Option<i64>,
}

async fn mine(
    State(state): State<SaleState>,
    headers: HeaderMap,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<(NoStore, Json<Vec<MyRegistration>>)> {
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
                waitlist_turns_passed: standing.turns_passed,
            })
        })
        .collect();
    Ok(([(header::CACHE_CONTROL, "no-store")], Json(lines)))
}

async fn draw(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<DrawReport>> {
    let Path(id) = id?;
    Ok(Json(ops::draw_report(&state, &actor, id).await?))
}

async fn revoke(
    State(state): State<SaleState>,
    actor: Actor,
    path: Result<Path<(i64, i64)>, PathRejection>,
    body: Result<Json<RevokeRegistration>, JsonRejection>,
) -> ApiResult<Json<Revoked>> {
    let Path((id, user)) = path?;
    authorize(&actor, Permission::RevokeRegistration)?;
    let Json(body) = body.map_err(|error| ApiError::BadRequest(error.body_text()))?;
    Ok(Json(
        ops::revoke(&state, &actor, Source::Api, id, user, &body.reason).await?,
    ))
}
