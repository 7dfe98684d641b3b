//! The order pipeline's admin routes: orders, dead letters, the outbox and recorded pre-orders.

use crate::SaleState;
use axum::extract::{FromRef, FromRequestParts};
use base::client_address::ClientAddress;
use base::route_table::RouteTable;
use contract::Actor;
mod dead_letters;
mod orders;
mod outbox;
mod recordings;

pub fn admin<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes
        .get("/orders", orders::list)
        .get("/orders/{id}", orders::read)
        .get("/dead-letters", dead_letters::list)
        .post("/dead-letters/requeue-all", dead_letters::requeue_all)
        .post("/dead-letters/{id}/requeue", dead_letters::requeue)
        .get("/outbox", outbox::summary)
        .post("/outbox/retry", outbox::retry_all)
        .post("/outbox/{id}/retry", outbox::retry)
        .post("/recordings/replay", recordings::replay)
}
