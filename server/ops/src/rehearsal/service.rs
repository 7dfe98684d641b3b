//! The use cases the admin API, the console and the CLI share: start a rehearsal (it runs
//! in a task of the instance that started it), read one, list them. Each asks the
//! permission table first.
//!
//! A rehearsal runs: plan, shadow copy and pre-warm, load, settle, check; then the clean-up,
//! whatever happened before it; then its row gets its status and result. It is refused when
//! it could not be over before the next start of any real activity, and stopped at once
//! (its load first, then cleaned up) when any real sale opens while it runs or its time is
//! up. Its instance beats its row's heartbeat while it runs; a rehearsal whose heartbeat
//! stopped (its instance died) is marked `error`, and the leader cleans it up from what its
//! copy's row says (the plan is the same, so are the keys), as it retries every clean-up
//! that failed, until each succeeds.

use chrono::{DateTime, Utc};
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
    control::status::Complaint,
    rehearsal::{
        check,
        load::{self, own_address, Load, Planned},
        plan::{self, PlannedBuy},
        rules::{self, InTheWay, CLEAN_UP, SETTLE},
        shadow::{self, Leftovers},
        store::{self, NewRehearsal},
    },
    state::AppState,
};
use base::{
    error::{ApiError, ApiResult},
    fault,
};
use sale::{
    audit::ops_audit::{self, OpsAction},
    audit::reason::audited_reason,
    catalog::{
        copies,
        store::{self as catalog, StoredActivity},
    },
    identity::authorize,
};

/// Rehearsals listed at most.
const LISTED: i64 = 50;
/// A running rehearsal whose heartbeat has not moved for this long, at least, has lost its
/// instance (longer when the instances' leases are longer).
const ABANDONED_AFTER: Duration = Duration::from_secs(15);
/// How often a running rehearsal beats its heartbeat and looks for a real sale on now.
const HEARTBEAT: Duration = Duration::from_secs(1);
/// How often the leader looks for rehearsals whose clean-up is owed.
const RETRY_EVERY: Duration = Duration::from_secs(2);
/// How often the progress is written while the load runs.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// Starts a rehearsal of `activity_id` in the background; answers its id at once.
pub async fn start(
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
        .filter(|activity| !copies::is_rehearsal(activity.rehearsal_of))
        .ok_or(ApiError::NotFound("activity"))?;
    if activity.kind == ActivityKind::Seated {
        return Err(ApiError::Invalid {
            code: "REHEARSAL_NOT_SUPPORTED",
            message: "seated activities cannot be rehearsed: the load generator buys units".into(),
        });
    }
    let buyers = u32::try_from(request.buyers).unwrap_or(u32::MAX);
    let rate_per_s = u32::try_from(request.rate_per_s).unwrap_or(u32::MAX);
    let requests = plan::request_count(buyers);
    let needed = rules::time_needed(requests, rate_per_s);
    let now = Utc::now();
    // Its load would take a live sale's capacity from its buyers: it must be over before
    // any real sale opens.
    match rules::in_the_way(store::next_sale(&state.db).await?, needed, now) {
        Some(InTheWay::OnSale(on_sale)) => {
            return Err(ApiError::Conflict {
                code: "SALE_OPEN",
                message: format!(
                    "activity {on_sale} is on sale now: rehearse before any sale or after them"
                ),
            })
        }
        Some(InTheWay::StartsTooSoon {
            activity,
            starts_at,
            available,
        }) => {
            return Err(ApiError::Conflict {
                code: "REHEARSAL_WOULD_OVERLAP_SALE",
                message: format!(
                    "the rehearsal needs {needed_s} s ({requests} requests at {rate_per_s}/s, \
                     with {prepare_s} s to prepare, {settle_s} s to settle and {clean_s} s to \
                     clean up) and there are {available_s} s before activity {activity} \
                     starts at {starts_at}: ask fewer buyers or a higher rate, or rehearse \
                     after that sale",
                    needed_s = needed.as_secs(),
                    prepare_s = rules::PREPARE.as_secs(),
                    settle_s = SETTLE.as_secs(),
                    clean_s = CLEAN_UP.as_secs(),
                    available_s = available.as_secs(),
                    starts_at = starts_at.to_rfc3339(),
                ),
            })
        }
        None => {}
    }
    // A rehearsal whose instance died must not hold the activity's one running rehearsal.
    store::fail_abandoned(&state.db, abandoned_after(state)).await?;
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
    fault::point("rehearsal.row_inserted");
    // The load stops, and the copy closes, when only the clean-up's time is left.
    let stop_at = now + chrono::Duration::from_std(needed - CLEAN_UP).unwrap_or_default();
    let run = Run::new(id, activity, request.buyers, request.rate_per_s);
    let state = state.clone();
    tokio::spawn(async move { run.execute(&state, stop_at).await });
    Ok(StartedRehearsal { id })
}

