//! `GET /admin/api/audit?page=N`: switch flips and operator actions, newest first.

use axum::{
    extract::{rejection::QueryRejection, Query, State},
    Json,
};
use contract::Actor;
use contract::AuditPage;
use serde::Deserialize;

use crate::{control::board, state::AppState};
use base::error::ApiResult;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    page: Option<i64>,
}

pub(crate) async fn list(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> ApiResult<Json<AuditPage>> {
    let Query(query) = query?;
    Ok(Json(board::audit(&state, &actor, query.page).await?))
}
