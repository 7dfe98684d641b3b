//! The pipeline's gauges: outbox rows by status, the age of the oldest row waiting, dead
//! letters waiting and pre-orders stuck past `fail_stuck_after_s` (from PostgreSQL),
//! and the ready messages of the queues (the MQ backlog, from RabbitMQ). Refreshed every
//! few seconds on every instance, so any instance's `/metrics` shows them.

use std::time::Duration;

use crate::{
    orders::{
        dead_letters,
        mq::{broker::queue_states, consume::QuietWarnings},
        outbox, stuck,
    },
    SaleState,
};

const REFRESH: Duration = Duration::from_secs(5);

pub fn spawn(state: &SaleState) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let mut database = QuietWarnings::new("pipeline gauges (PostgreSQL)");
        let mut broker = QuietWarnings::new("pipeline gauges (RabbitMQ)");
        loop {
            match refresh_rows(&state).await {
                Ok(()) => database.recovered(),
                Err(error) => database.failed(&error),
            }
            match refresh_queues(&state).await {
                Ok(()) => broker.recovered(),
                Err(error) => broker.failed(&error),
            }
            tokio::time::sleep(REFRESH).await;
        }
    })
}

async fn refresh_rows(state: &SaleState) -> Result<(), sqlx::Error> {
    let counts = outbox::counts(&state.db).await?;
    let metrics = &state.metrics.pipeline;
    for (status, rows) in [
        ("pending", counts.pending),
        ("failed", counts.failed),
        ("recorded", counts.recorded),
    ] {
        metrics.outbox_rows.with_label_values(&[status]).set(rows);
    }
    metrics
        .outbox_oldest_pending
        .set(outbox::oldest_pending_age_s(&state.db).await?);
    metrics
        .dead_letters_waiting
        .set(dead_letters::store::waiting_count(&state.db).await?);
    let flag_after = Duration::from_secs(state.settings.reconcile.fail_stuck_after_s);
    let stuck = stuck::stuck_counts(&state.db, flag_after).await?;
    for status in stuck::OUTBOX_STATES {
        let count = stuck
            .iter()
            .find(|(stuck_status, _)| stuck_status == status)
            .map_or(0, |(_, count)| *count);
        metrics
            .preorders_stuck
            .with_label_values(&[status])
            .set(count);
    }
    Ok(())
}

async fn refresh_queues(state: &SaleState) -> Result<(), crate::orders::mq::broker::BrokerError> {
    let topology = &state.pipeline.topology;
    let queues = [
        ("create", topology.create_queue.as_str()),
        ("pay-timeout", topology.pay_timeout_queue.as_str()),
        ("dead", topology.dead_queue.as_str()),
    ];
    let names: Vec<&str> = queues.iter().map(|(_, name)| *name).collect();
    let deadline = Duration::from_millis(state.settings.pipeline.confirm_timeout_ms);
    let states = queue_states(&state.amqp, topology, &names, deadline).await?;
    for ((role, _), queue) in queues.iter().zip(states) {
        state
            .metrics
            .pipeline
            .queue_depth
            .with_label_values(&[role])
            .set(i64::from(queue.ready));
    }
    Ok(())
}
