//! Channels on the one long-lived RabbitMQ connection ([`AmqpLink`]) and publishing with
//! confirms.
//!
//! Every role gets its own channel: consumers open one per consuming session (owned by
//! their task, so a task that dies closes it and the broker redelivers what it held); each
//! publishing role holds a [`Broker`], whose confirm-mode channel is re-opened when it
//! closes. Every publish is `mandatory` (an unroutable message comes back instead of
//! vanishing) and every confirm wait has a deadline: a confirm that does not come in time
//! counts as "unknown" (lapin can leave one pending forever), and the outbox relay resends.

use futures::future::join_all;
use lapin::{
    options::{BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions, QueueDeclareOptions},
    publisher_confirm::{Confirmation, PublisherConfirm},
    types::FieldTable,
    Channel,
};
use std::{
    collections::{BTreeMap, HashSet},
    sync::Arc,
    time::{Duration, Instant},
};
use tokio::sync::Mutex;

use crate::orders::mq::topology::{Outgoing, Topology};
use base::{amqp::AmqpLink, metrics::Metrics};

/// Orders one pay-timeout message carries at most: the consumer settles them together and
/// acks the message once all are settled.
pub const PAY_TIMEOUTS_PER_MESSAGE: usize = 256;

/// How long a failed connection attempt keeps publishers from trying again: while the
/// broker is away, offers fail at once instead of each waiting for a connect timeout.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum BrokerError {
    #[error("RabbitMQ: {0}")]
    Amqp(#[from] lapin::Error),
    #[error("RabbitMQ did not answer within {0:?}")]
    Timeout(Duration),
    #[error("RabbitMQ was unreachable moments ago; not retrying yet")]
    Paused,
}

/// Opens a channel (confirm mode and prefetch as asked) and declares the topology on it.
pub async fn open_channel(
    link: &AmqpLink,
    topology: &Topology,
    confirms: bool,
    prefetch: Option<u16>,
    deadline: Duration,
) -> Result<Channel, BrokerError> {
    let opening = async {
        let connection = link.connection().await?;
        let channel = connection.create_channel().await?;
        if confirms {
            channel
                .confirm_select(ConfirmSelectOptions::default())
                .await?;
        }
        if let Some(count) = prefetch {
            channel.basic_qos(count, BasicQosOptions::default()).await?;
        }
        topology.declare(&channel).await?;
        Ok::<_, lapin::Error>(channel)
    };
    tokio::time::timeout(deadline, opening)
        .await
        .map_err(|_| BrokerError::Timeout(deadline))?
        .map_err(BrokerError::from)
}

/// What a passive declare says of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueState {
    /// Messages ready (unacknowledged ones not counted).
    pub ready: u32,
    /// Consumers attached.
    pub consumers: u32,
}

/// The state of each of `queues`, asked on a channel of its own: a missing queue closes
/// the channel it was asked on.
pub async fn queue_states(
    link: &AmqpLink,
    topology: &Topology,
    queues: &[&str],
    deadline: Duration,
) -> Result<Vec<QueueState>, BrokerError> {
    let channel = open_channel(link, topology, false, None, deadline).await?;
    let mut states = Vec::with_capacity(queues.len());
    for queue in queues {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        let declared = tokio::time::timeout(
            deadline,
            channel.queue_declare(queue, passive, FieldTable::default()),
        )
        .await
        .map_err(|_| BrokerError::Timeout(deadline))??;
        states.push(QueueState {
            ready: declared.message_count(),
            consumers: declared.consumer_count(),
        });
    }
    let _ = channel.close(200, "done").await;
    Ok(states)
}

/// A publishing role's confirm-mode channel. Cheap to clone; clones share the channel.
#[derive(Clone)]
pub struct Broker(Arc<Inner>);

struct Inner {
    link: AmqpLink,
    topology: Arc<Topology>,
    role: &'static str,
    confirm_timeout: Duration,
    metrics: Metrics,
    slot: Mutex<Slot>,
}

#[derive(Default)]
struct Slot {
    channel: Option<Channel>,
    /// Delay queues declared since this channel opened.
    delays: HashSet<u32>,
    paused_until: Option<Instant>,
}

/// Publishes sent to the broker, whose confirms are still to come.
pub struct Confirms {
    pending: Vec<Option<PublisherConfirm>>,
    sent_at: Instant,
    timeout: Duration,
    role: &'static str,
    metrics: Metrics,
}

impl Broker {
    pub fn new(
        link: AmqpLink,
        topology: Arc<Topology>,
        role: &'static str,
        confirm_timeout: Duration,
        metrics: Metrics,
    ) -> Self {
        Self(Arc::new(Inner {
            link,
            topology,
            role,
            confirm_timeout,
            metrics,
            slot: Mutex::default(),
        }))
    }

    pub fn topology(&self) -> &Topology {
        &self.0.topology
    }

    /// Whether a connect failed moments ago and this publisher does not try again yet: a
    /// publish now fails without reaching the broker.
    pub async fn paused(&self) -> bool {
        let slot = self.0.slot.lock().await;
        let connected = (slot.channel.as_ref()).is_some_and(|channel| channel.status().connected());
        !connected
            && slot
                .paused_until
                .is_some_and(|until| Instant::now() < until)
    }

