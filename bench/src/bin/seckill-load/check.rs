//! The stock invariants checked after a run, against PostgreSQL and Redis. Per item under
//! load: (1) never oversold, (2) nobody over the per-user limit, (4) Redis stock plus the
//! units held by orders equals the total stock; and for the run: (3) every order id a
//! buyer got with a 200 is in `orders`. (4) only warns: orders may still be in flight.

use anyhow::Context;
use base::config::Settings;
use redis::aio::MultiplexedConnection;
use secrecy::ExposeSecret;
use serde::Serialize;
use sqlx::{postgres::PgPoolOptions, PgPool};
use std::{
    collections::HashSet,
    time::{Duration, Instant},
};
use uuid::Uuid;

/// Order states that hold stock.
const HOLDING: [&str; 4] = ["PRE_CREATED", "UNPAID", "PAID", "REFUND_PENDING"];

/// How often (4) looks again while Redis and the orders disagree.
const SETTLE_POLL: Duration = Duration::from_millis(250);

/// Offenders named in a failed check's detail.
const SHOWN: usize = 5;

#[derive(Serialize)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

#[derive(Serialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "UPPERCASE")]
pub enum Verdict {
    Pass,
    Fail,
    Warn,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Self::Pass => "PASS",
            Self::Fail => "FAIL",
            Self::Warn => "WARN",
        }
    }

    fn pass_if(ok: bool) -> Self {
        if ok {
            Self::Pass
        } else {
            Self::Fail
        }
    }
}

/// The server's Redis, read-only, under the deployment's key prefix.
struct Redis {
    connection: MultiplexedConnection,
    prefix: String,
}

impl Redis {
    async fn connect(settings: &Settings) -> redis::RedisResult<Self> {
        let client = redis::Client::open(settings.redis_url.expose_secret())?;
        Ok(Self {
            connection: client.get_multiplexed_async_connection().await?,
            prefix: settings.redis_prefix.clone(),
        })
    }

    /// The server's stock counter of one activity item (its hash tag keeps an item's keys
    /// on one cluster slot).
    fn stock_key(&self, item: &Item) -> String {
        format!(
            "{}{{a{}.i{}}}:stock",
            self.prefix, item.activity_id, item.item_id
        )
    }

    async fn get(&self, key: &str) -> redis::RedisResult<Option<i64>> {
        redis::cmd("GET")
            .arg(key)
            .query_async(&mut self.connection.clone())
            .await
    }
}

/// One item of the activity with its stock settings.
struct Item {
    activity_id: i64,
    item_id: i64,
    total_stock: i64,
    per_user_limit: i64,
}

impl Item {
    fn label(&self) -> String {
        format!("a{}.i{}", self.activity_id, self.item_id)
    }
}

/// Runs every check; an error means a store could not be asked, not that a check failed.
pub async fn run(
    settings: Settings,
    activity_id: i64,
    items: &[i64],
    order_ids: &HashSet<Uuid>,
    settle: Duration,
) -> anyhow::Result<Vec<Check>> {
    let pool = PgPoolOptions::new()
        .max_connections(2)
        .connect(settings.database_url.expose_secret())
        .await
        .context("connecting to PostgreSQL")?;
    let redis = Redis::connect(&settings)
        .await
        .context("connecting to Redis")?;
    let mut checks = Vec::new();
    for &item_id in items {
        match load_item(&pool, activity_id, item_id).await? {
            Some(item) => checks.extend(check_item(&pool, &redis, &item, settle).await?),
            None => checks.push(Check {
                name: format!("a{activity_id}.i{item_id} exists"),
                verdict: Verdict::Fail,
                detail: "not an item of this activity".into(),
            }),
        }
    }
    checks.push(orders_exist(&pool, order_ids).await?);
    Ok(checks)
}

async fn check_item(
    pool: &PgPool,
    redis: &Redis,
    item: &Item,
    settle: Duration,
) -> anyhow::Result<Vec<Check>> {
    Ok(vec![
        not_oversold(pool, item).await?,
        within_limit(pool, item).await?,
        redis_agrees(pool, redis, item, settle).await?,
    ])
}

