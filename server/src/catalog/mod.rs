//! The catalogue merchants keep: items and flash-sale activities (with their items, stock,
//! limits and seat maps). Its rules (`rules`), use cases shared by the admin API, the console
//! and the CLI (`service`), PostgreSQL queries (`store`) and admin routes (`routes`).

pub(crate) mod copies;
pub(crate) mod expiry;
pub(crate) mod routes;
pub(crate) mod rules;
pub(crate) mod service;
pub(crate) mod store;
