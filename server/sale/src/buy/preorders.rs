//! Orders in PostgreSQL: the group-committed pre-order writer of the buy path, and reads.
//!
//! A pre-order and its outbox row are written in the same transaction (funnel step 11).
//! Concurrent buys are gathered into one multi-row insert and one commit: the box flushes
//! its WAL a few thousand times a second at best, so one transaction per buyer would cap
//! the whole sale there: this is the group commit. The batch's events share outbox rows
//! (one per activity and outbox state), and once committed the writer offers each row to
//! the publisher (funnel step 12) before it answers the buyers.
//!
//! PostgreSQL is the arbiter of every pre-order, whichever layer deducted it: the batch
//! allocates each member against `activity_items.allocated` and the buyer's row in
//! `buyer_holdings` under the item row's lock, and both tables' CHECKs back that up. Redis
//! is the fast filter in front; when it is wrong (a deduction switch flip, a re-derivation
//! racing an in-flight deduction) the database refuses instead of overselling.

use sqlx::{postgres::PgArguments, Arguments, Postgres};
use std::{
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};
use tokio::sync::{mpsc, oneshot, Notify, Semaphore};
use uuid::Uuid;

use contract::{SaleItem, UserId};

use crate::buy::rules::Refusal;
use crate::buy::stock_scripts::IN_FLIGHT_MS;
use crate::orders::mq::{
    message::OrderCreated,
    publisher::{OutboxRow, Publisher},
};
use crate::orders::{mq::topology::CREATE_ORDER_TOPIC, Holding};
use base::{
    db::{is_outage, MeteredPool},
    quiet_log::quiet,
    tally::{self, Share, Tally},
};

/// A pre-order as the buy path hands it over, after Redis has deducted its stock.
#[derive(Clone, Debug)]
pub struct PreOrder {
    pub id: Uuid,
    pub activity_id: i64,
    pub item_id: i64,
    pub user_id: i64,
    pub quantity: i64,
    pub amount_cents: i64,
    pub request_id: String,
    /// Seats of a seated activity (empty otherwise); `quantity` is their number.
    pub seats: Vec<String>,
    /// Where the stock was, or is to be, deducted.
    pub reservation: Reservation,
    /// Written while the async switch is on `record`: the outbox row waits for an ops
    /// replay instead of the relay.
    pub recorded: bool,
}

impl PreOrder {
    pub fn sale_item(&self) -> SaleItem {
        SaleItem::new(self.activity_id, self.item_id)
    }

    pub fn buyer(&self) -> UserId {
        UserId(self.user_id)
    }

    /// The units this pre-order takes, as the stock scripts count them.
    pub fn holding(&self) -> Holding {
        Holding {
            sale: self.sale_item(),
            buyer: self.buyer(),
            quantity: self.quantity,
        }
    }

    /// Its create-order event, as its outbox row carries it.
    fn event(&self) -> OrderCreated {
        OrderCreated {
            order_id: self.id,
            activity_id: self.activity_id,
            item_id: self.item_id,
            user_id: self.user_id,
            quantity: self.quantity,
            amount_cents: self.amount_cents,
        }
    }
}

/// Where a pre-order's stock comes from. Either way the batch allocates it in PostgreSQL
/// within `per_user_limit`; the difference is whether Redis has to be given back.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reservation {
    /// Redis deducted it already.
    Redis { per_user_limit: i64 },
    /// Only the database allocates it (deduction switch on `db`).
    Database { per_user_limit: i64 },
}

impl Reservation {
    pub fn per_user_limit(self) -> i64 {
        match self {
            Self::Redis { per_user_limit } | Self::Database { per_user_limit } => per_user_limit,
        }
    }
}

