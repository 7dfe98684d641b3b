//! The operators' storey of the seckill server, over the sale's (the crate `sale`,
//! `server/sale`: identity, catalog, buy, orders, payment, lottery, events, sale pages, the
//! audit log): one folder per capability, each owning its routes, use cases and queries:
//! `prewarm`, `control` (etcd switches, election), `changes` (switch changes that wait:
//! scheduled, approved, staged), `dashboard` (the live figures the console draws), `hotkeys`
//! (hot-key detection across the cluster, the keys in force and manual keys), `readiness`
//! (the pre-sale go/no-go), `reconcile`, `rehearsal` (a sale's load against a shadow copy,
//! with the invariant check), `baselines`, `retention`, and `admin` (the admin API's router
//! and the audit log's route). `state` holds [`AppState`](state::AppState), what they all
//! work with.
//!
//! Nothing here starts a process or knows the console: the `seckill` crate (`server/`)
//! serves these routes, and the console's server functions (crate `app`, built with `ssr`)
//! call these use cases directly, so this crate never depends on either.

pub mod admin;
pub mod baselines;
pub mod changes;
pub mod control;
pub mod dashboard;
pub mod hotkeys;
pub mod prewarm;
pub mod readiness;
pub mod reconcile;
pub mod rehearsal;
pub mod retention;
pub mod state;
