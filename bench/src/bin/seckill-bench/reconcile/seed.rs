//! The reconciliation benchmark's data, written in SQL with `generate_series`: one sale of a
//! million orders as the pipeline leaves them mid-sale, consistent to the unit (so a report
//! run over it finds nothing), and an empty sale the buy load goes to.

use sqlx::{Connection, Executor, PgConnection};
use std::time::{Duration, Instant};

/// Price of both items, in cents.
const PRICE_CENTS: i64 = 4990;
/// Pay timeout of both activities: every active order's deadline is still ahead.
pub const PAY_TIMEOUT_S: i32 = 7200;
/// Stock of the bought item: never sold out within a run.
const BUY_STOCK: i32 = 10_000_000;

/// What is seeded: `orders` orders of one item, `cancelled` of them cancelled.
#[derive(Clone, Copy)]
pub struct Shape {
    pub orders: i64,
    pub cancelled: i64,
    pub total_stock: i64,
}

impl Shape {
    /// Orders holding their unit (`UNPAID` or `PAID`): the item's `allocated` and `sold`,
    /// and its buyers holding one unit.
    pub fn active(&self) -> i64 {
        self.orders - self.cancelled
    }
}

/// The two sales, as seeded.
pub struct Seeded {
    /// The sale of `orders` orders the report runs reconcile.
    pub reconciled: (i64, i64),
    /// The empty sale the buy load goes to.
    pub bought: (i64, i64),
    pub written: Duration,
    pub vacuumed: Duration,
}

/// Writes both sales into the migrated database at `url`, then VACUUM (ANALYZE)s the
/// tables a report run and the count read, so both sides find a set visibility map and
/// fresh statistics (as autovacuum leaves them in a sale that runs for a while).
pub async fn seed(url: &str, shape: Shape) -> anyhow::Result<Seeded> {
    anyhow::ensure!(
        shape.orders > 0 && (0..shape.orders).contains(&shape.cancelled),
        "orders must be positive and cancelled fewer than orders"
    );
    anyhow::ensure!(
        shape.total_stock >= shape.active() && i32::try_from(shape.total_stock).is_ok(),
        "the reconciled item's stock must cover its active orders and fit an INTEGER"
    );
    let started = Instant::now();
    let mut db = PgConnection::connect(url).await?;
    let mut tx = db.begin().await?;
    // Every row is consistent by construction (one merchant, one item per sale); the
    // per-row foreign-key triggers would only double the time the seed takes.
    tx.execute("SET LOCAL session_replication_role = replica")
        .await?;
    let merchant: i64 = sqlx::query_scalar(
        "INSERT INTO merchants (name) VALUES ('Reconciliation benchmark') RETURNING id",
    )
    .fetch_one(&mut *tx)
    .await?;
    let mut sales = Vec::new();
    for (title, total) in [
        ("Reconciled sale", shape.total_stock),
        ("Bought sale", i64::from(BUY_STOCK)),
    ] {
        let item: i64 = sqlx::query_scalar(
            "INSERT INTO items (merchant_id, name, price_cents) VALUES ($1, $2, $3) RETURNING id",
        )
        .bind(merchant)
        .bind(title)
        .bind(PRICE_CENTS)
        .fetch_one(&mut *tx)
        .await?;
        // Open three hours ago: the cancelled orders' deadlines have passed, the active
        // ones' have not.
        let activity: i64 = sqlx::query_scalar(
            "INSERT INTO activities (merchant_id, title, kind, starts_at, ends_at, pay_timeout_s)
             VALUES ($1, $2, 'standard', now() - interval '3 hours', now() + interval '3 hours', $3)
             RETURNING id",
        )
        .bind(merchant)
        .bind(title)
        .bind(PAY_TIMEOUT_S)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO activity_items
                 (activity_id, item_id, total_stock, allocated, sold, per_user_limit, price_cents)
             VALUES ($1, $2, $3, 0, 0, 1, $4)",
        )
        .bind(activity)
        .bind(item)
        .bind(i32::try_from(total)?)
        .bind(PRICE_CENTS)
        .execute(&mut *tx)
        .await?;
        sales.push((activity, item));
    }
    let (activity, item) = sales[0];
    // Buyer `u` placed order `u`. The first `cancelled` buyers' orders were created in the
    // sale's first hour and cancelled at their deadline (their holdings at 0 units, as the
    // cancel leaves them); the rest were created over the last 100 minutes, every other
    // one paid.
    sqlx::query(
        "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status,
                             request_id, pay_deadline, created_at, updated_at)
         SELECT gen_random_uuid(), $1, $2, u, 1, $3,
                CASE WHEN u <= $5 THEN 'CANCELLED' WHEN u % 2 = 0 THEN 'PAID' ELSE 'UNPAID' END,
                'seed-' || u, at + make_interval(secs => $6), at,
                CASE WHEN u <= $5 THEN at + make_interval(secs => $6) ELSE at END
         FROM generate_series(1, $4::BIGINT) AS u,
              LATERAL (SELECT CASE
                  WHEN u <= $5 THEN now() - interval '3 hours' + interval '1 hour' * (u::FLOAT8 / $5)
                  ELSE now() - interval '100 minutes' * (1 - (u - $5)::FLOAT8 / ($4 - $5))
              END AS at) AS created",
    )
    .bind(activity)
    .bind(item)
    .bind(PRICE_CENTS)
    .bind(shape.orders)
    .bind(shape.cancelled)
    .bind(f64::from(PAY_TIMEOUT_S))
    .execute(&mut *tx)
    .await?;
    // Given back to Redis too: no restore is owed.
    sqlx::query(
        "INSERT INTO stock_restore_journal
             (order_id, activity_id, item_id, quantity, restored_at, redis_restored_at)
         SELECT id, activity_id, item_id, quantity, updated_at, updated_at + interval '5 ms'
         FROM orders WHERE activity_id = $1 AND status = 'CANCELLED'",
    )
    .bind(activity)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
         SELECT $1, $2, u, CASE WHEN u <= $4 THEN 0 ELSE 1 END, 1
         FROM generate_series(1, $3::BIGINT) AS u",
    )
    .bind(activity)
    .bind(item)
    .bind(shape.orders)
    .bind(shape.cancelled)
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE activity_items SET allocated = $3, sold = $3 WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(activity)
    .bind(item)
    .bind(i32::try_from(shape.active())?)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    let written = started.elapsed();
    let started = Instant::now();
    db.execute("VACUUM (ANALYZE) orders, buyer_holdings, stock_restore_journal, activity_items")
        .await?;
    Ok(Seeded {
        reconciled: sales[0],
        bought: sales[1],
        written,
        vacuumed: started.elapsed(),
    })
}