/// What the batch decided for one pre-order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Written,
    /// The database allocation refused it: no stock left there, or the buyer's limit.
    Refused(Refusal),
    /// The buyer used its request id for an order of the same item before (`Some`: that
    /// order, committed earlier; `None`: an earlier member of the same batch). Its request
    /// was claimed twice, so this member is not written; its deduction is owed back.
    /// The same id for another item or activity is another request, never a duplicate.
    Duplicate(Option<Uuid>),
    /// A void took its order id first: it will never commit, and whoever voided it gives
    /// its deduction back.
    Voided,
}

impl Verdict {
    /// Reads a verdict of `allocate_preorders` (migrations), for pre-order `id`.
    fn read(id: Uuid, verdict: &str, existing: Option<Uuid>) -> Result<Self, sqlx::Error> {
        Ok(match verdict {
            "written" => Verdict::Written,
            "sold_out" => Verdict::Refused(Refusal::SoldOut),
            "not_enough" => Verdict::Refused(Refusal::NotEnough),
            "already_purchased" => Verdict::Refused(Refusal::AlreadyPurchased),
            "limit_exceeded" => Verdict::Refused(Refusal::LimitExceeded),
            "unknown_seat" => Verdict::Refused(Refusal::UnknownSeat),
            "duplicate" => Verdict::of_earlier(id, existing),
            "voided" => Verdict::Voided,
            other => {
                return Err(sqlx::Error::ColumnDecode {
                    index: "verdict".into(),
                    source: format!("unknown verdict `{other}`").into(),
                })
            }
        })
    }

    /// A member whose request id has an order already: its own, when an earlier attempt
    /// at this very batch committed (the connection was lost before its answer), else
    /// another one.
    fn of_earlier(id: Uuid, existing: Option<Uuid>) -> Self {
        if existing == Some(id) {
            Verdict::Written
        } else {
            Verdict::Duplicate(existing)
        }
    }
}

/// A member's verdict, and the event id of the outbox row its event went into if it was
/// written by this statement.
type Decided = (Verdict, Uuid);

/// A member's verdict, with its share of the batch's calls.
type Reply = oneshot::Sender<(Result<Verdict, Arc<sqlx::Error>>, Share)>;

/// Hands pre-orders to a background task that writes them in batches.
#[derive(Clone)]
pub struct PreorderWriter {
    queue: mpsc::Sender<(PreOrder, Reply)>,
    heading: Arc<Heading>,
}

/// The buy requests that may still bring a pre-order: admitted, and neither handed to the
/// writer nor finished. A batch waits for company only while there are some: once there
/// are none, the next member is a request not yet admitted, and whoever is gathered would
/// wait for it in vain (a lone buyer, or the whole closed loop of a load test).
#[derive(Default)]
struct Heading {
    requests: AtomicUsize,
    /// Woken when the count falls to zero.
    none_left: Notify,
}

/// One request counted among those on their way to the writer, until it is dropped.
pub struct OnTheWay(Arc<Heading>);

impl Drop for OnTheWay {
    fn drop(&mut self) {
        if self.0.requests.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.none_left.notify_one();
        }
    }
}

/// A batch behind `first`: the pre-orders that arrive within `wait` of it, up to `max`,
/// for no longer than some request may still bring one.
async fn gather<T>(
    first: T,
    incoming: &mut mpsc::Receiver<T>,
    heading: &Heading,
    max: usize,
    wait: Duration,
) -> Vec<T> {
    let mut batch = vec![first];
    let deadline = tokio::time::Instant::now() + wait;
    while batch.len() < max {
        if heading.requests.load(Ordering::Acquire) == 0 {
            // A request hands its pre-order over before it stops counting: every one
            // sent is in the queue by now.
            while batch.len() < max {
                match incoming.try_recv() {
                    Ok(next) => batch.push(next),
                    Err(_) => break,
                }
            }
            break;
        }
        tokio::select! {
            next = incoming.recv() => match next {
                Some(next) => batch.push(next),
                None => break,
            },
            // The count is read again above (a wake-up may be one left from earlier).
            () = heading.none_left.notified() => {}
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    batch
}

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("the pre-order could not be written: {0}")]
    Database(Arc<sqlx::Error>),
    #[error("the pre-order writer has stopped")]
    Stopped,
}

