//! The lottery's rows in PostgreSQL: the seed of each lottery activity, each item's draw and
//! every registrant's entry (rank, code, final status).

use chrono::{DateTime, Utc};
use contract::{AddressRegistrations, RegistrationSources};
use sqlx::{types::Json, PgPool, Postgres, Transaction};

use crate::lottery::{
    rules::{self, Grant, Status},
    scripts::Issued,
};

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or_default()
}

/// Fixes the seed of lottery activity `activity` the first time it becomes a lottery; never
/// replaced after, whatever edits follow, so its commitment holds from before registration.
pub async fn fix_seed(
    tx: &mut Transaction<'_, Postgres>,
    activity: i64,
) -> Result<(), sqlx::Error> {
    let seed: [u8; 32] = rand::random();
    sqlx::query(
        "INSERT INTO lottery_seeds (activity_id, seed, commitment) VALUES ($1, $2, $3)
         ON CONFLICT (activity_id) DO NOTHING",
    )
    .bind(activity)
    .bind(&seed[..])
    .bind(rules::commitment(&seed))
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A lottery item whose registration has closed and whose draw is not settled yet.
#[derive(sqlx::FromRow, Clone, Debug)]
pub struct DueItem {
    pub activity_id: i64,
    pub item_id: i64,
    pub total_stock: i32,
    pub per_user_limit: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub code_ttl_s: i32,
    pub registration_closes_at: DateTime<Utc>,
    pub drawn: bool,
    pub published: bool,
}

/// The lottery items with work for the leader at `now`: a draw, its publishing, the waitlist,
/// or the settling after the sale.
pub async fn due_items(pool: &PgPool, now: DateTime<Utc>) -> Result<Vec<DueItem>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.id AS activity_id, ai.item_id, ai.total_stock, ai.per_user_limit, a.starts_at,
                a.ends_at, a.code_ttl_s, a.registration_closes_at,
                d.activity_id IS NOT NULL AS drawn,
                d.published_at IS NOT NULL AS published
         FROM activities a
         JOIN activity_items ai ON ai.activity_id = a.id
         LEFT JOIN lottery_draws d ON d.activity_id = a.id AND d.item_id = ai.item_id
         WHERE a.mode = 'lottery' AND a.registration_closes_at <= $1 AND d.settled_at IS NULL
         ORDER BY a.id, ai.item_id",
    )
    .bind(now)
    .fetch_all(pool)
    .await
}

/// A lottery activity whose registration the buyer API must reach, with its items.
#[derive(sqlx::FromRow, Clone, Debug)]
pub struct Registering {
    pub activity_id: i64,
    pub item_ids: Vec<i64>,
}

/// The lottery activities whose registration opens by `horizon` and has not closed at `now`.
pub async fn registering(
    pool: &PgPool,
    now: DateTime<Utc>,
    horizon: DateTime<Utc>,
) -> Result<Vec<Registering>, sqlx::Error> {
    sqlx::query_as(
        "SELECT a.id AS activity_id, array_agg(ai.item_id ORDER BY ai.item_id) AS item_ids
         FROM activities a JOIN activity_items ai ON ai.activity_id = a.id
         WHERE a.mode = 'lottery' AND a.registration_opens_at <= $2
           AND a.registration_closes_at > $1
         GROUP BY a.id ORDER BY a.id",
    )
    .bind(now)
    .bind(horizon)
    .fetch_all(pool)
    .await
}

pub async fn seed(pool: &PgPool, activity: i64) -> Result<Vec<u8>, sqlx::Error> {
    sqlx::query_scalar("SELECT seed FROM lottery_seeds WHERE activity_id = $1")
        .bind(activity)
        .fetch_one(pool)
        .await
}

/// A draw's whole result.
pub struct DrawResult<'a> {
    pub order: &'a [i64],
    pub winners: usize,
    pub codes: &'a [Grant],
    pub revoked: &'a [i64],
    /// Where the registrations came from, as the sealed list left them.
    pub sources: Option<&'a RegistrationSources>,
}

