//! Reconciliation's SQL: the runs and their findings, and what a run reads of an activity
//! in PostgreSQL (item counters, holdings, the restore journal). Stuck pre-orders are the
//! order pipeline's own queries (`orders::stuck`).

use chrono::{DateTime, Utc};
use sqlx::{PgPool, Postgres, Transaction};
use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};
use uuid::Uuid;

use contract::{
    Finding, FindingAction, FindingClass, Progress, ReconciliationRun, RunStatus, RunSummary,
    RunTrigger,
};

use base::db::decode_name;
use sale::catalog::copies::{Copies, REAL_ACTIVITY};

/// An item's counters as PostgreSQL keeps them.
#[derive(Clone, Debug, sqlx::FromRow)]
pub(crate) struct ItemFigures {
    pub(crate) item_id: i64,
    pub(crate) name: String,
    pub(crate) total: i64,
    pub(crate) allocated: i64,
    pub(crate) sold: i64,
    pub(crate) restored: i64,
    pub(crate) restore_owed: i64,
}

/// Counters of every item of an activity: a few rows, read from the item rows and the
/// journal's item index, never from the orders.
pub(crate) async fn item_figures<'e>(
    executor: impl sqlx::PgExecutor<'e>,
    activity_id: i64,
) -> Result<Vec<ItemFigures>, sqlx::Error> {
    sqlx::query_as(
        "SELECT ai.item_id, i.name, ai.total_stock::BIGINT AS total,
                ai.allocated::BIGINT AS allocated, ai.sold::BIGINT AS sold,
                COALESCE(j.restored, 0)::BIGINT AS restored,
                COALESCE(j.owed, 0)::BIGINT AS restore_owed
         FROM activity_items ai
         JOIN items i ON i.id = ai.item_id
         LEFT JOIN LATERAL (
             SELECT SUM(quantity) AS restored,
                    SUM(quantity) FILTER (WHERE redis_restored_at IS NULL) AS owed
             FROM stock_restore_journal
             WHERE activity_id = ai.activity_id AND item_id = ai.item_id
         ) j ON TRUE
         WHERE ai.activity_id = $1 ORDER BY ai.item_id",
    )
    .bind(activity_id)
    .fetch_all(executor)
    .await
}

/// A read-only transaction whose every statement sees one snapshot, taken by its first
/// statement: what was committed before is in it, nothing committed after.
pub(crate) async fn snapshot(db: &PgPool) -> Result<Transaction<'static, Postgres>, sqlx::Error> {
    let mut tx = db.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Which of `orders` exist in this transaction's view (in any state). A set: during a sale
/// the markers of a pass run into thousands, and each is looked up in it.
pub(crate) async fn visible_orders(
    tx: &mut Transaction<'_, Postgres>,
    orders: &[Uuid],
) -> Result<HashSet<Uuid>, sqlx::Error> {
    if orders.is_empty() {
        return Ok(HashSet::new());
    }
    let visible: Vec<Uuid> = sqlx::query_scalar("SELECT id FROM orders WHERE id = ANY($1)")
        .bind(orders)
        .fetch_all(&mut **tx)
        .await?;
    Ok(visible.into_iter().collect())
}

/// Units each of `buyers` holds of the item.
pub(crate) async fn holdings_of(
    tx: &mut Transaction<'_, Postgres>,
    activity_id: i64,
    item_id: i64,
    buyers: &[i64],
) -> Result<HashMap<i64, i64>, sqlx::Error> {
    Ok(sqlx::query_as::<_, (i64, i64)>(
        "SELECT user_id, units::BIGINT FROM buyer_holdings
         WHERE activity_id = $1 AND item_id = $2 AND user_id = ANY($3) AND units > 0",
    )
    .bind(activity_id)
    .bind(item_id)
    .bind(buyers)
    .fetch_all(&mut **tx)
    .await?
    .into_iter()
    .collect())
}

/// A chunk of the item's holders, in buyer order after `after`.
pub(crate) async fn holders_after(
    tx: &mut Transaction<'_, Postgres>,
    activity_id: i64,
    item_id: i64,
    after: i64,
    limit: i64,
) -> Result<Vec<(i64, i64)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT user_id, units::BIGINT FROM buyer_holdings
         WHERE activity_id = $1 AND item_id = $2 AND units > 0 AND user_id > $3
         ORDER BY user_id LIMIT $4",
    )
    .bind(activity_id)
    .bind(item_id)
    .bind(after)
    .bind(limit)
    .fetch_all(&mut **tx)
    .await
}