/// Batches written at once; more would only queue on the same WAL flush.
const CONCURRENT_BATCHES: usize = 4;

impl PreorderWriter {
    pub fn spawn(
        pool: MeteredPool,
        publisher: Publisher,
        batch_max: usize,
        batch_wait: Duration,
        batch_sizes: prometheus::Histogram,
        batch_durations: prometheus::HistogramVec,
    ) -> Self {
        let (queue, mut incoming) = mpsc::channel::<(PreOrder, Reply)>(batch_max.max(1) * 16);
        let permits = Arc::new(Semaphore::new(CONCURRENT_BATCHES));
        let heading = Arc::new(Heading::default());
        let gathering = heading.clone();
        tokio::spawn(async move {
            while let Some(first) = incoming.recv().await {
                let batch = gather(first, &mut incoming, &gathering, batch_max, batch_wait).await;
                batch_sizes.observe(batch.len() as f64);
                let Ok(permit) = permits.clone().acquire_owned().await else {
                    break;
                };
                let (pool, publisher, durations) =
                    (pool.clone(), publisher.clone(), batch_durations.clone());
                tokio::spawn(async move {
                    let started = std::time::Instant::now();
                    let written = tally::scoped(
                        Arc::new(Tally::default()),
                        write_batch(&pool, &publisher, batch),
                    );
                    let outcome = if written.await { "ok" } else { "error" };
                    durations
                        .with_label_values(&["preorder_batch", outcome])
                        .observe(started.elapsed().as_secs_f64());
                    drop(permit);
                });
            }
        });
        Self { queue, heading }
    }

    /// Counts a request on its way to the writer: from its admission until it hands its
    /// pre-order over or ends.
    pub fn on_the_way(&self) -> OnTheWay {
        self.heading.requests.fetch_add(1, Ordering::AcqRel);
        OnTheWay(self.heading.clone())
    }

    /// Pre-orders handed over and not yet taken into a batch.
    pub fn queued(&self) -> usize {
        self.queue.max_capacity() - self.queue.capacity()
    }

    /// Writes the pre-order with its outbox row and offers the row to the publisher; returns
    /// once it is committed (or refused). The request stops counting as on its way once
    /// the pre-order is handed over.
    /// The buy's path counts its share of the batch's statements.
    pub async fn write(
        &self,
        order: PreOrder,
        on_the_way: OnTheWay,
    ) -> Result<Verdict, WriteError> {
        let (reply, answer) = oneshot::channel();
        self.queue
            .send((order, reply))
            .await
            .map_err(|_| WriteError::Stopped)?;
        drop(on_the_way);
        let (verdict, share) = answer.await.map_err(|_| WriteError::Stopped)?;
        share.count();
        verdict.map_err(WriteError::Database)
    }
}

