//! The create-order consumer's transaction: for the orders of a batch of create-order
//! messages, in ONE transaction, skip those no longer `PRE_CREATED` (completed, paid,
//! cancelled or voided already: a redelivery or a duplicate publish), complete the rest
//! (`PRE_CREATED → UNPAID`, price snapshot, pay deadline), move `sold` within
//! `total_stock`, fail what the stock no longer covers (its stock goes back through
//! `stock::release` and the restore journal), and record their events as processed. An
//! event is the outbox row of a pre-order batch, several orders; the order's own status is
//! what decides whether it is skipped.
//!
//! Item rows are the hot rows of a sale (the pre-order writer moves `allocated` on them).
//! The common case, where the stock covers every order, is one call of `complete_orders`
//! (migrations) in its own transaction: one round trip, the item rows updated after the
//! orders and committed with them. The rare case (stock no longer covers every order; the
//! call refuses and writes nothing) is a transaction that locks them in key order, after
//! the order rows, and decides order by order.

use sqlx::{PgPool, Postgres, Transaction};
use std::collections::{BTreeMap, HashSet};
use uuid::Uuid;

use crate::orders::{
    cancellations::GiveBack,
    release::{self as stock, Released},
    rules::{fit_within_stock, Claim},
    status::OrderStatus,
};
use base::db::MeteredPool;

/// An order this batch moved to `UNPAID`.
#[derive(Clone, Debug, PartialEq, sqlx::FromRow)]
pub struct Completed {
    pub order_id: Uuid,
    /// Its activity's pay timeout: the delay queue its timeout goes to.
    pub pay_timeout_s: i32,
    /// Seconds from the pre-order's commit to its completion.
    pub lag_s: f64,
}

/// What one batch did.
#[derive(Debug, Default)]
pub struct BatchOutcome {
    pub completed: Vec<Completed>,
    /// Orders the stock no longer covered: now `FAILED`; Redis is owed their units.
    pub failed: Vec<GiveBack>,
    /// Orders no longer `PRE_CREATED` (a redelivery or a duplicate publish): nothing changed.
    pub skipped: Vec<Uuid>,
}

impl BatchOutcome {
    pub fn absorb(&mut self, other: BatchOutcome) {
        self.completed.extend(other.completed);
        self.failed.extend(other.failed);
        self.skipped.extend(other.skipped);
    }
}

#[derive(sqlx::FromRow)]
struct Candidate {
    id: Uuid,
    activity_id: i64,
    item_id: i64,
    quantity: i32,
}

/// Completes `order_ids` (distinct) as consumer `consumer`, in one transaction.
pub async fn complete(
    pool: &MeteredPool,
    consumer: &str,
    order_ids: &[Uuid],
) -> Result<BatchOutcome, sqlx::Error> {
    match complete_covered(pool, consumer, order_ids).await {
        Err(error) if is_not_covered(&error) => {
            complete_order_by_order(pool, consumer, order_ids).await
        }
        outcome => outcome,
    }
}

/// The common case in one statement: every order the stock covers, or nothing written.
async fn complete_covered(
    pool: &MeteredPool,
    consumer: &str,
    order_ids: &[Uuid],
) -> Result<BatchOutcome, sqlx::Error> {
    let rows: Vec<(Uuid, bool, Option<i32>, Option<f64>)> = sqlx::query_as(
        "SELECT order_id, completed, pay_timeout_s, lag_s FROM complete_orders($1, $2)",
    )
    .bind(consumer)
    .bind(order_ids)
    .fetch_all(&mut *pool.acquire().await?)
    .await?;
    let mut outcome = BatchOutcome::default();
    for (order_id, completed, pay_timeout_s, lag_s) in rows {
        match (completed, pay_timeout_s, lag_s) {
            (true, Some(pay_timeout_s), Some(lag_s)) => outcome.completed.push(Completed {
                order_id,
                pay_timeout_s,
                lag_s,
            }),
            _ => outcome.skipped.push(order_id),
        }
    }
    Ok(outcome)
}

/// `complete_orders` refused: the stock no longer covers every order of the batch.
fn is_not_covered(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database) if database.code().as_deref() == Some("SK001"))
}

