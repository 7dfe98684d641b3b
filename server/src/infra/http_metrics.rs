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

use crate::state::AppState;

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
