//! `POST /admin/api/activities/{id}/rehearsals`, `GET /admin/api/rehearsals[?activity_id=]`
//! and `GET /admin/api/rehearsals/{id}`.

use axum::{
    extract::{rejection::JsonRejection, State},
    http::StatusCode,
    Json,
};
use contract::{Actor, Rehearsal, Source, StartRehearsal, StartedRehearsal};

use crate::{admin::routes::AdminRoutes, rehearsal::service, state::AppState};
use base::{
    error::{ApiError, ApiResult},
    paging::ByActivity,
    route_table::Id,
};

async fn start(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Id, ApiError>,
    body: Result<Json<StartRehearsal>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<StartedRehearsal>)> {
    // A role that may not rehearse learns nothing about its input.
    sale::identity::authorize(&actor, contract::Permission::Rehearse)?;
    let Id(id) = id?;
    let Json(request) = body?;
    let started = service::start(&state, &actor, Source::Api, id, request).await?;
    Ok((StatusCode::ACCEPTED, Json(started)))
}

async fn list(
    State(state): State<AppState>,
    actor: Actor,
    filter: ByActivity,
) -> ApiResult<Json<Vec<Rehearsal>>> {
    Ok(Json(
        service::list(&state, &actor, filter.activity_id).await?,
    ))
}

async fn get(
    State(state): State<AppState>,
    actor: Actor,
    Id(id): Id,
) -> ApiResult<Json<Rehearsal>> {
    Ok(Json(service::get(&state, &actor, id).await?))
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .post("/activities/{id}/rehearsals", start)
        .get("/rehearsals", list)
        .get("/rehearsals/{id}", get)
}
