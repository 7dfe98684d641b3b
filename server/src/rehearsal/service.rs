//! The use cases the admin API, the console and the CLI share: start a rehearsal (it runs
//! in a task of the instance that started it), read one, list them. Each asks the
//! permission table first.
//!
//! A rehearsal runs: plan, shadow copy and pre-warm, load, settle, check; then the clean-up,
//! whatever happened before it; then its row gets its status and result. A rehearsal whose
//! instance died is found by the next start (its progress stopped moving), marked `error`
//! and cleaned up from what its row says: the plan is the same, so are the keys.

use chrono::Utc;
use contract::{
    ActivityKind, Actor, Permission, Progress, Rehearsal, RehearsalResult, RehearsalStage, Source,
    StartRehearsal, StartedRehearsal,
};
use serde_json::json;
use std::{
    net::SocketAddr,
    sync::{atomic::AtomicU64, Arc},
    time::Duration,
};

use crate::{
    admin::{
        authorize,
        ops_audit::{self, OpsAction},
        reason::audited_reason,
    },
    buy::rules::{phase, Phase},
    catalog::store::{self as catalog, StoredActivity},
    error::{ApiError, ApiResult},
    rehearsal::{
        check,
        load::{self, own_address, Load, Planned},
        plan::{self, PlannedBuy},
        rules,
        shadow::{self, Leftovers},
        store::{self, NewRehearsal},
    },
    state::AppState,
};

/// Rehearsals listed at most.
const LISTED: i64 = 50;
/// A running rehearsal whose progress has not moved for this long has lost its instance.
const ABANDONED_AFTER: Duration = Duration::from_secs(120);
/// How long the shadow stays open past the load's planned end, at most (the clean-up
/// closes it as soon as the check is done).
const OPEN_PAST_LOAD: Duration = Duration::from_secs(600);
/// How long the pipeline and Redis get to settle after the load.
const SETTLE: Duration = Duration::from_secs(60);
/// How often the progress is written while the load runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Starts a rehearsal of `activity_id` in the background; answers its id at once.
pub(crate) async fn start(
    state: &AppState,
    actor: &Actor,
    source: Source,
    activity_id: i64,
    request: StartRehearsal,
) -> ApiResult<StartedRehearsal> {
    authorize(actor, Permission::Rehearse)?;
    if let Some(message) = rules::refusal(&request) {
        return Err(ApiError::Invalid {
            code: "INVALID_REHEARSAL",
            message,
        });
    }
    let reason = audited_reason(&request.reason)?.to_owned();
    // A shadow is no activity of the catalogue's: it cannot be rehearsed in turn.
    let activity = catalog::get_activity(&state.db, activity_id, None)
        .await?
        .filter(|activity| activity.rehearsal_of.is_none())
        .ok_or(ApiError::NotFound("activity"))?;
    // Its load would take the live sale's capacity from its buyers: rehearse before the
    // day, or after it.
    if phase(activity.starts_at, activity.ends_at, Utc::now(), true) == Phase::Open {
        return Err(ApiError::Conflict {
            code: "SALE_OPEN",
            message: format!(
                "activity {activity_id} is on sale now: rehearse it before its sale or after it"
            ),
        });
    }
    if activity.kind == ActivityKind::Seated {
        return Err(ApiError::Invalid {
            code: "REHEARSAL_NOT_SUPPORTED",
            message: "seated activities cannot be rehearsed: the load generator buys units".into(),
        });
    }
    recover_abandoned(state).await;
    let id = store::insert(
        &state.db,
        &NewRehearsal {
            activity_id,
            buyers: request.buyers,
            rate_per_s: request.rate_per_s,
            source,
            actor: &actor.username,
            reason: &reason,
        },
    )
    .await?
    .ok_or_else(|| ApiError::Conflict {
        code: "REHEARSAL_RUNNING",
        message: format!("activity {activity_id} is being rehearsed already"),
    })?;
    ops_audit::record(
        &state.db,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "rehearsal.start",
            target: &format!("activity:{activity_id}"),
            detail: json!({
                "rehearsal_id": id, "buyers": request.buyers,
                "rate_per_s": request.rate_per_s, "reason": reason,
            }),
        },
    )
    .await?;
    let run = Run::new(id, activity, request.buyers, request.rate_per_s);
    let state = state.clone();
    tokio::spawn(async move { run.execute(&state).await });
    Ok(StartedRehearsal { id })
}

