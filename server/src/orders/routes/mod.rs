//! The order pipeline's admin routes: orders, dead letters, the outbox and recorded pre-orders.

use crate::admin::routes::AdminRoutes;

mod dead_letters;
mod orders;
mod outbox;
mod recordings;

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
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
