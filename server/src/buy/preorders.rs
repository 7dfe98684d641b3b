//! Orders in PostgreSQL: the group-committed pre-order writer of the buy path, and reads.
//!
//! A pre-order and its outbox row are written in the same transaction (funnel step 11).
//! Concurrent buys are gathered into one multi-row insert and one commit: the box flushes
//! its WAL a few thousand times a second at best, so one transaction per buyer would cap
//! the whole sale there: this is the group commit.
//!
//! PostgreSQL is the arbiter of every pre-order, whichever layer deducted it: the batch
//! allocates each member against `activity_items.allocated` and the buyer's row in
//! `buyer_holdings` under the item row's lock, and both tables' CHECKs back that up. Redis
//! is the fast filter in front; when it is wrong (a deduction switch flip, a re-derivation
//! racing an in-flight deduction) the database refuses instead of overselling.

use sqlx::{Postgres, Transaction};
use std::{
    collections::{BTreeMap, HashMap},
    sync::Arc,
    time::Duration,
};
use tokio::sync::{mpsc, oneshot, Semaphore};
use uuid::Uuid;

use contract::{SaleItem, UserId};

use crate::buy::rules::Refusal;
use crate::buy::stock_scripts::Holding;
use crate::infra::{db::MeteredPool, quiet_log::quiet};

/// Outbox topic of a pre-order waiting for the create-order consumer.
pub(crate) const CREATE_ORDER_TOPIC: &str = "order.create";

/// A pre-order as the buy path hands it over, after Redis has deducted its stock.
#[derive(Clone, Debug)]
pub(crate) struct PreOrder {
    pub(crate) id: Uuid,
    pub(crate) activity_id: i64,
    pub(crate) item_id: i64,
    pub(crate) user_id: i64,
    pub(crate) quantity: i64,
    pub(crate) amount_cents: i64,
    pub(crate) request_id: String,
    /// Seats of a seated activity (empty otherwise); `quantity` is their number.
    pub(crate) seats: Vec<String>,
    /// Where the stock was, or is to be, deducted.
    pub(crate) reservation: Reservation,
    /// Written while the async switch is on `record`: the outbox row waits for an ops
    /// replay instead of the relay.
    pub(crate) recorded: bool,
}

impl PreOrder {
    pub(crate) fn sale_item(&self) -> SaleItem {
        SaleItem::new(self.activity_id, self.item_id)
    }

    pub(crate) fn buyer(&self) -> UserId {
        UserId(self.user_id)
    }

    /// The units this pre-order takes, as the stock scripts count them.
    pub(crate) fn holding(&self) -> Holding {
        Holding {
            sale: self.sale_item(),
            buyer: self.buyer(),
            quantity: self.quantity,
        }
    }
}

/// Where a pre-order's stock comes from. Either way the batch allocates it in PostgreSQL
/// within `per_user_limit`; the difference is whether Redis has to be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reservation {
    /// Redis deducted it already.
    Redis { per_user_limit: i64 },
    /// Only the database allocates it (deduction switch on `db`).
    Database { per_user_limit: i64 },
}

impl Reservation {
    pub(crate) fn per_user_limit(self) -> i64 {
        match self {
            Self::Redis { per_user_limit } | Self::Database { per_user_limit } => per_user_limit,
        }
    }
}

/// What the batch decided for one pre-order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Written,
    /// The database allocation refused it: no stock left there, or the buyer's limit.
    Refused(Refusal),
}

type Reply = oneshot::Sender<Result<Verdict, Arc<sqlx::Error>>>;

