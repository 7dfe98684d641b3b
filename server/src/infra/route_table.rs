//! A router that remembers what it serves: every route goes in with its method and path
//! template, so the OpenAPI document and the RBAC matrix are built from the same list the
//! router is, and neither can miss a route.

use axum::{
    handler::Handler,
    http::Method,
    routing::{self, MethodRouter},
    Router,
};

use crate::{error::ApiError, state::AppState};

/// Routes being assembled: the router and the (method, path) of every route.
#[derive(Default)]
pub(crate) struct RouteTable {
    router: Router<AppState>,
    listed: Vec<(Method, &'static str)>,
}

impl RouteTable {
    pub(crate) fn get<H: Handler<T, AppState>, T: 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add(Method::GET, path, routing::get(handler))
    }

    pub(crate) fn post<H: Handler<T, AppState>, T: 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add(Method::POST, path, routing::post(handler))
    }

    pub(crate) fn put<H: Handler<T, AppState>, T: 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add(Method::PUT, path, routing::put(handler))
    }

    pub(crate) fn delete<H: Handler<T, AppState>, T: 'static>(
        self,
        path: &'static str,
        handler: H,
    ) -> Self {
        self.add(Method::DELETE, path, routing::delete(handler))
    }

    fn add(mut self, method: Method, path: &'static str, route: MethodRouter<AppState>) -> Self {
        // axum merges method routers registered under the same path.
        self.router = self.router.route(path, route);
        self.listed.push((method, path));
        self
    }

    /// Every route as (method, path template), in the order they were added.
    pub(crate) fn listed(&self) -> &[(Method, &'static str)] {
        &self.listed
    }

    /// The router, answering an unknown path or a method a path does not take with the
    /// API's JSON error body rather than axum's empty 404 and 405.
    pub(crate) fn into_router(self) -> Router<AppState> {
        self.router
            .fallback(|| async { ApiError::NotFound("route") })
            .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
    }
}
