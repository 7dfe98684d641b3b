//! The pipeline's background workers, started together by `serve` (with workers on) and
//! `worker`. They take the whole state; nothing the state holds depends on them.

use tokio::task::JoinHandle;

use crate::{
    orders::{create_order, dead_letters, gauges, pay_timeout, relay},
    SaleState,
};

/// Starts the pipeline's background workers: the create-order consumer, the DLQ sink, the
/// outbox relay (it works only while this instance leads), the gauges and the pay-timeout
/// consumer. Returns their
/// handles; aborting one stops that worker.
pub fn spawn(state: &SaleState) -> Vec<JoinHandle<()>> {
    vec![
        create_order::spawn(state),
        dead_letters::spawn_sink(state),
        relay::spawn(state),
        gauges::spawn(state),
        pay_timeout::spawn(state),
    ]
}