/// Writes an item's draw in one transaction: the draw's row (whose key makes it once), every
/// entry, and the seed's reveal once every item of the activity is drawn. False when the item
/// was drawn already (nothing written).
pub async fn record_draw(
    pool: &PgPool,
    item: &DueItem,
    result: &DrawResult<'_>,
) -> Result<bool, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO lottery_draws (activity_id, item_id, registrants, winners, registrations,
                                    addresses, from_top_100, top_addresses)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8) ON CONFLICT DO NOTHING",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .bind(i32::try_from(result.order.len()).unwrap_or(i32::MAX))
    .bind(i32::try_from(result.winners).unwrap_or(i32::MAX))
    .bind(result.sources.map(|s| count(s.registrations)))
    .bind(result.sources.map(|s| count(s.addresses)))
    .bind(result.sources.map(|s| count(s.from_top_100)))
    .bind(result.sources.map(|s| Json(&s.top)))
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Ok(false);
    }
    // The winners with their codes, then the waitlist, the bulk of a large draw, with its
    // user ids alone: its ranks follow from the order, and four arrays of nulls beside them
    // made the insert of a million entries a third slower.
    let (winners, waiting) = result.order.split_at(result.codes.len());
    for (start, chunk) in chunks(winners) {
        let codes = &result.codes[start..start + chunk.len()];
        let code: Vec<&str> = codes.iter().map(|g| g.code.as_str()).collect();
        let from: Vec<DateTime<Utc>> = codes.iter().map(|g| at(g.valid_from_ms)).collect();
        let until: Vec<DateTime<Utc>> = codes.iter().map(|g| at(g.expires_ms)).collect();
        let units: Vec<i32> = codes
            .iter()
            .map(|g| i32::try_from(g.units).unwrap_or(i32::MAX))
            .collect();
        sqlx::query(
            "INSERT INTO lottery_entries (activity_id, item_id, user_id, rank, status, code,
                                          code_valid_from, code_expires_at, code_units)
             SELECT $1, $2, e.user_id, ($3 + e.n)::INTEGER, 'won', e.code, e.valid_from,
                    e.expires_at, e.units
             FROM UNNEST($4::BIGINT[], $5::TEXT[], $6::TIMESTAMPTZ[], $7::TIMESTAMPTZ[],
                         $8::INTEGER[]) WITH ORDINALITY
                  AS e (user_id, code, valid_from, expires_at, units, n)",
        )
        .bind(item.activity_id)
        .bind(item.item_id)
        .bind(rank_before(start))
        .bind(chunk)
        .bind(&code)
        .bind(&from)
        .bind(&until)
        .bind(&units)
        .execute(&mut *tx)
        .await?;
    }
    for (start, chunk) in chunks(waiting) {
        sqlx::query(
            "INSERT INTO lottery_entries (activity_id, item_id, user_id, rank, status)
             SELECT $1, $2, e.user_id, ($3 + e.n)::INTEGER, 'waitlisted'
             FROM UNNEST($4::BIGINT[]) WITH ORDINALITY AS e (user_id, n)",
        )
        .bind(item.activity_id)
        .bind(item.item_id)
        .bind(rank_before(winners.len() + start))
        .bind(chunk)
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query(
        "INSERT INTO lottery_entries (activity_id, item_id, user_id, status)
         SELECT $1, $2, UNNEST($3::BIGINT[]), 'revoked'",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .bind(result.revoked)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE lottery_seeds SET revealed_at = now()
         WHERE activity_id = $1 AND revealed_at IS NULL
           AND NOT EXISTS (SELECT 1 FROM activity_items ai
                           WHERE ai.activity_id = $1
                             AND NOT EXISTS (SELECT 1 FROM lottery_draws d
                                             WHERE d.activity_id = $1 AND d.item_id = ai.item_id))",
    )
    .bind(item.activity_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(true)
}

/// A drawn item's state: everything Redis must hold of it for its codes to buy and its
/// waitlist to move (`LotteryClient::publish`). Made in memory by the draw that commits it,
/// or read from PostgreSQL ([`drawn_state`]) by a leader that did not make it, or when Redis
/// has lost it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DrawnState {
    /// Everyone drawn and not revoked: (user, rank), in rank order.
    pub ranked: Vec<(i64, i64)>,
    pub winners: i64,
    /// Ranks that have had their turn: the winners', and every rank up to the last one the
    /// waitlist handed a code to.
    pub turns: i64,
    /// The waitlist, next first: everyone ranked after `turns` (the revoked among them too:
    /// their turn passes them by, as it does live).
    pub waiting: Vec<i64>,
    /// Every code that may still buy, or has bought.
    pub codes: Vec<(i64, Grant)>,
    /// Buyers whose code bought.
    pub used: Vec<i64>,
    /// Revoked buyers, with their rank if they were drawn.
    pub revoked: Vec<(i64, Option<i64>)>,
}

impl DrawnState {
    /// The state a draw leaves: `order` ranked, its first `codes.len()` with the codes.
    pub fn drawn(order: &[i64], codes: &[Grant], revoked: &[i64]) -> Self {
        let winners = codes.len();
        Self {
            ranked: order.iter().copied().zip(1..).collect(),
            winners: winners as i64,
            turns: winners as i64,
            waiting: order[winners..].to_vec(),
            codes: order.iter().copied().zip(codes.iter().cloned()).collect(),
            used: Vec::new(),
            revoked: revoked.iter().map(|user| (*user, None)).collect(),
        }
    }
}

