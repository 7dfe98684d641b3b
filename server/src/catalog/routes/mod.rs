//! The catalogue's admin routes: items and activities.

use crate::admin::routes::AdminRoutes;

mod activities;
mod items;

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
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
