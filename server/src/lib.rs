//! The `seckill` server: buyer API, admin API, admin console (Leptos SSR), `/metrics` and
//! background workers in one binary. `main` only parses the command line and calls [`cli`].

pub mod cli;
pub mod config;
pub mod console;
pub mod control;
pub mod domain;
pub mod error;
pub mod identity;
pub mod metrics;
pub mod payment;
pub mod pipeline;
pub mod routes;
pub mod services;
pub mod startup;
pub mod state;
pub mod storage;
pub mod telemetry;
