//! `GET /admin/api/changes?state=`, `POST /admin/api/changes/{id}/approve|reject` and
//! `DELETE /admin/api/changes/{id}`, each with `{reason}`; a change is made through `PUT
//! /admin/api/switches/{*path}` (with `at` or `revert_after_s`, or on a key that needs four
//! eyes).

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        Path, Query, State,
    },
    http::StatusCode,
    Json,
};
use contract::{
    Actor, ChangeList, ChangeState, Permission, Source, SwitchChangeRow, SwitchRevision,
};
use serde::Deserialize;

use crate::{
    admin::{authorize, routes::AdminRoutes},
    changes::{
        history,
        service::{self, Decision, Submitted},
    },
    control::board::{Board, Flip},
    state::AppState,
};
use base::error::{ApiError, ApiResult};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// `scheduled`, `pending_approval`, `applied`, `reverted`, `cancelled` or `rejected`.
    state: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult<Json<ChangeList>> {
    authorize(&actor, Permission::ReadSwitches)?;
    let Query(query) = query?;
    let wanted = match query.state.as_deref() {
        None => None,
        Some(text) => Some(ChangeState::parse(text).ok_or_else(|| ApiError::Invalid {
            code: "INVALID_STATE",
            message: format!("no change state `{text}`"),
        })?),
    };
    let changes = service::list(&Board::of(&state), &actor, wanted).await?;
    Ok(Json(ChangeList { changes }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    #[serde(default)]
    reason: String,
}

async fn cancel(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<DecisionBody>, JsonRejection>,
) -> ApiResult<StatusCode> {
    decide(state, actor, id, body, Decision::Cancel).await
}

async fn reject(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<DecisionBody>, JsonRejection>,
) -> ApiResult<StatusCode> {
    decide(state, actor, id, body, Decision::Reject).await
}

async fn decide(
    state: AppState,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<DecisionBody>, JsonRejection>,
    decision: Decision,
) -> ApiResult<StatusCode> {
    authorize(&actor, Permission::FlipSwitch)?;
    let Path(id) = id?;
    let Json(body) = body?;
    let board = Board::of(&state);
    service::decide(&board, &actor, Source::Api, id, decision, &body.reason).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The change as it stands after the approval (applied, or scheduled for its time).
async fn approve(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<DecisionBody>, JsonRejection>,
) -> ApiResult<Json<SwitchChangeRow>> {
    authorize(&actor, Permission::FlipSwitch)?;
    let Path(id) = id?;
    let Json(body) = body?;
    let now = state.changes.now();
    let board = Board::of(&state);
    let change = service::approve(&board, &actor, Source::Api, id, &body.reason, now).await?;
    Ok(Json(change))
}

/// `GET /admin/api/switches/{path}/history`: the key's revisions, newest first. A key's
/// path may hold slashes, so the action is the path's last segment.
async fn switch_history(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<String>, PathRejection>,
) -> ApiResult<Json<Vec<SwitchRevision>>> {
    authorize(&actor, Permission::ReadSwitches)?;
    let Path(path) = path?;
    let key = path
        .strip_suffix("/history")
        .ok_or(ApiError::NotFound("route"))?;
    Ok(Json(
        history::history(&Board::of(&state), &actor, key).await?,
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RollbackBody {
    revision: i64,
    #[serde(default)]
    reason: String,
}

/// `POST /admin/api/switches/{path}/rollback` `{revision, reason}`: answered as a flip.
async fn switch_rollback(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<RollbackBody>, JsonRejection>,
) -> ApiResult<Submitted> {
    authorize(&actor, Permission::FlipSwitch)?;
    let Path(path) = path?;
    let key = path
        .strip_suffix("/rollback")
        .ok_or(ApiError::NotFound("route"))?;
    let Json(body) = body?;
    let flip = Flip {
        actor: &actor,
        source: Source::Api,
        path: key,
        value: "",
        reason: &body.reason,
        wait: None,
    };
    let now = state.changes.now();
    history::rollback(&Board::of(&state), flip, body.revision, now).await
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .get("/switches/{*path}", switch_history)
        .post("/switches/{*path}", switch_rollback)
        .get("/changes", list)
        .delete("/changes/{id}", cancel)
        .post("/changes/{id}/approve", approve)
        .post("/changes/{id}/reject", reject)
}
