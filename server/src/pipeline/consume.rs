//! Keeping a consumer alive: open a channel (bounded prefetch), consume in batches, and
//! when the channel or the broker goes away, wait a little and start again. The channel
//! belongs to the running session, so a session that dies (or a task that is aborted)
//! closes it and the broker redelivers every message it held unacked.

use lapin::{message::Delivery, options::BasicConsumeOptions, types::FieldTable};
use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::{
    pipeline::{batch::next_batch, broker::open_channel, topology::Topology},
    storage::amqp::AmqpLink,
};

/// What a consumer consumes, and how.
#[derive(Clone, Debug)]
pub struct ConsumerSpec {
    /// Names the consumer in logs and its consumer tag.
    pub name: &'static str,
    pub queue: String,
    /// Unacknowledged deliveries held at most.
    pub prefetch: u16,
    /// Deliveries handled together at most, and how long the first waits for company.
    pub batch_max: usize,
    pub batch_wait: Duration,
    /// How long opening the channel may take.
    pub open_timeout: Duration,
}

/// Handles one batch; must settle (ack or nack) every delivery in it.
pub trait BatchHandler: Send + Sync + 'static {
    fn handle(&self, batch: Vec<Delivery>) -> impl Future<Output = ()> + Send;
}

const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Consumes `spec.queue` with `handler` for as long as the task runs.
pub async fn consume_forever<H: BatchHandler>(
    link: AmqpLink,
    topology: Arc<Topology>,
    spec: ConsumerSpec,
    handler: H,
) {
    let mut pause = FIRST_PAUSE;
    let mut warnings = QuietWarnings::new(spec.name);
    loop {
        match session(&link, &topology, &spec, &handler).await {
            Ok(()) => {
                pause = FIRST_PAUSE;
                warnings.recovered();
            }
            Err(error) => warnings.failed(&error),
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(LONGEST_PAUSE);
    }
}

/// One channel's life: consume until the consumer ends.
async fn session<H: BatchHandler>(
    link: &AmqpLink,
    topology: &Topology,
    spec: &ConsumerSpec,
    handler: &H,
) -> Result<(), crate::pipeline::broker::BrokerError> {
    let channel = open_channel(
        link,
        topology,
        false,
        Some(spec.prefetch),
        spec.open_timeout,
    )
    .await?;
    let mut consumer = channel
        .basic_consume(
            &spec.queue,
            spec.name,
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tracing::info!(queue = %spec.queue, consumer = spec.name, "consuming");
    while let Some(batch) = next_batch(&mut consumer, spec.batch_max, spec.batch_wait).await {
        handler.handle(batch).await;
    }
    Ok(())
}

/// Warns about a failing background job at most once per interval, so an outage cannot
/// fill the disk (seed 001 §6.1); says once when it works again.
pub struct QuietWarnings {
    job: &'static str,
    last_warned: Option<Instant>,
    failing: bool,
}

const WARN_EVERY: Duration = Duration::from_secs(30);

impl QuietWarnings {
    pub fn new(job: &'static str) -> Self {
        Self {
            job,
            last_warned: None,
            failing: false,
        }
    }

    pub fn failed(&mut self, error: &dyn std::fmt::Display) {
        self.failing = true;
        if self.last_warned.is_none_or(|at| at.elapsed() >= WARN_EVERY) {
            self.last_warned = Some(Instant::now());
            tracing::warn!(job = self.job, error = %error, "failing; retrying quietly");
        } else {
            tracing::debug!(job = self.job, error = %error, "still failing");
        }
    }

    pub fn recovered(&mut self) {
        if std::mem::take(&mut self.failing) {
            tracing::info!(job = self.job, "working again");
        }
    }
}
