//! Runs: the leader's pass that computes the run of every sale that ended, and of every
//! rehearsal's load (from every instance's reports around its window), and stores it, the list, and marking a run as
//! the baseline of its activity or of its activity's kind (audited).

use chrono::{DateTime, Duration as Span, Utc};
use contract::{ActivityBaselines, Actor, BaselineRun, BaselineScope, Permission, Source};
use std::time::Duration;

use crate::{
    baselines::{
        figures::{run_figures, InstanceWindow},
        store::{self, NewRun, StoredReport},
    },
    control::status::Complaint,
    state::AppState,
};
use base::error::{ApiError, ApiResult};
use sale::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    identity::authorize,
};

/// Reports are kept this long: a run not computed by then (no leader for days) is not.
const KEEP_REPORTS_DAYS: i64 = 2;

/// While this instance leads, computes the runs of sales that ended and of rehearsals,
/// every report interval.
pub(crate) fn spawn_leader(state: &AppState) {
    let state = state.clone();
    tokio::spawn(async move {
        let interval = report_interval(&state);
        let mut leadership = state.leadership.clone();
        let mut trouble = Complaint::new(Duration::from_secs(60));
        loop {
            leadership.until_leader().await;
            match compute_due(&state).await {
                Ok(()) => trouble.recovered("baseline runs computed again"),
                Err(error) => trouble.complain("baseline runs not computed", &error),
            }
            tokio::time::sleep(interval).await;
        }
    });
}

fn report_interval(state: &AppState) -> Duration {
    Duration::from_millis(state.settings.baselines.report_interval_ms.max(10))
}

/// Every instance has reported after a sale's end once this long has passed since it.
fn settle(interval: Duration) -> Span {
    Span::from_std(interval * 2).unwrap_or(Span::MAX) + Span::seconds(1)
}

/// How far before a run's start and after its end its reports are looked for: past one
/// report of every instance, whatever the interval.
fn lookback(interval: Duration) -> Span {
    Span::from_std(interval * 3)
        .unwrap_or(Span::MAX)
        .max(Span::minutes(1))
}

/// Computes and stores the run of every sale that ended and every rehearsal's load,
/// settled, within the reports kept.
async fn compute_due(state: &AppState) -> sqlx::Result<()> {
    let interval = report_interval(state);
    let now = Utc::now();
    let keep = Span::days(KEEP_REPORTS_DAYS);
    let (since, until) = (now - keep, now - settle(interval));
    let mut due = store::ended_without_run(&state.db, since, until).await?;
    due.extend(store::rehearsed_without_run(&state.db, since, until).await?);
    for sale in due {
        let reports = store::reports_between(
            &state.db,
            sale.starts_at - lookback(interval),
            sale.ends_at + lookback(interval),
        )
        .await?;
        let windows = windows(reports, sale.starts_at, sale.ends_at);
        let seconds = (sale.ends_at - sale.starts_at).num_milliseconds() as f64 / 1000.0;
        let (perf, cost, path) = run_figures(&windows, seconds);
        let run = NewRun {
            activity_id: sale.activity_id,
            kind: sale.kind,
            rehearsal_id: sale.rehearsal_id,
            started_at: sale.starts_at,
            ended_at: sale.ends_at,
            perf,
            cost,
            path,
        };
        if let Some(id) = store::insert_run(&state.db, &run).await? {
            tracing::info!(
                run = id,
                activity = sale.activity_id,
                kind = sale.kind.as_str(),
                instances = windows.len(),
                "baseline run recorded"
            );
        }
    }
    store::prune_reports(&state.db, now - keep).await?;
    Ok(())
}

