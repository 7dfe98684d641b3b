//! This instance's standing in the control plane: how current its switches are, what it
//! has applied lately, and whether it leads. The watcher writes it; the node heartbeat,
//! the switch board and the metrics read it. Nothing on the request path touches it.

use serde::{Deserialize, Serialize};
use std::{
    collections::VecDeque,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex, MutexGuard,
    },
    time::{Duration, Instant},
};
use tokio::sync::Notify;

use crate::control::accepted::Accepted;
use base::{config::ControlSettings, quiet_log::Budget};

/// Recent applies kept for the node report: enough for a burst of flips, small enough
/// for a heartbeat.
const RECENT_APPLIES: usize = 32;

pub(crate) use contract::ValuesFrom;

/// One key this instance applied from a watch event (or a resync).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RecentApply {
    pub(crate) path: String,
    pub(crate) mod_revision: i64,
    /// Wall-clock microseconds since the epoch.
    pub(crate) applied_at_us: i64,
}

#[derive(Debug)]
pub(crate) struct SyncState {
    /// The watch stream is open and etcd answers.
    pub(crate) connected: bool,
    /// When etcd last confirmed this instance had every change (event or progress report).
    pub(crate) last_sync: Option<Instant>,
    /// Every change up to this revision has been applied.
    pub(crate) applied_revision: i64,
    pub(crate) values_from: ValuesFrom,
    pub(crate) accepted: Accepted,
    pub(crate) recent: VecDeque<RecentApply>,
    /// The staged values this instance applies in place of etcd's.
    pub(crate) staged: Vec<contract::StagedValue>,
}

impl SyncState {
    pub(crate) fn synced_ago(&self) -> Option<Duration> {
        self.last_sync.map(|at| at.elapsed())
    }
}

/// Cheap to clone; all clones share one state.
#[derive(Clone)]
pub(crate) struct ControlStatus(Arc<Inner>);

struct Inner {
    node_id: String,
    /// Wall-clock microseconds since the epoch when this process made its state: a switch
    /// rehearsal counts only if every live instance was running when it happened.
    started_at_us: i64,
    /// True while this process runs the control plane (not in the CLI).
    running: AtomicBool,
    sync: Mutex<SyncState>,
    /// Wakes the node heartbeat to report a fresh apply at once.
    report_now: Notify,
}

impl ControlStatus {
    pub(crate) fn new(settings: &ControlSettings) -> Self {
        Self(Arc::new(Inner {
            node_id: settings.node_id.clone().unwrap_or_else(generated_node_id),
            started_at_us: super::layout::now_us(),
            running: AtomicBool::new(false),
            sync: Mutex::new(SyncState {
                connected: false,
                last_sync: None,
                applied_revision: 0,
                values_from: ValuesFrom::Settings,
                accepted: Accepted::default(),
                recent: VecDeque::new(),
                staged: Vec::new(),
            }),
            report_now: Notify::new(),
        }))
    }

    pub(crate) fn node_id(&self) -> &str {
        &self.0.node_id
    }

    /// When this instance started, as its reports say.
    pub(crate) fn started_at_us(&self) -> i64 {
        self.0.started_at_us
    }

    pub(crate) fn running(&self) -> bool {
        self.0.running.load(Ordering::Acquire)
    }

    pub(super) fn set_running(&self, running: bool) {
        self.0.running.store(running, Ordering::Release);
    }

    /// The sync state; held only for copies, never across an await.
    pub(crate) fn sync(&self) -> MutexGuard<'_, SyncState> {
        // A panic while holding it cannot leave the state half-written in a way that
        // matters more than losing the control plane's view: keep going with it.
        self.0
            .sync
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(super) fn record_applies(&self, applies: impl IntoIterator<Item = RecentApply>) {
        let mut sync = self.sync();
        for apply in applies {
            if sync.recent.len() == RECENT_APPLIES {
                sync.recent.pop_front();
            }
            sync.recent.push_back(apply);
        }
        drop(sync);
        self.0.report_now.notify_one();
    }

    /// Puts the staged values this instance applies in its next report, written at once.
    pub(super) fn record_staged(&self, staged: Vec<contract::StagedValue>) {
        let mut sync = self.sync();
        if sync.staged == staged {
            return;
        }
        sync.staged = staged;
        drop(sync);
        self.0.report_now.notify_one();
    }

    pub(super) async fn report_requested(&self) {
        self.0.report_now.notified().await;
    }
}

/// Host name, process id and a random suffix: unique per process, readable in the console.
fn generated_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "host".into());
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..6];
    format!("{host}-{}-{suffix}", std::process::id())
}

/// Logs a recurring failure as a warning the first time and then at most every
/// `every`, so an etcd outage does not fill the disk; the rest go to debug.
pub(crate) struct Complaint {
    budget: Budget,
}

impl Complaint {
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            budget: Budget::new(1, every),
        }
    }

    pub(crate) fn complain(&mut self, what: &str, error: &dyn std::fmt::Display) {
        match self.budget.admit(Instant::now()) {
            Some(suppressed) => tracing::warn!(error = %error, suppressed, "{what}"),
            None => tracing::debug!(error = %error, "{what}"),
        }
    }

    /// The failure is over: the next one warns again at once.
    pub(crate) fn recovered(&mut self, what: &str) {
        if self.budget.in_use() {
            tracing::info!("{what}");
        }
        self.budget.reset();
    }
}

/// Doubling retry delays between a floor and a ceiling.
pub(crate) struct Backoff {
    next: Duration,
    floor: Duration,
    ceiling: Duration,
}

impl Backoff {
    pub(crate) fn new(floor: Duration, ceiling: Duration) -> Self {
        Self {
            next: floor,
            floor,
            ceiling,
        }
    }

    pub(crate) fn next_delay(&mut self) -> Duration {
        let delay = self.next;
        self.next = (self.next * 2).min(self.ceiling);
        delay
    }

    pub(crate) fn reset(&mut self) {
        self.next = self.floor;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recent_applies_are_bounded_and_newest_last() {
        let status = ControlStatus::new(&ControlSettings::default());
        status.record_applies((0..40).map(|i| RecentApply {
            path: "switches/entry".into(),
            mod_revision: i,
            applied_at_us: i,
        }));
        let sync = status.sync();
        assert_eq!(sync.recent.len(), RECENT_APPLIES);
        assert_eq!(sync.recent.back().map(|a| a.mod_revision), Some(39));
        assert_eq!(sync.recent.front().map(|a| a.mod_revision), Some(8));
    }

    #[test]
    fn node_ids_are_unique_unless_configured() {
        let a = ControlStatus::new(&ControlSettings::default());
        let b = ControlStatus::new(&ControlSettings::default());
        assert_ne!(a.node_id(), b.node_id());
        let named = ControlStatus::new(&ControlSettings {
            node_id: Some("blue-1".into()),
            ..ControlSettings::default()
        });
        assert_eq!(named.node_id(), "blue-1");
    }

    #[test]
    fn backoff_doubles_up_to_its_ceiling() {
        let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_millis(350));
        let delays: Vec<u128> = (0..4).map(|_| backoff.next_delay().as_millis()).collect();
        assert_eq!(delays, [100, 200, 350, 350]);
        backoff.reset();
        assert_eq!(backoff.next_delay().as_millis(), 100);
    }
}
