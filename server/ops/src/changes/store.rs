//! The queries of `switch_changes`: where a change waits until the leader applies it, and
//! where an applied one keeps the revert still due.

use chrono::{DateTime, Utc};
use contract::{ChangeState, Source, SwitchChangeRow};
use sqlx::{PgExecutor, PgPool, Postgres, Transaction};

use base::db::decode_name;

/// A change as it is made.
pub(crate) struct NewChange<'a> {
    pub(crate) path: &'a str,
    pub(crate) value: &'a str,
    pub(crate) reason: &'a str,
    pub(crate) proposer: &'a str,
    pub(crate) source: Source,
    pub(crate) state: ChangeState,
    pub(crate) apply_at: Option<DateTime<Utc>>,
    pub(crate) revert_after_s: Option<u32>,
    /// A stage's named instances, or its share of the live ones.
    pub(crate) stage_instances: Option<&'a [String]>,
    pub(crate) stage_percent: Option<u8>,
}

pub(crate) async fn insert<'e>(
    db: impl PgExecutor<'e>,
    change: &NewChange<'_>,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO switch_changes
             (path, value, reason, proposer, source, state, apply_at, revert_after_s,
              stage_instances, stage_percent)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
    )
    .bind(change.path)
    .bind(change.value)
    .bind(change.reason)
    .bind(change.proposer)
    .bind(change.source.as_str())
    .bind(change.state.as_str())
    .bind(change.apply_at)
    .bind(change.revert_after_s.map(|s| s as i32))
    .bind(change.stage_instances)
    .bind(change.stage_percent.map(i16::from))
    .fetch_one(db)
    .await
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    path: String,
    value: String,
    reason: String,
    proposer: String,
    source: String,
    state: String,
    apply_at: Option<DateTime<Utc>>,
    revert_after_s: Option<i32>,
    created_at: DateTime<Utc>,
    applied_at: Option<DateTime<Utc>>,
    applied_revision: Option<i64>,
    replaced_value: Option<String>,
    revert_at: Option<DateTime<Utc>>,
    revert_dropped: Option<String>,
    decided_by: Option<String>,
    decided_reason: Option<String>,
    decided_at: Option<DateTime<Utc>>,
    stage_instances: Option<Vec<String>>,
    stage_percent: Option<i16>,
    staged_at: Option<DateTime<Utc>>,
}

impl Row {
    fn decode(self) -> sqlx::Result<SwitchChangeRow> {
        Ok(SwitchChangeRow {
            id: self.id,
            path: self.path,
            value: self.value,
            reason: self.reason,
            proposer: self.proposer,
            source: decode_name("source", &self.source, Source::parse)?,
            state: decode_name("state", &self.state, ChangeState::parse)?,
            apply_at: self.apply_at,
            revert_after_s: self.revert_after_s.map(|s| s.unsigned_abs()),
            created_at: self.created_at,
            applied_at: self.applied_at,
            applied_revision: self.applied_revision,
            replaced_value: self.replaced_value,
            revert_at: self.revert_at,
            revert_dropped: self.revert_dropped,
            decided_by: self.decided_by,
            decided_reason: self.decided_reason,
            decided_at: self.decided_at,
            stage_instances: self.stage_instances,
            stage_percent: self.stage_percent.and_then(|p| u8::try_from(p).ok()),
            staged_at: self.staged_at,
        })
    }
}

const COLUMNS: &str = "id, path, value, reason, proposer, source, state, apply_at, revert_after_s,
    created_at, applied_at, applied_revision, replaced_value, revert_at, revert_dropped,
    decided_by, decided_reason, decided_at, stage_instances, stage_percent, staged_at";

/// The latest `limit` changes, of one state or all, newest first.
pub(crate) async fn list(
    db: &PgPool,
    state: Option<ChangeState>,
    limit: i64,
) -> sqlx::Result<Vec<SwitchChangeRow>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM switch_changes WHERE $1::TEXT IS NULL OR state = $1
         ORDER BY created_at DESC, id DESC LIMIT $2"
    ))
    .bind(state.map(ChangeState::as_str))
    .bind(limit)
    .fetch_all(db)
    .await?;
    rows.into_iter().map(Row::decode).collect()
}

/// Every change that may still flip a key: scheduled, waiting for approval, staged, or
/// applied with its revert still due.
pub(crate) async fn waiting(db: &PgPool) -> sqlx::Result<Vec<SwitchChangeRow>> {
    let rows: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM switch_changes
         WHERE state IN ('scheduled', 'pending_approval', 'staged')
            OR (state = 'applied' AND revert_at IS NOT NULL AND revert_dropped IS NULL)
         ORDER BY id"
    ))
    .fetch_all(db)
    .await?;
    rows.into_iter().map(Row::decode).collect()
}

