//! The stored answers of successful buys, written to Redis after the buyer has his answer,
//! many in one round trip.
//!
//! A pre-order batch releases its buyers together, and each used to store its answer with a
//! round trip of its own before answering: some fifty calls queued at Redis at once, ahead
//! of the next buyers' scripts, and the last buyer of a batch waited for all of them. Now
//! the buyer is answered first, and one task writes whatever answers are waiting, one
//! pipeline per item (an item's keys share its hash tag, so a pipeline stays on one cluster
//! slot).
//!
//! A replay is never told less than the truth meanwhile: until its answer is in Redis, a
//! request stays listed as running on this instance (its [`First`] travels with the answer
//! and is dropped once the write is done), so a replay here gets the answer from memory; a
//! replay on another instance finds the in-flight marker and is asked to retry. An answer
//! that never lands (Redis failing then, the server killed) leaves the marker to expire, as
//! an answer Redis refused to store always did: a replay after that runs as a new request,
//! and is answered with the order its request id already has while stock remains (the
//! pre-order writer's duplicate check), or, refused from memory as a holder, from
//! PostgreSQL (the funnel's `unless_replay`).

use contract::SaleItem;
use std::collections::HashMap;
use tokio::sync::mpsc;

use crate::buy::{funnel::Answer, in_flight::First};
use base::{
    quiet_log::quiet,
    redis::RedisStore,
    tally::{Call, PathTotals},
};

/// Answers written in one go at most; more wait for the next round trip.
const MOST_AT_ONCE: usize = 512;

/// A successful answer on its way to Redis.
pub struct Kept {
    pub sale: SaleItem,
    /// The request key it is stored under.
    pub key: String,
    /// As stored: the status line, then the body.
    pub stored: Vec<u8>,
    /// The request, listed as running here until its answer is in Redis: held for its
    /// drop alone.
    pub _listed: First<Answer>,
}

/// Where successful answers go to be stored; the writing task ends with the last handle.
#[derive(Clone)]
pub struct KeptAnswers {
    queue: mpsc::UnboundedSender<Kept>,
}

impl KeptAnswers {
    /// Starts the task that writes answers, each kept `ttl_s` seconds, its calls counted
    /// in the successful buys' `path` totals.
    pub fn start(redis: RedisStore, ttl_s: u64, path: PathTotals) -> Self {
        let (queue, waiting) = mpsc::unbounded_channel();
        tokio::spawn(write(redis, waiting, ttl_s, path));
        Self { queue }
    }

    /// Hands an answer to the writing task.
    pub fn keep(&self, kept: Kept) {
        // The task ends only when every handle is gone, so the send cannot fail while
        // `self` exists; an answer it could not take would be dropped like one Redis lost.
        let _ = self.queue.send(kept);
    }
}

/// Writes the waiting answers, one pipeline per item, the items' pipelines side by side,
/// until every [`KeptAnswers`] is gone.
async fn write(
    redis: RedisStore,
    mut waiting: mpsc::UnboundedReceiver<Kept>,
    ttl_s: u64,
    path: PathTotals,
) {
    let mut batch = Vec::with_capacity(MOST_AT_ONCE);
    while waiting.recv_many(&mut batch, MOST_AT_ONCE).await > 0 {
        let mut by_item: HashMap<SaleItem, Vec<(&str, &[u8])>> = HashMap::new();
        for kept in &batch {
            by_item
                .entry(kept.sale)
                .or_default()
                .push((kept.key.as_str(), kept.stored.as_slice()));
        }
        // Only successes are kept: the calls are theirs, like the publishes after them.
        path.after_success(Call::RedisRoundTrip, by_item.len() as u64);
        path.after_success(Call::RedisCommand, batch.len() as u64);
        let writes = by_item
            .values()
            .map(|answers| redis.store_responses(answers, ttl_s));
        for written in futures::future::join_all(writes).await {
            if let Err(error) = written {
                quiet!(warn, "buy.keep_for_replay", error = %error, "could not keep answers for replay; their in-flight markers stay until they expire");
            }
        }
        // Drops each request's `First`: replays here now find the answer in Redis.
        batch.clear();
    }
}
