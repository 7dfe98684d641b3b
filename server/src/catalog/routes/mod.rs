//! The catalogue's admin routes: items and activities.

use axum::{
    routing::{get, put},
    Router,
};

use crate::state::AppState;

mod activities;
mod items;

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
}