/// Hands pre-orders to a background task that writes them in batches.
#[derive(Clone)]
pub(crate) struct PreorderWriter {
    queue: mpsc::Sender<(PreOrder, Reply)>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum WriteError {
    #[error("the pre-order could not be written: {0}")]
    Database(Arc<sqlx::Error>),
    #[error("the pre-order writer has stopped")]
    Stopped,
}

/// Batches written at once; more would only queue on the same WAL flush.
const CONCURRENT_BATCHES: usize = 4;

impl PreorderWriter {
    pub(crate) fn spawn(
        pool: MeteredPool,
        batch_max: usize,
        batch_wait: Duration,
        batch_sizes: prometheus::Histogram,
        batch_durations: prometheus::HistogramVec,
    ) -> Self {
        let (queue, mut incoming) = mpsc::channel::<(PreOrder, Reply)>(batch_max.max(1) * 16);
        let permits = Arc::new(Semaphore::new(CONCURRENT_BATCHES));
        tokio::spawn(async move {
            while let Some(first) = incoming.recv().await {
                let mut batch = vec![first];
                let deadline = tokio::time::Instant::now() + batch_wait;
                while batch.len() < batch_max {
                    match tokio::time::timeout_at(deadline, incoming.recv()).await {
                        Ok(Some(next)) => batch.push(next),
                        Ok(None) | Err(_) => break,
                    }
                }
                batch_sizes.observe(batch.len() as f64);
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let (pool, durations) = (pool.clone(), batch_durations.clone());
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    let outcome = if write_batch(&pool, batch).await {
                        "ok"
                    } else {
                        "error"
                    };
                    durations
                        .with_label_values(&["preorder_batch", outcome])
                        .observe(started.elapsed().as_secs_f64());
                    drop(permit);
                });
            }
        });
        Self { queue }
    }

    /// Pre-orders handed over and not yet taken into a batch.
    pub(crate) fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }

    /// Writes the pre-order with its outbox row; returns once it is committed (or refused).
    pub(crate) async fn write(&self, order: PreOrder) -> Result<Verdict, WriteError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((order, reply))
            .await
            .map_err(|_| WriteError::Stopped)?;
        answer
            .await
            .map_err(|_| WriteError::Stopped)?
            .map_err(WriteError::Database)
    }
}

/// One transaction for the batch; if it fails, each member is retried alone so one bad
/// row (say, a reused request id) fails only its own buyer. Whether the batch's own
/// transaction committed.
async fn write_batch(pool: &MeteredPool, batch: Vec<(PreOrder, Reply)>) -> bool {
    let (orders, replies): (Vec<PreOrder>, Vec<Reply>) = batch.into_iter().unzip();
    match commit(pool, &orders).await {
        Ok(verdicts) => {
            for (reply, verdict) in replies.into_iter().zip(verdicts) {
                let _ = reply.send(Ok(verdict));
            }
            return true;
        }
        Err(error) if orders.len() == 1 => {
            let _ = replies
                .into_iter()
                .next()
                .map(|reply| reply.send(Err(Arc::new(error))));
        }
        Err(error) => {
            quiet!(warn, "buy.preorder_batch", error = %error, size = orders.len(), "pre-order batch failed; writing its members one by one");
            for (order, reply) in orders.into_iter().zip(replies) {
                let result = commit(pool, std::slice::from_ref(&order)).await;
                let _ = reply.send(result.map(|verdicts| verdicts[0]).map_err(Arc::new));
            }
        }
    }
    false
}

/// Decides the batch's members, writes every granted pre-order with its outbox row and
/// seats, and moves `allocated` and the buyers' holdings once per row: one transaction.
async fn commit(pool: &MeteredPool, orders: &[PreOrder]) -> Result<Vec<Verdict>, sqlx::Error> {
    // Redis already decided these; in the common case the database agrees, and writing
    // first with the stock rows last holds the hot item row only for the last two
    // statements. Should a CHECK refuse (Redis off the truth), decide member by member.
    if orders
        .iter()
        .all(|order| matches!(order.reservation, Reservation::Redis { .. }))
    {
        let mut tx = pool.begin().await?;
        match insert(&mut tx, orders).await {
            Ok(()) => {
                tx.commit().await?;
                return Ok(vec![Verdict::Written; orders.len()]);
            }
            Err(error) if is_check_violation(&error) => tx.rollback().await?,
            Err(error) => return Err(error),
        }
    }
    let mut tx = pool.begin().await?;
    let verdicts = allocate(&mut tx, orders).await?;
    let granted: Vec<PreOrder> = orders
        .iter()
        .zip(&verdicts)
        .filter(|(_, verdict)| **verdict == Verdict::Written)
        .map(|(order, _)| order.clone())
        .collect();
    if !granted.is_empty() {
        insert(&mut tx, &granted).await?;
    }
    tx.commit().await?;
    Ok(verdicts)
}

/// A CHECK constraint refused the statement (`allocated` past the stock, a holding past
/// the per-user limit).
fn is_check_violation(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database) if database.code().as_deref() == Some("23514"))
}

