//! `POST /admin/api/recordings/replay`: feed the pre-orders recorded while the async switch
//! was on `record` to the order pipeline.

use axum::{
    extract::{rejection::JsonRejection, State},
    Json,
};
use contract::Actor;
use contract::Source;
use contract::{OpsReason, ReplayReport};

use crate::{orders::recordings, SaleState};
use base::error::ApiResult;

pub async fn replay(
    State(state): State<SaleState>,
    actor: Actor,
    body: Result<Json<OpsReason>, JsonRejection>,
) -> ApiResult<Json<ReplayReport>> {
    let Json(body) = body?;
    Ok(Json(
        recordings::replay(&state, &actor, Source::Api, &body.reason).await?,
    ))
}