/// Each instance's window over `[start, end]` from its reports (ordered by instance, then
/// time). An instance counts when it reported at or after the start and first reported
/// before the end. A report at the end smaller than the one at the start is a restarted
/// process under a configured node id: it counted from zero.
pub(crate) fn windows(
    reports: Vec<StoredReport>,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Vec<InstanceWindow> {
    let mut windows = Vec::new();
    let mut reports = reports.into_iter().peekable();
    while let Some(first) = reports.next() {
        let mut node = vec![first];
        while let Some(next) = reports.next_if(|next| next.node_id == node[0].node_id) {
            node.push(next);
        }
        if node[0].taken_at > end || node.last().is_some_and(|last| last.taken_at < start) {
            continue;
        }
        let at_start = node.iter().rev().find(|r| r.taken_at <= start);
        let at_end = node
            .iter()
            .find(|r| r.taken_at >= end)
            .or(node.last())
            .expect("a node has a report");
        let at_start = at_start
            .filter(|s| s.figures.cpu_seconds <= at_end.figures.cpu_seconds)
            .map(|s| s.figures.clone());
        windows.push(InstanceWindow {
            node_id: at_end.node_id.clone(),
            at_start,
            at_end: at_end.figures.clone(),
            during: (node.iter())
                .filter(|r| r.taken_at > start && r.taken_at < end)
                .map(|r| r.figures.clone())
                .collect(),
        });
    }
    windows
}

/// The runs of one activity (of every activity without one), newest first.
pub(crate) async fn list(
    state: &AppState,
    actor: &Actor,
    activity_id: Option<i64>,
) -> ApiResult<Vec<BaselineRun>> {
    authorize(actor, Permission::WatchOperations)?;
    Ok(store::runs(&state.db, activity_id).await?)
}

/// One activity's runs, newest first, with the run it is held against (its own baseline,
/// else its kind's): the console's Baselines page.
pub async fn of_activity(
    state: &AppState,
    actor: &Actor,
    activity_id: i64,
) -> ApiResult<ActivityBaselines> {
    authorize(actor, Permission::WatchOperations)?;
    let (runs, baseline) = tokio::try_join!(
        store::runs(&state.db, Some(activity_id)),
        store::baseline_of(&state.db, activity_id)
    )?;
    Ok(ActivityBaselines {
        runs,
        baseline: baseline.map(|applied| applied.run),
    })
}

/// Makes run `id` the baseline of its activity, or of every activity of its activity's
/// kind (`scope`), with the reason and the scope in the audit log; answers the run.
pub async fn mark(
    state: &AppState,
    actor: &Actor,
    source: Source,
    id: i64,
    scope: BaselineScope,
    reason: &str,
) -> ApiResult<BaselineRun> {
    authorize(actor, Permission::MarkBaseline)?;
    let reason = audited_reason(reason)?;
    let mut tx = state.db.begin().await?;
    let detail = match scope {
        BaselineScope::Activity => store::mark(&mut tx, id)
            .await?
            .map(|activity_id| serde_json::json!({ "activity_id": activity_id })),
        BaselineScope::Kind => (store::mark_kind(&mut tx, id).await?).map(|(activity_id, kind)| {
            serde_json::json!({ "activity_id": activity_id, "kind": kind.as_str() })
        }),
    };
    let Some(mut detail) = detail else {
        return Err(ApiError::NotFound("run"));
    };
    detail["reason"] = reason.into();
    detail["scope"] = scope.as_str().into();
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "baseline.mark",
            target: &format!("baseline_run:{id}"),
            detail,
        },
    )
    .await?;
    tx.commit().await?;
    store::run(&state.db, id)
        .await?
        .ok_or(ApiError::NotFound("run"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::baselines::figures::Figures;

    fn report(node: &str, at_s: i64, cpu: f64) -> StoredReport {
        StoredReport {
            node_id: node.into(),
            taken_at: DateTime::from_timestamp(at_s, 0).expect("a time"),
            figures: Figures {
                cpu_seconds: cpu,
                ..Figures::default()
            },
        }
    }

    #[test]
    fn each_instance_is_read_from_its_report_before_the_start_to_the_one_after_the_end() {
        let at = |s| DateTime::from_timestamp(s, 0).expect("a time");
        let reports = vec![
            report("a", 5, 1.0),
            report("a", 10, 2.0),
            report("a", 15, 3.0),
            report("a", 20, 4.0),
            report("a", 25, 5.0),
            // Started during the run.
            report("b", 14, 0.5),
            report("b", 22, 0.9),
            // Gone before the run.
            report("c", 3, 1.0),
            // Restarted under the same id: counts from zero.
            report("d", 9, 7.0),
            report("d", 21, 1.0),
        ];
        let windows = windows(reports, at(10), at(20));
        let nodes: Vec<&str> = windows.iter().map(|w| w.node_id.as_str()).collect();
        assert_eq!(nodes, ["a", "b", "d"]);
        let a = &windows[0];
        assert_eq!(a.at_start.as_ref().map(|f| f.cpu_seconds), Some(2.0));
        assert_eq!(a.at_end.cpu_seconds, 4.0);
        assert_eq!(a.during.len(), 1);
        assert!(windows[1].at_start.is_none());
        assert_eq!(windows[1].at_end.cpu_seconds, 0.9);
        assert!(windows[2].at_start.is_none());
    }

    #[test]
    fn a_run_waits_for_every_instance_to_report_after_the_end() {
        let interval = Duration::from_millis(200);
        assert_eq!(settle(interval), Span::milliseconds(1400));
        assert_eq!(lookback(interval), Span::minutes(1));
    }
}
