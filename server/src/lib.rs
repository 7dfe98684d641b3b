//! The `seckill` server: buyer API, admin API, admin console (Leptos SSR), `/metrics` and
//! background workers in one binary. `main` only parses the command line and calls [`cli`].
//!
//! One folder per capability, each owning its routes, use cases and queries: `buy` (the buyer
//! API and its funnel), `catalog`, `prewarm`, `orders` (the RabbitMQ pipeline, pay timeout,
//! outbox relay, dead letters, order admin), `payment`, `control` (etcd switches, election),
//! `changes` (switch changes that wait: scheduled, reverted later),
//! `identity`, `dashboard` (the live figures the console draws), `hotkeys` (hot-key
//! detection, its reactions and manual keys), `readiness` (the pre-sale go/no-go), `rehearsal` (a sale's load against a shadow copy, with the invariant check), `sale_page` (the static
//! sale page: publish, serve, the button script), `admin` (the admin router, permissions, console backend, audit). `openapi` documents both APIs. What every capability stands on is the crate `base`
//! (`server/base`); the HTTP plumbing beneath the routes is in `web`; `startup` and `state`
//! put the pieces together.

pub mod admin;
pub(crate) mod audit;
pub(crate) mod baselines;
pub mod buy;
pub(crate) mod catalog;
pub mod changes;
pub mod cli;
pub mod control;
pub(crate) mod dashboard;
pub mod events;
pub mod hotkeys;
pub mod identity;
pub mod lottery;
pub mod openapi;
pub mod orders;
pub mod payment;
pub(crate) mod prewarm;
pub(crate) mod readiness;
pub mod reconcile;
pub(crate) mod rehearsal;
pub mod retention;
pub mod sale;
pub mod sale_page;
pub mod startup;
pub mod state;
pub(crate) mod switches;
pub(crate) mod web;
