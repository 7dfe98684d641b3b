//! Items, activities, their stock rows and seats in PostgreSQL.
//!
//! `merchant` arguments are the visibility scope from [`Actor::visible_merchant`]:
//! `None` reads every merchant's rows, `Some(id)` only that merchant's.
//!
//! [`Actor::visible_merchant`]: contract::Actor::visible_merchant

use chrono::{DateTime, Utc};
use contract::{ActivityInput, ActivityKind, ActivitySummary, Item, ItemInput};
use sqlx::{PgPool, Postgres, Transaction};

use crate::{catalog::copies::REAL_ACTIVITY, catalog::rules::LotteryTerms};
use base::tally;

pub async fn insert_item(
    pool: &PgPool,
    merchant_id: i64,
    input: &ItemInput,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO items (merchant_id, name, description, price_cents)
         VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(merchant_id)
    .bind(input.name.trim())
    .bind(&input.description)
    .bind(input.price_cents)
    .fetch_one(pool)
    .await
}

/// Updates the item if it is visible in `merchant`'s scope; false when it is not.
pub async fn update_item(
    pool: &PgPool,
    id: i64,
    merchant: Option<i64>,
    input: &ItemInput,
) -> Result<bool, sqlx::Error> {
    let result = sqlx::query(
        "UPDATE items SET name = $3, description = $4, price_cents = $5, updated_at = now()
         WHERE id = $1 AND ($2::BIGINT IS NULL OR merchant_id = $2)",
    )
    .bind(id)
    .bind(merchant)
    .bind(input.name.trim())
    .bind(&input.description)
    .bind(input.price_cents)
    .execute(pool)
    .await?;
    Ok(result.rows_affected() == 1)
}

#[derive(sqlx::FromRow)]
struct ItemRow {
    id: i64,
    merchant_id: i64,
    name: String,
    description: String,
    price_cents: i64,
}

impl From<ItemRow> for Item {
    fn from(row: ItemRow) -> Self {
        Item {
            id: row.id,
            merchant_id: row.merchant_id,
            name: row.name,
            description: row.description,
            price_cents: row.price_cents,
        }
    }
}

pub async fn list_items(pool: &PgPool, merchant: Option<i64>) -> Result<Vec<Item>, sqlx::Error> {
    let rows: Vec<ItemRow> = sqlx::query_as(
        "SELECT id, merchant_id, name, description, price_cents FROM items
         WHERE $1::BIGINT IS NULL OR merchant_id = $1 ORDER BY id DESC LIMIT 1000",
    )
    .bind(merchant)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Item::from).collect())
}

pub async fn get_item(
    pool: &PgPool,
    id: i64,
    merchant: Option<i64>,
) -> Result<Option<Item>, sqlx::Error> {
    let row: Option<ItemRow> = sqlx::query_as(
        "SELECT id, merchant_id, name, description, price_cents FROM items
         WHERE id = $1 AND ($2::BIGINT IS NULL OR merchant_id = $2)",
    )
    .bind(id)
    .bind(merchant)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(Item::from))
}

/// How many of `item_ids` belong to `merchant_id`; an activity may only sell its merchant's items.
async fn count_owned_items(
    tx: &mut Transaction<'_, Postgres>,
    merchant_id: i64,
    item_ids: &[i64],
) -> Result<usize, sqlx::Error> {
    let owned: i64 =
        sqlx::query_scalar("SELECT count(*) FROM items WHERE merchant_id = $1 AND id = ANY($2)")
            .bind(merchant_id)
            .bind(item_ids)
            .fetch_one(&mut **tx)
            .await?;
    Ok(usize::try_from(owned).unwrap_or(0))
}

/// Why an activity write did not happen.
#[derive(Debug)]
pub enum ActivityWrite {
    /// An item is not the merchant's (or does not exist).
    ForeignItem,
    /// The activity is not visible in the caller's scope.
    Missing,
    /// The sale has started (or stock has moved): its shape is frozen.
    Locked,
}

