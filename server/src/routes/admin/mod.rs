//! The JSON admin API under `/admin/api` (docs/admin-api.md). Every route takes an
//! [`Actor`](crate::domain::access::Actor), so no token → 401 before anything runs.

use axum::{
    routing::{get, post, put},
    Router,
};

use crate::state::AppState;

mod activities;
mod audit;
mod dead_letters;
mod items;
mod orders;
mod outbox;
mod prewarm;
mod recordings;
mod switches;

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
        .route("/switches", get(switches::list))
        .route("/switches/{*path}", put(switches::set))
        .route("/audit", get(audit::list))
        .route("/orders", get(orders::list))
        .route("/orders/{id}", get(orders::read))
        .route("/dead-letters", get(dead_letters::list))
        .route("/dead-letters/requeue-all", post(dead_letters::requeue_all))
        .route("/dead-letters/{id}/requeue", post(dead_letters::requeue))
        .route("/outbox", get(outbox::summary))
        .route("/recordings/replay", post(recordings::replay))
}
