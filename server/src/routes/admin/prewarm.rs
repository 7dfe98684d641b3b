//! `POST /admin/api/activities/{id}/prewarm`.

use axum::{
    extract::{rejection::PathRejection, Path, State},
    Json,
};

use crate::{
    domain::access::Actor,
    error::ApiResult,
    services::prewarm::{self, PrewarmReport},
    state::AppState,
};

pub async fn prewarm(
    State(state): State<AppState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<PrewarmReport>> {
    let Path(id) = id?;
    Ok(Json(prewarm::prewarm(&state, &actor, id).await?))
}
