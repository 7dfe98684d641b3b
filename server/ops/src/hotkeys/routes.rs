//! `GET /admin/api/hotkeys` (the keys in force and the cluster-wide top), `GET
//! /admin/api/hotkeys/history?hours=`, `POST /admin/api/hotkeys` (a manual key) and
//! `DELETE /admin/api/hotkeys/{kind}/{key}?reason=`.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        Path, Query, State,
    },
    http::StatusCode,
    Json,
};
use contract::{Actor, HotKey, HotKeyPeriod, HotKeysView, NewHotKey, Permission, Source};
use serde::Deserialize;

use crate::{admin::routes::AdminRoutes, control::board::Board, hotkeys::service, state::AppState};
use base::error::ApiResult;
use sale::identity::authorize;

async fn view(State(state): State<AppState>, actor: Actor) -> ApiResult<Json<HotKeysView>> {
    Ok(Json(service::view(&state, &actor)?))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    #[serde(default = "default_hours")]
    hours: u32,
}

fn default_hours() -> u32 {
    6
}

async fn history(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> ApiResult<Json<Vec<HotKeyPeriod>>> {
    authorize(&actor, Permission::WatchOperations)?;
    let Query(query) = query?;
    Ok(Json(
        service::history(&state.db, &actor, query.hours).await?,
    ))
}

async fn add(
    State(state): State<AppState>,
    actor: Actor,
    body: Result<Json<NewHotKey>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<HotKey>)> {
    // A role that may not add learns nothing about its input.
    authorize(&actor, Permission::ManageHotKeys)?;
    let Json(new) = body?;
    let added = service::add(&Board::of(&state), &actor, Source::Api, &new).await?;
    Ok((StatusCode::CREATED, Json(added)))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct RemoveQuery {
    #[serde(default)]
    reason: String,
}

async fn remove(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<(String, String)>, PathRejection>,
    query: Result<Query<RemoveQuery>, QueryRejection>,
) -> ApiResult<StatusCode> {
    authorize(&actor, Permission::ManageHotKeys)?;
    let Path((kind, key)) = path?;
    let Query(query) = query?;
    service::remove(
        &Board::of(&state),
        &actor,
        Source::Api,
        &kind,
        &key,
        &query.reason,
    )
    .await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .get("/hotkeys", view)
        .get("/hotkeys/history", history)
        .post("/hotkeys", add)
        .delete("/hotkeys/{kind}/{key}", remove)
}
