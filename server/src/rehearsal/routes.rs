//! `POST /admin/api/activities/{id}/rehearsals`, `GET /admin/api/rehearsals[?activity_id=]`
//! and `GET /admin/api/rehearsals/{id}`.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        Path, Query, State,
    },
    http::StatusCode,
    Json,
};
use contract::{Actor, Rehearsal, Source, StartRehearsal, StartedRehearsal};

use crate::{admin::routes::AdminRoutes, rehearsal::service, state::AppState};
use base::{error::ApiResult, paging::ByActivity};

async fn start(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
    body: Result<Json<StartRehearsal>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<StartedRehearsal>)> {
    // A role that may not rehearse learns nothing about its input.
    crate::admin::authorize(&actor, contract::Permission::Rehearse)?;
    let Path(id) = id?;
    let Json(request) = body?;
    let started = service::start(&state, &actor, Source::Api, id, request).await?;
    Ok((StatusCode::ACCEPTED, Json(started)))
}

async fn list(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<ByActivity>, QueryRejection>,
) -> ApiResult<Json<Vec<Rehearsal>>> {
    let Query(query) = query?;
    Ok(Json(
        service::list(&state, &actor, query.activity_id).await?,
    ))
}

async fn get(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<Rehearsal>> {
    let Path(id) = id?;
    Ok(Json(service::get(&state, &actor, id).await?))
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .post("/activities/{id}/rehearsals", start)
        .get("/rehearsals", list)
        .get("/rehearsals/{id}", get)
}
