//! The order pipeline's admin routes: orders, dead letters, the outbox and recorded pre-orders.

use axum::{
    routing::{get, post},
    Router,
};

use crate::state::AppState;

mod dead_letters;
mod orders;
mod outbox;
mod recordings;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/orders", get(orders::list))
        .route("/orders/{id}", get(orders::read))
        .route("/dead-letters", get(dead_letters::list))
        .route("/dead-letters/requeue-all", post(dead_letters::requeue_all))
        .route("/dead-letters/{id}/requeue", post(dead_letters::requeue))
        .route("/outbox", get(outbox::summary))
        .route("/recordings/replay", post(recordings::replay))
}
