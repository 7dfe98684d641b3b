//! The leader's lottery job, a few times a second: the buyer API made able to find every
//! lottery whose registration opens soon or is open (`registration`); for each lottery item
//! whose registration has closed, the draw (once: its row in `lottery_draws` commits with
//! every entry in one transaction), the draw's result into Redis (repeated until done), the
//! waitlist's advance while the sale is on, and the final statuses once it is over.
//!
//! A leader that dies mid-draw left nothing in PostgreSQL (the transaction never committed):
//! the next one seals and reads the same closed list, orders it by the same seed to the same
//! order, and draws it; its codes are the only ones ever issued. One that dies after the
//! commit left the draw's row: the next one only publishes it, from PostgreSQL.

use chrono::{DateTime, Utc};
use contract::SaleItem;
use std::time::Duration;

use crate::{
    catalog::expiry::keys_expire_at,
    lottery::{
        registration, registration_changed,
        rules::{self, Grant, Status},
        scripts::LotteryClient,
        store::{self, DrawResult, DrawnState, DueItem},
    },
    orders::mq::consume::QuietWarnings,
    SaleState,
};

/// How often the leader looks: a unit given back reaches the next on the waitlist within
/// this and one pass, well inside the 2 s docs/lottery.md promises.
const TICK: Duration = Duration::from_millis(250);
/// Fresh codes one advance call takes: buyers it may reach at most.
const ADVANCE_BATCH: usize = 64;

pub fn spawn(state: &SaleState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_while_leading(state.clone()))
}

async fn run_while_leading(state: SaleState) {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leadership = state.leadership.clone();
    let mut warnings = QuietWarnings::new("lottery");
    loop {
        leadership.until_leader().await;
        ticks.tick().await;
        if !state.leadership.is_leader() {
            continue;
        }
        match pass(&state).await {
            Ok(()) => warnings.recovered(),
            Err(error) => warnings.failed(&format!("{error:#}")),
        }
    }
}

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// When a code handed out at `now_ms` lives: from the sale's start (or now, if later) for
/// the activity's code lifetime.
fn lifetime(item: &DueItem, now_ms: i64) -> (i64, i64) {
    let from = item.starts_at.timestamp_millis().max(now_ms);
    (from, from + i64::from(item.code_ttl_s) * 1000)
}

async fn pass(state: &SaleState) -> anyhow::Result<()> {
    let now_ms = state.lottery.now_ms();
    // Its failure does not hold the draws back; the pass reports it after them.
    let prepared = registration::prepare(state, at(now_ms)).await;
    let listed = store::due_items(&state.db, at(now_ms)).await?;
    // The time is read again after the list: a registration judges the window by the clock
    // when it arrives, so the draw must not seal an item by a reading older than the rows it
    // read (a pass that waited on the database, a clock stepped back, a test's clock swapped
    // in meanwhile). The later reading decides which window has closed.
    let now_ms = state.lottery.now_ms();
    for item in listed
        .into_iter()
        .filter(|item| item.registration_closes_at.timestamp_millis() <= now_ms)
    {
        let made = if item.drawn {
            None
        } else {
            draw(state, &item, now_ms).await?
        };
        let sale = SaleItem::new(item.activity_id, item.item_id);
        if !item.published {
            publish(state, &item, made).await?;
        } else if !LotteryClient(&state.redis).holds_draw(sale).await? {
            rederive(state, &item).await?;
        }
        if now_ms < item.ends_at.timestamp_millis() {
            advance(state, &item, now_ms).await?;
        } else {
            settle(state, &item, now_ms).await?;
        }
    }
    prepared
}

/// Draws `item`; its state when this call committed the draw (None: another leader had).
async fn draw(
    state: &SaleState,
    item: &DueItem,
    now_ms: i64,
) -> anyhow::Result<Option<DrawnState>> {
    let sale = SaleItem::new(item.activity_id, item.item_id);
    let expires_at_ms = keys_expire_at(item.ends_at).timestamp_millis();
    let (registrants, revoked) = LotteryClient(&state.redis)
        .seal_and_read(sale, expires_at_ms)
        .await?;
    // The list is sealed: its sources are final.
    let sources = LotteryClient(&state.redis).sources(sale).await?;
    let seed = store::seed(&state.db, item.activity_id).await?;
    let order = rules::draw_order(&seed, &registrants);
    let limit = i64::from(item.per_user_limit);
    let winners = rules::winners(item.total_stock.into(), limit).min(order.len());
    let (valid_from_ms, expires_ms) = lifetime(item, now_ms);
    let codes: Vec<Grant> = (0..winners)
        .map(|_| Grant {
            code: rules::new_code(),
            valid_from_ms,
            expires_ms,
            units: limit,
        })
        .collect();
    let result = DrawResult {
        order: &order,
        winners,
        codes: &codes,
        revoked: &revoked,
        sources: sources.as_ref(),
    };
    // A test kills the leader here: the list sealed and ordered, nothing written yet.
    base::fault::point("lottery.drawing");
    let committed = store::record_draw(&state.db, item, &result).await?;
    if committed {
        let metrics = &state.metrics.lottery;
        metrics.draws.inc();
        metrics
            .codes
            .with_label_values(&["issued"])
            .inc_by(winners as u64);
        tracing::info!(
            activity = item.activity_id,
            item = item.item_id,
            registrants = order.len(),
            winners,
            "lottery drawn"
        );
    }
    // A test kills the leader here: the draw is in PostgreSQL, not yet in Redis.
    base::fault::point("lottery.drawn");
    Ok(committed.then(|| DrawnState::drawn(&order, &codes, &revoked)))
}

