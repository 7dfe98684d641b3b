//! The rehearsals' SQL: the rehearsal row (what was asked, its stage and progress, its
//! result), and what the check reads of the shadow's orders.

use chrono::{DateTime, Utc};
use contract::{
    OrderStatus, Progress, Rehearsal, RehearsalResult, RehearsalStage, RehearsalStatus, Source,
};
use sqlx::PgPool;
use std::{collections::HashMap, time::Duration};
use uuid::Uuid;

use base::db::decode_name;
use sale::catalog::copies::REAL_ACTIVITY;

/// A rehearsal about to start.
pub(crate) struct NewRehearsal<'a> {
    pub(crate) activity_id: i64,
    pub(crate) buyers: i64,
    pub(crate) rate_per_s: i64,
    pub(crate) source: Source,
    pub(crate) actor: &'a str,
    pub(crate) reason: &'a str,
}

/// Inserts the rehearsal `running`; `None` when one of the activity runs already.
pub(crate) async fn insert(
    db: &PgPool,
    new: &NewRehearsal<'_>,
) -> Result<Option<i64>, sqlx::Error> {
    let inserted = sqlx::query_scalar(
        "INSERT INTO rehearsals (activity_id, buyers, rate_per_s, source, actor, reason)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
    )
    .bind(new.activity_id)
    .bind(i32::try_from(new.buyers).unwrap_or(i32::MAX))
    .bind(i32::try_from(new.rate_per_s).unwrap_or(i32::MAX))
    .bind(new.source.as_str())
    .bind(new.actor)
    .bind(new.reason)
    .fetch_one(db)
    .await;
    match inserted {
        Ok(id) => Ok(Some(id)),
        Err(sqlx::Error::Database(error)) if error.code().as_deref() == Some("23505") => Ok(None),
        Err(error) => Err(error),
    }
}

pub(crate) async fn set_stage(
    db: &PgPool,
    id: i64,
    stage: RehearsalStage,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE rehearsals SET stage = $2, updated_at = now() WHERE id = $1")
        .bind(id)
        .bind(stage.as_str())
        .execute(db)
        .await?;
    Ok(())
}

/// Requests sent of those planned.
pub(crate) async fn set_progress(
    db: &PgPool,
    id: i64,
    progress: Progress,
) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE rehearsals SET sent = $2, planned = $3, updated_at = now() WHERE id = $1")
        .bind(id)
        .bind(progress.done)
        .bind(progress.total)
        .execute(db)
        .await?;
    Ok(())
}

/// When the load ran.
pub(crate) async fn set_load_window(
    db: &PgPool,
    id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE rehearsals SET load_started_at = $2, load_ended_at = $3, updated_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(from)
    .bind(to)
    .execute(db)
    .await?;
    Ok(())
}

/// Ends the rehearsal: passed or failed by its result, or an error before one existed;
/// a failed clean-up is recorded as the error (the result stays) and leaves the rehearsal at
/// stage `cleanup_failed`, for the leader to retry. A rehearsal the leader took for
/// abandoned meanwhile keeps what the leader wrote.
pub(crate) async fn finish(
    db: &PgPool,
    id: i64,
    outcome: Result<&RehearsalResult, &str>,
    cleaned: Result<(), &str>,
) -> Result<(), sqlx::Error> {
    let (status, result, error) = match outcome {
        Ok(result) if result.passed => (RehearsalStatus::Passed, Some(result), None),
        Ok(result) => (RehearsalStatus::Failed, Some(result), None),
        Err(error) => (RehearsalStatus::Error, None, Some(error.to_owned())),
    };
    let (stage, error) = match cleaned {
        Ok(()) => (RehearsalStage::Done, error),
        Err(cleaning) => (
            RehearsalStage::CleanupFailed,
            Some(format!(
                "{}the clean-up failed (the leader retries it): {cleaning}",
                error.map(|error| format!("{error}; ")).unwrap_or_default()
            )),
        ),
    };
    let result = result.map(sqlx::types::Json);
    sqlx::query(
        "UPDATE rehearsals SET status = $2, stage = $3, result = $4, error = $5,
                cleaned_up = $6, ended_at = now(), updated_at = now()
         WHERE id = $1 AND status = 'running'",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(stage.as_str())
    .bind(result)
    .bind(error)
    .bind(cleaned.is_ok())
    .execute(db)
    .await?;
    Ok(())
}

/// Rehearsals still `running` whose heartbeat has not moved for `stale` (their instance
/// died): marked `error`, their clean-up left to the leader (stage `cleanup_failed`).
pub(crate) async fn fail_abandoned(db: &PgPool, stale: Duration) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE rehearsals
         SET status = 'error', stage = 'cleanup_failed',
             error = 'abandoned: the instance running it stopped; the leader cleans it up',
             ended_at = now(), updated_at = now()
         WHERE status = 'running' AND updated_at < now() - make_interval(secs => $1)",
    )
    .bind(stale.as_secs_f64())
    .execute(db)
    .await?;
    Ok(())
}