/// How many buyers hold units of the item.
pub(crate) async fn holder_count(
    tx: &mut Transaction<'_, Postgres>,
    activity_id: i64,
    item_id: i64,
) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT COUNT(*) FROM buyer_holdings WHERE activity_id = $1 AND item_id = $2 AND units > 0",
    )
    .bind(activity_id)
    .bind(item_id)
    .fetch_one(&mut **tx)
    .await
}

/// `UNPAID` orders of the activity past their deadline by more than `grace`.
pub(crate) async fn overdue_unpaid(
    db: &PgPool,
    activity_id: i64,
    grace: Duration,
    limit: i64,
) -> Result<Vec<(Uuid, i64, i64, i32)>, sqlx::Error> {
    sqlx::query_as(
        "SELECT id, item_id, user_id, quantity FROM orders
         WHERE activity_id = $1 AND status = 'UNPAID'
           AND pay_deadline < now() - make_interval(secs => $2)
         ORDER BY pay_deadline LIMIT $3",
    )
    .bind(activity_id)
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(db)
    .await
}

/// The activity's item ids whose stock went back to PostgreSQL and not yet to Redis, more
/// than `grace` ago.
pub(crate) async fn owed_restores(
    db: &PgPool,
    activity_id: i64,
    grace: Duration,
    limit: i64,
) -> Result<Vec<sale::orders::cancellations::GiveBack>, sqlx::Error> {
    sqlx::query_as(
        "SELECT j.order_id, j.activity_id, j.item_id, o.user_id, j.quantity, j.seats
         FROM stock_restore_journal j JOIN orders o ON o.id = j.order_id
         WHERE j.activity_id = $1 AND j.redis_restored_at IS NULL
           AND j.restored_at < now() - make_interval(secs => $2)
         ORDER BY j.restored_at LIMIT $3",
    )
    .bind(activity_id)
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(db)
    .await
}

/// Orders of the item whose units went back to stock in PostgreSQL (the journal).
pub(crate) async fn restored_orders(
    tx: &mut Transaction<'_, Postgres>,
    activity_id: i64,
    item_id: i64,
) -> Result<Vec<Uuid>, sqlx::Error> {
    sqlx::query_scalar(
        "SELECT order_id FROM stock_restore_journal WHERE activity_id = $1 AND item_id = $2",
    )
    .bind(activity_id)
    .bind(item_id)
    .fetch_all(&mut **tx)
    .await
}

/// When the activity was last loaded into Redis.
pub(crate) async fn prewarmed_at(
    db: &PgPool,
    activity_id: i64,
) -> Result<Option<DateTime<Utc>>, sqlx::Error> {
    Ok(sqlx::query_scalar::<_, Option<DateTime<Utc>>>(
        "SELECT prewarmed_at FROM activities WHERE id = $1",
    )
    .bind(activity_id)
    .fetch_optional(db)
    .await?
    .flatten())
}

pub(crate) async fn mark_prewarmed(db: &PgPool, activity_id: i64) -> Result<(), sqlx::Error> {
    sqlx::query("UPDATE activities SET prewarmed_at = now() WHERE id = $1")
        .bind(activity_id)
        .execute(db)
        .await?;
    Ok(())
}

/// A run about to start.
pub(crate) struct NewRun<'a> {
    pub(crate) activity_id: i64,
    pub(crate) repair: bool,
    pub(crate) trigger: RunTrigger,
    pub(crate) actor: &'a str,
    pub(crate) reason: Option<&'a str>,
    pub(crate) items: i64,
}

pub(crate) async fn insert_run(db: &PgPool, run: &NewRun<'_>) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(
        "INSERT INTO reconciliation_runs (activity_id, repair, trigger, actor, reason, total)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
    )
    .bind(run.activity_id)
    .bind(run.repair)
    .bind(run.trigger.as_str())
    .bind(run.actor)
    .bind(run.reason)
    .bind(i32::try_from(run.items).unwrap_or(i32::MAX))
    .fetch_one(db)
    .await
}

