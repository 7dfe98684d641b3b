//! The pay timeout (docs/pipeline.md): an `UNPAID` order past its deadline is cancelled
//! only after the payment center confirms it unpaid, and its stock goes back exactly once.
//!
//! Two ways in, one decision ([`settle_overdue`]):
//! * the consumer of `<prefix>.order.pay-timeout`, fed by the TTL delay queues;
//! * the leader's scanner, for orders whose message was lost (overdue by more than a grace),
//!   which also retries Redis give-backs that failed.
//!
//! The cancel is one PostgreSQL transaction (the order row locked, its trades closed under
//! it, status guard, restore-journal row keyed by the order id, DB stock move), so that a
//! trade opened under the same row and the cancel never both win. Redis is given back after
//! the commit, by a script that remembers the order id, so neither a duplicated message nor
//! a retried give-back can restore twice. A give-back that keeps failing is left with
//! `redis_restored_at` NULL for the scanner to retry.

use crate::orders::release_scripts::ReleaseClient;
use crate::orders::Holding;
use base::quiet_log::quiet;
use contract::{SaleItem, UserId};
use futures::StreamExt;
use lapin::{
    message::Delivery,
    options::{BasicAckOptions, BasicRejectOptions},
};
use std::time::Duration;
use uuid::Uuid;

use crate::{
    orders::{
        cancellations::{self, Cancel, GiveBack},
        mq::{
            batch::requeue,
            consume::{consume_forever, BatchHandler, ConsumerSpec, QuietWarnings},
            message,
        },
        status::OrderStatus,
    },
    payment::{self, store::Recorded, PaymentState, Settled},
    SaleState,
};

/// The consumer's name in logs and its consumer tag.
pub const CONSUMER: &str = "pay-timeout";
/// Messages one consumer works on at once, and orders of one message settled at once (each
/// is a few short statements and a question to the payment center).
const CONCURRENCY: usize = 16;
/// A message this early is held until the deadline; an earlier one goes back into a delay
/// queue (holding it longer would stall the messages behind it).
const MAX_EARLY_WAIT: Duration = Duration::from_secs(3);
/// Pause before a failed message goes back to the queue.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
/// Orders and give-backs one scan handles at most; the next scan takes the rest.
const SCAN_BATCH: i64 = 500;
/// First wait between Redis give-back attempts; it doubles.
const GIVEBACK_FIRST_WAIT: Duration = Duration::from_millis(50);

/// What found the overdue order (the `trigger` label of `seckill_order_cancellations_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    Message,
    Scan,
    /// A reconciliation run.
    Reconcile,
}

impl Trigger {
    fn label(self) -> &'static str {
        match self {
            Self::Message => "message",
            Self::Scan => "scan",
            Self::Reconcile => "reconcile",
        }
    }
}

/// What [`settle_overdue`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No such order, or it is not `UNPAID` (paid, cancelled before, ...): nothing to do.
    NothingToDo,
    /// The deadline is still this far ahead.
    NotYet(Duration),
    /// The center had the money though the callback had not come: recorded as paid.
    PaidAtCenter,
    /// Cancelled, its DB stock moved; `given_back` says whether Redis has it back too.
    Cancelled { given_back: bool },
}

/// Settles an order whose pay timeout came: paid if the center has its money, else
/// cancelled with its stock given back. Safe to call any number of times, concurrently.
pub async fn settle_overdue(
    state: &SaleState,
    order_id: Uuid,
    trigger: Trigger,
) -> anyhow::Result<Verdict> {
    let Some(view) = cancellations::timeout_view(&state.db, order_id).await? else {
        return Ok(Verdict::NothingToDo);
    };
    if view.status != OrderStatus::Unpaid {
        return Ok(Verdict::NothingToDo);
    }
    let Some(ms_to_deadline) = view.ms_to_deadline else {
        quiet!(warn, "pay_timeout.no_deadline", %order_id, "unpaid order without a pay deadline; not cancelled");
        return Ok(Verdict::NothingToDo);
    };
    if ms_to_deadline > 0 {
        return Ok(Verdict::NotYet(Duration::from_millis(
            ms_to_deadline.unsigned_abs(),
        )));
    }
    // After this answer no money can arrive for the order through a trade opened so far; one
    // opened since, before the deadline, is closed (or found paid) under the order row.
    let (trade_no, amount_cents) = match state.payment.close_unless_paid(order_id).await? {
        PaymentState::Paid {
            trade_no,
            amount_cents,
        } => (trade_no, amount_cents),
        PaymentState::Unpaid => match cancellations::cancel_unpaid(&state.db, order_id).await? {
            // Paid or cancelled by someone else in the meantime.
            Cancel::Unchanged => return Ok(Verdict::NothingToDo),
            Cancel::Cancelled(give_back) => {
                state
                    .metrics
                    .order_cancellations
                    .with_label_values(&[trigger.label()])
                    .inc();
                state.events.order(
                    give_back.activity_id,
                    give_back.user_id,
                    order_id,
                    OrderStatus::Cancelled,
                );
                let given_back = give_back_to_redis(state, &give_back).await;
                return Ok(Verdict::Cancelled { given_back });
            }
            Cancel::Paid(trade) => (trade.trade_no, trade.amount_cents),
        },
    };
    tracing::info!(%order_id, %trade_no, "paid at the center before its callback came");
    let recorded = payment::record_payment(
        &state.db,
        &state.metrics,
        &state.events,
        order_id,
        amount_cents,
        "timeout_check",
    )
    .await?;
    match recorded {
        Recorded::Applied { effect, .. } => match Settled::of(effect) {
            Some(_) => Ok(Verdict::PaidAtCenter),
            None => Ok(Verdict::NothingToDo),
        },
        Recorded::AmountMismatch { order_amount_cents } => anyhow::bail!(
            "order {order_id} costs {order_amount_cents} cents but the center holds {amount_cents}; left for review"
        ),
        Recorded::NoOrder => Ok(Verdict::NothingToDo),
    }
}

