//! The JSON admin API under `/admin/api`: every capability's admin routes in one router.
//! Every route takes an [`Actor`](contract::Actor), so a request without
//! credentials is answered 401 before anything runs.

use axum::{routing::get, Router};

use crate::state::AppState;

pub fn router() -> Router<AppState> {
    Router::new()
        .merge(crate::catalog::routes::router())
        .merge(crate::prewarm::routes::router())
        .merge(crate::control::routes::router())
        .merge(crate::orders::routes::router())
        .route("/audit", get(super::audit_routes::list))
}