/// Rehearsals over whose shadow is not removed yet, oldest first.
pub(crate) async fn to_clean(db: &PgPool) -> Result<Vec<ToClean>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, buyers, rate_per_s FROM rehearsals
         WHERE stage = 'cleanup_failed' ORDER BY id",
    )
    .fetch_all(db)
    .await
}

/// A rehearsal whose clean-up the leader owes, as the clean-up needs it.
#[derive(sqlx::FromRow)]
pub(crate) struct ToClean {
    pub(crate) id: i64,
    pub(crate) buyers: i32,
    pub(crate) rate_per_s: i32,
}

/// The shadow is gone; a rehearsal already over is then done.
pub(crate) async fn mark_cleaned_up(db: &PgPool, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query(
        "UPDATE rehearsals
         SET cleaned_up = TRUE, updated_at = now(),
             stage = CASE WHEN status = 'running' THEN stage ELSE 'done' END
         WHERE id = $1",
    )
    .bind(id)
    .execute(db)
    .await?;
    Ok(())
}

/// The shadow of rehearsal `id`, if it has one: found by the copy's own row, which names
/// its rehearsal from the moment it exists.
pub(crate) async fn shadow_of(db: &PgPool, id: i64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM activities WHERE rehearsal_id = $1")
        .bind(id)
        .fetch_optional(db)
        .await
}

/// A real activity in a rehearsal's way: the first whose sale is not over, by its start
/// (open now when that start is past).
pub(crate) async fn next_sale(db: &PgPool) -> Result<Option<(i64, DateTime<Utc>)>, sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT a.id, a.starts_at FROM activities a
         WHERE {REAL_ACTIVITY} AND a.ends_at > now() ORDER BY a.starts_at, a.id LIMIT 1"
    ))
    .fetch_optional(db)
    .await
}

/// The heartbeat of running rehearsal `id`; answers a real activity on sale now, if any.
pub(crate) async fn heartbeat(db: &PgPool, id: i64) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "WITH beat AS (UPDATE rehearsals SET updated_at = now()
                       WHERE id = $1 AND status = 'running')
         SELECT a.id FROM activities a
         WHERE {REAL_ACTIVITY} AND a.starts_at <= now() AND a.ends_at > now()
         ORDER BY a.starts_at LIMIT 1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    activity_id: i64,
    shadow_activity_id: Option<i64>,
    buyers: i32,
    rate_per_s: i32,
    source: String,
    actor: String,
    reason: String,
    status: String,
    stage: String,
    sent: i64,
    planned: i64,
    result: Option<sqlx::types::Json<RehearsalResult>>,
    error: Option<String>,
    cleaned_up: bool,
    started_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
}