    /// The open channel, re-opened (and the topology re-declared) when it has closed.
    async fn channel(&self) -> Result<Channel, BrokerError> {
        let mut slot = self.0.slot.lock().await;
        if let Some(channel) = slot.channel.as_ref().filter(|c| c.status().connected()) {
            return Ok(channel.clone());
        }
        if slot
            .paused_until
            .is_some_and(|until| Instant::now() < until)
        {
            return Err(BrokerError::Paused);
        }
        match open_channel(
            &self.0.link,
            &self.0.topology,
            true,
            None,
            self.0.confirm_timeout,
        )
        .await
        {
            Ok(channel) => {
                *slot = Slot {
                    channel: Some(channel.clone()),
                    ..Slot::default()
                };
                Ok(channel)
            }
            Err(error) => {
                slot.channel = None;
                slot.paused_until = Some(Instant::now() + RECONNECT_PAUSE);
                Err(error)
            }
        }
    }

    /// Publishes every message now (mandatory, persistent); the confirms come later. A
    /// message the channel refused to send is unconfirmed from the start.
    pub async fn send(&self, messages: &[Outgoing]) -> Result<Confirms, BrokerError> {
        let channel = self.channel().await?;
        let sent_at = Instant::now();
        let mut pending = Vec::with_capacity(messages.len());
        for message in messages {
            let sent = channel
                .basic_publish(
                    &message.exchange,
                    &message.routing_key,
                    BasicPublishOptions {
                        mandatory: true,
                        ..BasicPublishOptions::default()
                    },
                    &message.payload,
                    message.properties(),
                )
                .await;
            match sent {
                Ok(confirm) => pending.push(Some(confirm)),
                Err(error) => {
                    tracing::debug!(error = %error, role = self.0.role, "publish refused by the channel");
                    pending.push(None);
                }
            }
        }
        Ok(Confirms {
            pending,
            sent_at,
            timeout: self.0.confirm_timeout,
            role: self.0.role,
            metrics: self.0.metrics.clone(),
        })
    }

    /// Publishes and waits for the confirms: per message, whether the broker took it.
    pub async fn publish(&self, messages: &[Outgoing]) -> Result<Vec<bool>, BrokerError> {
        Ok(self.send(messages).await?.wait().await)
    }

    /// Schedules pay timeouts: the orders of each delay in one message (or a few, of at
    /// most [`PAY_TIMEOUTS_PER_MESSAGE`]) into the delay queue of its seconds (declared on
    /// first use on this channel). Whether the broker took every message.
    pub async fn schedule_pay_timeouts(
        &self,
        orders: &[(uuid::Uuid, u32)],
    ) -> Result<bool, BrokerError> {
        let mut by_delay: BTreeMap<u32, Vec<uuid::Uuid>> = BTreeMap::new();
        for (order_id, seconds) in orders {
            by_delay.entry(*seconds).or_default().push(*order_id);
        }
        self.declare_delays(by_delay.keys().copied().collect())
            .await?;
        let messages: Vec<Outgoing> = by_delay
            .iter()
            .flat_map(|(seconds, ids)| {
                ids.chunks(PAY_TIMEOUTS_PER_MESSAGE)
                    .map(|chunk| self.0.topology.pay_timeouts(chunk, *seconds))
            })
            .collect();
        let confirmed = self.publish(&messages).await?;
        let all = confirmed.iter().all(|ok| *ok);
        if !all {
            // An unroutable delay means its queue went away: declare again next time.
            self.0.slot.lock().await.delays.clear();
        }
        Ok(all)
    }

    async fn declare_delays(&self, delays: HashSet<u32>) -> Result<(), BrokerError> {
        let channel = self.channel().await?;
        let missing: Vec<u32> = {
            let slot = self.0.slot.lock().await;
            delays
                .into_iter()
                .filter(|seconds| !slot.delays.contains(seconds))
                .collect()
        };
        for seconds in missing {
            tokio::time::timeout(
                self.0.confirm_timeout,
                self.0.topology.declare_delay(&channel, seconds),
            )
            .await
            .map_err(|_| BrokerError::Timeout(self.0.confirm_timeout))??;
            self.0.slot.lock().await.delays.insert(seconds);
        }
        Ok(())
    }
}

impl Confirms {
    /// Waits for every confirm until the deadline: `true` where the broker acked the
    /// message and routed it; a nack, a return (unroutable) or silence is `false`.
    pub async fn wait(self) -> Vec<bool> {
        let sent_at = self.sent_at;
        let deadline = tokio::time::Instant::from_std(sent_at + self.timeout);
        let latency = self
            .metrics
            .pipeline
            .publish_confirm_seconds
            .with_label_values(&[self.role]);
        let waits = self.pending.into_iter().map(|confirm| {
            let latency = latency.clone();
            async move {
                let confirm = confirm?;
                let confirmation = tokio::time::timeout_at(deadline, confirm).await.ok()?;
                latency.observe(sent_at.elapsed().as_secs_f64());
                Some(confirmation)
            }
        });
        let outcomes: Vec<Option<Result<Confirmation, lapin::Error>>> = join_all(waits).await;
        outcomes
            .into_iter()
            .map(|outcome| {
                let (label, ok) = match outcome {
                    None => ("unconfirmed", false),
                    Some(Err(_)) => ("failed", false),
                    Some(Ok(Confirmation::Ack(None))) => ("confirmed", true),
                    Some(Ok(Confirmation::Ack(Some(_)))) => ("returned", false),
                    Some(Ok(Confirmation::Nack(_))) => ("nacked", false),
                    // Confirm mode is always on for a Broker; this cannot be a success.
                    Some(Ok(Confirmation::NotRequested)) => ("unconfirmed", false),
                };
                self.metrics
                    .pipeline
                    .published
                    .with_label_values(&[self.role, label])
                    .inc();
                ok
            })
            .collect()
    }
}
