//! Reports and runs in PostgreSQL (`baseline_reports`, `baseline_runs`).

use chrono::{DateTime, Utc};
use contract::{BaselineRun, RunCost, RunKind, RunPath, RunPerf};
use sqlx::{types::Json, PgPool, Postgres, Transaction};

use crate::{baselines::figures::Figures, infra::db::decode_name};

pub(crate) async fn insert_report(
    db: &PgPool,
    node_id: &str,
    taken_at: DateTime<Utc>,
    figures: &Figures,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO baseline_reports (node_id, taken_at, figures) VALUES ($1, $2, $3)
         ON CONFLICT (node_id, taken_at) DO NOTHING",
    )
    .bind(node_id)
    .bind(taken_at)
    .bind(Json(figures))
    .execute(db)
    .await?;
    Ok(())
}

/// One instance's report as stored.
pub(crate) struct StoredReport {
    pub(crate) node_id: String,
    pub(crate) taken_at: DateTime<Utc>,
    pub(crate) figures: Figures,
}

/// Every report taken from `from` to `to`, by instance and time.
pub(crate) async fn reports_between(
    db: &PgPool,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> sqlx::Result<Vec<StoredReport>> {
    let rows: Vec<(String, DateTime<Utc>, Json<Figures>)> = sqlx::query_as(
        "SELECT node_id, taken_at, figures FROM baseline_reports
         WHERE taken_at BETWEEN $1 AND $2 ORDER BY node_id, taken_at",
    )
    .bind(from)
    .bind(to)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(node_id, taken_at, Json(figures))| StoredReport {
            node_id,
            taken_at,
            figures,
        })
        .collect())
}

/// Reports older than `before` are no run's any more.
pub(crate) async fn prune_reports(db: &PgPool, before: DateTime<Utc>) -> sqlx::Result<u64> {
    Ok(
        sqlx::query("DELETE FROM baseline_reports WHERE taken_at < $1")
            .bind(before)
            .execute(db)
            .await?
            .rows_affected(),
    )
}

/// A window whose run is due: a sale that ended, or a rehearsal's load.
pub(crate) struct DueRun {
    pub(crate) activity_id: i64,
    pub(crate) kind: RunKind,
    /// The rehearsal a `rehearsal` run measures.
    pub(crate) rehearsal_id: Option<i64>,
    pub(crate) starts_at: DateTime<Utc>,
    pub(crate) ends_at: DateTime<Utc>,
}

/// Activities that ended between `since` and `until` and have no sale run. A rehearsal's
/// shadow copy is no sale: the rehearsal deletes it, and its run with it.
pub(crate) async fn ended_without_run(
    db: &PgPool,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> sqlx::Result<Vec<DueRun>> {
    let rows: Vec<(i64, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "SELECT a.id, a.starts_at, a.ends_at FROM activities a
         WHERE a.ends_at > $1 AND a.ends_at <= $2 AND a.rehearsal_of IS NULL
           AND NOT EXISTS (SELECT 1 FROM baseline_runs r WHERE r.activity_id = a.id AND r.kind = 'sale')
         ORDER BY a.ends_at",
    )
    .bind(since)
    .bind(until)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(activity_id, starts_at, ends_at)| DueRun {
            activity_id,
            kind: RunKind::Sale,
            rehearsal_id: None,
            starts_at,
            ends_at,
        })
        .collect())
}

/// Rehearsals whose load ended between `since` and `until` and have no run: the run is
/// the activity's (not its shadow's), over the load's window.
pub(crate) async fn rehearsed_without_run(
    db: &PgPool,
    since: DateTime<Utc>,
    until: DateTime<Utc>,
) -> sqlx::Result<Vec<DueRun>> {
    let rows: Vec<(i64, i64, DateTime<Utc>, DateTime<Utc>)> = sqlx::query_as(
        "SELECT r.id, r.activity_id, r.load_started_at, r.load_ended_at FROM rehearsals r
         WHERE r.load_ended_at > $1 AND r.load_ended_at <= $2
           AND r.load_started_at IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM baseline_runs b WHERE b.rehearsal_id = r.id)
         ORDER BY r.load_ended_at",
    )
    .bind(since)
    .bind(until)
    .fetch_all(db)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(rehearsal_id, activity_id, starts_at, ends_at)| DueRun {
            activity_id,
            kind: RunKind::Rehearsal,
            rehearsal_id: Some(rehearsal_id),
            starts_at,
            ends_at,
        })
        .collect())
}

/// A run about to be stored.
pub(crate) struct NewRun {
    pub(crate) activity_id: i64,
    pub(crate) kind: RunKind,
    pub(crate) rehearsal_id: Option<i64>,
    pub(crate) started_at: DateTime<Utc>,
    pub(crate) ended_at: DateTime<Utc>,
    pub(crate) perf: RunPerf,
    pub(crate) cost: RunCost,
    pub(crate) path: RunPath,
}