pub(crate) async fn get(db: &PgPool, id: i64) -> sqlx::Result<Option<SwitchChangeRow>> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM switch_changes WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?;
    row.map(Row::decode).transpose()
}

/// Moves a change that still waits (`from`) to a final state an operator decided
/// (`cancelled`, `rejected`); false when it no longer waits (applied, or decided already).
pub(crate) async fn decide<'e>(
    db: impl PgExecutor<'e>,
    id: i64,
    from: &[ChangeState],
    to: ChangeState,
    by: &str,
    reason: &str,
) -> sqlx::Result<bool> {
    let from: Vec<&str> = from.iter().map(|state| state.as_str()).collect();
    let done = sqlx::query(
        "UPDATE switch_changes
         SET state = $3, decided_by = $4, decided_reason = $5, decided_at = now()
         WHERE id = $1 AND state = ANY($2)",
    )
    .bind(id)
    .bind(&from)
    .bind(to.as_str())
    .bind(by)
    .bind(reason)
    .execute(db)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// A change locked for a decision on it (an approval), waiting for the lock if the leader
/// holds it.
pub(crate) async fn lock(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
) -> sqlx::Result<Option<SwitchChangeRow>> {
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM switch_changes WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(Row::decode).transpose()
}

/// A second person approved a change: it is scheduled for `apply_at` (its own time, or
/// now when it had none or it has passed).
pub(crate) async fn approve(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    by: &str,
    reason: &str,
    apply_at: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE switch_changes
         SET state = 'scheduled', apply_at = $4,
             decided_by = $2, decided_reason = $3, decided_at = now()
         WHERE id = $1 AND state = 'pending_approval'",
    )
    .bind(id)
    .bind(by)
    .bind(reason)
    .bind(apply_at)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// What the leader looks for.
#[derive(Clone, Copy)]
pub(crate) enum Due {
    /// A scheduled change whose time has come.
    Apply,
    /// An applied change whose revert's time has come.
    Revert,
}

/// One change due at `now`, locked for the leader's transaction; another transaction's
/// claim is skipped, not waited for.
pub(crate) async fn claim(
    tx: &mut Transaction<'_, Postgres>,
    due: Due,
    now: DateTime<Utc>,
) -> sqlx::Result<Option<SwitchChangeRow>> {
    let (condition, order) = match due {
        Due::Apply => ("state = 'scheduled' AND apply_at <= $1", "apply_at"),
        Due::Revert => (
            "state = 'applied' AND revert_at <= $1 AND revert_dropped IS NULL",
            "revert_at",
        ),
    };
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM switch_changes WHERE {condition}
         ORDER BY {order}, id LIMIT 1 FOR UPDATE SKIP LOCKED"
    ))
    .bind(now)
    .fetch_optional(&mut **tx)
    .await?;
    row.map(Row::decode).transpose()
}

/// A change's value is in etcd at `revision`, replacing `replaced`. Its revert, if asked
/// for, falls due `revert_after_s` after `applied_at`.
pub(crate) async fn mark_applied(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    applied_at: DateTime<Utc>,
    revision: i64,
    replaced: Option<&str>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE switch_changes
         SET state = 'applied', applied_at = $2, applied_revision = $3, replaced_value = $4,
             revert_at = $2 + make_interval(secs => revert_after_s)
         WHERE id = $1",
    )
    .bind(id)
    .bind(applied_at)
    .bind(revision)
    .bind(replaced)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// A stage is in force on `instances` since `staged_at`.
pub(crate) async fn mark_staged(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    staged_at: DateTime<Utc>,
    instances: &[String],
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE switch_changes SET state = 'staged', staged_at = $2, stage_instances = $3
         WHERE id = $1",
    )
    .bind(id)
    .bind(staged_at)
    .bind(instances)
    .execute(&mut **tx)
    .await?;
    Ok(())
}

/// The change staged on the key now, or about to be (scheduled or waiting for approval),
/// if any: a key has one stage at a time.
pub(crate) async fn stage_on(db: &PgPool, path: &str) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "SELECT id FROM switch_changes
         WHERE path = $1 AND (state = 'staged' OR (state IN ('scheduled', 'pending_approval')
               AND (stage_instances IS NOT NULL OR stage_percent IS NOT NULL)))
         ORDER BY id LIMIT 1",
    )
    .bind(path)
    .fetch_optional(db)
    .await
}

pub(crate) async fn mark_reverted(tx: &mut Transaction<'_, Postgres>, id: i64) -> sqlx::Result<()> {
    sqlx::query("UPDATE switch_changes SET state = 'reverted' WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(())
}

/// The revert is no longer due, and why.
pub(crate) async fn drop_revert(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
    why: &str,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE switch_changes SET revert_dropped = $2 WHERE id = $1")
        .bind(id)
        .bind(why)
        .execute(&mut **tx)
        .await?;
    Ok(())
}
