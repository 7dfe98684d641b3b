//! `GET /admin/api/switches` and `PUT /admin/api/switches/{*path}` (now, or as a change
//! that waits: see `crate::changes`).

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        Path, Query, State,
    },
    Json,
};
use contract::Actor;
use contract::Source;
use contract::SwitchBoard;
use serde::Deserialize;
use std::time::Duration;

use crate::{
    changes::service::{self, Submission, Submitted},
    control::board::{Board, Flip},
    state::AppState,
};
use base::error::ApiResult;

pub(crate) async fn list(
    State(state): State<AppState>,
    actor: Actor,
) -> ApiResult<Json<SwitchBoard>> {
    sale::identity::authorize(&actor, contract::Permission::ReadSwitches)?;
    Ok(Json(Board::of(&state).read().await?))
}

/// A limit may be sent as a JSON number, a hot-key rule as a JSON object; switches as
/// strings.
#[derive(Deserialize)]
#[serde(untagged)]
enum Value {
    Text(String),
    Number(i64),
    Rule(serde_json::Map<String, serde_json::Value>),
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlipBody {
    value: Value,
    #[serde(default)]
    reason: String,
    /// Apply at this time (RFC 3339) instead of now: answered 202 with the change.
    #[serde(default)]
    at: Option<chrono::DateTime<chrono::Utc>>,
    /// Set the key back to the value it replaced this many seconds after applying.
    #[serde(default)]
    revert_after_s: Option<u32>,
    /// An admin flips a key that needs four eyes at once; the audit flags it.
    #[serde(default)]
    emergency: bool,
    /// Put the value in force on these instances only (named, or a share of the live
    /// ones) until the change is promoted or aborted: answered 202 with the change.
    #[serde(default)]
    stage: Option<contract::StageTarget>,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct FlipQuery {
    /// Wait until every live instance applied the flip, at most this many milliseconds.
    wait_ms: Option<u64>,
}

pub(crate) async fn set(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<FlipQuery>, QueryRejection>,
    body: Result<Json<FlipBody>, JsonRejection>,
) -> ApiResult<Submitted> {
    // A role that may not flip learns nothing about its input.
    sale::identity::authorize(&actor, contract::Permission::FlipSwitch)?;
    let Path(path) = path?;
    let Query(query) = query?;
    let Json(body) = body?;
    let value = match body.value {
        Value::Text(text) => text,
        Value::Number(number) => number.to_string(),
        Value::Rule(rule) => serde_json::Value::Object(rule).to_string(),
    };
    let submitted = service::submit(
        &Board::of(&state),
        Submission {
            flip: Flip {
                actor: &actor,
                source: Source::Api,
                path: &path,
                value: &value,
                reason: &body.reason,
                wait: query.wait_ms.map(Duration::from_millis),
            },
            at: body.at,
            revert_after_s: body.revert_after_s,
            emergency: body.emergency,
            stage: body.stage,
            now: state.changes.now(),
        },
    )
    .await?;
    Ok(submitted)
}

pub(crate) fn admin(
    routes: crate::admin::routes::AdminRoutes,
) -> crate::admin::routes::AdminRoutes {
    routes.get("/switches", list).put("/switches/{*path}", set)
}
