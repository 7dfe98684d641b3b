//! `POST /admin/api/reconciliations`, `GET /admin/api/reconciliations[?activity_id=]`,
//! `GET /admin/api/reconciliations/{id}` and `GET /admin/api/activities/{id}/ledger`.

use axum::{
    extract::{rejection::JsonRejection, State},
    http::StatusCode,
    Json,
};
use contract::{
    ActivityLedger, Actor, ReconciliationRun, RunSummary, Source, StartReconciliation, StartedRun,
};

use crate::{admin::routes::AdminRoutes, reconcile::service, state::AppState};
use base::{error::ApiResult, paging::ByActivity, route_table::Id};

async fn start(
    State(state): State<AppState>,
    actor: Actor,
    body: Result<Json<StartReconciliation>, JsonRejection>,
) -> ApiResult<(StatusCode, Json<StartedRun>)> {
    // A role that may not reconcile learns nothing about its input.
    sale::identity::authorize(&actor, contract::Permission::Reconcile)?;
    let Json(request) = body?;
    let started = service::start(&state, &actor, Source::Api, request).await?;
    Ok((StatusCode::ACCEPTED, Json(started)))
}

async fn list(
    State(state): State<AppState>,
    actor: Actor,
    filter: ByActivity,
) -> ApiResult<Json<Vec<RunSummary>>> {
    Ok(Json(
        service::list(&state, &actor, filter.activity_id).await?,
    ))
}

async fn get(
    State(state): State<AppState>,
    actor: Actor,
    Id(id): Id,
) -> ApiResult<Json<ReconciliationRun>> {
    Ok(Json(service::get(&state, &actor, id).await?))
}

async fn ledger(
    State(state): State<AppState>,
    actor: Actor,
    Id(id): Id,
) -> ApiResult<Json<ActivityLedger>> {
    Ok(Json(service::ledger(&state, &actor, id).await?))
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .post("/reconciliations", start)
        .get("/reconciliations", list)
        .get("/reconciliations/{id}", get)
        .get("/activities/{id}/ledger", ledger)
}
