//! Gathering deliveries into batches, and settling a batch with one multiple-ack: the
//! consumers' share of "fewer, larger transactions", so the database sees a steady rate.

use base::quiet_log::quiet;
use futures::StreamExt;
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicNackOptions},
    Consumer,
};
use std::time::Duration;

/// The next batch: waits for a first delivery, then takes up to `max` within `wait`.
/// `None` when the consumer has ended (channel closed, consumer cancelled); an error is
/// logged and ends the consumer too, after the deliveries already gathered.
pub async fn next_batch(
    consumer: &mut Consumer,
    max: usize,
    wait: Duration,
) -> Option<Vec<Delivery>> {
    let first = match consumer.next().await? {
        Ok(delivery) => delivery,
        Err(error) => {
            tracing::warn!(error = %error, queue = %consumer.queue(), "consumer stopped");
            return None;
        }
    };
    let mut batch = vec![first];
    let deadline = tokio::time::Instant::now() + wait;
    while batch.len() < max {
        match tokio::time::timeout_at(deadline, consumer.next()).await {
            Ok(Some(Ok(delivery))) => batch.push(delivery),
            Ok(Some(Err(error))) => {
                tracing::warn!(error = %error, queue = %consumer.queue(), "consumer stopped mid-batch");
                break;
            }
            Ok(None) | Err(_) => break,
        }
    }
    Some(batch)
}

/// Acks every delivery up to the last of `settled` in one frame (`multiple`). Deliveries
/// of the batch that were nacked before stay nacked: a multiple-ack only covers tags still
/// outstanding. A failed ack means the channel is gone, and the broker redelivers.
pub async fn ack_all(settled: &[&Delivery]) {
    if let Some(last) = settled.iter().max_by_key(|d| d.delivery_tag) {
        if let Err(error) = last.acker.ack(BasicAckOptions { multiple: true }).await {
            quiet!(warn, "mq.ack_failed", error = %error, "ack failed; the broker will redeliver");
        }
    }
}

/// Returns one delivery to its queue; the quorum queue counts it towards the delivery
/// limit and dead-letters it past that.
pub async fn requeue(delivery: &Delivery) {
    if let Err(error) = delivery
        .acker
        .nack(BasicNackOptions {
            multiple: false,
            requeue: true,
        })
        .await
    {
        quiet!(warn, "mq.nack_failed", error = %error, "nack failed; the broker will redeliver");
    }
}

/// Returns every delivery up to the last of `deliveries` to the queue in one frame.
pub async fn requeue_all(deliveries: &[&Delivery]) {
    if let Some(last) = deliveries.iter().max_by_key(|d| d.delivery_tag) {
        if let Err(error) = last
            .acker
            .nack(BasicNackOptions {
                multiple: true,
                requeue: true,
            })
            .await
        {
            quiet!(warn, "mq.nack_failed", error = %error, "nack failed; the broker will redeliver");
        }
    }
}
