//! `POST /admin/api/activities/{id}/publish`, and the public routes that serve what it
//! published: `/sale/{id}/` (the page), `/sale/{id}/button.js` (the button script of the
//! phase the server's clock is in) and `/sale/assets/{name}` (hashed, immutable assets).
//! All three answer from memory; an unknown id is 404 `NOT_FOUND`, a malformed one 400.
//! They read the request's headers where they are (taking the request) rather than have
//! axum copy them for each request: the rest of the work is a lookup in memory.

use axum::extract::{FromRef, FromRequestParts};
use axum::{
    extract::{rejection::PathRejection, Path, Request, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    routing::get,
    Json, Router,
};
use base::client_address::ClientAddress;
use base::route_table::RouteTable;
use contract::{Actor, PublishedPage};

use super::render::page_url;
use crate::SaleState;
use base::error::{ApiError, ApiResult};

pub async fn publish(
    State(state): State<SaleState>,
    actor: Actor,
    id: Result<Path<i64>, PathRejection>,
) -> ApiResult<Json<PublishedPage>> {
    let Path(id) = id?;
    Ok(Json(super::publish(&state, &actor, id).await?))
}

pub fn admin<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes.post("/activities/{id}/publish", publish)
}

pub fn router<S>() -> Router<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    Router::new()
        .route("/sale/{id}", get(without_slash))
        .route("/sale/{id}/", get(page))
        .route("/sale/{id}/button.js", get(button))
        .route("/sale/assets/{name}", get(asset))
}

/// The page's links are absolute, but people type the address without its last slash.
async fn without_slash(id: Result<Path<i64>, PathRejection>) -> ApiResult<Response> {
    let Path(id) = id?;
    Ok((
        StatusCode::PERMANENT_REDIRECT,
        [(header::LOCATION, page_url(id))],
    )
        .into_response())
}

/// What `serve` answers for the path's activity id, or 404 when it has no published page.
fn published(
    id: Result<Path<i64>, PathRejection>,
    serve: impl FnOnce(i64) -> Option<Response>,
) -> ApiResult<Response> {
    let Path(id) = id?;
    serve(id).ok_or(ApiError::NotFound("sale page"))
}

async fn page(
    State(state): State<SaleState>,
    id: Result<Path<i64>, PathRejection>,
    request: Request,
) -> ApiResult<Response> {
    published(id, |id| state.sale_pages.page(id, request.headers()))
}

async fn button(
    State(state): State<SaleState>,
    id: Result<Path<i64>, PathRejection>,
    request: Request,
) -> ApiResult<Response> {
    published(id, |id| state.sale_pages.button(id, request.headers()))
}

async fn asset(
    State(state): State<SaleState>,
    Path(name): Path<String>,
    request: Request,
) -> ApiResult<Response> {
    state
        .sale_pages
        .asset(&name, request.headers())
        .ok_or(ApiError::NotFound("asset"))
}
