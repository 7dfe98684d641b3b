//! Keeping a consumer alive: open a channel (bounded prefetch), consume in batches, and
//! when the channel or the broker goes away, wait a little and start again. The channel
//! belongs to the running session, so a session that dies (or a task that is aborted)
//! closes it and the broker redelivers every message it held unacked.
//!
//! Two ways to handle batches: a [`BatchHandler`] settles each batch itself, one batch at
//! a time; a [`PipelinedHandler`] works on several batches at once and says what to do
//! with each, and the loop settles them in arrival order, so a multiple-ack never covers
//! a batch still in progress.

use futures::{stream::FuturesOrdered, StreamExt};
use lapin::{message::Delivery, options::BasicConsumeOptions, types::FieldTable, Consumer};
use std::{
    future::Future,
    sync::Arc,
    time::{Duration, Instant},
};

use crate::orders::mq::{
    batch::{ack_all, next_batch, requeue, requeue_all},
    broker::{open_channel, BrokerError},
    topology::Topology,
};
use base::{amqp::AmqpLink, quiet_log::Budget};

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

/// What a [`PipelinedHandler`] decided for one batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Indexes of deliveries to return to the queue one by one (towards the delivery limit).
    pub returned: Vec<usize>,
    /// Ack the others; when false they go back to the queue too.
    pub ack_rest: bool,
}

/// Works on up to [`in_flight`](Self::in_flight) batches at once; never settles deliveries
/// itself.
pub trait PipelinedHandler: Send + Sync + 'static {
    fn in_flight(&self) -> usize;
    /// The work on `batch`, taking from it what it needs.
    fn work(&self, batch: &[Delivery]) -> impl Future<Output = Verdict> + Send + 'static;
}

const FIRST_PAUSE: Duration = Duration::from_millis(200);
const LONGEST_PAUSE: Duration = Duration::from_secs(5);

/// Consumes `spec.queue` with `handler`, one batch at a time, for as long as the task runs.
pub async fn consume_forever<H: BatchHandler>(
    link: AmqpLink,
    topology: Arc<Topology>,
    spec: ConsumerSpec,
    handler: H,
) {
    keep_consuming(&link, &topology, &spec, &Sequential(handler)).await;
}

/// Consumes `spec.queue` with `handler`, several batches at once, for as long as the task runs.
pub async fn consume_pipelined<H: PipelinedHandler>(
    link: AmqpLink,
    topology: Arc<Topology>,
    spec: ConsumerSpec,
    handler: H,
) {
    keep_consuming(&link, &topology, &spec, &Pipelined(handler)).await;
}

/// How a session hands its deliveries to a handler.
trait Drain: Send + Sync {
    fn drain<'a>(
        &'a self,
        consumer: &'a mut Consumer,
        spec: &'a ConsumerSpec,
    ) -> impl Future<Output = ()> + Send + 'a;
}

struct Sequential<H>(H);
struct Pipelined<H>(H);

impl<H: BatchHandler> Drain for Sequential<H> {
    async fn drain(&self, consumer: &mut Consumer, spec: &ConsumerSpec) {
        while let Some(batch) = next_batch(consumer, spec.batch_max, spec.batch_wait).await {
            self.0.handle(batch).await;
        }
    }
}

impl<H: PipelinedHandler> Drain for Pipelined<H> {
    async fn drain(&self, consumer: &mut Consumer, spec: &ConsumerSpec) {
        let limit = self.0.in_flight().max(1);
        let mut working = FuturesOrdered::new();
        // The batch being gathered, and when it goes even if not full.
        let mut gathering: Vec<Delivery> = Vec::new();
        let mut due: Option<tokio::time::Instant> = None;
        loop {
            let room = working.len() < limit;
            let mut dispatch = false;
            tokio::select! {
                Some((batch, verdict)) = working.next(), if !working.is_empty() => {
                    let batch: Vec<Delivery> = batch;
                    settle(&batch, verdict).await;
                }
                delivery = consumer.next(), if room => match delivery {
                    Some(Ok(delivery)) => {
                        due.get_or_insert_with(|| tokio::time::Instant::now() + spec.batch_wait);
                        gathering.push(delivery);
                        dispatch = gathering.len() >= spec.batch_max;
                    }
                    Some(Err(error)) => {
                        tracing::warn!(error = %error, queue = %spec.queue, "consumer stopped");
                        return;
                    }
                    None => return,
                },
                () = tokio::time::sleep_until(due.unwrap_or_else(tokio::time::Instant::now)),
                    if room && due.is_some() => dispatch = true,
            }
            if dispatch {
                let batch = std::mem::take(&mut gathering);
                due = None;
                let work = self.0.work(&batch);
                working.push_back(async move { (batch, work.await) });
            }
        }
    }
}

/// Carries out a verdict: the returned deliveries one by one, then the rest in one frame.
async fn settle(batch: &[Delivery], verdict: Verdict) {
    for &index in &verdict.returned {
        requeue(&batch[index]).await;
    }
    let rest: Vec<&Delivery> = batch
        .iter()
        .enumerate()
        .filter(|(index, _)| !verdict.returned.contains(index))
        .map(|(_, delivery)| delivery)
        .collect();
    if verdict.ack_rest {
        ack_all(&rest).await;
    } else {
        requeue_all(&rest).await;
    }
}

async fn keep_consuming<D: Drain>(
    link: &AmqpLink,
    topology: &Topology,
    spec: &ConsumerSpec,
    drain: &D,
) {
    let mut pause = FIRST_PAUSE;
    let mut warnings = QuietWarnings::new(spec.name);
    loop {
        match session(link, topology, spec, drain).await {
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
async fn session<D: Drain>(
    link: &AmqpLink,
    topology: &Topology,
    spec: &ConsumerSpec,
    drain: &D,
) -> Result<(), BrokerError> {
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
    drain.drain(&mut consumer, spec).await;
    Ok(())
}

/// Warns about a failing background job at most once per interval, so an outage cannot
/// fill the disk (the next warning says how many failures went to debug meanwhile); says
/// once when it works again.
pub struct QuietWarnings {
    job: &'static str,
    budget: Budget,
    failing: bool,
}

const WARN_EVERY: Duration = Duration::from_secs(30);

impl QuietWarnings {
    pub fn new(job: &'static str) -> Self {
        Self {
            job,
            budget: Budget::new(1, WARN_EVERY),
            failing: false,
        }
    }

    pub fn failed(&mut self, error: &dyn std::fmt::Display) {
        self.failing = true;
        match self.budget.admit(Instant::now()) {
            Some(suppressed) => {
                tracing::warn!(job = self.job, error = %error, suppressed, "failing; retrying quietly");
            }
            None => tracing::debug!(job = self.job, error = %error, "still failing"),
        }
    }

    /// Leaves the budget as it is: a job that flaps still warns at most once per interval.
    pub fn recovered(&mut self) {
        if std::mem::take(&mut self.failing) {
            tracing::info!(job = self.job, "working again");
        }
    }
}
