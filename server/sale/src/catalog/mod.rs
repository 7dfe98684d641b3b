//! The catalogue merchants keep: items and flash-sale activities (with their items, stock,
//! limits and seat maps). Its rules (`rules`), use cases shared by the admin API, the console
//! and the CLI (`service`), PostgreSQL queries (`store`) and admin routes (`routes`).

pub mod copies;
pub mod expiry;
pub mod routes;
pub mod rules;
pub mod service;
pub mod store;