/// Gives a cancelled order's units back to Redis, retrying a few times; records success in
/// the journal. On failure the journal row keeps `redis_restored_at` NULL for the scanner.
pub async fn give_back_to_redis(state: &SaleState, give_back: &GiveBack) -> bool {
    let attempts = state.settings.pipeline.redis_giveback_attempts.max(1);
    let mut wait = GIVEBACK_FIRST_WAIT;
    for attempt in 1..=attempts {
        let restored = ReleaseClient(&state.redis)
            .restore_order(
                &give_back.order_id.to_string(),
                Holding {
                    sale: SaleItem::new(give_back.activity_id, give_back.item_id),
                    buyer: UserId(give_back.user_id),
                    quantity: i64::from(give_back.quantity),
                },
                &give_back.seats,
            )
            .await;
        match restored {
            // Given back now, given back before (-7), or not pre-warmed (-4: a pre-warm
            // loads stock from PostgreSQL, which has it back already).
            Ok(_) => {
                return match cancellations::mark_given_back(&state.db, give_back.order_id).await {
                    Ok(()) => true,
                    Err(error) => {
                        // Redis has it; a retry finds the order id in the script's set.
                        quiet!(warn, "pay_timeout.giveback_unrecorded", order_id = %give_back.order_id, error = %error, "could not record a Redis give-back");
                        false
                    }
                };
            }
            Err(error) if attempt < attempts => {
                tracing::debug!(order_id = %give_back.order_id, attempt, error = %error, "Redis give-back failed; retrying");
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(error) => {
                state.metrics.redis_giveback_failures.inc();
                quiet!(warn, "pay_timeout.giveback_failed", order_id = %give_back.order_id, attempts,
                    error = %error, "Redis give-back failed; left to the timeout scanner");
            }
        }
    }
    false
}

/// Starts the pay-timeout consumer and the leader's scanner, in one task that runs until
/// it is aborted.
pub fn spawn(state: &SaleState) -> tokio::task::JoinHandle<()> {
    let consumer = consume_pay_timeouts(state);
    let scanner = scan_while_leading(state.clone());
    tokio::spawn(async move {
        tokio::join!(consumer, scanner);
    })
}

fn consume_pay_timeouts(state: &SaleState) -> impl std::future::Future<Output = ()> + Send {
    let settings = &state.settings.pipeline;
    let spec = ConsumerSpec {
        name: CONSUMER,
        queue: state.pipeline.topology.pay_timeout_queue.clone(),
        prefetch: settings.prefetch,
        batch_max: CONCURRENCY,
        batch_wait: Duration::from_millis(settings.batch_wait_ms),
        open_timeout: Duration::from_millis(settings.confirm_timeout_ms),
    };
    consume_forever(
        state.amqp.clone(),
        state.pipeline.topology.clone(),
        spec,
        TimeoutHandler {
            state: state.clone(),
            warnings: std::sync::Mutex::new(QuietWarnings::new(CONSUMER)),
        },
    )
}

struct TimeoutHandler {
    state: SaleState,
    /// Failures are warned about at most every so often: an outage must not fill the disk.
    warnings: std::sync::Mutex<QuietWarnings>,
}

impl BatchHandler for TimeoutHandler {
    async fn handle(&self, batch: Vec<Delivery>) {
        futures::stream::iter(batch)
            .for_each_concurrent(CONCURRENCY, |delivery| self.handle_one(delivery))
            .await;
    }
}

impl TimeoutHandler {
    /// Acks once every order of the message is settled; a malformed message is rejected
    /// (dead-lettered); a failure of any of its orders sends it back to the queue (its
    /// settled orders are nothing to do the next time), whose delivery limit dead-letters a
    /// poison message (the scanner still finds its orders).
    async fn handle_one(&self, delivery: Delivery) {
        let Ok(message) = serde_json::from_slice::<message::PayTimeouts>(&delivery.data) else {
            quiet!(
                warn,
                "pay_timeout.malformed",
                "malformed pay-timeout message; dead-lettered"
            );
            let _ = delivery.reject(BasicRejectOptions { requeue: false }).await;
            self.done("rejected");
            return;
        };
        let orders = message.order_ids();
        let settled: Vec<Settling> = futures::stream::iter(orders.iter().copied())
            .map(|order_id| self.settle(order_id))
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let early: Vec<(Uuid, u32)> = settled
            .iter()
            .filter_map(|settling| match settling {
                Settling::Later(order_id, seconds) => Some((*order_id, *seconds)),
                _ => None,
            })
            .collect();
        let settled = !settled.contains(&Settling::Failed) && self.schedule_again(&early).await;
        if !settled {
            requeue(&delivery).await;
            self.done("requeued");
        } else if let Err(error) = delivery.ack(BasicAckOptions::default()).await {
            // Only this delivery: a multiple-ack would settle others still in hand.
            tracing::debug!(first_order = ?orders.first(), error = %error, "ack failed; the broker will redeliver");
        } else {
            self.done("acked");
        }
    }

    /// Settles one order of a message, waiting out a deadline a moment away.
    async fn settle(&self, order_id: Uuid) -> Settling {
        loop {
            match settle_overdue(&self.state, order_id, Trigger::Message).await {
                Ok(Verdict::NotYet(wait)) if wait <= MAX_EARLY_WAIT => {
                    tokio::time::sleep(wait).await;
                }
                Ok(Verdict::NotYet(wait)) => {
                    let seconds =
                        u32::try_from(wait.as_secs().saturating_add(1)).unwrap_or(u32::MAX);
                    return Settling::Later(order_id, seconds);
                }
                Ok(_) => return Settling::Done,
                Err(error) => {
                    let error = format!("order {order_id}: {error:#}");
                    self.warnings
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .failed(&error);
                    tokio::time::sleep(RETRY_PAUSE).await;
                    return Settling::Failed;
                }
            }
        }
    }

    /// Counts a message this consumer is done with: most change nothing (early, duplicated,
    /// already settled), and this count is what shows they were handled all the same.
    fn done(&self, outcome: &str) {
        self.state
            .metrics
            .pipeline
            .pay_timeout_messages
            .with_label_values(&[outcome])
            .inc();
    }

    /// Puts early timeouts back into the delay queues of the seconds left; whether the
    /// broker took them (nothing to put back is done at once).
    async fn schedule_again(&self, early: &[(Uuid, u32)]) -> bool {
        if early.is_empty() {
            return true;
        }
        match self
            .state
            .pipeline
            .scheduler
            .schedule_pay_timeouts(early)
            .await
        {
            Ok(confirmed) => confirmed,
            Err(error) => {
                quiet!(warn, "pay_timeout.reschedule_failed", orders = early.len(), error = %error, "could not reschedule early pay timeouts");
                false
            }
        }
    }
}

/// What became of one order of a pay-timeout message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Settling {
    /// Settled now, or nothing to do.
    Done,
    /// Its deadline is this many seconds away: it goes back into a delay queue.
    Later(Uuid, u32),
    /// Not settled this time: the message goes back to the queue.
    Failed,
}