/// Writes the activity (`id` absent: a new one) with its items and seats, replacing any
/// it had. Refused when an item is not `owner`'s.
async fn write_activity(
    tx: &mut Transaction<'_, Postgres>,
    id: Option<i64>,
    owner: i64,
    input: &ActivityInput,
    lottery: Option<LotteryTerms>,
) -> Result<Result<i64, ActivityWrite>, sqlx::Error> {
    let item_ids: Vec<i64> = input.items.iter().map(|i| i.item_id).collect();
    if count_owned_items(tx, owner, &item_ids).await? != item_ids.len() {
        return Ok(Err(ActivityWrite::ForeignItem));
    }
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO activities (id, merchant_id, title, kind, starts_at, ends_at, pay_timeout_s,
                                 mode, registration_opens_at, registration_closes_at, code_ttl_s)
         VALUES (COALESCE($1, nextval(pg_get_serial_sequence('activities', 'id'))), $2, $3, $4, $5, $6, $7,
                 $8, $9, $10, $11)
         ON CONFLICT (id) DO UPDATE
            SET title = EXCLUDED.title, kind = EXCLUDED.kind, starts_at = EXCLUDED.starts_at,
                ends_at = EXCLUDED.ends_at, pay_timeout_s = EXCLUDED.pay_timeout_s,
                mode = EXCLUDED.mode, registration_opens_at = EXCLUDED.registration_opens_at,
                registration_closes_at = EXCLUDED.registration_closes_at,
                code_ttl_s = EXCLUDED.code_ttl_s, updated_at = now()
         RETURNING id",
    )
    .bind(id)
    .bind(owner)
    .bind(input.title.trim())
    .bind(input.kind.as_str())
    .bind(input.starts_at)
    .bind(input.ends_at)
    .bind(i32::try_from(input.pay_timeout_s).unwrap_or(i32::MAX))
    .bind(input.mode.as_str())
    .bind(lottery.map(|terms| terms.registration_opens_at))
    .bind(lottery.map(|terms| terms.registration_closes_at))
    .bind(lottery.map(|terms| i32::try_from(terms.code_ttl_s).unwrap_or(i32::MAX)))
    .fetch_one(&mut **tx)
    .await?;
    if lottery.is_some() {
        crate::lottery::store::fix_seed(tx, id).await?;
    }
    sqlx::query("DELETE FROM seats WHERE activity_id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    sqlx::query("DELETE FROM activity_items WHERE activity_id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    let stocks: Vec<i64> = input.items.iter().map(|i| i.stock).collect();
    let limits: Vec<i64> = input.items.iter().map(|i| i.per_user_limit).collect();
    let prices: Vec<i64> = input.items.iter().map(|i| i.price_cents).collect();
    sqlx::query(
        "INSERT INTO activity_items (activity_id, item_id, total_stock, per_user_limit, price_cents)
         SELECT $1, item_id, stock::INTEGER, per_user_limit::INTEGER, price_cents
         FROM UNNEST($2::BIGINT[], $3::BIGINT[], $4::BIGINT[], $5::BIGINT[])
              AS lines (item_id, stock, per_user_limit, price_cents)",
    )
    .bind(id)
    .bind(&item_ids)
    .bind(&stocks)
    .bind(&limits)
    .bind(&prices)
    .execute(&mut **tx)
    .await?;
    if input.kind == ActivityKind::Seated {
        sqlx::query("INSERT INTO seats (activity_id, seat_code) SELECT $1, UNNEST($2::TEXT[])")
            .bind(id)
            .bind(&input.seats)
            .execute(&mut **tx)
            .await?;
    }
    Ok(Ok(id))
}

pub async fn insert_activity(
    pool: &PgPool,
    merchant_id: i64,
    input: &ActivityInput,
    lottery: Option<LotteryTerms>,
) -> Result<Result<i64, ActivityWrite>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let written = write_activity(&mut tx, None, merchant_id, input, lottery).await?;
    if written.is_ok() {
        tx.commit().await?;
    }
    Ok(written)
}

