//! `/metrics`: the Prometheus text exposition, and the middleware that counts and times
//! every HTTP request by its matched route (never the raw path, to bound label cardinality).

use axum::{
    extract::{MatchedPath, Request, State},
    http::header,
    middleware::Next,
    response::{IntoResponse, Response},
};
use std::time::Instant;

use crate::state::AppState;

pub(crate) async fn render(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

pub(crate) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_owned(), |path| path.as_str().to_owned());
    let method = request.method().clone();
    let started = Instant::now();
    let response = next.run(request).await;
    state
        .metrics
        .http_duration
        .with_label_values(&[&route])
        .observe(started.elapsed().as_secs_f64());
    state
        .metrics
        .http_requests
        .with_label_values(&[&route, method.as_str(), response.status().as_str()])
        .inc();
    response
}
