//! The `seckill` server: buyer API, admin API, admin console (Leptos SSR), `/metrics` and
//! background workers in one binary. `main` only parses the command line and calls [`cli`].
//!
//! The operators' storey, over the sale's (the crate `sale`, `server/sale`: identity,
//! catalog, buy, orders, payment, lottery, events, sale pages, the audit log): one folder per
//! capability, each owning its routes, use cases and queries: `prewarm`, `control` (etcd
//! switches, election), `changes` (switch changes that wait: scheduled, approved, staged),
//! `dashboard` (the live figures the console draws), `hotkeys` (hot-key detection across the
//! cluster, the keys in force and manual keys), `readiness` (the pre-sale go/no-go),
//! `reconcile`, `rehearsal` (a sale's load against a shadow copy, with the invariant check),
//! `baselines`, `retention`, and `admin` (the admin router, the console backend, the
//! cross-site check). `openapi` documents both APIs. What every capability stands on is the
//! crate `base` (`server/base`); the HTTP plumbing beneath the routes is in `web`; `startup`
//! and `state` put the pieces together.

pub mod admin;
pub(crate) mod baselines;
pub mod changes;
pub mod cli;
pub mod control;
pub(crate) mod dashboard;
pub mod hotkeys;
pub mod openapi;
pub(crate) mod prewarm;
pub(crate) mod readiness;
pub mod reconcile;
pub(crate) mod rehearsal;
pub mod retention;
pub mod startup;
pub mod state;
pub(crate) mod web;
