//! HTTP adapters: each handler extracts, calls a service, and maps the result to JSON.
//! The router is assembled in `startup`.

pub mod admin;
pub mod buyer;
pub mod health;
pub mod metrics;
pub mod payment;
