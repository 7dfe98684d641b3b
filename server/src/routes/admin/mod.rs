//! The JSON admin API under `/admin/api` (SPEC §8.1). Every route takes an
//! [`Actor`](crate::domain::access::Actor), so no token → 401 before anything runs.

use axum::{
    routing::{get, post, put},
    Router,
};

use crate::state::AppState;

mod activities;
mod items;
mod prewarm;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/items", get(items::list).post(items::create))
        .route("/items/{id}", put(items::update).get(items::read))
        .route(
            "/activities",
            get(activities::list).post(activities::create),
        )
        .route(
            "/activities/{id}",
            get(activities::read).put(activities::update),
        )
        .route("/activities/{id}/prewarm", post(prewarm::prewarm))
}
