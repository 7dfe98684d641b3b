//! The live dashboard: one frame of live figures per second per instance (funnel, buy
//! QPS and p99, stock of live items, pipeline backlog, pool, admission, instances,
//! switches), taken once by a background task whatever the number of viewers, kept for
//! the last minutes and fanned out to every viewer of `GET /admin/api/dashboard/stream`.
//!
//! What belongs here: the sampling of those figures ([`sample`]), the hub that keeps and
//! fans out frames ([`Hub`]), and the Server-Sent Events route ([`routes`]).

pub(crate) mod routes;
pub(crate) mod sample;

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::sync::broadcast;

use contract::{Actor, DashboardFrame};

use crate::state::AppState;
use base::error::ApiResult;

/// How many frames a viewer gets on connecting: five minutes, so a page opened during a
/// sale starts with its recent history rather than empty.
pub(crate) const BACKLOG_FRAMES: usize = 300;
/// How often a frame is taken.
const PERIOD: Duration = Duration::from_secs(1);

/// The frames of this instance, as JSON: serialised once, sent to every viewer as is.
#[derive(Clone)]
pub(crate) struct Hub(Arc<Inner>);

struct Inner {
    recent: Mutex<VecDeque<Arc<str>>>,
    live: broadcast::Sender<Arc<str>>,
}

impl Default for Hub {
    fn default() -> Self {
        // A viewer further behind than a backlog's worth skips ahead rather than slowing
        // the sampler.
        let (live, _) = broadcast::channel(BACKLOG_FRAMES);
        Self(Arc::new(Inner {
            recent: Mutex::new(VecDeque::with_capacity(BACKLOG_FRAMES)),
            live,
        }))
    }
}

impl Hub {
    fn recent(&self) -> std::sync::MutexGuard<'_, VecDeque<Arc<str>>> {
        self.0
            .recent
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Keeps the frame and sends it to every viewer.
    fn publish(&self, frame: Arc<str>) {
        let mut recent = self.recent();
        if recent.len() == BACKLOG_FRAMES {
            recent.pop_front();
        }
        recent.push_back(frame.clone());
        // Sent under the lock, so a viewer subscribing meanwhile gets each frame once:
        // either in its backlog or live. No viewer is not an error.
        let _ = self.0.live.send(frame);
    }

    /// The frames kept so far, oldest first, and the frames from now on.
    pub(crate) fn subscribe(&self) -> (Vec<Arc<str>>, broadcast::Receiver<Arc<str>>) {
        let recent = self.recent();
        (recent.iter().cloned().collect(), self.0.live.subscribe())
    }
}

/// Frames the console page draws before its stream opens: a minute's worth, since the
/// stream sends the rest of the backlog anyway.
const PAGE_FRAMES: usize = 60;

/// The most recent frames, oldest first, for a role that may watch operations.
pub fn recent(state: &AppState, actor: &Actor) -> ApiResult<Vec<DashboardFrame>> {
    sale::identity::authorize(actor, contract::Permission::WatchOperations)?;
    let (recent, _) = state.dashboard.subscribe();
    let skip = recent.len().saturating_sub(PAGE_FRAMES);
    Ok(recent
        .iter()
        .skip(skip)
        .filter_map(|frame| serde_json::from_str(frame).ok())
        .collect())
}

/// Takes a frame every second for the life of the process.
pub fn spawn(state: &AppState) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let mut sampler = sample::Sampler::default();
        let mut tick = tokio::time::interval(PERIOD);
        // A slow second (etcd or PostgreSQL lagging) shows as a gap, not as a burst.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            tick.tick().await;
            let frame = sampler.take(&state).await;
            match serde_json::to_string(&frame) {
                Ok(json) => state.dashboard.publish(json.into()),
                Err(error) => tracing::error!(%error, "dashboard frame not serialisable"),
            }
        }
    })
}