/// Replaces an activity's fields, items and seats, but only before it starts and while no
/// order exists for it: after that, stock belongs to the sale.
pub async fn update_activity(
    pool: &PgPool,
    id: i64,
    merchant: Option<i64>,
    input: &ActivityInput,
    lottery: Option<LotteryTerms>,
    now: DateTime<Utc>,
) -> Result<Result<(), ActivityWrite>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let current: Option<(i64, DateTime<Utc>)> = sqlx::query_as(
        "SELECT merchant_id, starts_at FROM activities
         WHERE id = $1 AND ($2::BIGINT IS NULL OR merchant_id = $2) FOR UPDATE",
    )
    .bind(id)
    .bind(merchant)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((owner, starts_at)) = current else {
        return Ok(Err(ActivityWrite::Missing));
    };
    let has_orders: bool =
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM orders WHERE activity_id = $1)")
            .bind(id)
            .fetch_one(&mut *tx)
            .await?;
    if starts_at <= now || has_orders {
        return Ok(Err(ActivityWrite::Locked));
    }
    let written = write_activity(&mut tx, Some(id), owner, input, lottery).await?;
    if written.is_ok() {
        tx.commit().await?;
    }
    Ok(written.map(|_| ()))
}

#[derive(sqlx::FromRow)]
struct SummaryRow {
    id: i64,
    merchant_id: i64,
    title: String,
    kind: String,
    starts_at: DateTime<Utc>,
    ends_at: DateTime<Utc>,
    total_stock: i64,
    item_count: i64,
    prewarmed: bool,
    published_version: Option<i64>,
}

fn parse_kind(kind: &str) -> Result<ActivityKind, sqlx::Error> {
    kind.parse()
        .map_err(|e: String| sqlx::Error::Decode(e.into()))
}

/// The catalogue's activities, newest first; a rehearsal's shadow copy is no activity of
/// the catalogue's and is left out.
pub async fn list_activities(
    pool: &PgPool,
    merchant: Option<i64>,
) -> Result<Vec<ActivitySummary>, sqlx::Error> {
    let rows: Vec<SummaryRow> = sqlx::query_as(&format!(
        "SELECT a.id, a.merchant_id, a.title, a.kind, a.starts_at, a.ends_at,
                COALESCE(SUM(ai.total_stock), 0)::BIGINT AS total_stock,
                COUNT(ai.item_id) AS item_count,
                a.prewarmed_at IS NOT NULL AS prewarmed,
                (SELECT p.version FROM sale_pages p WHERE p.activity_id = a.id) AS published_version
         FROM activities a LEFT JOIN activity_items ai ON ai.activity_id = a.id
         WHERE ($1::BIGINT IS NULL OR a.merchant_id = $1) AND {REAL_ACTIVITY}
         GROUP BY a.id ORDER BY a.starts_at DESC LIMIT 500"
    ))
    .bind(merchant)
    .fetch_all(pool)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(ActivitySummary {
                id: row.id,
                merchant_id: row.merchant_id,
                title: row.title,
                kind: parse_kind(&row.kind)?,
                starts_at: row.starts_at,
                ends_at: row.ends_at,
                total_stock: row.total_stock,
                item_count: row.item_count,
                prewarmed: row.prewarmed,
                published_version: row.published_version,
            })
        })
        .collect()
}

/// An activity as stored, before live Redis figures are added.
pub struct StoredActivity {
    pub id: i64,
    pub merchant_id: i64,
    pub title: String,
    pub kind: ActivityKind,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub pay_timeout_s: i64,
    /// Set on a rehearsal's shadow copy: the activity it copies.
    pub rehearsal_of: Option<i64>,
    pub lines: Vec<StoredLine>,
    pub seats: Vec<String>,
    /// A lottery activity's terms and draw commitment; `None` sells to whoever comes first.
    pub lottery: Option<StoredLottery>,
}