/// How long a rehearsal's heartbeat may stand still before its instance is taken for dead:
/// past an instance's lease, and never less than [`ABANDONED_AFTER`].
fn abandoned_after(state: &AppState) -> Duration {
    let lease = u64::try_from(state.settings.control.lease_ttl_s).unwrap_or(0);
    ABANDONED_AFTER.max(Duration::from_secs(3 * lease))
}

/// One rehearsal, with its progress and, once over, its result.
pub async fn get(state: &AppState, actor: &Actor, id: i64) -> ApiResult<Rehearsal> {
    authorize(actor, Permission::WatchOperations)?;
    store::get(&state.db, id)
        .await?
        .ok_or(ApiError::NotFound("rehearsal"))
}

/// Rehearsals, newest first, of one activity or of all.
pub async fn list(
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

    /// Rehearses until done, a real sale opens or its time is up; cleans up whatever
    /// happened; records the outcome. Its heartbeat beats all along.
    async fn execute(self, state: &AppState, stop_at: DateTime<Utc>) {
        let heartbeat = Heartbeat::start(state, self.id, stop_at);
        let outcome = self
            .rehearse(state, stop_at, heartbeat.stop.clone())
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
            tracing::warn!(rehearsal = self.id, %error, "rehearsal clean-up failed; the leader retries it");
        }
        let recorded = outcome.as_ref().map_err(String::as_str);
        let cleaned = cleaned.as_ref().map(|_| ()).map_err(String::as_str);
        if let Err(error) = store::finish(&state.db, self.id, recorded, cleaned).await {
            tracing::warn!(rehearsal = self.id, %error, "could not record the end of a rehearsal");
        }
        drop(heartbeat);
    }

    /// The rehearsal up to its verdict; stopped at once (an error saying why) when `stop`
    /// says so: any other step is dropped where it stands, the load stops sending and waits
    /// for the answers of the requests it sent, so none reaches the server after the
    /// clean-up.
    async fn rehearse(
        &self,
        state: &AppState,
        stop_at: DateTime<Utc>,
        mut stop: Stop,
    ) -> anyhow::Result<RehearsalResult> {
        let db = &state.db;
        let planned_requests = self.sends.len() as i64;
        store::set_progress(db, self.id, progress(0, planned_requests)).await?;
        let opening = shadow::open(state, &self.activity, self.id, stop_at);
        let shadow = unless_stopped(&mut stop, opening).await?;
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
        let reporter = AbortOnDrop(tokio::spawn(report_progress(
            state.clone(),
            self.id,
            sent.clone(),
            planned_requests,
        )));
        let from = Utc::now();
        let replies = load.run(sent.clone(), stop.clone()).await;
        let to = Utc::now();
        drop(reporter);
        let replies = replies?;
        if let Some(reason) = stopped(&stop) {
            anyhow::bail!(reason);
        }
        store::set_progress(
            db,
            self.id,
            progress(replies.len() as i64, planned_requests),
        )
        .await?;
        record_window(state, self.id, from, to).await?;
        let tally = load::tally(&planned.sends, &replies);
        store::set_stage(db, self.id, RehearsalStage::Settling).await?;
        let checking = check::figures(state, self.id, shadow.id, &tally, SETTLE);
        let figures = unless_stopped(&mut stop, checking).await?;
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

    /// Removes the shadow (if one was made) and everything its load left, and says so on
    /// the rehearsal's row.
    async fn clean_up(&self, state: &AppState) -> anyhow::Result<()> {
        if let Some(shadow) = store::shadow_of(&state.db, self.id).await? {
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
        }
        fault::point("rehearsal.cleanup_rows_deleted");
        store::mark_cleaned_up(&state.db, self.id).await?;
        Ok(())
    }
}

/// Why a running rehearsal must stop, once it must: a real sale opened, or its time is up.
pub(crate) type Stop = tokio::sync::watch::Receiver<Option<String>>;