/// Writes the batch in one statement and answers each member. A statement PostgreSQL
/// aborted to break a deadlock is tried again whole, once. Should PostgreSQL fail the
/// statement over one member (an error of the server, not a decision: a trigger, a
/// constraint no decision foresaw), each member is written alone, so that member fails
/// only its own buyer. A statement that failed otherwise (a lost connection) is tried again
/// as a whole while PostgreSQL is out of reach: both ways of writing recognise members an
/// earlier attempt committed.
/// Whether the batch was written as one.
async fn write_batch(
    pool: &MeteredPool,
    publisher: &Publisher,
    batch: Vec<(PreOrder, Reply)>,
) -> bool {
    let (orders, replies): (Vec<PreOrder>, Vec<Reply>) = batch.into_iter().unzip();
    let decided = match decide(pool, &orders).await {
        // PostgreSQL rolled the statement back to break a deadlock or a serialization
        // conflict: nothing of it is written and no member caused it, so it goes again
        // whole, once. A batch aborted twice is written as any other failed batch.
        Err(error) if is_aborted_to_break_a_conflict(&error) => {
            quiet!(warn, "buy.preorder_batch", error = %error, size = orders.len(), "PostgreSQL aborted a pre-order batch to break a conflict; writing it again whole");
            decide(pool, &orders).await
        }
        decided => decided,
    };
    let decided = match decided {
        // A statement PostgreSQL judged, not one it could not run (it was restarting).
        Err(error)
            if orders.len() > 1
                && matches!(error, sqlx::Error::Database(_))
                && !is_outage(&error) =>
        {
            quiet!(warn, "buy.preorder_batch", error = %error, size = orders.len(), "PostgreSQL failed a pre-order batch; writing its members one by one");
            let mut verdicts = Vec::with_capacity(orders.len());
            for order in &orders {
                let alone = allocate(pool, std::slice::from_ref(order)).await;
                verdicts.push(alone.map(|decided| decided[0]).map_err(Arc::new));
            }
            let written: Vec<Option<Decided>> = verdicts
                .iter()
                .map(|verdict| verdict.as_ref().ok().copied())
                .collect();
            offer_written(publisher, &orders, written.iter().copied());
            // Every member shares the batch's statements, the failed one included.
            let share = tally::current_share(orders.len());
            for (reply, verdict) in replies.into_iter().zip(verdicts) {
                let _ = reply.send((verdict.map(|(verdict, _)| verdict), share));
            }
            return false;
        }
        Err(error) => {
            quiet!(warn, "buy.preorder_batch", error = %error, size = orders.len(), "pre-order batch failed; trying again while PostgreSQL is out of reach");
            retry_out_of_reach(pool, &orders).await
        }
        decided => decided,
    };
    let written = decided.is_ok();
    let share = tally::current_share(replies.len());
    match decided {
        Ok(decided) => {
            offer_written(publisher, &orders, decided.iter().copied().map(Some));
            for (reply, (verdict, _)) in replies.into_iter().zip(decided) {
                let _ = reply.send((Ok(verdict), share));
            }
        }
        Err(error) => {
            let error = Arc::new(error);
            for reply in replies {
                let _ = reply.send((Err(error.clone()), share));
            }
        }
    }
    written
}

/// Offers the publisher each outbox row the batch wrote, with the events of its written
/// members; rows of members recorded while the async switch is on `record` wait for an
/// ops replay instead. A member written by an earlier attempt at the batch (its answer was
/// lost) is offered under this attempt's row: that row holds no more than the offer says,
/// so marking it sent never hides an event, and the earlier row is the relay's to resend.
fn offer_written(
    publisher: &Publisher,
    orders: &[PreOrder],
    decided: impl Iterator<Item = Option<Decided>>,
) {
    let mut rows: Vec<OutboxRow> = Vec::new();
    for (order, decided) in orders.iter().zip(decided) {
        let Some((Verdict::Written, event_id)) = decided else {
            continue;
        };
        if order.recorded {
            continue;
        }
        match rows.iter_mut().find(|row| row.event_id == event_id) {
            Some(row) => row.orders.push(order.event()),
            None => rows.push(OutboxRow {
                event_id,
                orders: vec![order.event()],
            }),
        }
    }
    for row in rows {
        publisher.offer(row);
    }
}

/// How long a batch keeps trying while PostgreSQL is out of reach: a restart with its crash
/// recovery takes seconds, and its buyers had better wait than be told to retry. Shorter than
/// a claim's in-flight life, so no replay can deduct again while the batch may still commit.
const OUT_OF_REACH_PATIENCE: Duration = Duration::from_secs(8);
const _: () = assert!(OUT_OF_REACH_PATIENCE.as_millis() < IN_FLIGHT_MS as u128);