/// One rehearsal, with its progress and, once over, its result.
pub(crate) async fn get(state: &AppState, actor: &Actor, id: i64) -> ApiResult<Rehearsal> {
    authorize(actor, Permission::WatchOperations)?;
    store::get(&state.db, id)
        .await?
        .ok_or(ApiError::NotFound("rehearsal"))
}

/// Rehearsals, newest first, of one activity or of all.
pub(crate) async fn list(
    state: &AppState,
    actor: &Actor,
    activity_id: Option<i64>,
) -> ApiResult<Vec<Rehearsal>> {
    authorize(actor, Permission::WatchOperations)?;
    Ok(store::list(&state.db, activity_id, LISTED).await?)
}

/// Where this instance's buyer API listens (the configured address where it serves none,
/// as in the command line, which rehearses against the deployment's server).
fn address(state: &AppState) -> SocketAddr {
    state.address.get().copied().unwrap_or(state.settings.bind)
}

/// A rehearsal as it runs: the activity and the plan.
struct Run {
    id: i64,
    activity: StoredActivity,
    /// Item ids, hot first.
    items: Vec<i64>,
    sends: Vec<PlannedBuy>,
    buyers: u32,
    rate_per_s: u32,
}

impl Run {
    /// The plan of rehearsal `id` of `activity`: the same every time it is made.
    fn new(id: i64, activity: StoredActivity, buyers: i64, rate_per_s: i64) -> Self {
        let stock: Vec<(i64, i64)> = activity
            .lines
            .iter()
            .map(|line| (line.item_id, i64::from(line.total_stock)))
            .collect();
        let items = plan::hot_first(&stock);
        let buyers = u32::try_from(buyers).unwrap_or(u32::MAX);
        let rate_per_s = u32::try_from(rate_per_s).unwrap_or(u32::MAX);
        let sends = plan::plan(id.unsigned_abs(), buyers, items.len(), rate_per_s);
        Self {
            id,
            activity,
            items,
            sends,
            buyers,
            rate_per_s,
        }
    }

    /// Rehearses, cleans up whatever happened, records the outcome.
    async fn execute(self, state: &AppState) {
        let outcome = self
            .rehearse(state)
            .await
            .map_err(|error| format!("{error:#}"));
        if let Err(error) = &outcome {
            tracing::warn!(rehearsal = self.id, %error, "rehearsal stopped");
        }
        let cleaned = match store::set_stage(&state.db, self.id, RehearsalStage::Cleaning).await {
            Ok(()) => self.clean_up(state).await,
            Err(error) => Err(error.into()),
        }
        .map_err(|error| format!("{error:#}"));
        if let Err(error) = &cleaned {
            tracing::warn!(rehearsal = self.id, %error, "rehearsal clean-up failed");
        }
        let recorded = outcome.as_ref().map_err(String::as_str);
        let cleaned = cleaned.as_ref().map(|_| ()).map_err(String::as_str);
        if let Err(error) = store::finish(&state.db, self.id, recorded, cleaned).await {
            tracing::warn!(rehearsal = self.id, %error, "could not record the end of a rehearsal");
        }
    }

