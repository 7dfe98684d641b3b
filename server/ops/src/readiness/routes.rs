//! `GET /admin/api/readiness?activity_id=`.

use axum::{
    extract::{rejection::QueryRejection, Query, State},
    Json,
};
use contract::{Actor, Readiness};
use serde::Deserialize;

use crate::{admin::routes::AdminRoutes, readiness, state::AppState};
use base::error::ApiResult;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ReadinessQuery {
    activity_id: i64,
}

async fn readiness(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<ReadinessQuery>, QueryRejection>,
) -> ApiResult<Json<Readiness>> {
    // A role that may not read it learns nothing about its input.
    sale::identity::authorize(&actor, contract::Permission::WatchOperations)?;
    let Query(query) = query?;
    Ok(Json(
        readiness::check(&state, &actor, query.activity_id).await?,
    ))
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes.get("/readiness", readiness)
}
