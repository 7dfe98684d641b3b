//! The in-memory snapshot of every switch and limit. The watcher swaps in a new
//! snapshot when etcd changes; handlers take the current one with one atomic load.

use arc_swap::ArcSwap;
use contract::{HotKeyKind, HotKeyRule};
use std::{collections::HashSet, sync::Arc};
use tokio::sync::watch;

use base::config::{AsyncMode, BuySettings, DeductionMode};

/// Thresholds of the funnel that ops can change during a sale (`/seckill/limits/{name}`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Buy requests in flight per instance; beyond it, 503 `OVERLOADED` at once.
    pub max_in_flight: u64,
    /// Local token bucket: buy requests per second this instance admits to Redis.
    pub local_rate_per_s: u64,
    /// Fixed-window length of the Redis rate limits, in seconds.
    pub rate_window_s: u64,
    pub per_user_per_window: u64,
    pub per_ip_per_window: u64,
    pub per_item_per_window: u64,
    /// Lottery registrations one client address may make per item and window.
    pub registrations_per_ip_per_window: u64,
}

/// The hot-key rule of each kind, if any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HotKeyRules {
    item: Option<HotKeyRule>,
    user: Option<HotKeyRule>,
    ip: Option<HotKeyRule>,
}

impl HotKeyRules {
    pub fn of(&self, kind: HotKeyKind) -> Option<HotKeyRule> {
        match kind {
            HotKeyKind::Item => self.item,
            HotKeyKind::User => self.user,
            HotKeyKind::Ip => self.ip,
        }
    }

    pub fn set(&mut self, kind: HotKeyKind, rule: Option<HotKeyRule>) {
        let slot = match kind {
            HotKeyKind::Item => &mut self.item,
            HotKeyKind::User => &mut self.user,
            HotKeyKind::Ip => &mut self.ip,
        };
        *slot = rule;
    }
}

/// Every switch and limit as one instance applies them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SwitchValues {
    /// `switches/entry`: closed answers `ACTIVITY_CLOSED` for every activity.
    pub entry_open: bool,
    /// Activities whose own `switches/entry/{id}` is `closed`.
    pub closed_activities: HashSet<i64>,
    pub deduction: DeductionMode,
    pub async_mode: AsyncMode,
    pub challenge_required: bool,
    pub limits: Limits,
    /// `rules/hotkeys/{kind}`: absent or `off`, no key of the kind is ever published.
    pub hotkey_rules: HotKeyRules,
    /// The etcd revision these values were read at (0: defaults, never from etcd).
    pub revision: i64,
}

impl SwitchValues {
    /// The values before etcd has said anything: the process's settings.
    pub fn from_settings(buy: &BuySettings) -> Self {
        Self {
            entry_open: true,
            closed_activities: HashSet::new(),
            deduction: buy.deduction,
            async_mode: buy.async_mode,
            challenge_required: buy.challenge_required,
            limits: Limits {
                max_in_flight: buy.max_in_flight as u64,
                local_rate_per_s: u64::from(buy.local_rate_per_s),
                rate_window_s: u64::from(buy.rate_window_s),
                per_user_per_window: u64::from(buy.per_user_per_window),
                per_ip_per_window: u64::from(buy.per_ip_per_window),
                per_item_per_window: u64::from(buy.per_item_per_window),
                registrations_per_ip_per_window: u64::from(buy.registrations_per_ip_per_window),
            },
            hotkey_rules: HotKeyRules::default(),
            revision: 0,
        }
    }

    /// Whether buyers may enter this activity at all.
    pub fn entry_open_for(&self, activity_id: i64) -> bool {
        self.entry_open && !self.closed_activities.contains(&activity_id)
    }
}

/// The shared handle: one atomic pointer to the current snapshot for handlers, and a
/// change notification for the tasks that must act on a flip (the deduction hand-over).
#[derive(Clone)]
pub struct Switches {
    current: Arc<ArcSwap<SwitchValues>>,
    changes: Arc<watch::Sender<Arc<SwitchValues>>>,
}

impl Switches {
    pub fn new(initial: SwitchValues) -> Self {
        let initial = Arc::new(initial);
        Self {
            current: Arc::new(ArcSwap::new(initial.clone())),
            changes: Arc::new(watch::Sender::new(initial)),
        }
    }

    /// The snapshot in force now; cheap enough for every request.
    pub fn current(&self) -> Arc<SwitchValues> {
        self.current.load_full()
    }

    /// Puts a new snapshot in force (the watcher, and tests) and tells the subscribers.
    pub fn replace(&self, values: SwitchValues) {
        let values = Arc::new(values);
        self.current.store(values.clone());
        self.changes.send_replace(values);
    }

    /// Every snapshot put in force from now on (the latest one when a subscriber lags).
    pub fn subscribe(&self) -> watch::Receiver<Arc<SwitchValues>> {
        self.changes.subscribe()
    }
}