/// The batch again, until it is decided (written or refused by the database) or the
/// patience is spent; each attempt waits for a connection up to the pool's acquire timeout.
async fn retry_out_of_reach(
    pool: &MeteredPool,
    orders: &[PreOrder],
) -> Result<Vec<Decided>, sqlx::Error> {
    let started = tokio::time::Instant::now();
    loop {
        match allocate(pool, orders).await {
            Err(error)
                if (is_outage(&error) || !matches!(error, sqlx::Error::Database(_)))
                    && started.elapsed() < OUT_OF_REACH_PATIENCE =>
            {
                quiet!(debug, "buy.preorder_batch", error = %error, "PostgreSQL still out of reach");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            decided => return decided,
        }
    }
}

/// One statement decides the batch. In the common case every member fits: Redis deducted
/// its units already, or on the database path the item has them left, and no buyer goes
/// past the limit. A plain insert of every member then writes the batch, locking the item
/// row only for its last two writes and the commit, where `allocate_preorders` locks it
/// before deciding member by member: on the database path, where every batch of the item
/// queues on that lock, the lock is held for a fraction of the statement. Should the
/// database refuse the insert (a CHECK: Redis off the truth, or the stock or a buyer's limit
/// reached on the database path; an order id taken by a void), and for seats,
/// `allocate_preorders` decides member by member, first come first served.
async fn decide(pool: &MeteredPool, orders: &[PreOrder]) -> Result<Vec<Decided>, sqlx::Error> {
    if orders.iter().any(|order| !order.seats.is_empty()) {
        return allocate(pool, orders).await;
    }
    match insert(pool, orders).await {
        Err(error) if is_refusal(&error) => allocate(pool, orders).await,
        decided => decided,
    }
}

/// A CHECK (`allocated` past the stock, a holding past the per-user limit) or a unique
/// constraint (an order id voided already) refused the statement.
fn is_refusal(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database)
        if matches!(database.code().as_deref(), Some("23514" | "23505")))
}

/// PostgreSQL aborted the transaction to break a deadlock (40P01) or a serialization
/// conflict (40001): a decision about the moment, not about the statement.
fn is_aborted_to_break_a_conflict(error: &sqlx::Error) -> bool {
    matches!(error, sqlx::Error::Database(database)
        if matches!(database.code().as_deref(), Some("40P01" | "40001")))
}

/// The batch's columns, one array per column, as `$1`–`$9` of both statements; a statement
/// adds its own parameters after them with [`push`].
fn columns(orders: &[PreOrder]) -> Result<PgArguments, sqlx::Error> {
    let narrow = |value: i64| i32::try_from(value).unwrap_or(i32::MAX);
    let mut arguments = PgArguments::default();
    push(
        &mut arguments,
        orders.iter().map(|o| o.id).collect::<Vec<_>>(),
    )?;
    push(
        &mut arguments,
        orders.iter().map(|o| o.activity_id).collect::<Vec<_>>(),
    )?;
    push(
        &mut arguments,
        orders.iter().map(|o| o.item_id).collect::<Vec<_>>(),
    )?;
    push(
        &mut arguments,
        orders.iter().map(|o| o.user_id).collect::<Vec<_>>(),
    )?;
    push(
        &mut arguments,
        orders
            .iter()
            .map(|o| narrow(o.quantity))
            .collect::<Vec<_>>(),
    )?;
    push(
        &mut arguments,
        orders.iter().map(|o| o.amount_cents).collect::<Vec<_>>(),
    )?;
    push(
        &mut arguments,
        orders
            .iter()
            .map(|o| o.request_id.as_str())
            .collect::<Vec<_>>(),
    )?;
    let outbox_states: Vec<&str> = orders
        .iter()
        .map(|o| if o.recorded { "recorded" } else { "pending" })
        .collect();
    push(&mut arguments, outbox_states)?;
    let limits: Vec<i32> = orders
        .iter()
        .map(|o| narrow(o.reservation.per_user_limit()))
        .collect();
    push(&mut arguments, limits)?;
    Ok(arguments)
}

