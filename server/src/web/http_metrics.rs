//! `/metrics`: the Prometheus text exposition, and the middleware that counts and times
//! every HTTP request by its matched route and its method. Neither label takes what the
//! client chooses: an unmatched path is `unmatched`, a method outside the standard ones
//! `other`.

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, Method},
    middleware::Next,
    response::{IntoResponse, Response},
};
use std::time::Instant;

use ops::state::AppState;

/// The `route` of a request no route matched.
const UNMATCHED: &str = "unmatched";

/// The standard methods by name, any other as `other`.
fn method_label(method: &Method) -> &'static str {
    const STANDARD: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    STANDARD
        .into_iter()
        .find(|name| *name == method.as_str())
        .unwrap_or("other")
}

pub(crate) async fn render(State(state): State<AppState>) -> impl IntoResponse {
    refresh_pools(&state);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        state.metrics.render(),
    )
}

/// The USE gauges, read at scrape time so they are never older than the scrape.
fn refresh_pools(state: &AppState) {
    let metrics = &state.metrics;
    let (size, idle) = (state.db.size(), state.db.num_idle() as u32);
    let pool = &metrics.db_pool_connections;
    pool.with_label_values(&["in_use"])
        .set(i64::from(size.saturating_sub(idle)));
    pool.with_label_values(&["idle"]).set(i64::from(idle));
    pool.with_label_values(&["max"])
        .set(i64::from(state.settings.db_max_connections));
    metrics
        .admission_in_flight
        .set(i64::try_from(state.funnel.in_flight()).unwrap_or(i64::MAX));
    metrics
        .preorder_queue_depth
        .set(i64::try_from(state.funnel.preorders_queued()).unwrap_or(i64::MAX));
}

pub(crate) async fn track(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED.to_owned(), |path| path.as_str().to_owned());
    let method = method_label(request.method());
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
        .with_label_values(&[&route, method, response.status().as_str()])
        .inc();
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_methods_keep_their_name_and_others_are_other() {
        assert_eq!(method_label(&Method::GET), "GET");
        assert_eq!(method_label(&Method::PATCH), "PATCH");
        let made_up = Method::from_bytes(b"BREW").expect("a token");
        assert_eq!(method_label(&made_up), "other");
        let lower = Method::from_bytes(b"get").expect("a token");
        assert_eq!(method_label(&lower), "other");
    }
}
