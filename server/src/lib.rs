//! The `seckill` server: buyer API, admin API, admin console (Leptos SSR), `/metrics` and
//! background workers in one binary. `main` only parses the command line and calls [`cli`].
//!
//! This crate is the thin top of the server: what the capabilities are is below it, in the
//! operators' storey (the crate `ops`, `server/ops`: control plane, changes, hot keys,
//! pre-warm, reconciliation, rehearsal, readiness, dashboard, baselines, retention, the admin
//! API and `AppState`) over the sale's (the crate `sale`, `server/sale`). Here: `startup`
//! (the router and the process), `web` (the HTTP plumbing beneath the routes), `openapi`
//! (both APIs documented), `console` (the Leptos console mounted, with the cross-site check
//! and the state its server functions take) and `cli`.

pub mod cli;
mod console;
pub mod openapi;
pub mod startup;
pub(crate) mod web;
