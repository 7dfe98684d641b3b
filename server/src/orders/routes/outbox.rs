//! `GET /admin/api/outbox`: rows waiting for the relay, given up on, and recorded.

use axum::{extract::State, Json};
use contract::Actor;
use contract::OutboxSummary;

use crate::{error::ApiResult, orders::relay, state::AppState};

pub(crate) async fn summary(
    State(state): State<AppState>,
    actor: Actor,
) -> ApiResult<Json<OutboxSummary>> {
    Ok(Json(relay::summary(&state, &actor).await?))
}
