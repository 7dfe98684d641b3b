//! Reconciliation: every unit of every activity item accounted for between Redis (the
//! traffic-bearing layer) and PostgreSQL (the truth), while the sale is live.
//!
//! * [`ledger`]: the live stock ledger, one cut of both stores per item.
//! * [`run`]: a run over an activity: findings by class, and the repairs of the safe ones.
//! * [`auto`]: the leader's repair pass over every live activity every few seconds.
//! * [`fence`]: re-deriving an item's Redis state from PostgreSQL mid-sale (pre-warm,
//!   repair, Redis lost), behind a fence no deduction passes.
//! * [`viewers`]: the live ledger as viewers read it, computed once a second and shared.
//! * Voiding a pre-order that may never commit and giving its units back is the buy path's
//!   (`sale::buy::settle`): it does so the moment it loses track of a deduction, and a run
//!   for every marker that outlived its grace.
//!
//! # How a run knows no in-flight request will still take or commit what it repairs
//!
//! Every Redis deduction leaves a **marker** under its pre-order's id (`lua/buy.lua`)
//! until a run sees that order committed. So a deduction Redis made is never silent: its
//! marker is there until its order is in PostgreSQL or its units are back.
//!
//! * A marker older than `reconcile.marker_grace_ms` without an order is settled by a
//!   **void**: a `FAILED` row under the pre-order's id. The id is the orders' primary key,
//!   so the void and a late commit cannot both succeed; whichever is first wins, and the
//!   units go back (`lua/release_deduction.lua`, once: it consumes the marker) only when
//!   the void won. No waiting on clocks: correctness rests on the key, the grace only
//!   spares requests that are merely slow.
//! * Rewriting an item's counters (a drift, a buyer record no order explains, Redis lost)
//!   happens behind the **fence** ([`fence`]): no deduction runs while it is up, every
//!   earlier deduction is committed or voided before the snapshot, and the snapshot is taken
//!   under the item row's lock, which every other stock-moving transaction also takes.
//! * Two repairs never work on one activity at once: each holds a PostgreSQL advisory lock
//!   on the activity for its whole run (the leader's pass skips an activity an operator is
//!   repairing).

pub mod auto;
pub(crate) mod fence;
pub(crate) mod ledger;
pub mod redis_state;
pub(crate) mod routes;
pub(crate) mod rules;
pub(crate) mod run;
pub mod service;
pub(crate) mod store;
pub(crate) mod viewers;