/// Writes `item`'s drawn state into Redis: `made`, as this leader just drew it, or else as
/// PostgreSQL holds it.
async fn write_state(
    state: &SaleState,
    item: &DueItem,
    made: Option<DrawnState>,
) -> anyhow::Result<DrawnState> {
    let drawn = match made {
        Some(drawn) => drawn,
        None => store::drawn_state(&state.db, item).await?,
    };
    LotteryClient(&state.redis)
        .publish(
            SaleItem::new(item.activity_id, item.item_id),
            &drawn,
            keys_expire_at(item.ends_at).timestamp_millis(),
        )
        .await?;
    Ok(drawn)
}

/// Writes the draw's result into Redis, marks it published and tells every registrant.
async fn publish(
    state: &SaleState,
    item: &DueItem,
    made: Option<DrawnState>,
) -> anyhow::Result<()> {
    let drawn = write_state(state, item, made).await?;
    let sale = SaleItem::new(item.activity_id, item.item_id);
    store::mark_published(&state.db, item).await?;
    // Told once the result is in Redis, where a buyer's page reads his code and his place.
    let changes: Vec<(i64, Status)> = drawn
        .ranked
        .iter()
        .map(|(user, rank)| {
            let status = if *rank <= drawn.winners {
                Status::Won
            } else {
                Status::Waitlisted
            };
            (*user, status)
        })
        .collect();
    registration_changed(&state.events, sale, &changes);
    Ok(())
}

/// Redis has lost a published draw (a restart or a fail-over without its data): its state
/// is written again from PostgreSQL, whose entries hold every rank, code and revocation,
/// and whose orders tell which codes bought. Until then a code cannot buy (the buyer is
/// told `NOT_QUALIFIED` for that moment) and the waitlist does not move; nobody's status
/// changes, so nobody is told anything.
async fn rederive(state: &SaleState, item: &DueItem) -> anyhow::Result<()> {
    let drawn = write_state(state, item, None).await?;
    state.metrics.lottery.rederived.inc();
    tracing::warn!(
        activity = item.activity_id,
        item = item.item_id,
        codes = drawn.codes.len(),
        waiting = drawn.waiting.len(),
        "the lottery's state was gone from Redis; re-derived from PostgreSQL"
    );
    Ok(())
}

async fn advance(state: &SaleState, item: &DueItem, now_ms: i64) -> anyhow::Result<()> {
    let sale = SaleItem::new(item.activity_id, item.item_id);
    let (valid_from_ms, expires_ms) = lifetime(item, now_ms);
    loop {
        let fresh: Vec<String> = (0..ADVANCE_BATCH).map(|_| rules::new_code()).collect();
        let issued = LotteryClient(&state.redis)
            .advance(
                sale,
                now_ms,
                valid_from_ms,
                expires_ms,
                item.per_user_limit.into(),
                &fresh,
            )
            .await?;
        if issued.is_empty() {
            return Ok(());
        }
        store::record_issued(&state.db, item, &issued).await?;
        let changes: Vec<(i64, Status)> = issued.iter().map(|i| (i.buyer, Status::Won)).collect();
        registration_changed(&state.events, sale, &changes);
        let metrics = &state.metrics.lottery;
        metrics.waitlist_advances.inc_by(issued.len() as u64);
        metrics
            .codes
            .with_label_values(&["issued"])
            .inc_by(issued.len() as u64);
        if issued.len() < ADVANCE_BATCH {
            return Ok(());
        }
    }
}

/// Once the sale is over: every entry's final status (bought, expired, lost, revoked).
async fn settle(state: &SaleState, item: &DueItem, now_ms: i64) -> anyhow::Result<()> {
    let live = LotteryClient(&state.redis)
        .live_state(SaleItem::new(item.activity_id, item.item_id))
        .await?;
    let codes: std::collections::HashMap<i64, Grant> = live.codes.into_iter().collect();
    let finals: Vec<(i64, Status, Option<Grant>)> = store::entries(&state.db, item)
        .await?
        .into_iter()
        .map(|(user, written)| {
            let grant = codes.get(&user).cloned();
            let status = if written == rules::status_name(Status::Revoked) {
                Status::Revoked
            } else if live.used.contains(&user) {
                Status::Bought
            } else if grant.is_some() {
                Status::Expired
            } else {
                Status::Lost
            };
            (user, status, grant)
        })
        .collect();
    store::settle(&state.db, item, &finals).await?;
    let changes: Vec<(i64, Status)> = finals.iter().map(|f| (f.0, f.1)).collect();
    registration_changed(
        &state.events,
        SaleItem::new(item.activity_id, item.item_id),
        &changes,
    );
    let codes_metric = &state.metrics.lottery.codes;
    for (status, outcome) in [
        (Status::Bought, "used"),
        (Status::Expired, "expired"),
        (Status::Revoked, "revoked"),
    ] {
        let count = finals.iter().filter(|f| f.1 == status).count();
        codes_metric
            .with_label_values(&[outcome])
            .inc_by(count as u64);
    }
    tracing::info!(
        activity = item.activity_id,
        item = item.item_id,
        now_ms,
        "lottery settled"
    );
    Ok(())
}