/// Stores an item's findings and counts it done.
pub(crate) async fn item_done(
    db: &PgPool,
    run_id: i64,
    findings: &[Finding],
) -> Result<(), sqlx::Error> {
    let mut tx = db.begin().await?;
    if !findings.is_empty() {
        let orders: Vec<Option<Uuid>> = findings
            .iter()
            .map(|f| f.order_id.as_deref().and_then(|id| id.parse().ok()))
            .collect();
        sqlx::query(
            "INSERT INTO reconciliation_findings (run_id, class, item_id, order_id, user_id, units, action, detail)
             SELECT $1, class, item_id, order_id, user_id, units, action, detail
             FROM UNNEST($2::TEXT[], $3::BIGINT[], $4::UUID[], $5::BIGINT[], $6::BIGINT[], $7::TEXT[], $8::TEXT[])
                  AS f (class, item_id, order_id, user_id, units, action, detail)",
        )
        .bind(run_id)
        .bind(findings.iter().map(|f| f.class.as_str()).collect::<Vec<_>>())
        .bind(findings.iter().map(|f| f.item_id).collect::<Vec<_>>())
        .bind(orders)
        .bind(findings.iter().map(|f| f.user_id).collect::<Vec<_>>())
        .bind(findings.iter().map(|f| f.units).collect::<Vec<_>>())
        .bind(findings.iter().map(|f| f.action.as_str()).collect::<Vec<_>>())
        .bind(findings.iter().map(|f| f.detail.as_str()).collect::<Vec<_>>())
        .execute(&mut *tx)
        .await?;
    }
    sqlx::query("UPDATE reconciliation_runs SET done = done + 1, updated_at = now() WHERE id = $1")
        .bind(run_id)
        .execute(&mut *tx)
        .await?;
    tx.commit().await
}

pub(crate) async fn finish(
    db: &PgPool,
    run_id: i64,
    error: Option<&str>,
) -> Result<(), sqlx::Error> {
    let status = if error.is_some() {
        RunStatus::Failed
    } else {
        RunStatus::Done
    };
    sqlx::query(
        "UPDATE reconciliation_runs SET status = $2, error = $3, ended_at = now(), updated_at = now()
         WHERE id = $1",
    )
    .bind(run_id)
    .bind(status.as_str())
    .bind(error)
    .execute(db)
    .await?;
    Ok(())
}

/// Runs still `running` whose progress has not moved for `stale`: their instance died.
pub(crate) async fn fail_abandoned(db: &PgPool, stale: Duration) -> Result<u64, sqlx::Error> {
    Ok(sqlx::query(
        "UPDATE reconciliation_runs
         SET status = 'failed', error = 'abandoned: the instance running it stopped', ended_at = now()
         WHERE status = 'running' AND updated_at < now() - make_interval(secs => $1)",
    )
    .bind(stale.as_secs_f64())
    .execute(db)
    .await?
    .rows_affected())
}

#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    activity_id: i64,
    status: String,
    repair: bool,
    trigger: String,
    actor: String,
    reason: Option<String>,
    done: i32,
    total: i32,
    error: Option<String>,
    started_at: DateTime<Utc>,
    ended_at: Option<DateTime<Utc>>,
}

const RUN_COLUMNS: &str = "r.id, r.activity_id, r.status, r.repair, r.trigger, r.actor, r.reason, \
                           r.done, r.total, r.error, r.started_at, r.ended_at";

impl RunRow {
    fn progress(&self) -> Progress {
        Progress {
            done: self.done.into(),
            total: self.total.into(),
        }
    }

    fn status(&self) -> Result<RunStatus, sqlx::Error> {
        decode_name("status", &self.status, RunStatus::parse)
    }

    fn trigger(&self) -> Result<RunTrigger, sqlx::Error> {
        decode_name("trigger", &self.trigger, RunTrigger::parse)
    }
}