    async fn rehearse(&self, state: &AppState) -> anyhow::Result<RehearsalResult> {
        let db = &state.db;
        let planned_requests = self.sends.len() as i64;
        store::set_progress(db, self.id, progress(0, planned_requests)).await?;
        let load_time =
            Duration::from_secs_f64(planned_requests as f64 / f64::from(self.rate_per_s));
        let shadow =
            shadow::open(state, &self.activity, self.id, load_time + OPEN_PAST_LOAD).await?;
        let planned = Arc::new(Planned {
            rehearsal_id: self.id,
            shadow: shadow.id,
            items: self.items.clone(),
            sends: self.sends.clone(),
            buyers: self.buyers,
            rate_per_s: self.rate_per_s,
        });
        let load = Load::new(address(state), &state.settings.jwt_secret, planned.clone())?;
        store::set_stage(db, self.id, RehearsalStage::Loading).await?;
        let sent = Arc::new(AtomicU64::new(0));
        let reporter = tokio::spawn(report_progress(
            state.clone(),
            self.id,
            sent.clone(),
            planned_requests,
        ));
        let from = Utc::now();
        let replies = load.run(sent.clone()).await;
        let to = Utc::now();
        reporter.abort();
        let replies = replies?;
        store::set_progress(
            db,
            self.id,
            progress(replies.len() as i64, planned_requests),
        )
        .await?;
        record_window(state, self.id, from, to).await?;
        let tally = load::tally(&planned.sends, &replies);
        store::set_stage(db, self.id, RehearsalStage::Settling).await?;
        let figures = check::figures(state, self.id, shadow.id, &tally, SETTLE).await?;
        store::set_stage(db, self.id, RehearsalStage::Checking).await?;
        let checks = rules::verdicts(&figures);
        Ok(RehearsalResult {
            requests: tally.requests,
            unanswered: tally.unanswered,
            load_s: (to - from).num_milliseconds() as f64 / 1000.0,
            outcomes: tally.outcomes,
            latency_ms: tally.latency_ms,
            passed: rules::passed(&checks),
            checks,
        })
    }

    /// Removes the shadow (if one was made) and everything its load left.
    async fn clean_up(&self, state: &AppState) -> anyhow::Result<()> {
        let shadow = store::get(&state.db, self.id)
            .await?
            .and_then(|rehearsal| rehearsal.shadow_activity_id);
        let Some(shadow) = shadow else {
            return Ok(());
        };
        let client = own_address(address(state)).ip().to_string();
        shadow::clean_up(
            state,
            &Leftovers {
                rehearsal_id: self.id,
                shadow,
                items: &self.items,
                sends: &self.sends,
                client: &client,
            },
        )
        .await?;
        store::mark_cleaned_up(&state.db, self.id).await?;
        Ok(())
    }
}

fn progress(done: i64, total: i64) -> Progress {
    Progress { done, total }
}

/// Writes the requests sent every [`PROGRESS_EVERY`] until aborted.
async fn report_progress(state: AppState, id: i64, sent: Arc<AtomicU64>, planned: i64) {
    loop {
        tokio::time::sleep(PROGRESS_EVERY).await;
        let done = i64::try_from(sent.load(std::sync::atomic::Ordering::Relaxed)).unwrap_or(0);
        if let Err(error) = store::set_progress(&state.db, id, progress(done, planned)).await {
            tracing::debug!(rehearsal = id, %error, "rehearsal progress not written");
        }
    }
}

/// Records when rehearsal `id`'s load ran: the leader's baseline pass records that window
/// as a run of the activity (kind `rehearsal`: per-endpoint figures, cost and path), to be
/// set beside the activity's baseline.
async fn record_window(
    state: &AppState,
    id: i64,
    from: chrono::DateTime<Utc>,
    to: chrono::DateTime<Utc>,
) -> anyhow::Result<()> {
    store::set_load_window(&state.db, id, from, to).await?;
    Ok(())
}

/// Marks rehearsals whose instance died as `error` and cleans their shadows up; what goes
/// wrong is logged, and the next start tries again.
async fn recover_abandoned(state: &AppState) {
    let abandoned = match store::fail_abandoned(&state.db, ABANDONED_AFTER).await {
        Ok(abandoned) => abandoned,
        Err(error) => {
            tracing::warn!(%error, "abandoned rehearsals not looked for");
            return;
        }
    };
    for rehearsal in abandoned {
        if rehearsal.shadow_activity_id.is_none() {
            continue;
        }
        let activity = match catalog::get_activity(&state.db, rehearsal.activity_id, None).await {
            Ok(Some(activity)) => activity,
            Ok(None) => continue,
            Err(error) => {
                tracing::warn!(rehearsal = rehearsal.id, %error, "abandoned rehearsal not cleaned up");
                continue;
            }
        };
        let run = Run::new(
            rehearsal.id,
            activity,
            rehearsal.buyers.into(),
            rehearsal.rate_per_s.into(),
        );
        if let Err(error) = run.clean_up(state).await {
            tracing::warn!(
                rehearsal = rehearsal.id,
                error = format!("{error:#}"),
                "abandoned rehearsal not cleaned up"
            );
        }
    }
}
