//! The control plane: switches and limits held in etcd, watched into memory so
//! handlers read them without locks or I/O; node heartbeats that prove propagation; the
//! leader election of the singleton jobs; and the audit of every flip.
//!
//! [`start`] runs it for a serving process; the CLI only uses [`board`] against etcd.

use std::{net::SocketAddr, sync::Arc};
use tokio::{sync::watch, task::JoinHandle};

use crate::state::AppState;
use base::leadership::LeadershipSignal;

pub(crate) mod accepted;
pub mod board;
pub(crate) mod election;
pub(crate) mod keys;
pub(crate) mod layout;
pub(crate) mod nodes;
pub(crate) mod policy;
pub(crate) mod routes;
pub(crate) mod status;
mod watcher;

/// The running control plane of one instance.
#[derive(Clone)]
pub struct ControlPlane(Arc<Tasks>);

struct Tasks {
    state: AppState,
    /// The election's end of `state.leadership`: the control plane alone holds it.
    election: Arc<LeadershipSignal>,
    stop: watch::Sender<bool>,
    /// The heartbeat and the election: they end on `stop`, giving their leases back.
    stoppable: std::sync::Mutex<Vec<JoinHandle<()>>>,
    /// The watcher and the staleness gauge: they run until aborted.
    endless: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

/// How long a graceful stop waits for the leases to be given back.
const GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Puts the best switch values available in force (etcd, else the local snapshot, else
/// the settings; at most a couple of seconds' wait for etcd), then runs the watcher, the
/// node heartbeat, the election and the staleness gauge in the background. `election` is
/// the only handle that sets `state.leadership`; the election keeps it.
pub async fn start(
    state: &AppState,
    election: LeadershipSignal,
    address: SocketAddr,
) -> ControlPlane {
    let election = Arc::new(election);
    let layout = layout::Layout::new(&state.settings.etcd_prefix);
    state.control.set_running(true);
    let watcher = watcher::Watcher::start(state.clone(), layout.clone()).await;
    let (stop, stopped) = watch::channel(false);
    let stoppable = vec![
        tokio::spawn(nodes::heartbeat(
            state.clone(),
            layout.clone(),
            address.to_string(),
            stopped.clone(),
        )),
        tokio::spawn(election::run(
            state.clone(),
            election.clone(),
            layout,
            stopped,
        )),
    ];
    let endless = vec![
        tokio::spawn(watcher.run()),
        tokio::spawn(staleness_gauge(state.clone())),
    ];
    ControlPlane(Arc::new(Tasks {
        state: state.clone(),
        election,
        stop,
        stoppable: std::sync::Mutex::new(stoppable),
        endless: std::sync::Mutex::new(endless),
    }))
}

impl ControlPlane {
    /// Stops every task at once, as a crash would: the leases are left to expire, so the
    /// others notice only through etcd. The signal goes false: a dead instance leads nothing.
    pub fn abort(&self) {
        for handle in take(&self.0.stoppable)
            .into_iter()
            .chain(take(&self.0.endless))
        {
            handle.abort();
        }
        self.finish();
    }

    /// Stops gracefully: resigns the election and revokes the node lease, so another
    /// instance takes over and nobody waits for this one, without waiting for a TTL.
    pub async fn shutdown(&self) {
        self.0.stop.send_replace(true);
        for handle in take(&self.0.stoppable) {
            let abort = handle.abort_handle();
            if tokio::time::timeout(GRACE, handle).await.is_err() {
                abort.abort();
            }
        }
        self.abort();
    }

    fn finish(&self) {
        let state = &self.0.state;
        self.0.election.set(false);
        state.metrics.control.leader.set(0);
        state.control.set_running(false);
    }
}

fn take(handles: &std::sync::Mutex<Vec<JoinHandle<()>>>) -> Vec<JoinHandle<()>> {
    let mut handles = handles
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    std::mem::take(&mut *handles)
}

/// Seconds since the last sync, for `/metrics`, once a second.
async fn staleness_gauge(state: AppState) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        tick.tick().await;
        let age = state.control.sync().synced_ago();
        let seconds = age.map_or(f64::INFINITY, |age| age.as_secs_f64());
        state.metrics.control.sync_age.set(seconds);
    }
}