/// Stores the run; a sale's run, or a rehearsal's, is stored once, whichever leader
/// computed it first.
pub(crate) async fn insert_run(db: &PgPool, run: &NewRun) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "INSERT INTO baseline_runs
             (activity_id, kind, rehearsal_id, started_at, ended_at, perf, cost, path)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT DO NOTHING
         RETURNING id",
    )
    .bind(run.activity_id)
    .bind(run.kind.as_str())
    .bind(run.rehearsal_id)
    .bind(run.started_at)
    .bind(run.ended_at)
    .bind(Json(&run.perf))
    .bind(Json(&run.cost))
    .bind(Json(&run.path))
    .fetch_optional(db)
    .await
}

type RunRow = (
    i64,
    i64,
    String,
    DateTime<Utc>,
    DateTime<Utc>,
    bool,
    Json<RunPerf>,
    Json<RunCost>,
    Json<RunPath>,
);

const RUN_COLUMNS: &str =
    "id, activity_id, kind, started_at, ended_at, is_baseline, perf, cost, path";

fn run_of(row: RunRow) -> sqlx::Result<BaselineRun> {
    let (id, activity_id, kind, started_at, ended_at, is_baseline, perf, cost, path) = row;
    Ok(BaselineRun {
        id,
        activity_id,
        kind: decode_name("kind", &kind, RunKind::parse)?,
        started_at: started_at.to_rfc3339(),
        ended_at: ended_at.to_rfc3339(),
        is_baseline,
        perf: perf.0,
        cost: cost.0,
        path: path.0,
    })
}

/// The runs of one activity (every activity's without one), newest first.
pub(crate) async fn runs(db: &PgPool, activity_id: Option<i64>) -> sqlx::Result<Vec<BaselineRun>> {
    let rows: Vec<RunRow> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM baseline_runs
         WHERE $1::BIGINT IS NULL OR activity_id = $1
         ORDER BY started_at DESC, id DESC LIMIT 500"
    ))
    .bind(activity_id)
    .fetch_all(db)
    .await?;
    rows.into_iter().map(run_of).collect()
}

/// The one run `filter` (a condition on `$1`) selects, if any.
async fn one_run(db: &PgPool, filter: &str, id: i64) -> sqlx::Result<Option<BaselineRun>> {
    let row: Option<RunRow> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM baseline_runs WHERE {filter}"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?;
    row.map(run_of).transpose()
}

/// The run a rehearsal was recorded as, once the leader has recorded it.
pub(crate) async fn run_of_rehearsal(
    db: &PgPool,
    rehearsal_id: i64,
) -> sqlx::Result<Option<BaselineRun>> {
    one_run(db, "rehearsal_id = $1", rehearsal_id).await
}

/// The run marked as the activity's baseline.
pub(crate) async fn baseline_of(
    db: &PgPool,
    activity_id: i64,
) -> sqlx::Result<Option<BaselineRun>> {
    one_run(db, "activity_id = $1 AND is_baseline", activity_id).await
}

/// The baseline runs of the activities on sale now.
pub(crate) async fn live_baselines(db: &PgPool) -> sqlx::Result<Vec<BaselineRun>> {
    let rows: Vec<RunRow> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM baseline_runs r
         WHERE r.is_baseline AND EXISTS (SELECT 1 FROM activities a
               WHERE a.id = r.activity_id AND a.starts_at <= now() AND a.ends_at > now())
         ORDER BY r.activity_id"
    ))
    .fetch_all(db)
    .await?;
    rows.into_iter().map(run_of).collect()
}

/// Makes run `id` its activity's baseline in the caller's transaction, the one before no
/// longer; the run's activity, or none when there is no such run.
pub(crate) async fn mark(tx: &mut Transaction<'_, Postgres>, id: i64) -> sqlx::Result<Option<i64>> {
    let Some(activity_id): Option<i64> =
        sqlx::query_scalar("SELECT activity_id FROM baseline_runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut **tx)
            .await?
    else {
        return Ok(None);
    };
    // Every run of the activity locked, so two marks of one activity take turns.
    sqlx::query("SELECT id FROM baseline_runs WHERE activity_id = $1 ORDER BY id FOR UPDATE")
        .bind(activity_id)
        .execute(&mut **tx)
        .await?;
    // Unmarked first: one baseline per activity is a unique index.
    sqlx::query(
        "UPDATE baseline_runs SET is_baseline = FALSE WHERE activity_id = $1 AND is_baseline AND id <> $2",
    )
    .bind(activity_id)
    .bind(id)
    .execute(&mut **tx)
    .await?;
    sqlx::query("UPDATE baseline_runs SET is_baseline = TRUE WHERE id = $1")
        .bind(id)
        .execute(&mut **tx)
        .await?;
    Ok(Some(activity_id))
}
