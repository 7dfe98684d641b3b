//! Reports, runs and baselines in PostgreSQL (`baseline_reports`, `baseline_runs`,
//! `kind_baselines`), and which baseline an activity is held against.

use chrono::{DateTime, Utc};
use contract::{ActivityKind, BaselineRun, BaselineScope, RunCost, RunKind, RunPath, RunPerf};
use sqlx::{types::Json, PgPool, Postgres, Transaction};

use crate::baselines::figures::Figures;
use base::db::decode_name;

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

/// A run as stored, with the kind it is the baseline of (`RUN_COLUMNS`).
#[derive(sqlx::FromRow)]
struct RunRow {
    id: i64,
    activity_id: i64,
    kind: String,
    started_at: DateTime<Utc>,
    ended_at: DateTime<Utc>,
    is_baseline: bool,
    baseline_of_kind: Option<String>,
    perf: Json<RunPerf>,
    cost: Json<RunCost>,
    path: Json<RunPath>,
}

/// The columns of [`RunRow`], of `baseline_runs r`.
const RUN_COLUMNS: &str = "r.id, r.activity_id, r.kind, r.started_at, r.ended_at, r.is_baseline,
     (SELECT k.kind FROM kind_baselines k WHERE k.run_id = r.id) AS baseline_of_kind,
     r.perf, r.cost, r.path";

fn run_of(row: RunRow) -> sqlx::Result<BaselineRun> {
    Ok(BaselineRun {
        id: row.id,
        activity_id: row.activity_id,
        kind: decode_name("kind", &row.kind, RunKind::parse)?,
        started_at: row.started_at.to_rfc3339(),
        ended_at: row.ended_at.to_rfc3339(),
        is_baseline: row.is_baseline,
        baseline_of_kind: (row.baseline_of_kind.as_deref())
            .map(|kind| decode_name("baseline_of_kind", kind, |kind| kind.parse().ok()))
            .transpose()?,
        perf: row.perf.0,
        cost: row.cost.0,
        path: row.path.0,
    })
}

/// The runs of one activity (every activity's without one), newest first.
pub(crate) async fn runs(db: &PgPool, activity_id: Option<i64>) -> sqlx::Result<Vec<BaselineRun>> {
    let rows: Vec<RunRow> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM baseline_runs r
         WHERE $1::BIGINT IS NULL OR r.activity_id = $1
         ORDER BY r.started_at DESC, r.id DESC LIMIT 500"
    ))
    .bind(activity_id)
    .fetch_all(db)
    .await?;
    rows.into_iter().map(run_of).collect()
}

/// The one run `filter` (a condition on `$1`) selects, if any.
async fn one_run(db: &PgPool, filter: &str, id: i64) -> sqlx::Result<Option<BaselineRun>> {
    let row: Option<RunRow> = sqlx::query_as(&format!(
        "SELECT {RUN_COLUMNS} FROM baseline_runs r WHERE {filter}"
    ))
    .bind(id)
    .fetch_optional(db)
    .await?;
    row.map(run_of).transpose()
}

/// Run `id`.
pub(crate) async fn run(db: &PgPool, id: i64) -> sqlx::Result<Option<BaselineRun>> {
    one_run(db, "r.id = $1", id).await
}

/// The run a rehearsal was recorded as, once the leader has recorded it.
pub(crate) async fn run_of_rehearsal(
    db: &PgPool,
    rehearsal_id: i64,
) -> sqlx::Result<Option<BaselineRun>> {
    one_run(db, "r.rehearsal_id = $1", rehearsal_id).await
}

/// The baseline an activity is held against: the run marked as its own, else the run
/// marked as its kind's (a run of another activity of that kind, as a rule).
pub(crate) struct AppliedBaseline {
    /// The activity held against it.
    pub(crate) activity_id: i64,
    pub(crate) scope: BaselineScope,
    pub(crate) run: BaselineRun,
}

impl AppliedBaseline {
    /// `run #3`, or `run #3 (its kind's baseline, a run of activity #7)`.
    pub(crate) fn run_name(&self) -> String {
        self.scope.name_run(self.run.id, self.run.activity_id)
    }
}

#[derive(sqlx::FromRow)]
struct AppliedRow {
    applied_to: i64,
    scope: String,
    #[sqlx(flatten)]
    run: RunRow,
}

/// The baselines of the activities `filter` (a condition on `activities a`, on `$1` when
/// `id` is given) selects; an activity with neither its own nor its kind's has none.
async fn applied(db: &PgPool, filter: &str, id: Option<i64>) -> sqlx::Result<Vec<AppliedBaseline>> {
    let sql = format!(
        "SELECT a.id AS applied_to, b.scope, {RUN_COLUMNS}
         FROM activities a
         CROSS JOIN LATERAL (
             SELECT 'activity' AS scope, 0 AS preference, id AS run_id FROM baseline_runs
             WHERE activity_id = a.id AND is_baseline
             UNION ALL
             SELECT 'kind', 1, run_id FROM kind_baselines WHERE kind = a.kind
             ORDER BY preference LIMIT 1
         ) b
         JOIN baseline_runs r ON r.id = b.run_id
         WHERE {filter}
         ORDER BY a.id"
    );
    let query = sqlx::query_as::<_, AppliedRow>(&sql);
    let query = match id {
        Some(id) => query.bind(id),
        None => query,
    };
    let rows = query.fetch_all(db).await?;
    rows.into_iter()
        .map(|row| {
            Ok(AppliedBaseline {
                activity_id: row.applied_to,
                scope: decode_name("scope", &row.scope, BaselineScope::parse)?,
                run: run_of(row.run)?,
            })
        })
        .collect()
}

/// The baseline activity `activity_id` is held against, if it has one.
pub(crate) async fn baseline_of(
    db: &PgPool,
    activity_id: i64,
) -> sqlx::Result<Option<AppliedBaseline>> {
    Ok(applied(db, "a.id = $1", Some(activity_id)).await?.pop())
}

/// The baselines of the activities on sale now. A rehearsal's shadow copy is no sale: it
/// is invisible to buyers, and its load is held against the baseline once recorded.
pub(crate) async fn live_baselines(db: &PgPool) -> sqlx::Result<Vec<AppliedBaseline>> {
    applied(
        db,
        "a.starts_at <= now() AND a.ends_at > now() AND a.rehearsal_of IS NULL",
        None,
    )
    .await
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

/// Makes run `id` the baseline of its activity's kind in the caller's transaction, the
/// kind's one before no longer; the run's activity and the kind, or none when there is no
/// such run.
pub(crate) async fn mark_kind(
    tx: &mut Transaction<'_, Postgres>,
    id: i64,
) -> sqlx::Result<Option<(i64, ActivityKind)>> {
    let Some((activity_id, kind)): Option<(i64, String)> = sqlx::query_as(
        "SELECT r.activity_id, a.kind FROM baseline_runs r
         JOIN activities a ON a.id = r.activity_id WHERE r.id = $1",
    )
    .bind(id)
    .fetch_optional(&mut **tx)
    .await?
    else {
        return Ok(None);
    };
    // One row per kind: two marks of one kind take turns on it, the later one stays.
    sqlx::query(
        "INSERT INTO kind_baselines (kind, run_id) VALUES ($1, $2)
         ON CONFLICT (kind) DO UPDATE SET run_id = EXCLUDED.run_id, marked_at = now()",
    )
    .bind(&kind)
    .bind(id)
    .execute(&mut **tx)
    .await?;
    let kind = decode_name("kind", &kind, |kind| kind.parse().ok())?;
    Ok(Some((activity_id, kind)))
}