/// A lottery activity's terms as stored, with what it shows of its draw's seed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredLottery {
    pub terms: LotteryTerms,
    /// Hex SHA-256 of the seed, fixed since the activity became a lottery.
    pub commitment: String,
    /// The seed in hex, once every item is drawn.
    pub revealed_seed: Option<String>,
}

#[derive(sqlx::FromRow)]
pub struct StoredLine {
    pub item_id: i64,
    pub name: String,
    pub description: String,
    pub total_stock: i32,
    /// Units the pre-orders hold (PostgreSQL's deduction, whichever layer deducted first).
    pub allocated: i32,
    pub sold: i32,
    pub per_user_limit: i32,
    pub price_cents: i64,
}

pub async fn get_activity(
    pool: &PgPool,
    id: i64,
    merchant: Option<i64>,
) -> Result<Option<StoredActivity>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Head {
        id: i64,
        merchant_id: i64,
        title: String,
        kind: String,
        starts_at: DateTime<Utc>,
        ends_at: DateTime<Utc>,
        pay_timeout_s: i32,
        rehearsal_of: Option<i64>,
        registration_opens_at: Option<DateTime<Utc>>,
        registration_closes_at: Option<DateTime<Utc>>,
        code_ttl_s: Option<i32>,
        commitment: Option<String>,
        revealed_seed: Option<Vec<u8>>,
    }
    // A buy that misses the activity cache pays these three statements (its path counts them).
    tally::db_statement_alone();
    let head: Option<Head> = sqlx::query_as(
        "SELECT a.id, a.merchant_id, a.title, a.kind, a.starts_at, a.ends_at, a.pay_timeout_s,
                a.rehearsal_of, a.registration_opens_at, a.registration_closes_at, a.code_ttl_s,
                s.commitment, CASE WHEN s.revealed_at IS NOT NULL THEN s.seed END AS revealed_seed
         FROM activities a LEFT JOIN lottery_seeds s ON s.activity_id = a.id AND a.mode = 'lottery'
         WHERE a.id = $1 AND ($2::BIGINT IS NULL OR a.merchant_id = $2)",
    )
    .bind(id)
    .bind(merchant)
    .fetch_optional(pool)
    .await?;
    let Some(head) = head else { return Ok(None) };
    let lottery = match (
        head.registration_opens_at,
        head.registration_closes_at,
        head.code_ttl_s,
        head.commitment,
    ) {
        (Some(opens), Some(closes), Some(ttl), Some(commitment)) => Some(StoredLottery {
            terms: LotteryTerms {
                registration_opens_at: opens,
                registration_closes_at: closes,
                code_ttl_s: ttl.into(),
            },
            commitment,
            revealed_seed: head.revealed_seed.map(hex::encode),
        }),
        _ => None,
    };
    tally::db_statement_alone();
    let lines: Vec<StoredLine> = sqlx::query_as(
        "SELECT ai.item_id, i.name, i.description, ai.total_stock, ai.allocated, ai.sold, ai.per_user_limit,
                ai.price_cents
         FROM activity_items ai JOIN items i ON i.id = ai.item_id
         WHERE ai.activity_id = $1 ORDER BY ai.item_id",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    tally::db_statement_alone();
    let seats: Vec<String> =
        sqlx::query_scalar("SELECT seat_code FROM seats WHERE activity_id = $1 ORDER BY seat_code")
            .bind(id)
            .fetch_all(pool)
            .await?;
    Ok(Some(StoredActivity {
        id: head.id,
        merchant_id: head.merchant_id,
        title: head.title,
        kind: parse_kind(&head.kind)?,
        starts_at: head.starts_at,
        ends_at: head.ends_at,
        pay_timeout_s: head.pay_timeout_s.into(),
        rehearsal_of: head.rehearsal_of,
        lines,
        seats,
        lottery,
    }))
}
