//! `GET /admin/api/changes?state=`, `POST /admin/api/changes/{id}/approve|reject|
//! promote|abort` and `DELETE /admin/api/changes/{id}`, each with `{reason}`; a change is
//! made through `PUT /admin/api/switches/{*path}` (with `at`, `revert_after_s` or `stage`,
//! or on a key that needs four eyes). A key's history, its rollback and the impact of a
//! flip hang under `/admin/api/switches/{*path}/...`.

use axum::{
    extract::{
        rejection::{JsonRejection, PathRejection, QueryRejection},
        FromRequest, FromRequestParts, Path, Query, Request, State,
    },
    http::StatusCode,
    Json,
};
use contract::{Actor, ChangeList, ChangeState, Permission, Source, SwitchChangeRow};
use serde::Deserialize;

use crate::{
    admin::routes::AdminRoutes,
    changes::{
        history, impact,
        service::{self, Decision, Submitted},
        stage,
    },
    control::board::{Board, Flip},
    state::AppState,
};
use base::{
    error::{ApiError, ApiResult},
    route_table::{DescribesRequest, Id, RequestShape},
};
use sale::identity::authorize;

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// `scheduled`, `pending_approval`, `staged`, `applied`, `reverted`, `cancelled`,
    /// `rejected` or `aborted`.
    state: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    actor: Actor,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> ApiResult<Json<ChangeList>> {
    authorize(&actor, Permission::ReadSwitches)?;
    let Query(query) = query?;
    let wanted = match query.state.as_deref() {
        None => None,
        Some(text) => Some(ChangeState::parse(text).ok_or_else(|| ApiError::Invalid {
            code: "INVALID_STATE",
            message: format!("no change state `{text}`"),
        })?),
    };
    let changes = service::list(&Board::of(&state), &actor, wanted).await?;
    Ok(Json(ChangeList { changes }))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DecisionBody {
    #[serde(default)]
    reason: String,
}

/// Who decides what on which change, and why: what every `/changes/{id}/...` route takes.
/// Refused in this order: no caller (401), one who may not flip (403), then a bad id or
/// body (400), so a caller without the right learns nothing about the change.
struct Deciding {
    actor: Actor,
    id: i64,
    reason: String,
}

impl FromRequest<AppState> for Deciding {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &AppState) -> Result<Self, ApiError> {
        let (mut parts, body) = request.into_parts();
        let actor = Actor::from_request_parts(&mut parts, state).await?;
        authorize(&actor, Permission::FlipSwitch)?;
        let Id(id) = Id::from_request_parts(&mut parts, state).await?;
        let Json(DecisionBody { reason }) =
            Json::<DecisionBody>::from_request(Request::from_parts(parts, body), state).await?;
        Ok(Self { actor, id, reason })
    }
}

impl DescribesRequest for Deciding {
    fn describe(shape: &mut RequestShape) {
        Id::describe(shape);
        <Result<Json<DecisionBody>, JsonRejection>>::describe(shape);
    }
}

async fn cancel(State(state): State<AppState>, by: Deciding) -> ApiResult<StatusCode> {
    decide(state, by, Decision::Cancel).await
}

async fn reject(State(state): State<AppState>, by: Deciding) -> ApiResult<StatusCode> {
    decide(state, by, Decision::Reject).await
}

