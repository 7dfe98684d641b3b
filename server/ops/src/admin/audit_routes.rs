//! `GET /admin/api/audit?page=N&kind=&containing=`: switch flips and operator actions,
//! newest first, filtered on the server so each page holds only the rows asked for.

use axum::{
    extract::{rejection::QueryRejection, Query, State},
    Json,
};
use contract::{Actor, AuditFilter, AuditPage};
use serde::Deserialize;

use crate::{control::board, state::AppState};
use base::error::{ApiError, ApiResult};

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuditQuery {
    page: Option<i64>,
    /// `switch` (switch flips) or `ops` (other operator actions); blank or absent: both.
    kind: Option<String>,
    /// Only rows whose who, from where, action, target, change or reason contain this text,
    /// in any case (at most 200 characters); blank or absent: every row.
    containing: Option<String>,
}

pub(crate) async fn list(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<AuditQuery>, QueryRejection>,
) -> ApiResult<Json<AuditPage>> {
    let Query(query) = query?;
    let filter = AuditFilter::parse(query.kind.as_deref(), query.containing.as_deref())
        .map_err(ApiError::BadRequest)?;
    Ok(Json(
        board::audit(&state, &actor, query.page, &filter).await?,
    ))
}
