//! The JSON admin API under `/admin/api`: every capability adds its admin routes to one
//! [`AdminRoutes`] table, which builds the router and lists what it serves, so the RBAC
//! matrix test can insist that every route has a row. Every route takes an
//! [`Actor`](contract::Actor), so a request without credentials is answered 401 before
//! anything runs.

use axum::{http::Method, Router};

use base::route_table::RouteTable;

use crate::state::AppState;

/// The admin API's table: routes whose handlers take the whole state.
pub type AdminRoutes = RouteTable<AppState>;

pub fn table() -> AdminRoutes {
    let routes = AdminRoutes::default().get("/audit", super::audit_routes::list);
    let routes = sale::catalog::routes::admin(routes);
    let routes = crate::prewarm::routes::admin(routes);
    let routes = crate::control::routes::admin(routes);
    let routes = crate::changes::routes::admin(routes);
    let routes = crate::reconcile::routes::admin(routes);
    let routes = crate::dashboard::routes::admin(routes);
    let routes = sale::sale_page::routes::admin(routes);
    let routes = crate::hotkeys::routes::admin(routes);
    let routes = crate::readiness::routes::admin(routes);
    let routes = crate::rehearsal::routes::admin(routes);
    let routes = crate::baselines::routes::admin(routes);
    let routes = sale::lottery::routes::admin(routes);
    sale::orders::routes::admin(routes)
}

pub fn router() -> Router<AppState> {
    table().into_router()
}

/// Every admin route as (method, path template), in the order the capabilities add them.
pub fn listed() -> Vec<(Method, &'static str)> {
    table()
        .listed()
        .iter()
        .map(|route| (route.method.clone(), route.path))
        .collect()
}