async fn load_item(pool: &PgPool, activity_id: i64, item_id: i64) -> sqlx::Result<Option<Item>> {
    let row: Option<(i32, i32)> = sqlx::query_as(
        "SELECT total_stock, per_user_limit FROM activity_items \
         WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(activity_id)
    .bind(item_id)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(|(total_stock, per_user_limit)| Item {
        activity_id,
        item_id,
        total_stock: total_stock.into(),
        per_user_limit: per_user_limit.into(),
    }))
}

async fn held_units(pool: &PgPool, item: &Item) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT COALESCE(SUM(quantity), 0)::bigint FROM orders \
         WHERE activity_id = $1 AND item_id = $2 AND status = ANY($3)",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .bind(&HOLDING[..])
    .fetch_one(pool)
    .await
}

/// (1) Units held by orders never exceed the total stock.
async fn not_oversold(pool: &PgPool, item: &Item) -> sqlx::Result<Check> {
    let held = held_units(pool, item).await?;
    Ok(Check {
        name: format!("[1] {} not oversold", item.label()),
        verdict: Verdict::pass_if(held <= item.total_stock),
        detail: format!("{held} units held, total stock {}", item.total_stock),
    })
}

/// (2) No buyer holds more than the per-user limit.
async fn within_limit(pool: &PgPool, item: &Item) -> sqlx::Result<Check> {
    let offenders: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT user_id, SUM(quantity)::bigint AS held FROM orders \
         WHERE activity_id = $1 AND item_id = $2 AND status = ANY($3) \
         GROUP BY user_id HAVING SUM(quantity) > $4 ORDER BY held DESC",
    )
    .bind(item.activity_id)
    .bind(item.item_id)
    .bind(&HOLDING[..])
    .bind(item.per_user_limit)
    .fetch_all(pool)
    .await?;
    let detail = if offenders.is_empty() {
        format!("nobody holds more than {}", item.per_user_limit)
    } else {
        let shown: Vec<String> = offenders
            .iter()
            .take(SHOWN)
            .map(|(user, held)| format!("user {user} holds {held}"))
            .collect();
        format!(
            "{} buyers over the limit of {}: {}",
            offenders.len(),
            item.per_user_limit,
            shown.join(", ")
        )
    };
    Ok(Check {
        name: format!("[2] {} per-user limit", item.label()),
        verdict: Verdict::pass_if(offenders.is_empty()),
        detail,
    })
}

/// (3) Every order id returned with a 200 is in `orders`.
async fn orders_exist(pool: &PgPool, order_ids: &HashSet<Uuid>) -> sqlx::Result<Check> {
    let wanted: Vec<Uuid> = order_ids.iter().copied().collect();
    let found: HashSet<Uuid> =
        sqlx::query_scalar("SELECT id FROM orders WHERE id = ANY($1::uuid[])")
            .bind(&wanted)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    let missing: Vec<String> = order_ids
        .difference(&found)
        .take(SHOWN)
        .map(Uuid::to_string)
        .collect();
    let detail = if missing.is_empty() {
        format!("all {} order ids found", wanted.len())
    } else {
        format!(
            "{} of {} order ids missing, e.g. {}",
            wanted.len() - found.len(),
            wanted.len(),
            missing.join(", ")
        )
    };
    Ok(Check {
        name: "[3] every 200 has its order".into(),
        verdict: Verdict::pass_if(missing.is_empty()),
        detail,
    })
}

/// (4) Redis stock + units held by orders == total stock, looked at again until `settle`
/// has passed; a lasting difference is a warning (a deduction may still be on its way to
/// an order, or waiting to be given back).
async fn redis_agrees(
    pool: &PgPool,
    redis: &Redis,
    item: &Item,
    settle: Duration,
) -> anyhow::Result<Check> {
    let key = redis.stock_key(item);
    let deadline = Instant::now() + settle;
    loop {
        let stock = redis.get(&key).await?;
        let held = held_units(pool, item).await?;
        let agrees = stock.is_some_and(|stock| stock + held == item.total_stock);
        if agrees || Instant::now() >= deadline {
            let stock = stock.map_or_else(|| "absent".to_owned(), |s| s.to_string());
            return Ok(Check {
                name: format!("[4] {} Redis stock + held = total", item.label()),
                verdict: if agrees { Verdict::Pass } else { Verdict::Warn },
                detail: format!(
                    "{key} = {stock}, {held} units held, total stock {}",
                    item.total_stock
                ),
            });
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}