/// Decides every member item by item, first come first served, under the item row's
/// lock, so concurrent batches cannot both hand out the last units or both take a buyer
/// past the limit.
async fn allocate(
    tx: &mut Transaction<'_, Postgres>,
    orders: &[PreOrder],
) -> Result<Vec<Verdict>, sqlx::Error> {
    let mut verdicts = vec![Verdict::Written; orders.len()];
    let mut by_item: BTreeMap<(i64, i64), Vec<usize>> = BTreeMap::new();
    for (index, order) in orders.iter().enumerate() {
        by_item
            .entry((order.activity_id, order.item_id))
            .or_default()
            .push(index);
    }
    // BTreeMap order: rows are locked in one global order, so batches cannot deadlock.
    for ((activity_id, item_id), members) in by_item {
        let (allocated, total): (i32, i32) = sqlx::query_as(
            "SELECT allocated, total_stock FROM activity_items WHERE activity_id = $1 AND item_id = $2 FOR UPDATE",
        )
        .bind(activity_id)
        .bind(item_id)
        .fetch_one(&mut **tx)
        .await?;
        let buyers: Vec<i64> = members.iter().map(|&i| orders[i].user_id).collect();
        let mut held: HashMap<i64, i64> = sqlx::query_as(
            "SELECT user_id, units::BIGINT FROM buyer_holdings
             WHERE activity_id = $1 AND item_id = $2 AND user_id = ANY($3)",
        )
        .bind(activity_id)
        .bind(item_id)
        .bind(&buyers)
        .fetch_all(&mut **tx)
        .await?
        .into_iter()
        .collect();
        let mut left = i64::from(total - allocated);
        for index in members {
            let order = &orders[index];
            let limit = order.reservation.per_user_limit();
            let holding = held.entry(order.user_id).or_default();
            verdicts[index] = match allocation(left, *holding, order.quantity, limit) {
                Ok(stock_left) => {
                    left = stock_left;
                    *holding += order.quantity;
                    Verdict::Written
                }
                Err(refusal) => Verdict::Refused(refusal),
            };
        }
    }
    Ok(verdicts)
}

/// The same rule as `lua/deduct_stock.lua`, for the database path: the stock left after
/// granting `quantity`, or why not.
fn allocation(left: i64, held: i64, quantity: i64, limit: i64) -> Result<i64, Refusal> {
    if held >= limit {
        Err(Refusal::AlreadyPurchased)
    } else if held + quantity > limit {
        Err(Refusal::LimitExceeded)
    } else if left <= 0 {
        Err(Refusal::SoldOut)
    } else if left < quantity {
        Err(Refusal::NotEnough)
    } else {
        Ok(left - quantity)
    }
}

async fn insert(
    tx: &mut Transaction<'_, Postgres>,
    orders: &[PreOrder],
) -> Result<(), sqlx::Error> {
    let ids: Vec<Uuid> = orders.iter().map(|o| o.id).collect();
    let activities: Vec<i64> = orders.iter().map(|o| o.activity_id).collect();
    let items: Vec<i64> = orders.iter().map(|o| o.item_id).collect();
    let users: Vec<i64> = orders.iter().map(|o| o.user_id).collect();
    let quantities: Vec<i64> = orders.iter().map(|o| o.quantity).collect();
    let amounts: Vec<i64> = orders.iter().map(|o| o.amount_cents).collect();
    let request_ids: Vec<String> = orders.iter().map(|o| o.request_id.clone()).collect();
    let outbox_states: Vec<&str> = orders
        .iter()
        .map(|o| if o.recorded { "recorded" } else { "pending" })
        .collect();
    let limits: Vec<i64> = orders
        .iter()
        .map(|o| o.reservation.per_user_limit())
        .collect();
    sqlx::query(
        "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status, request_id)
         SELECT id, activity_id, item_id, user_id, quantity::INTEGER, amount_cents, 'PRE_CREATED', request_id
         FROM UNNEST($1::UUID[], $2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[], $6::BIGINT[], $7::TEXT[])
              AS o (id, activity_id, item_id, user_id, quantity, amount_cents, request_id)",
    )
    .bind(&ids)
    .bind(&activities)
    .bind(&items)
    .bind(&users)
    .bind(&quantities)
    .bind(&amounts)
    .bind(&request_ids)
    .execute(&mut **tx)
    .await?;
    // The event id is the order id: a consumer that records it cannot apply one order twice.
    sqlx::query(
        "INSERT INTO outbox (event_id, topic, status, payload)
         SELECT o.id, $2, w.outbox_state, jsonb_build_object('order_id', o.id,
                'activity_id', o.activity_id, 'item_id', o.item_id, 'user_id', o.user_id,
                'quantity', o.quantity, 'amount_cents', o.amount_cents)
         FROM UNNEST($1::UUID[], $3::TEXT[]) AS w (id, outbox_state)
         JOIN orders o ON o.id = w.id",
    )
    .bind(&ids)
    .bind(CREATE_ORDER_TOPIC)
    .bind(&outbox_states)
    .execute(&mut **tx)
    .await?;
    hold_seats(tx, orders).await?;
    // The stock rows last, item row before buyer rows as in every transaction that moves
    // them (`orders::release`), so the hot item row is held from here to the commit only.
    // One UPDATE per item row for the whole batch; its CHECK refuses an oversell.
    sqlx::query(
        "UPDATE activity_items ai SET allocated = ai.allocated + batch.units
         FROM (SELECT activity_id, item_id, SUM(quantity)::INTEGER AS units
               FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::BIGINT[]) AS o (activity_id, item_id, quantity)
               GROUP BY activity_id, item_id ORDER BY activity_id, item_id) AS batch
         WHERE ai.activity_id = batch.activity_id AND ai.item_id = batch.item_id",
    )
    .bind(&activities)
    .bind(&items)
    .bind(&quantities)
    .execute(&mut **tx)
    .await?;
    // Sorted, so two batches lock a buyer's rows in one order; its CHECK refuses a buyer
    // past the per-user limit.
    sqlx::query(
        "INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
         SELECT activity_id, item_id, user_id, SUM(quantity)::INTEGER, MAX(per_user_limit)::INTEGER
         FROM UNNEST($1::BIGINT[], $2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[])
              AS o (activity_id, item_id, user_id, quantity, per_user_limit)
         GROUP BY activity_id, item_id, user_id ORDER BY activity_id, item_id, user_id
         ON CONFLICT (activity_id, item_id, user_id)
         DO UPDATE SET units = buyer_holdings.units + EXCLUDED.units,
                       per_user_limit = EXCLUDED.per_user_limit",
    )
    .bind(&activities)
    .bind(&items)
    .bind(&users)
    .bind(&quantities)
    .bind(&limits)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Marks the seats of seated pre-orders as held by them. Each seat must still be free in