/// Binds the next parameter.
fn push<'q, T>(arguments: &mut PgArguments, value: T) -> Result<(), sqlx::Error>
where
    T: sqlx::Encode<'q, Postgres> + sqlx::Type<Postgres> + 'q,
{
    arguments.add(value).map_err(sqlx::Error::Encode)
}

/// Every member written as it came, with its group's outbox row, the item's
/// `allocated` and the buyers' holdings, in one statement (its own transaction). A member
/// whose request id has an order of its item already is skipped and reported. The item row
/// is locked before the buyer rows, as in every transaction that moves both (`allocate_preorders`,
/// `orders::release`), so that none of them waits for this one while holding the row it
/// waits for: PostgreSQL promises no order among the writes of a statement (it runs the
/// ones the main query does not read after it, the last listed first), so the holdings
/// join the rows `stock` returns, and no holding is written before its item row is locked.
/// The outbox rows are listed last, so that they are written before the item row is
/// locked and not while it is. The CHECKs of the item row and of the holdings refuse an
/// oversell. Each outbox row's payload is the create-order message of its written members,
/// in the batch's order.
async fn insert(pool: &MeteredPool, orders: &[PreOrder]) -> Result<Vec<Decided>, sqlx::Error> {
    let mut arguments = columns(orders)?;
    push(&mut arguments, CREATE_ORDER_TOPIC)?;
    let outbox_rows = outbox_rows(orders);
    push(&mut arguments, outbox_rows.clone())?;
    tally::db_statement_alone();
    let rows: Vec<(Uuid, bool, Option<Uuid>)> = sqlx::query_as_with(
        "WITH m AS (
             SELECT * FROM UNNEST($1::UUID[], $2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::INTEGER[],
                                  $6::BIGINT[], $7::TEXT[], $8::TEXT[], $9::INTEGER[], $11::UUID[])
                 WITH ORDINALITY
                 AS m (id, activity_id, item_id, user_id, quantity, amount_cents, request_id,
                       outbox_state, per_user_limit, outbox_event_id, member)
         ), written AS (
             INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status,
                                 request_id, outbox_event_id)
             SELECT id, activity_id, item_id, user_id, quantity, amount_cents, 'PRE_CREATED',
                    request_id, outbox_event_id
             FROM m ORDER BY member
             ON CONFLICT (user_id, request_id, activity_id, item_id) DO NOTHING
             RETURNING id
         ), stock AS (
             UPDATE activity_items ai SET allocated = ai.allocated + b.units
             FROM (SELECT m.activity_id, m.item_id, SUM(m.quantity)::INTEGER AS units
                   FROM m JOIN written USING (id)
                   GROUP BY m.activity_id, m.item_id ORDER BY m.activity_id, m.item_id) b
             WHERE ai.activity_id = b.activity_id AND ai.item_id = b.item_id
             RETURNING ai.activity_id, ai.item_id
         ), holdings AS (
             INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
             SELECT m.activity_id, m.item_id, m.user_id, SUM(m.quantity)::INTEGER, MAX(m.per_user_limit)
             FROM m JOIN written USING (id) JOIN stock USING (activity_id, item_id)
             GROUP BY m.activity_id, m.item_id, m.user_id
             ORDER BY m.activity_id, m.item_id, m.user_id
             ON CONFLICT (activity_id, item_id, user_id)
             DO UPDATE SET units = buyer_holdings.units + EXCLUDED.units,
                           per_user_limit = EXCLUDED.per_user_limit
         ), outbox_rows AS (
             INSERT INTO outbox (event_id, topic, status, payload)
             SELECT m.outbox_event_id, $10, m.outbox_state, jsonb_build_object('orders',
                    jsonb_agg(jsonb_build_object('order_id', m.id, 'activity_id', m.activity_id,
                        'item_id', m.item_id, 'user_id', m.user_id, 'quantity', m.quantity,
                        'amount_cents', m.amount_cents) ORDER BY m.member))
             FROM m JOIN written USING (id)
             GROUP BY m.outbox_event_id, m.outbox_state
             ORDER BY min(m.member)
         )
         SELECT m.id, written.id IS NOT NULL,
                -- A subquery, not a join: PostgreSQL tests `written.id IS NULL` before it
                -- looks the order up, where a join looked every member up.
                (SELECT earlier.id FROM orders earlier
                 WHERE written.id IS NULL
                   AND earlier.user_id = m.user_id AND earlier.request_id = m.request_id
                   AND earlier.activity_id = m.activity_id AND earlier.item_id = m.item_id)
         FROM m LEFT JOIN written USING (id)
         ORDER BY m.member",
        arguments,
    )
    .fetch_all(&mut *pool.acquire().await?)
    .await?;
    Ok(rows
        .into_iter()
        .zip(outbox_rows)
        .map(|((id, written, earlier), outbox_row)| {
            let verdict = if written {
                Verdict::Written
            } else {
                Verdict::of_earlier(id, earlier)
            };
            (verdict, outbox_row)
        })
        .collect())
}

