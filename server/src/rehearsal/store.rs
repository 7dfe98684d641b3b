//! The rehearsals' SQL: the rehearsal row (what was asked, its stage and progress, its
//! result), and what the check reads of the shadow's orders.

use chrono::{DateTime, Utc};
use contract::{
    OrderStatus, Progress, Rehearsal, RehearsalResult, RehearsalStage, RehearsalStatus, Source,
};
use sqlx::PgPool;
use std::{collections::HashMap, time::Duration};
use uuid::Uuid;

use crate::infra::db::decode_name;

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
/// a failed clean-up is recorded as the error (the result stays).
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
    let error = match cleaned {
        Ok(()) => error,
        Err(cleaning) => Some(format!(
            "{}the clean-up failed: {cleaning}",
            error.map(|error| format!("{error}; ")).unwrap_or_default()
        )),
    };
    let result = result.map(sqlx::types::Json);
    sqlx::query(
        "UPDATE rehearsals SET status = $2, stage = 'done', result = $3, error = $4,
                cleaned_up = $5, ended_at = now(), updated_at = now()
         WHERE id = $1",
    )
    .bind(id)
    .bind(status.as_str())
    .bind(result)
    .bind(error)
    .bind(cleaned.is_ok())
    .execute(db)
    .await?;
    Ok(())
}

/// Rehearsals still `running` whose progress has not moved for `stale` (their instance
/// died): marked `error`, and returned with their shadow for the clean-up.
pub(crate) async fn fail_abandoned(
    db: &PgPool,
    stale: Duration,
) -> Result<Vec<Abandoned>, sqlx::Error> {
    sqlx::query_as(
        "UPDATE rehearsals
         SET status = 'error', stage = 'done', error = 'abandoned: the instance running it stopped',
             ended_at = now(), updated_at = now()
         WHERE status = 'running' AND updated_at < now() - make_interval(secs => $1)
         RETURNING id, activity_id, shadow_activity_id, buyers, rate_per_s",
    )
    .bind(stale.as_secs_f64())
    .fetch_all(db)
    .await
}

/// An abandoned rehearsal, as its clean-up needs it.
#[derive(sqlx::FromRow)]
pub(crate) struct Abandoned {
    pub(crate) id: i64,
    pub(crate) activity_id: i64,
    pub(crate) shadow_activity_id: Option<i64>,
    pub(crate) buyers: i32,
    pub(crate) rate_per_s: i32,
}

pub(crate) async fn mark_cleaned_up(db: &PgPool, id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE rehearsals SET cleaned_up = TRUE WHERE id = $1")
        .bind(id)
        .execute(db)
        .await?;
    Ok(())
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
