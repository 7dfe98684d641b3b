//! `GET /admin/api/baselines?activity_id=` (the recorded runs) and `POST
//! /admin/api/baselines/{id}/mark` (make a run the baseline of its activity or of its
//! activity's kind; a reason required).

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection},
        Path, State,
    },
    Json,
};
use contract::{Actor, BaselineRun, MarkBaseline, Source};

use crate::{admin::routes::AdminRoutes, baselines::runs, state::AppState};
use base::{
    error::{ApiError, ApiResult},
    paging::ByActivity,
};

async fn list(
    State(state): State<AppState>,
    actor: Actor,
    filter: Result<ByActivity, ApiError>,
) -> ApiResult<Json<Vec<BaselineRun>>> {
    sale::identity::authorize(&actor, contract::Permission::WatchOperations)?;
    Ok(Json(runs::list(&state, &actor, filter?.activity_id).await?))
}

async fn mark(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<i64>, PathRejection>,
    body: Result<Json<MarkBaseline>, JsonRejection>,
) -> ApiResult<Json<BaselineRun>> {
    // A role that may not mark learns nothing about its input.
    sale::identity::authorize(&actor, contract::Permission::MarkBaseline)?;
    let Path(id) = path?;
    let Json(body) = body?;
    Ok(Json(
        runs::mark(&state, &actor, Source::Api, id, body.scope, &body.reason).await?,
    ))
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .get("/baselines", list)
        .post("/baselines/{id}/mark", mark)
}
