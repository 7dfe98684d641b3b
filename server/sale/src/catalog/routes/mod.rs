//! The catalogue's admin routes: items and activities.

use crate::SaleState;
use axum::extract::{FromRef, FromRequestParts};
use base::client_address::ClientAddress;
use base::route_table::RouteTable;
use contract::Actor;
mod activities;
mod items;

pub fn admin<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes
        .get("/items", items::list)
        .post("/items", items::create)
        .get("/items/{id}", items::read)
        .put("/items/{id}", items::update)
        .get("/activities", activities::list)
        .post("/activities", activities::create)
        .get("/activities/{id}", activities::read)
        .put("/activities/{id}", activities::update)
}