/// PostgreSQL too; otherwise the whole transaction fails and its stock goes back.
async fn hold_seats(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    orders: &[PreOrder],
) -> Result<(), sqlx::Error> {
    let seated = orders
        .iter()
        .flat_map(|o| o.seats.iter().map(move |seat| (o, seat)));
    let (mut order_ids, mut activities, mut codes) = (Vec::new(), Vec::new(), Vec::new());
    for (order, seat) in seated {
        order_ids.push(order.id);
        activities.push(order.activity_id);
        codes.push(seat.clone());
    }
    if codes.is_empty() {
        return Ok(());
    }
    let held = sqlx::query(
        "UPDATE seats s SET order_id = t.order_id
         FROM UNNEST($1::UUID[], $2::BIGINT[], $3::TEXT[]) AS t (order_id, activity_id, seat_code)
         WHERE s.activity_id = t.activity_id AND s.seat_code = t.seat_code AND s.order_id IS NULL",
    )
    .bind(&order_ids)
    .bind(&activities)
    .bind(&codes)
    .execute(&mut **tx)
    .await?
    .rows_affected();
    if held == codes.len() as u64 {
        Ok(())
    } else {
        Err(sqlx::Error::Protocol(format!(
            "{} of {} seats were no longer free",
            codes.len() as u64 - held,
            codes.len()
        )))
    }
}

/// Every seat of an activity with the buyer of the order holding it, if that order still
/// keeps stock; a re-derivation loads this map into Redis.
pub(crate) async fn seat_holders<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    activity_id: i64,
) -> Result<Vec<(String, Option<i64>)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT s.seat_code, o.user_id FROM seats s
         LEFT JOIN orders o ON o.id = s.order_id AND o.status IN ('PRE_CREATED', 'UNPAID', 'PAID')
         WHERE s.activity_id = $1 ORDER BY s.seat_code",
    )
    .bind(activity_id)
    .fetch_all(executor)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_allocation_follows_the_lua_rule() {
        assert_eq!(allocation(5, 0, 2, 2), Ok(3));
        assert_eq!(allocation(0, 0, 1, 2), Err(Refusal::SoldOut));
        assert_eq!(allocation(1, 0, 2, 2), Err(Refusal::NotEnough));
        assert_eq!(allocation(5, 2, 1, 2), Err(Refusal::AlreadyPurchased));
        assert_eq!(allocation(5, 1, 2, 2), Err(Refusal::LimitExceeded));
    }
}
