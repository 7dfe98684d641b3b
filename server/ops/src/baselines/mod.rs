//! Baselines: how an activity's sale behaved and what it cost, recorded as a run, so the
//! next sale can be held against the run an operator marked as the activity's baseline,
//! or, without one, as the baseline of its kind of activity.
//!
//! What belongs here (the path counters that feed it, the calls each buy makes to Redis,
//! PostgreSQL and RabbitMQ, are `base::tally`, counted where the calls are made): every instance's
//! periodic report of its figures (`report`), the figures of a run as plain values and
//! computations (`figures`), the live dashboard's figures against the baseline (`live`),
//! the leader's computing of runs, the list and the mark
//! (`runs`), their tables and which baseline applies to an activity (`store`) and the
//! admin routes (`routes`).

pub(crate) mod figures;
pub(crate) mod live;
pub(crate) mod report;
pub(crate) mod routes;
pub mod runs;
pub(crate) mod store;

use crate::state::AppState;

/// Starts this instance's reports and, for whenever it leads, the computing of runs.
pub fn spawn(state: &AppState) {
    report::spawn(state);
    runs::spawn_leader(state);
}
