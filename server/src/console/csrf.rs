//! Cross-site request forgery: a state-changing request a browser would authenticate by
//! itself (one carrying the console's session cookie, or any call of a console server
//! function, logging in included) must come from the console's own origin. The session
//! cookie's `SameSite=Strict` is one layer; the `Origin` header (the `Referer` when a
//! browser sends no `Origin`) is the second, checked by [`guard`] for every request before
//! any route runs. Requests with an `Authorization` header are exempt: a browser never adds
//! one to a cross-site request by itself, and such a request ignores the cookie anyway.

use axum::{
    extract::{Request, State},
    http::{header, HeaderMap, Method, Uri},
    middleware::Next,
    response::{IntoResponse, Response},
};

use base::error::ApiError;
use ops::state::AppState;

/// Where the console's server functions are served (the `prefix` of `app::api`'s functions).
pub(crate) const SERVER_FUNCTIONS: &str = "/console/fn/";

/// Whether the request is one a forged cross-site page could make with the user's
/// credentials: not a safe method, no `Authorization` header, and either the session
/// cookie or a server function's path.
pub(crate) fn needs_origin(method: &Method, path: &str, headers: &HeaderMap) -> bool {
    let safe = matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
    );
    !safe
        && !headers.contains_key(header::AUTHORIZATION)
        && (sale::identity::authenticate::session_token(headers).is_some()
            || path.starts_with(SERVER_FUNCTIONS))
}

/// Whether the request names the console's own origin: its `Origin` (else the origin of its
/// `Referer`) equals `public_origin` when one is configured, else names the host of the
/// request's `Host` header. A request with neither header, or `Origin: null` (a sandboxed
/// or privacy-stripped context), is refused: a browser sends one of them on every
/// cross-site request, so a missing one proves nothing either way.
pub(crate) fn from_own_origin(headers: &HeaderMap, public_origin: Option<&str>) -> bool {
    let text = |name| headers.get(name).and_then(|value| value.to_str().ok());
    let Some(claimed) = text(header::ORIGIN)
        .or_else(|| text(header::REFERER))
        .and_then(|url| url.parse::<Uri>().ok())
    else {
        return false;
    };
    let (Some(scheme), Some(authority)) = (claimed.scheme_str(), claimed.authority()) else {
        return false;
    };
    match public_origin {
        Some(public) => public
            .trim_end_matches('/')
            .parse::<Uri>()
            .is_ok_and(|own| {
                own.scheme_str()
                    .is_some_and(|own| own.eq_ignore_ascii_case(scheme))
                    && own
                        .authority()
                        .is_some_and(|own| own.as_str().eq_ignore_ascii_case(authority.as_str()))
            }),
        None => {
            text(header::HOST).is_some_and(|host| host.eq_ignore_ascii_case(authority.as_str()))
        }
    }
}

/// The middleware: 403 `CROSS_SITE_REQUEST` for a request [`needs_origin`] picks that does
/// not come [`from_own_origin`]; nothing behind it runs.
pub(crate) async fn guard(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let checked = needs_origin(request.method(), request.uri().path(), request.headers());
    if checked && !from_own_origin(request.headers(), state.settings.public_origin.as_deref()) {
        return ApiError::CrossSite.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, value.parse().expect("header value"));
        }
        headers
    }

    const COOKIE: (&str, &str) = ("cookie", "seckill_session=abc");

    #[test]
    fn only_state_changing_requests_a_browser_authenticates_by_itself_are_checked() {
        let cookie = headers(&[COOKIE]);
        assert!(needs_origin(&Method::POST, "/admin/api/items", &cookie));
        assert!(needs_origin(&Method::PUT, "/admin/api/items/1", &cookie));
        assert!(needs_origin(
            &Method::DELETE,
            "/admin/api/hotkeys/x/y",
            &cookie
        ));
        // Logging in: no cookie yet, still a server function.
        assert!(needs_origin(
            &Method::POST,
            "/console/fn/login",
            &HeaderMap::new()
        ));
        // Reads, bearer tokens, and callers without any browser credential are not.
        assert!(!needs_origin(&Method::GET, "/admin/api/items", &cookie));
        assert!(!needs_origin(&Method::HEAD, "/console/fn/x", &cookie));
        let bearer = headers(&[COOKIE, ("authorization", "Bearer t")]);
        assert!(!needs_origin(&Method::POST, "/admin/api/items", &bearer));
        assert!(!needs_origin(&Method::POST, "/console/fn/login", &bearer));
        assert!(!needs_origin(
            &Method::POST,
            "/api/pay/notify",
            &HeaderMap::new()
        ));
    }

    #[test]
    fn the_origin_must_name_the_host_asked() {
        let host = ("host", "127.0.0.1:3000");
        let own = headers(&[host, ("origin", "http://127.0.0.1:3000")]);
        assert!(from_own_origin(&own, None));
        for origin in [
            "http://evil.example",
            "http://127.0.0.1:3001",
            "null",
            "nonsense",
        ] {
            assert!(
                !from_own_origin(&headers(&[host, ("origin", origin)]), None),
                "{origin}"
            );
        }
        assert!(!from_own_origin(&headers(&[host]), None), "neither header");
        assert!(!from_own_origin(
            &headers(&[("origin", "http://127.0.0.1:3000")]),
            None
        ));
    }

    #[test]
    fn the_referer_stands_in_for_a_missing_origin_only() {
        let host = ("host", "shop.example:8443");
        let own = "https://shop.example:8443/activities?x=1";
        assert!(from_own_origin(&headers(&[host, ("referer", own)]), None));
        let foreign = "https://evil.example/shop.example:8443";
        assert!(!from_own_origin(
            &headers(&[host, ("referer", foreign)]),
            None
        ));
        let both = headers(&[host, ("origin", "https://evil.example"), ("referer", own)]);
        assert!(!from_own_origin(&both, None), "Origin wins over Referer");
    }

    #[test]
    fn a_configured_public_origin_replaces_the_host() {
        let public = Some("https://console.example.com/");
        let behind_proxy = |origin| headers(&[("host", "10.0.0.5:3000"), ("origin", origin)]);
        assert!(from_own_origin(
            &behind_proxy("https://console.example.com"),
            public
        ));
        assert!(from_own_origin(
            &behind_proxy("HTTPS://Console.Example.com"),
            public
        ));
        assert!(!from_own_origin(
            &behind_proxy("http://console.example.com"),
            public
        ));
        assert!(!from_own_origin(
            &behind_proxy("http://10.0.0.5:3000"),
            public
        ));
    }
}