async fn decide(state: AppState, by: Deciding, decision: Decision) -> ApiResult<StatusCode> {
    let board = Board::of(&state);
    service::decide(&board, &by.actor, Source::Api, by.id, decision, &by.reason).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// The change as it stands after the approval (applied, or scheduled for its time).
async fn approve(State(state): State<AppState>, by: Deciding) -> ApiResult<Json<SwitchChangeRow>> {
    let now = state.changes.now();
    let board = Board::of(&state);
    Ok(Json(
        service::approve(&board, &by.actor, Source::Api, by.id, &by.reason, now).await?,
    ))
}

/// A staged change's value on every instance; answers the change as it stands after.
async fn promote(State(state): State<AppState>, by: Deciding) -> ApiResult<Json<SwitchChangeRow>> {
    let now = state.changes.now();
    let board = Board::of(&state);
    Ok(Json(
        stage::promote(&board, &by.actor, Source::Api, by.id, &by.reason, now).await?,
    ))
}

/// A staged change taken back; answers the change as it stands after.
async fn abort(State(state): State<AppState>, by: Deciding) -> ApiResult<Json<SwitchChangeRow>> {
    let board = Board::of(&state);
    Ok(Json(
        stage::abort(&board, &by.actor, Source::Api, by.id, &by.reason).await?,
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ReadQuery {
    /// For `.../impact`: the value the flip would set.
    value: Option<String>,
}

/// A read about one key; the answer is `SwitchRevision[]` or `SwitchImpact`.
#[derive(serde::Serialize)]
#[serde(untagged)]
enum KeyRead {
    History(Vec<contract::SwitchRevision>),
    Impact(contract::SwitchImpact),
}

impl axum::response::IntoResponse for KeyRead {
    fn into_response(self) -> axum::response::Response {
        Json(self).into_response()
    }
}

/// In the OpenAPI document: 200 with either body.
impl base::route_table::DescribesAnswer for KeyRead {
    fn describe_answer(shape: &mut base::route_table::RequestShape) {
        use utoipa::{PartialSchema, ToSchema};
        contract::SwitchRevision::schemas(&mut shape.schemas);
        contract::SwitchImpact::schemas(&mut shape.schemas);
        shape.success = Some(base::route_table::Success {
            status: "200",
            body: Some(
                utoipa::openapi::schema::OneOfBuilder::new()
                    .item(<Vec<contract::SwitchRevision>>::schema())
                    .item(contract::SwitchImpact::schema())
                    .into(),
            ),
        });
    }
}

/// `GET /admin/api/switches/{path}/history`: the key's revisions, newest first;
/// `GET /admin/api/switches/{path}/impact?value=`: what setting it would touch. A key's
/// path may hold slashes, so the read is the path's last segment.
async fn switch_read(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadQuery>, QueryRejection>,
) -> ApiResult<KeyRead> {
    authorize(&actor, Permission::ReadSwitches)?;
    let Path(path) = path?;
    let Query(query) = query?;
    let board = Board::of(&state);
    if let Some(key) = path.strip_suffix("/history") {
        return Ok(KeyRead::History(
            history::history(&board, &actor, key).await?,
        ));
    }
    let key = path
        .strip_suffix("/impact")
        .ok_or(ApiError::NotFound("route"))?;
    let value = query.value.ok_or_else(|| ApiError::Invalid {
        code: "INVALID_VALUE",
        message: "`value` names the value the flip would set".into(),
    })?;
    let now = state.changes.now();
    Ok(KeyRead::Impact(
        impact::impact(&board, &actor, key, &value, now).await?,
    ))
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RollbackBody {
    revision: i64,
    #[serde(default)]
    reason: String,
}

/// `POST /admin/api/switches/{path}/rollback` `{revision, reason}`: answered as a flip.
async fn switch_rollback(
    State(state): State<AppState>,
    actor: Actor,
    path: Result<Path<String>, PathRejection>,
    body: Result<Json<RollbackBody>, JsonRejection>,
) -> ApiResult<Submitted> {
    authorize(&actor, Permission::FlipSwitch)?;
    let Path(path) = path?;
    let key = path
        .strip_suffix("/rollback")
        .ok_or(ApiError::NotFound("route"))?;
    let Json(body) = body?;
    let flip = Flip {
        actor: &actor,
        source: Source::Api,
        path: key,
        value: "",
        reason: &body.reason,
        wait: None,
    };
    let now = state.changes.now();
    history::rollback(&Board::of(&state), flip, body.revision, now).await
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes
        .get("/switches/{*path}", switch_read)
        .post("/switches/{*path}", switch_rollback)
        .get("/changes", list)
        .delete("/changes/{id}", cancel)
        .post("/changes/{id}/approve", approve)
        .post("/changes/{id}/reject", reject)
        .post("/changes/{id}/promote", promote)
        .post("/changes/{id}/abort", abort)
}
