//! Registrations on their way to Redis, grouped. A registration's Redis work is a few
//! lookups; a round trip of its own (the call, its wake-ups and the script's start on
//! both sides) costs several times that, and a registration storm is many buyers of one
//! item at once. So the registrations of an item that reach this instance together go to
//! Redis as one call of `lua/lottery_register.lua`, which answers each as if it had come
//! alone.
//!
//! Nothing waits for company: a background task sends whatever is queued as soon as one of
//! its [`CALLS_IN_FLIGHT`] calls is free, so a lone registration goes at once, and under a
//! storm the registrations arriving during a call's round trip make up the next one. With
//! calls of one registration at most (`[buy] registration_call_max = 1`, for comparing) there
//! is no queue: each request makes its own call.

use std::{collections::HashMap, sync::Arc};
use tokio::sync::{mpsc, oneshot, Semaphore};

use contract::SaleItem;

use crate::lottery::scripts::{LotteryClient, Registered, Registration, RegistrationTerms};
use base::redis::RedisStore;

/// Calls to Redis in flight at once: two, so one is answered while the next is under way,
/// and the rest queue into the call after (more calls would only make each smaller).
const CALLS_IN_FLIGHT: usize = 2;

/// The registrations one call carries at most: the script passes each buyer as one
/// argument of a Lua call, and Lua takes about 8,000 of those.
pub const MOST_PER_CALL: usize = 1_000;

/// A registration's answer, or the failure of the call it went in (shared by the call's
/// other registrations).
type Answer = Result<Registered, Arc<redis::RedisError>>;

/// A registration waiting to go, with where its answer goes.
struct Queued {
    sale: SaleItem,
    terms: RegistrationTerms,
    registration: Registration,
    reply: oneshot::Sender<Answer>,
}

#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error("Redis failed the registration: {0}")]
    Redis(Arc<redis::RedisError>),
    #[error("the registration intake has stopped")]
    Stopped,
}

/// Hands registrations to the background task that sends them to Redis grouped per item.
#[derive(Clone)]
pub struct RegistrationIntake {
    redis: RedisStore,
    /// None: no grouping, each registration is a call of its own.
    queue: Option<mpsc::Sender<Queued>>,
    call_sizes: prometheus::Histogram,
}

impl RegistrationIntake {
    /// Starts the task: calls of at most `most_per_call` registrations (at least one, at
    /// most [`MOST_PER_CALL`]; one: no task, no queue), each call's size observed in
    /// `call_sizes`.
    pub fn spawn(
        redis: RedisStore,
        most_per_call: usize,
        call_sizes: prometheus::Histogram,
    ) -> Self {
        let most_per_call = most_per_call.clamp(1, MOST_PER_CALL);
        if most_per_call == 1 {
            return Self {
                redis,
                queue: None,
                call_sizes,
            };
        }
        let (queue, mut incoming) = mpsc::channel::<Queued>(most_per_call * 16);
        let sizes = call_sizes.clone();
        let sending = redis.clone();
        let calls = Arc::new(Semaphore::new(CALLS_IN_FLIGHT));
        tokio::spawn(async move {
            loop {
                // The call's turn is taken before its first registration: while every call
                // is in flight, the registrations arriving queue up for the next.
                let Ok(turn) = calls.clone().acquire_owned().await else {
                    break;
                };
                let Some(first) = incoming.recv().await else {
                    break;
                };
                let mut taken = vec![first];
                while taken.len() < most_per_call {
                    match incoming.try_recv() {
                        Ok(next) => taken.push(next),
                        Err(_) => break,
                    }
                }
                sizes.observe(taken.len() as f64);
                let redis = sending.clone();
                tokio::spawn(async move {
                    send(&redis, taken).await;
                    drop(turn);
                });
            }
        });
        Self {
            redis,
            queue: Some(queue),
            call_sizes,
        }
    }

    /// Registers `registration` for `sale` under `terms`; returns once Redis has answered.
    pub async fn register(
        &self,
        sale: SaleItem,
        terms: RegistrationTerms,
        registration: Registration,
    ) -> Result<Registered, RegisterError> {
        let Some(queue) = &self.queue else {
            self.call_sizes.observe(1.0);
            let answers = LotteryClient(&self.redis)
                .register(sale, terms, std::slice::from_ref(&registration))
                .await
                .map_err(|error| RegisterError::Redis(Arc::new(error)))?;
            return answers
                .into_iter()
                .next()
                .ok_or_else(|| RegisterError::Redis(Arc::new(miscounted(0, 1))));
        };
        let (reply, answer) = oneshot::channel();
        queue
            .send(Queued {
                sale,
                terms,
                registration,
                reply,
            })
            .await
            .map_err(|_| RegisterError::Stopped)?;
        answer
            .await
            .map_err(|_| RegisterError::Stopped)?
            .map_err(RegisterError::Redis)
    }
}

/// Sends `taken` to Redis, one call per item and terms (the script judges every
/// registration of a call by the same terms), the calls at once, and answers each.
async fn send(redis: &RedisStore, taken: Vec<Queued>) {
    let mut groups: HashMap<(SaleItem, RegistrationTerms), Vec<Queued>> = HashMap::new();
    for queued in taken {
        groups
            .entry((queued.sale, queued.terms))
            .or_default()
            .push(queued);
    }
    let client = LotteryClient(redis);
    futures::future::join_all(groups.into_iter().map(|((sale, terms), group)| async move {
        let (registrations, replies): (Vec<Registration>, Vec<_>) = group
            .into_iter()
            .map(|queued| (queued.registration, queued.reply))
            .unzip();
        match client.register(sale, terms, &registrations).await {
            Ok(answers) if answers.len() == replies.len() => {
                for (reply, answer) in replies.into_iter().zip(answers) {
                    let _ = reply.send(Ok(answer));
                }
            }
            Ok(answers) => {
                let error = Arc::new(miscounted(answers.len(), replies.len()));
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
            Err(error) => {
                let error = Arc::new(error);
                for reply in replies {
                    let _ = reply.send(Err(error.clone()));
                }
            }
        }
    }))
    .await;
}

/// The script answered `answers` registrations of the `sent`.
fn miscounted(answers: usize, sent: usize) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::TypeError,
        "lottery_register.lua answered another number of registrations",
        format!("{answers} answers for {sent}"),
    ))
}