/// The reason to stop, if there is one yet.
fn stopped(stop: &Stop) -> Option<String> {
    stop.borrow().clone()
}

/// Runs `work` unless the rehearsal must stop first: `work` is then dropped where it
/// stands, and the reason is the error.
async fn unless_stopped<T>(
    stop: &mut Stop,
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::select! {
        done = work => done,
        reason = stop_reason(stop) => Err(anyhow::anyhow!(reason)),
    }
}

/// Waits for a reason to stop.
async fn stop_reason(stop: &mut Stop) -> String {
    let reason = match stop.wait_for(Option::is_some).await {
        Ok(reason) => reason.clone(),
        Err(_) => None,
    };
    match reason {
        Some(reason) => reason,
        // The heartbeat is gone (it lives as long as the rehearsal): nothing stops it.
        None => std::future::pending().await,
    }
}

/// A running rehearsal's heartbeat: its row's `updated_at` moved every [`HEARTBEAT`], and
/// the reason to stop once a real activity is seen on sale or the time is up. Stops when
/// dropped.
struct Heartbeat {
    _task: AbortOnDrop,
    stop: Stop,
}

impl Heartbeat {
    fn start(state: &AppState, id: i64, stop_at: DateTime<Utc>) -> Self {
        let (reason, stop) = tokio::sync::watch::channel(None);
        let state = state.clone();
        let task = tokio::spawn(async move {
            loop {
                let why = match store::heartbeat(&state.db, id).await {
                    Ok(Some(activity)) => Some(format!(
                        "stopped: activity {activity} went on sale while the rehearsal ran"
                    )),
                    Ok(None) if Utc::now() >= stop_at => {
                        Some("stopped: its time before the next sale's start was up".to_owned())
                    }
                    Ok(None) => None,
                    Err(error) => {
                        tracing::debug!(rehearsal = id, %error, "rehearsal heartbeat missed");
                        None
                    }
                };
                if why.is_some() {
                    reason.send_if_modified(|reason| {
                        let first = reason.is_none();
                        if first {
                            *reason = why;
                        }
                        first
                    });
                }
                tokio::time::sleep(HEARTBEAT).await;
            }
        });
        Self {
            _task: AbortOnDrop(task),
            stop,
        }
    }
}

/// A spawned task aborted when its handle is dropped, whichever way its owner ends.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
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

/// While this instance leads: marks the rehearsals whose instance died, and retries every
/// clean-up owed (theirs, and those that failed) every [`RETRY_EVERY`] until each succeeds.
pub fn spawn_leader(state: &AppState) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let mut leadership = state.leadership.clone();
        let mut trouble = Complaint::new(Duration::from_secs(60));
        loop {
            leadership.until_leader().await;
            match clean_up_owed(&state).await {
                Ok(()) => trouble.recovered("rehearsal clean-ups done again"),
                Err(error) => trouble.complain(
                    "a rehearsal clean-up failed, retried",
                    &format!("{error:#}"),
                ),
            }
            tokio::time::sleep(RETRY_EVERY).await;
        }
    })
}

/// One pass of the leader's clean-ups; the first error, once every owed one was tried.
async fn clean_up_owed(state: &AppState) -> anyhow::Result<()> {
    store::fail_abandoned(&state.db, abandoned_after(state)).await?;
    let mut failed = Ok(());
    for owed in store::to_clean(&state.db).await? {
        let cleaned = clean_up_one(state, &owed).await;
        if let Err(error) = cleaned {
            tracing::warn!(
                rehearsal = owed.id,
                error = format!("{error:#}"),
                "rehearsal clean-up failed; retried"
            );
            if failed.is_ok() {
                failed = Err(error);
            }
        }
    }
    failed
}

/// Cleans one rehearsal up from its copy: the copy has the activity's items as they were
/// copied, so the plan made from it names the very keys the load could have made.
async fn clean_up_one(state: &AppState, owed: &store::ToClean) -> anyhow::Result<()> {
    let copy = match store::shadow_of(&state.db, owed.id).await? {
        Some(shadow) => catalog::get_activity(&state.db, shadow, None).await?,
        None => None,
    };
    let Some(copy) = copy else {
        // No copy was made, or its rows went before the instance died: its keys went first.
        store::mark_cleaned_up(&state.db, owed.id).await?;
        return Ok(());
    };
    let run = Run::new(owed.id, copy, owed.buyers.into(), owed.rate_per_s.into());
    run.clean_up(state).await
}