/// A drawn item's state as PostgreSQL holds it: its entries (ranks, codes, revocations) and,
/// for the codes, whether an order of the item exists (the code bought). A cancelled order
/// counts: its code bought once, and its unit went back to the stock for the waitlist.
pub async fn drawn_state(pool: &PgPool, item: &DueItem) -> Result<DrawnState, sqlx::Error> {
    let winners: i32 = sqlx::query_scalar(
        "SELECT winners FROM lottery_draws WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .fetch_one(pool)
    .await?;
    #[derive(sqlx::FromRow)]
    struct Entry {
        user_id: i64,
        rank: Option<i32>,
        revoked: bool,
        code: Option<String>,
        code_valid_from: Option<DateTime<Utc>>,
        code_expires_at: Option<DateTime<Utc>>,
        code_units: Option<i32>,
        used: bool,
    }
    let entries: Vec<Entry> = sqlx::query_as(
        "SELECT e.user_id, e.rank, e.status = 'revoked' AS revoked, e.code, e.code_valid_from,
                e.code_expires_at, e.code_units,
                CASE WHEN e.code IS NULL THEN false
                     ELSE EXISTS (SELECT 1 FROM orders o WHERE o.user_id = e.user_id
                                    AND o.activity_id = e.activity_id AND o.item_id = e.item_id)
                END AS used
         FROM lottery_entries e
         WHERE e.activity_id = $1 AND e.item_id = $2 ORDER BY e.rank NULLS LAST",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .fetch_all(pool)
    .await?;
    let mut state = DrawnState {
        winners: winners.into(),
        turns: winners.into(),
        ..DrawnState::default()
    };
    let mut in_line = Vec::with_capacity(entries.len());
    for entry in entries {
        let rank = entry.rank.map(i64::from);
        if let Some(rank) = rank {
            in_line.push((entry.user_id, rank));
        }
        if entry.used {
            state.used.push(entry.user_id);
        }
        if let (Some(code), Some(from), Some(until), Some(units)) = (
            entry.code,
            entry.code_valid_from,
            entry.code_expires_at,
            entry.code_units,
        ) {
            state.turns = state.turns.max(rank.unwrap_or(0));
            // A revocation deletes a code that has not bought.
            if !entry.revoked || entry.used {
                let grant = Grant {
                    code,
                    valid_from_ms: from.timestamp_millis(),
                    expires_ms: until.timestamp_millis(),
                    units: units.into(),
                };
                state.codes.push((entry.user_id, grant));
            }
        }
        match (entry.revoked, rank) {
            (true, _) => state.revoked.push((entry.user_id, rank)),
            (false, Some(rank)) => state.ranked.push((entry.user_id, rank)),
            (false, None) => {}
        }
    }
    state.waiting = in_line
        .into_iter()
        .filter(|(_, rank)| *rank > state.turns)
        .map(|(user, _)| user)
        .collect();
    Ok(state)
}

pub async fn mark_published(pool: &PgPool, item: &DueItem) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE lottery_draws SET published_at = now() WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .execute(pool)
    .await?;
    Ok(())
}

/// Writes the codes the waitlist's advance handed out.
pub async fn record_issued(
    pool: &PgPool,
    item: &DueItem,
    issued: &[Issued],
) -> Result<(), sqlx::Error> {
    let users: Vec<i64> = issued.iter().map(|i| i.buyer).collect();
    let codes: Vec<&str> = issued.iter().map(|i| i.grant.code.as_str()).collect();
    let from: Vec<DateTime<Utc>> = issued.iter().map(|i| at(i.grant.valid_from_ms)).collect();
    let until: Vec<DateTime<Utc>> = issued.iter().map(|i| at(i.grant.expires_ms)).collect();
    let units: Vec<i32> = issued
        .iter()
        .map(|i| i32::try_from(i.grant.units).unwrap_or(i32::MAX))
        .collect();
    sqlx::query(
        "UPDATE lottery_entries e
         SET status = 'won', code = i.code, code_valid_from = i.valid_from,
             code_expires_at = i.expires_at, code_units = i.units
         FROM UNNEST($3::BIGINT[], $4::TEXT[], $5::TIMESTAMPTZ[], $6::TIMESTAMPTZ[], $7::INTEGER[])
              AS i (user_id, code, valid_from, expires_at, units)
         WHERE e.activity_id = $1 AND e.item_id = $2 AND e.user_id = i.user_id",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .bind(&users)
    .bind(&codes)
    .bind(&from)
    .bind(&until)
    .bind(&units)
    .execute(pool)
    .await?;
    Ok(())
}

/// Writes every entry's final status once the sale is over, and marks the draw settled.
pub async fn settle(
    pool: &PgPool,
    item: &DueItem,
    finals: &[(i64, Status, Option<Grant>)],
) -> Result<(), sqlx::Error> {
    let users: Vec<i64> = finals.iter().map(|f| f.0).collect();
    let statuses: Vec<&str> = finals.iter().map(|f| rules::status_name(f.1)).collect();
    let codes: Vec<Option<&str>> = finals
        .iter()
        .map(|f| f.2.as_ref().map(|g| g.code.as_str()))
        .collect();
    let mut tx = pool.begin().await?;
    sqlx::query(
        "UPDATE lottery_entries e SET status = f.status, code = COALESCE(f.code, e.code)
         FROM UNNEST($3::BIGINT[], $4::TEXT[], $5::TEXT[]) AS f (user_id, status, code)
         WHERE e.activity_id = $1 AND e.item_id = $2 AND e.user_id = f.user_id",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .bind(&users)
    .bind(&statuses)
    .bind(&codes)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE lottery_draws SET settled_at = now() WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .execute(&mut *tx)
    .await?;
    tx.commit().await
}

/// Marks `user`'s entries of the activity revoked with ops' reason (after the draw; before
/// it he has no entry yet, and the draw writes one from Redis's list).
pub async fn record_revoked(
    pool: &PgPool,
    activity: i64,
    user: i64,
    reason: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE lottery_entries SET status = 'revoked', revoked_reason = $3
         WHERE activity_id = $1 AND user_id = $2",
    )
    .bind(activity)
    .bind(user)
    .bind(reason)
    .execute(pool)
    .await?;
    Ok(())
}

/// One item's draw as ops see it in PostgreSQL.
#[derive(sqlx::FromRow, Clone, Debug)]
pub struct DrawRow {
    pub item_id: i64,
    pub registrants: Option<i32>,
    pub winners: Option<i32>,
    pub drawn_at: Option<DateTime<Utc>>,
    pub codes_issued: i64,
    pub revoked: i64,
    registrations: Option<i32>,
    addresses: Option<i32>,
    from_top_100: Option<i32>,
    top_addresses: Option<Json<Vec<AddressRegistrations>>>,
}

impl DrawRow {
    /// Where the registrations came from, as the draw fixed it (None before the draw).
    pub fn sources(&self) -> Option<RegistrationSources> {
        Some(RegistrationSources {
            registrations: self.registrations?.into(),
            addresses: self.addresses?.into(),
            from_top_100: self.from_top_100?.into(),
            top: self.top_addresses.as_ref()?.0.clone(),
        })
    }
}

/// Entries one insert of a draw carries at most, with the offset of each slice.
fn chunks(entries: &[i64]) -> impl Iterator<Item = (usize, &[i64])> {
    const ENTRIES_PER_INSERT: usize = 50_000;
    entries
        .chunks(ENTRIES_PER_INSERT)
        .enumerate()
        .map(|(n, chunk)| (n * ENTRIES_PER_INSERT, chunk))
}

/// The rank before the entry at `index` of the order (ranks start at 1).
fn rank_before(index: usize) -> i32 {
    i32::try_from(index).unwrap_or(i32::MAX)
}

/// A count as its INTEGER column holds it.
fn count(value: i64) -> i32 {
    i32::try_from(value).unwrap_or(i32::MAX)
}

pub async fn draw_rows(pool: &PgPool, activity: i64) -> Result<Vec<DrawRow>, sqlx::Error> {
    sqlx::query_as(
        "SELECT ai.item_id, d.registrants, d.winners, d.drawn_at, d.registrations, d.addresses,
                d.from_top_100, d.top_addresses,
                (SELECT count(*) FROM lottery_entries e WHERE e.activity_id = ai.activity_id
                   AND e.item_id = ai.item_id AND e.code IS NOT NULL) AS codes_issued,
                (SELECT count(*) FROM lottery_entries e WHERE e.activity_id = ai.activity_id
                   AND e.item_id = ai.item_id AND e.status = 'revoked') AS revoked
         FROM activity_items ai
         LEFT JOIN lottery_draws d ON d.activity_id = ai.activity_id AND d.item_id = ai.item_id
         WHERE ai.activity_id = $1 ORDER BY ai.item_id",
    )
    .bind(activity)
    .fetch_all(pool)
    .await
}

/// Every entry of a drawn item: (user, status as written so far).
pub async fn entries(pool: &PgPool, item: &DueItem) -> Result<Vec<(i64, String)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT user_id, status FROM lottery_entries WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .fetch_all(pool)
    .await
}