impl Row {
    fn into_rehearsal(self) -> Result<Rehearsal, sqlx::Error> {
        Ok(Rehearsal {
            id: self.id,
            activity_id: self.activity_id,
            shadow_activity_id: self.shadow_activity_id,
            buyers: self.buyers.into(),
            rate_per_s: self.rate_per_s.into(),
            source: decode_name("source", &self.source, |text| {
                Source::ALL
                    .into_iter()
                    .find(|source| source.as_str() == text)
            })?,
            actor: self.actor,
            reason: self.reason,
            status: decode_name("status", &self.status, RehearsalStatus::parse)?,
            stage: decode_name("stage", &self.stage, RehearsalStage::parse)?,
            progress: Progress {
                done: self.sent,
                total: self.planned,
            },
            result: self.result.map(|json| json.0),
            error: self.error,
            cleaned_up: self.cleaned_up,
            started_at: self.started_at.to_rfc3339(),
            ended_at: self.ended_at.map(|at| at.to_rfc3339()),
        })
    }
}

const COLUMNS: &str = "id, activity_id, shadow_activity_id, buyers, rate_per_s, source, actor, \
                       reason, status, stage, sent, planned, result, error, cleaned_up, \
                       started_at, ended_at";

pub(crate) async fn get(db: &PgPool, id: i64) -> Result<Option<Rehearsal>, sqlx::Error> {
    let row: Option<Row> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM rehearsals WHERE id = $1"))
            .bind(id)
            .fetch_optional(db)
            .await?;
    row.map(Row::into_rehearsal).transpose()
}

/// Rehearsals newest first, of one activity or of all.
pub(crate) async fn list(
    db: &PgPool,
    activity_id: Option<i64>,
    limit: i64,
) -> Result<Vec<Rehearsal>, sqlx::Error> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM rehearsals
         WHERE $1::BIGINT IS NULL OR activity_id = $1 ORDER BY id DESC LIMIT $2"
    ))
    .bind(activity_id)
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.into_iter().map(Row::into_rehearsal).collect()
}

/// The order states that keep units out of stock, as stored.
fn holding() -> Vec<&'static str> {
    OrderStatus::ALL
        .into_iter()
        .filter(|status| status.holds_stock())
        .map(OrderStatus::as_str)
        .collect()
}

/// Pre-orders of the activity the pipeline has not completed.
pub(crate) async fn pre_created(db: &PgPool, activity_id: i64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM orders WHERE activity_id = $1 AND status = 'PRE_CREATED'",
    )
    .bind(activity_id)
    .fetch_one(db)
    .await
}

/// Units held by orders that keep stock, per item of the activity.
pub(crate) async fn held_units(
    db: &PgPool,
    activity_id: i64,
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    Ok(sqlx::query_as::<_, (i64, i64)>(
        "SELECT item_id, SUM(quantity)::BIGINT FROM orders
         WHERE activity_id = $1 AND status = ANY($2) GROUP BY item_id",
    )
    .bind(activity_id)
    .bind(holding())
    .fetch_all(db)
    .await?
    .into_iter()
    .collect())
}

/// Buyers whose orders that keep stock hold more of an item than its per-user limit:
/// (item, buyer, units).
pub(crate) async fn over_limit(
    db: &PgPool,
    activity_id: i64,
) -> Result<Vec<(i64, i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT o.item_id, o.user_id, SUM(o.quantity)::BIGINT AS units
         FROM orders o
         JOIN activity_items ai ON ai.activity_id = o.activity_id AND ai.item_id = o.item_id
         WHERE o.activity_id = $1 AND o.status = ANY($2)
         GROUP BY o.item_id, o.user_id, ai.per_user_limit
         HAVING SUM(o.quantity) > ai.per_user_limit
         ORDER BY units DESC",
    )
    .bind(activity_id)
    .bind(holding())
    .fetch_all(db)
    .await
}

/// Which of `orders` exist and keep stock.
pub(crate) async fn holding_orders(db: &PgPool, orders: &[Uuid]) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar("SELECT id FROM orders WHERE id = ANY($1) AND status = ANY($2)")
        .bind(orders)
        .bind(holding())
        .fetch_all(db)
        .await
}