/// The rare case: in one transaction, order by order under the item rows' locks.
async fn complete_order_by_order(
    pool: &MeteredPool,
    consumer: &str,
    order_ids: &[Uuid],
) -> Result<BatchOutcome, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let (completed, failed) = complete_within_stock(&mut tx, order_ids).await?;
    let decided: HashSet<Uuid> = completed
        .iter()
        .map(|order| order.order_id)
        .chain(failed.iter().map(|order| order.order_id))
        .collect();
    let decided_ids: Vec<Uuid> = decided.iter().copied().collect();
    sqlx::query(
        "INSERT INTO processed_events (consumer, event_id)
         SELECT DISTINCT $1, COALESCE(outbox_event_id, id) FROM orders WHERE id = ANY($2)
         ORDER BY 2 ON CONFLICT DO NOTHING",
    )
    .bind(consumer)
    .bind(&decided_ids)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(BatchOutcome {
        completed,
        failed,
        skipped: order_ids
            .iter()
            .filter(|id| !decided.contains(id))
            .copied()
            .collect(),
    })
}

/// `PRE_CREATED → UNPAID` with the price snapshot and the pay deadline, for those of
/// `order_ids` still `PRE_CREATED` (events of other orders are recorded and left alone).
async fn complete_pre_created(
    tx: &mut Transaction<'_, Postgres>,
    order_ids: &[Uuid],
) -> Result<Vec<Completed>, sqlx::Error> {
    debug_assert!(OrderStatus::PreCreated.may_become(OrderStatus::Unpaid));
    sqlx::query_as(
        "UPDATE orders o SET status = 'UNPAID', amount_cents = ai.price_cents * o.quantity,
                pay_deadline = now() + make_interval(secs => a.pay_timeout_s), updated_at = now(),
                completed_at = now()
         FROM activity_items ai, activities a
         WHERE o.id = ANY($1) AND o.status = 'PRE_CREATED'
           AND ai.activity_id = o.activity_id AND ai.item_id = o.item_id AND a.id = o.activity_id
         RETURNING o.id AS order_id, a.pay_timeout_s,
                   EXTRACT(EPOCH FROM clock_timestamp() - o.created_at)::FLOAT8 AS lag_s",
    )
    .bind(order_ids)
    .fetch_all(&mut **tx)
    .await
}

/// The rare case, when the stock no longer covers every order of the batch: decides order
/// by order (oldest first) under the item rows' locks; what does not fit fails.
async fn complete_within_stock(
    tx: &mut Transaction<'_, Postgres>,
    order_ids: &[Uuid],
) -> Result<(Vec<Completed>, Vec<GiveBack>), sqlx::Error> {
    let candidates: Vec<Candidate> = sqlx::query_as(
        "SELECT id, activity_id, item_id, quantity FROM orders
         WHERE id = ANY($1) AND status = 'PRE_CREATED'
         ORDER BY created_at, id FOR UPDATE",
    )
    .bind(order_ids)
    .fetch_all(&mut **tx)
    .await?;
    let (accepted, refused) = take_stock(tx, &candidates).await?;
    let completed = if accepted.is_empty() {
        Vec::new()
    } else {
        complete_pre_created(tx, &accepted).await?
    };
    let failed = if refused.is_empty() {
        Vec::new()
    } else {
        fail(tx, &refused).await?
    };
    Ok((completed, failed))
}

