//! Use cases over the stores. Admin operations (`catalog`, `prewarm`) are shared by the
//! admin API, the console and the CLI: each checks the actor's role and scope, validates
//! with `domain`, then calls `storage`. The buyer side is the funnel (`buy`) with its
//! in-memory `catalogue` and `challenge`s.

pub mod buy;
pub mod catalog;
pub mod catalogue;
pub mod challenge;
pub mod deduction;
pub mod order_admin;
pub mod prewarm;