/// The event id of each member's outbox row: one new row per activity and outbox state for
/// each statement, so a row's events never mix activities (a rehearsal's shadow removes its
/// rows whole) nor replay rules.
fn outbox_rows(orders: &[PreOrder]) -> Vec<Uuid> {
    let mut rows: Vec<((i64, bool), Uuid)> = Vec::new();
    orders
        .iter()
        .map(|order| {
            let group = (order.activity_id, order.recorded);
            match rows.iter().find(|(of, _)| *of == group) {
                Some((_, row)) => *row,
                None => {
                    // Time-ordered like the order ids, for the same reason.
                    let row = Uuid::now_v7();
                    rows.push((group, row));
                    row
                }
            }
        })
        .collect()
}

/// Every member decided in PostgreSQL, first come first served under the item row's lock,
/// and the granted ones written with their group's outbox row: one call of
/// `allocate_preorders` (migrations).
async fn allocate(pool: &MeteredPool, orders: &[PreOrder]) -> Result<Vec<Decided>, sqlx::Error> {
    let mut arguments = columns(orders)?;
    let (mut seat_members, mut seat_codes) = (Vec::new(), Vec::new());
    for (member, order) in (1_i32..).zip(orders) {
        for seat in &order.seats {
            seat_members.push(member);
            seat_codes.push(seat.as_str());
        }
    }
    push(&mut arguments, seat_members)?;
    push(&mut arguments, seat_codes)?;
    push(&mut arguments, CREATE_ORDER_TOPIC)?;
    let outbox_rows = outbox_rows(orders);
    push(&mut arguments, outbox_rows.clone())?;
    tally::db_statement_alone();
    let rows: Vec<(i32, String, Option<Uuid>)> = sqlx::query_as_with(
        "SELECT member, verdict, existing
         FROM allocate_preorders($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         ORDER BY member",
        arguments,
    )
    .fetch_all(&mut *pool.acquire().await?)
    .await?;
    orders
        .iter()
        .zip(rows)
        .zip(outbox_rows)
        .map(|((order, (_, verdict, existing)), outbox_row)| {
            Ok((Verdict::read(order.id, &verdict, existing)?, outbox_row))
        })
        .collect()
}

/// Every seat of an activity with the buyer of the order holding it, if that order still
/// keeps stock; a re-derivation loads this map into Redis.
pub async fn seat_holders<'e>(
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

/// The order a buyer's request id made for an item, unless it was voided: what a winner's
/// replay is answered with when his stored answer never reached Redis.
pub async fn order_of_request<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    sale: SaleItem,
    user_id: i64,
    request_id: &str,
) -> Result<Option<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT id FROM orders
         WHERE user_id = $1 AND request_id = $2 AND activity_id = $3 AND item_id = $4
           AND status <> 'FAILED'",
    )
    .bind(user_id)
    .bind(request_id)
    .bind(sale.activity.0)
    .bind(sale.item.0)
    .fetch_optional(executor)
    .await
}

#[cfg(test)]
mod tests;