/// The leader's safety net, every `timeout_scan_interval_ms`: settles `UNPAID` orders past
/// their deadline by more than two intervals (their message was lost), then retries Redis
/// give-backs that failed.
async fn scan_while_leading(state: SaleState) {
    let interval = Duration::from_millis(state.settings.pipeline.timeout_scan_interval_ms.max(1));
    let grace = interval * 2;
    let mut leadership = state.leadership.clone();
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut warnings = QuietWarnings::new("pay-timeout scanner");
    loop {
        leadership.until_leader().await;
        ticks.tick().await;
        if !state.leadership.is_leader() {
            continue;
        }
        match scan(&state, grace, &mut warnings).await {
            Ok(()) => warnings.recovered(),
            Err(error) => warnings.failed(&format!("{error:#}")),
        }
    }
}

async fn scan(
    state: &SaleState,
    grace: Duration,
    warnings: &mut QuietWarnings,
) -> anyhow::Result<()> {
    for order_id in cancellations::overdue_unpaid(&state.db, grace, SCAN_BATCH).await? {
        if let Err(error) = settle_overdue(state, order_id, Trigger::Scan).await {
            // One bad order must not hold up the others behind it.
            warnings.failed(&format!("overdue order {order_id} not settled: {error:#}"));
        }
    }
    for give_back in cancellations::owed_give_backs(&state.db, grace, SCAN_BATCH).await? {
        if !give_back_to_redis(state, &give_back).await {
            // Redis is most likely away: the next scan tries the rest.
            break;
        }
    }
    Ok(())
}