/// The run with its findings; `merchant` limits it to that merchant's activities.
pub(crate) async fn get_run(
    db: &PgPool,
    id: i64,
    merchant: Option<i64>,
) -> Result<Option<ReconciliationRun>, sqlx::Error> {
    let row: Option<RunRow> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM reconciliation_runs r JOIN activities a ON a.id = r.activity_id
         WHERE r.id = $1 AND ($2::BIGINT IS NULL OR a.merchant_id = $2)"
    ))
    .bind(id)
    .bind(merchant)
    .fetch_optional(db)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    #[derive(sqlx::FromRow)]
    struct FindingRow {
        class: String,
        item_id: i64,
        order_id: Option<Uuid>,
        user_id: Option<i64>,
        units: i64,
        action: String,
        detail: String,
    }
    let findings: Vec<FindingRow> = sqlx::query_as(
        "SELECT class, item_id, order_id, user_id, units, action, detail
         FROM reconciliation_findings WHERE run_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(db)
    .await?;
    let findings = findings
        .into_iter()
        .map(|row| {
            Ok(Finding {
                class: decode_name("class", &row.class, FindingClass::parse)?,
                item_id: row.item_id,
                order_id: row.order_id.map(|id| id.to_string()),
                user_id: row.user_id,
                units: row.units,
                action: decode_name("action", &row.action, FindingAction::parse)?,
                detail: row.detail,
            })
        })
        .collect::<Result<Vec<_>, sqlx::Error>>()?;
    Ok(Some(ReconciliationRun {
        id: row.id,
        activity_id: row.activity_id,
        status: row.status()?,
        repair: row.repair,
        trigger: row.trigger()?,
        actor: row.actor.clone(),
        reason: row.reason.clone(),
        progress: row.progress(),
        findings,
        error: row.error.clone(),
        started_at: row.started_at.to_rfc3339(),
        ended_at: row.ended_at.map(|at| at.to_rfc3339()),
    }))
}

/// Runs newest first, with their findings counted: of real sales only, unless one activity
/// is asked for by id (the leader's pass stores runs of rehearsals' copies too, whose
/// figures are their rehearsal's own, never listed with a real sale's).
pub(crate) async fn list_runs(
    db: &PgPool,
    activity_id: Option<i64>,
    merchant: Option<i64>,
    limit: i64,
) -> Result<Vec<RunSummary>, sqlx::Error> {
    #[derive(sqlx::FromRow)]
    struct Listed {
        #[sqlx(flatten)]
        run: RunRow,
        findings: i64,
        repaired: i64,
        flagged: i64,
    }
    let rows: Vec<Listed> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS},
                COUNT(f.id) AS findings,
                COUNT(f.id) FILTER (WHERE f.action = 'repaired') AS repaired,
                COUNT(f.id) FILTER (WHERE f.action = 'flagged') AS flagged
         FROM reconciliation_runs r
         JOIN activities a ON a.id = r.activity_id
         LEFT JOIN reconciliation_findings f ON f.run_id = r.id
         WHERE ($1::BIGINT IS NULL OR r.activity_id = $1)
           AND ($1::BIGINT IS NOT NULL OR {REAL_ACTIVITY})
           AND ($2::BIGINT IS NULL OR a.merchant_id = $2)
         GROUP BY r.id ORDER BY r.id DESC LIMIT $3"
    ))
    .bind(activity_id)
    .bind(merchant)
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.into_iter()
        .map(|row| {
            Ok(RunSummary {
                id: row.run.id,
                activity_id: row.run.activity_id,
                status: row.run.status()?,
                repair: row.run.repair,
                trigger: row.run.trigger()?,
                actor: row.run.actor.clone(),
                progress: row.run.progress(),
                findings: row.findings,
                repaired: row.repaired,
                flagged: row.flagged,
                started_at: row.run.started_at.to_rfc3339(),
                ended_at: row.run.ended_at.map(|at| at.to_rfc3339()),
            })
        })
        .collect()
}

/// Activities the leader reconciles on every pass: not ended, and open or pre-warmed;
/// rehearsals' copies with them or not, as `copies` says.
pub(crate) async fn live_activity_ids(
    db: &PgPool,
    copies: Copies,
) -> Result<Vec<i64>, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "SELECT a.id FROM activities a
         WHERE a.ends_at > now() AND (a.starts_at <= now() OR a.prewarmed_at IS NOT NULL)
           AND ($1 OR {REAL_ACTIVITY})
         ORDER BY a.id"
    ))
    .bind(copies == Copies::Included)
    .fetch_all(db)
    .await
}

/// Deletes up to `limit` runs that ended before `before`, with their findings; how many
/// runs it deleted. A running run is never deleted. The runs go a few at a time, since
/// each takes its findings with it.
pub(crate) async fn prune_runs_older_than(
    db: &PgPool,
    before: DateTime<Utc>,
    limit: i64,
) -> Result<u64, sqlx::Error> {
    base::db::prune_batch(
        db,
        "DELETE FROM reconciliation_runs WHERE id IN (
             SELECT id FROM reconciliation_runs WHERE status <> 'running' AND ended_at < $1
             ORDER BY id LIMIT $2 FOR UPDATE SKIP LOCKED)",
        before,
        limit,
    )
    .await
}
