//! `POST /admin/api/activities/{id}/prewarm`.

use axum::{
    extract::{rejection::PathRejection, Path, State},
    Json,
};
use contract::Actor;
use contract::PrewarmReport;

use crate::{prewarm, state::AppState};
use base::error::ApiResult;

pub(crate) async fn prewarm(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<PrewarmReport>> {
    let Path(id) = id?;
    Ok(Json(
        prewarm::prewarm(&state, &actor, contract::Source::Api, id).await?,
    ))
}

pub(crate) fn admin(
    routes: crate::admin::routes::AdminRoutes,
) -> crate::admin::routes::AdminRoutes {
    routes.post("/activities/{id}/prewarm", prewarm)
}