/// Moves `sold` item by item (in key order) under the item row's lock for the candidates
/// (oldest first) that the stock covers; returns (accepted, refused) order ids.
async fn take_stock(
    tx: &mut Transaction<'_, Postgres>,
    candidates: &[Candidate],
) -> Result<(Vec<Uuid>, Vec<Uuid>), sqlx::Error> {
    let mut by_item: BTreeMap<(i64, i64), Vec<&Candidate>> = BTreeMap::new();
    for candidate in candidates {
        by_item
            .entry((candidate.activity_id, candidate.item_id))
            .or_default()
            .push(candidate);
    }
    let (mut accepted, mut refused) = (Vec::new(), Vec::new());
    for ((activity_id, item_id), members) in by_item {
        let left: Option<i64> = sqlx::query_scalar(
            "SELECT (total_stock - sold)::BIGINT FROM activity_items
             WHERE activity_id = $1 AND item_id = $2 FOR UPDATE",
        )
        .bind(activity_id)
        .bind(item_id)
        .fetch_optional(&mut **tx)
        .await?;
        let claims: Vec<Claim> = members
            .iter()
            .map(|c| Claim {
                quantity: i64::from(c.quantity),
            })
            .collect();
        let fitting: HashSet<usize> = fit_within_stock(&claims, left.unwrap_or(0))
            .into_iter()
            .collect();
        let mut taken = 0_i64;
        for (index, member) in members.iter().enumerate() {
            if fitting.contains(&index) {
                taken += i64::from(member.quantity);
                accepted.push(member.id);
            } else {
                refused.push(member.id);
            }
        }
        if taken > 0 {
            sqlx::query(
                "UPDATE activity_items SET sold = sold + $3 WHERE activity_id = $1 AND item_id = $2",
            )
            .bind(activity_id)
            .bind(item_id)
            .bind(taken)
            .execute(&mut **tx)
            .await?;
        }
    }
    Ok((accepted, refused))
}

/// `PRE_CREATED → FAILED` for orders the stock no longer covers; their allocation, holding
/// and seats go back through `stock::release`, journaled like a cancellation so the Redis
/// give-back is retried by whoever retries those.
pub async fn fail(
    tx: &mut Transaction<'_, Postgres>,
    order_ids: &[Uuid],
) -> Result<Vec<GiveBack>, sqlx::Error> {
    debug_assert!(OrderStatus::PreCreated.may_become(OrderStatus::Failed));
    let failed: Vec<Released> = sqlx::query_as(
        "UPDATE orders SET status = 'FAILED', updated_at = now()
         WHERE id = ANY($1) AND status = 'PRE_CREATED'
         RETURNING id AS order_id, activity_id, item_id, user_id, quantity",
    )
    .bind(order_ids)
    .fetch_all(&mut **tx)
    .await?;
    let mut owed = Vec::with_capacity(failed.len());
    for order in failed {
        let seats = stock::release(tx, &order, false).await?;
        sqlx::query(
            "INSERT INTO stock_restore_journal (order_id, activity_id, item_id, quantity, seats)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(order.order_id)
        .bind(order.activity_id)
        .bind(order.item_id)
        .bind(order.quantity)
        .bind(&seats)
        .execute(&mut **tx)
        .await?;
        owed.push(GiveBack {
            order_id: order.order_id,
            activity_id: order.activity_id,
            item_id: order.item_id,
            user_id: order.user_id,
            quantity: order.quantity,
            seats,
        });
    }
    Ok(owed)
}

/// Pay timeouts of these orders that are `UNPAID` now, for re-scheduling after a
/// redelivery (the first delivery may have died between its commit and its schedule).
pub async fn unpaid_timeouts(
    pool: &PgPool,
    order_ids: &[Uuid],
) -> Result<Vec<(Uuid, i32)>, sqlx::Error> {
    if order_ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as(
        "SELECT o.id, a.pay_timeout_s FROM orders o JOIN activities a ON a.id = o.activity_id
         WHERE o.id = ANY($1) AND o.status = 'UNPAID'",
    )
    .bind(order_ids)
    .fetch_all(pool)
    .await
}

/// Deletes up to `limit` records of events processed before `before`, oldest first; how
/// many it deleted. Nothing reads them back: an order is completed only while it is
/// `PRE_CREATED`, whatever this table holds.
pub async fn prune_processed_older_than(
    pool: &PgPool,
    before: chrono::DateTime<chrono::Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    base::db::prune_batch(
        pool,
        "DELETE FROM processed_events WHERE (consumer, event_id) IN (
             SELECT consumer, event_id FROM processed_events WHERE processed_at < $1
             ORDER BY processed_at LIMIT $2 FOR UPDATE SKIP LOCKED)",
        before,
        limit,
    )
    .await
}
