//! Rehearsals: before the day, the built-in load generator runs a flash sale's traffic
//! through the real buy path against a shadow copy of the activity, then checks the
//! invariants and removes the copy.
//!
//! * [`plan`]: who sends what, when (hot item, Zipf tail, buyers coming back), and the
//!   synthetic buyers' ids.
//! * [`shadow`]: the shadow copy (invisible to buyers, pre-warmed like a sale) and its
//!   clean-up.
//! * [`load`]: the load generator, over HTTP to this deployment's own buyer API, and the
//!   tally of what came back.
//! * [`check`] and [`rules`]: the figures after the load and the invariants' verdicts.
//! * The one rule that tells a rehearsal's copy and traffic from a real sale's is the
//!   catalogue's (`sale::catalog::copies`): every listing and figure of a sale asks it.
//! * [`service`], [`routes`], [`store`]: the use cases (start, read, list), the admin
//!   routes, the rehearsal rows; [`service`] also holds the leader's clean-up retries.

pub(crate) mod check;
pub(crate) mod load;
pub(crate) mod plan;
pub(crate) mod routes;
pub(crate) mod rules;
pub mod service;
pub(crate) mod shadow;
pub(crate) mod store;
