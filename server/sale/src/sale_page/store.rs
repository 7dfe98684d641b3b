//! The published versions in PostgreSQL (`sale_pages`).

use sqlx::{PgPool, Postgres, Transaction};

/// Starts a publish of `activity_id`: takes its activity row's lock, so two publishes of one
/// activity take turns (buys, which only take the key-share lock of a foreign key, go on),
/// and reads the current version. `Ok(None)` inside: not yet published.
pub async fn begin_publish(
    pool: &PgPool,
    activity_id: i64,
) -> Result<(Transaction<'static, Postgres>, Option<i64>), sqlx::Error> {
    let mut tx = pool.begin().await?;
    sqlx::query("SELECT id FROM activities WHERE id = $1 FOR NO KEY UPDATE")
        .bind(activity_id)
        .execute(&mut *tx)
        .await?;
    let current: Option<i64> =
        sqlx::query_scalar("SELECT version FROM sale_pages WHERE activity_id = $1")
            .bind(activity_id)
            .fetch_optional(&mut *tx)
            .await?;
    Ok((tx, current))
}

/// Records `version` as the current publication (inside the publish's transaction).
pub async fn save_version(
    tx: &mut Transaction<'static, Postgres>,
    activity_id: i64,
    version: i64,
    published_by: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO sale_pages (activity_id, version, published_by) VALUES ($1, $2, $3)
         ON CONFLICT (activity_id) DO UPDATE
         SET version = EXCLUDED.version, published_by = EXCLUDED.published_by, published_at = now()",
    )
    .bind(activity_id)
    .bind(version)
    .bind(published_by)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// Every published activity with its current version.
pub async fn versions(pool: &PgPool) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as("SELECT activity_id, version FROM sale_pages")
        .fetch_all(pool)
        .await
}

/// Those of `ids` that are activities still: a page folder of any other belongs to a
/// deleted activity. Asked of `activities` rather than `sale_pages`, since a first publish
/// writes its folder before its row commits.
pub async fn existing_activities(pool: &PgPool, ids: &[i64]) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM activities WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(pool)
        .await
}

/// The current publication of `activity_id`, if any: its version, when, and whether the
/// activity or one of its items was edited after it (the buyers' page is then stale).
pub async fn publication(
    pool: &PgPool,
    activity_id: i64,
) -> Result<Option<contract::Publication>, sqlx::Error> {
    let row: Option<(i64, chrono::DateTime<chrono::Utc>, bool)> = sqlx::query_as(
        "SELECT p.version, p.published_at,
                p.published_at < GREATEST(a.updated_at,
                    (SELECT max(i.updated_at) FROM activity_items ai JOIN items i ON i.id = ai.item_id
                     WHERE ai.activity_id = a.id))
         FROM sale_pages p JOIN activities a ON a.id = p.activity_id
         WHERE p.activity_id = $1",
    )
    .bind(activity_id)
    .fetch_optional(pool)
    .await?;
    Ok(
        row.map(|(version, published_at, stale)| contract::Publication {
            version,
            published_at,
            stale,
        }),
    )
}
