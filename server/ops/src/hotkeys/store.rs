//! The history of hot keys in PostgreSQL (`hotkey_periods`): a period opens when a key goes
//! into force, its peak rises while the leader renews it, and it closes when the key is
//! removed or lapses.

use chrono::{DateTime, Utc};
use contract::{HotKeyId, HotKeyPeriod};
use sqlx::PgPool;

use base::db::decode_name;

/// A period about to open.
pub(super) struct Opening<'a> {
    pub(super) id: HotKeyId,
    pub(super) action: contract::HotKeyAction,
    pub(super) source: contract::HotKeySource,
    pub(super) rate_per_s: u64,
    pub(super) actor: Option<&'a str>,
    pub(super) reason: Option<&'a str>,
}

fn rate(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// Opens a period for the key, unless one is open (a takeover continues it).
pub(super) async fn open(db: &PgPool, opening: &Opening<'_>) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO hotkey_periods (kind, key, action, source, peak_rate_per_s, actor, reason)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (kind, key) WHERE ended_at IS NULL DO NOTHING",
    )
    .bind(opening.id.kind().as_str())
    .bind(opening.id.to_string())
    .bind(opening.action.as_str())
    .bind(opening.source.as_str())
    .bind(rate(opening.rate_per_s))
    .bind(opening.actor)
    .bind(opening.reason)
    .execute(db)
    .await?;
    Ok(())
}

/// Raises the open period's peak to `rate_per_s` if it is higher.
pub(super) async fn raise_peak(db: &PgPool, id: HotKeyId, rate_per_s: u64) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE hotkey_periods SET peak_rate_per_s = GREATEST(peak_rate_per_s, $3)
         WHERE kind = $1 AND key = $2 AND ended_at IS NULL",
    )
    .bind(id.kind().as_str())
    .bind(id.to_string())
    .bind(rate(rate_per_s))
    .execute(db)
    .await?;
    Ok(())
}

/// Closes the key's open period, if any.
pub(super) async fn close(db: &PgPool, id: HotKeyId) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE hotkey_periods SET ended_at = now()
         WHERE kind = $1 AND key = $2 AND ended_at IS NULL",
    )
    .bind(id.kind().as_str())
    .bind(id.to_string())
    .execute(db)
    .await?;
    Ok(())
}

/// Closes every open period whose key is no longer in force (`in_force`: `kind/key`).
pub(super) async fn close_lapsed(db: &PgPool, in_force: &[String]) -> sqlx::Result<u64> {
    let done = sqlx::query(
        "UPDATE hotkey_periods SET ended_at = now()
         WHERE ended_at IS NULL AND NOT (kind || '/' || key = ANY($1))",
    )
    .bind(in_force)
    .execute(db)
    .await?;
    Ok(done.rows_affected())
}

fn source_named(text: &str) -> Option<contract::HotKeySource> {
    use contract::HotKeySource::{Detected, Manual};
    [Detected, Manual].into_iter().find(|s| s.as_str() == text)
}

/// The periods that started or were still open within the last `hours`, latest first.
pub(crate) async fn recent(db: &PgPool, hours: u32, limit: i64) -> sqlx::Result<Vec<HotKeyPeriod>> {
    type Row = (
        i64,
        String,
        String,
        String,
        String,
        i64,
        DateTime<Utc>,
        Option<DateTime<Utc>>,
        Option<String>,
        Option<String>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, kind, key, action, source, peak_rate_per_s, started_at, ended_at, actor, reason
         FROM hotkey_periods
         WHERE ended_at IS NULL OR ended_at > now() - make_interval(hours => $1)
         ORDER BY started_at DESC, id DESC
         LIMIT $2",
    )
    .bind(i32::try_from(hours).unwrap_or(i32::MAX))
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(
            |(id, kind, key, action, source, peak, started_at, ended_at, actor, reason)| {
                Ok(HotKeyPeriod {
                    id,
                    kind: decode_name("kind", &kind, |k| k.parse().ok())?,
                    key,
                    action: decode_name("action", &action, |a| a.parse().ok())?,
                    source: decode_name("source", &source, source_named)?,
                    peak_rate_per_s: u64::try_from(peak).unwrap_or(0),
                    started_at,
                    ended_at,
                    actor,
                    reason,
                })
            },
        )
        .collect()
}

/// Deletes up to `limit` periods that ended before `before`; how many it deleted. A key in
/// force (its period open) is never deleted, however old.
pub(crate) async fn prune_older_than(
    db: &PgPool,
    before: DateTime<Utc>,
    limit: i64,
) -> sqlx::Result<u64> {
    base::db::prune_batch(
        db,
        "DELETE FROM hotkey_periods WHERE id IN (
             SELECT id FROM hotkey_periods WHERE ended_at < $1
             ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
        before,
        limit,
    )
    .await
}
