//! The JSON admin API under `/admin/api`: every capability adds its admin routes to one
//! [`AdminRoutes`] table, which builds the router and lists what it serves, so the RBAC
//! matrix test can insist that every route has a row. Every route takes an
//! [`Actor`](contract::Actor), so a request without credentials is answered 401 before
//! anything runs.

use axum::{
    handler::Handler,
    http::Method,
    routing::{self, MethodRouter},
    Router,
};

use crate::state::AppState;

/// The admin API being assembled: its router and the (method, path) of every route.
#[derive(Default)]
pub(crate) struct AdminRoutes {
    router: Router<AppState>,
    listed: Vec<(Method, &'static str)>,
}

impl AdminRoutes {
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
}

fn table() -> AdminRoutes {
    let routes = AdminRoutes::default().get("/audit", super::audit_routes::list);
    let routes = crate::catalog::routes::admin(routes);
    let routes = crate::prewarm::routes::admin(routes);
    let routes = crate::control::routes::admin(routes);
    let routes = crate::reconcile::routes::admin(routes);
    let routes = crate::dashboard::routes::admin(routes);
    let routes = crate::sale_page::routes::admin(routes);
    let routes = crate::hotkeys::routes::admin(routes);
    let routes = crate::readiness::routes::admin(routes);
    crate::orders::routes::admin(routes)
}

pub(crate) fn router() -> Router<AppState> {
    table().router
}

/// Every admin route as (method, path template), in the order the capabilities add them.
pub fn listed() -> Vec<(Method, &'static str)> {
    table().listed
}
