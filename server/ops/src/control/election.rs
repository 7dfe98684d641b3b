//! The leader election of the singleton jobs: an etcd lease, kept alive here, and
//! a campaign with etcd's election API on `{prefix}/election/leader`. It drives
//! [`LeadershipSignal`](base::leadership::LeadershipSignal); jobs read
//! [`Leadership`](base::leadership::Leadership).
//!
//! Never two leaders: the leader steps down (signal false) as soon as a keep-alive fails,
//! and at the latest two thirds of a TTL after the last acknowledged keep-alive was sent;
//! etcd frees the election for the next candidate only when the lease expires, a full TTL
//! after that send at the earliest. A dead leader is replaced within one TTL (plus etcd's
//! expiry sweep, about half a second).
//!
//! The campaign blocks until elected, so it runs on a client of its own without the
//! shared client's request timeout: a timed-out campaign makes etcd resign the candidate's
//! key behind the caller's back.

use etcd_client::{
    Client, ConnectOptions, EventType, GetOptions, LeaseKeepAliveStream, LeaseKeeper, SortOrder,
    SortTarget, WatchOptions,
};
use std::{sync::Arc, time::Duration};
use tokio::{sync::watch, time::Instant};

use crate::control::{
    layout::Layout,
    status::{Backoff, Complaint},
};
use crate::state::AppState;
use base::etcd::EtcdCall;
use base::leadership::LeadershipSignal;

/// Bound on every single election call that is not the campaign itself.
const CALL: Duration = Duration::from_secs(3);

/// This instance as a candidate: its state, and the one handle that sets its leadership.
struct Candidate {
    state: AppState,
    signal: Arc<LeadershipSignal>,
}

impl Candidate {
    fn lead(&self) {
        self.signal.set(true);
        self.state.metrics.control.leader.set(1);
        tracing::info!(
            node = self.state.control.node_id(),
            "leading the singleton jobs"
        );
    }

    fn step_down(&self) {
        let state = &self.state;
        if state.leadership.is_leader() {
            tracing::info!(node = state.control.node_id(), "leadership given up");
        }
        self.signal.set(false);
        state.metrics.control.leader.set(0);
    }
}

/// The node id of the elected leader, if any: the value of the oldest candidate key under
/// the election's name, which is who etcd's election API names the leader.
pub(crate) async fn current_leader(
    state: &AppState,
    layout: &Layout,
) -> anyhow::Result<Option<String>> {
    let mut client = state.etcd.client().await?;
    let options = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1);
    let response = state
        .etcd
        .timed(
            EtcdCall::Get,
            client.get(format!("{}/", layout.election()), Some(options)),
        )
        .await?;
    Ok(response
        .kvs()
        .first()
        .map(|kv| kv.value_str().unwrap_or("<not UTF-8>").to_owned()))
}

pub(super) async fn run(
    state: AppState,
    signal: Arc<LeadershipSignal>,
    layout: Layout,
    mut stop: watch::Receiver<bool>,
) {
    let candidate = Candidate { state, signal };
    let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut complaint = Complaint::new(Duration::from_secs(30));
    let mut client: Option<Client> = None;
    while !*stop.borrow() {
        let outcome = match client.as_mut() {
            Some(client) => term(&candidate, &layout, client, &mut stop).await,
            // The balanced channel reconnects by itself once made: one client for good.
            None => connect(&candidate.state).await.map(|made| {
                client = Some(made);
            }),
        };
        if let Err(error) = outcome {
            complaint.complain("leader election interrupted", &error);
            tokio::select! {
                () = tokio::time::sleep(backoff.next_delay()) => {}
                _ = stop.changed() => {}
            }
        } else {
            backoff.reset();
        }
    }
    candidate.step_down();
}

async fn connect(state: &AppState) -> anyhow::Result<Client> {
    let options = ConnectOptions::new()
        .with_connect_timeout(Duration::from_secs(2))
        // HTTP/2 pings find a dead connection that never errors by itself.
        .with_keep_alive(Duration::from_secs(1), Duration::from_secs(2))
        .with_keep_alive_while_idle(true);
    Ok(Client::connect(&state.settings.etcd_endpoints, Some(options)).await?)
}

/// One lease's life: campaign, lead until the lease is in doubt, give everything back.
/// Returns `Ok` only when asked to stop; otherwise the reason the term ended.
async fn term(
    candidate: &Candidate,
    layout: &Layout,
    client: &mut Client,
    stop: &mut watch::Receiver<bool>,
) -> anyhow::Result<()> {
    let state = &candidate.state;
    let ttl = Duration::from_secs(state.settings.control.lease_ttl_s.max(1) as u64);
    let granted_at = Instant::now();
    let grant = state.etcd.timed(
        EtcdCall::Lease,
        client.lease_grant(ttl.as_secs() as i64, None),
    );
    let lease = tokio::time::timeout(CALL, grant).await??.id();
    let outcome = async {
        let (mut keeper, mut acks) =
            tokio::time::timeout(CALL, client.lease_keep_alive(lease)).await??;
        let mut lease_clock = LeaseClock::new(ttl, granted_at);
        let name = layout.election();
        let node_id = state.control.node_id().to_owned();
        let mut campaigner = client.clone();
        let leader = tokio::select! {
            response = campaigner.campaign(name.clone(), node_id, lease) => response?
                .take_leader()
                .ok_or_else(|| anyhow::anyhow!("campaign answered without a leader key"))?,
            error = keep(&mut keeper, &mut acks, &mut lease_clock) => return Err(error),
            _ = stop.changed() => return Ok(()),
        };
        // The campaign may return after the lease was lost while it waited: confirm that
        // etcd's leader is this lease before acting as one.
        let current = tokio::time::timeout(CALL, client.leader(name)).await??;
        if current.kv().map(|kv| kv.lease()) != Some(lease) {
            anyhow::bail!("elected on a lease that no longer leads");
        }
        let options = WatchOptions::new().with_start_revision(leader.rev() + 1);
        let mut own_key = tokio::time::timeout(CALL, client.watch(leader.key(), Some(options))).await??;
        candidate.lead();
        loop {
            tokio::select! {
                error = keep(&mut keeper, &mut acks, &mut lease_clock) => return Err(error),
                _ = stop.changed() => return Ok(()),
                message = own_key.message() => {
                    let response = message?.ok_or_else(|| anyhow::anyhow!("the leader key's watch closed"))?;
                    if response.canceled() || response.events().iter().any(|e| e.event_type() == EventType::Delete) {
                        anyhow::bail!("the leader key was deleted");
                    }
                }
            }
        }
    }
    .await;
    // Signal first, then free the election for the next candidate.
    candidate.step_down();
    let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
    outcome
}

/// When this instance must stop trusting its lease.
struct LeaseClock {
    ttl: Duration,
    trusted_until: Instant,
    /// When each keep-alive still unanswered was sent, oldest first.
    in_flight: std::collections::VecDeque<Instant>,
}

impl LeaseClock {
    fn new(ttl: Duration, granted_at: Instant) -> Self {
        Self {
            ttl,
            trusted_until: granted_at + Self::margin(ttl),
            in_flight: Default::default(),
        }
    }

    /// Two thirds of the TTL: at least a third of it between stepping down and the
    /// earliest moment etcd could let another candidate win.
    fn margin(ttl: Duration) -> Duration {
        ttl * 2 / 3
    }

    fn sent(&mut self, at: Instant) {
        self.in_flight.push_back(at);
    }

    fn acknowledged(&mut self) {
        if let Some(sent) = self.in_flight.pop_front() {
            self.trusted_until = self.trusted_until.max(sent + Self::margin(self.ttl));
        }
    }
}

/// Keeps the lease alive (a keep-alive every third of the TTL); returns the error that
/// puts the lease in doubt.
async fn keep(
    keeper: &mut LeaseKeeper,
    acks: &mut LeaseKeepAliveStream,
    clock: &mut LeaseClock,
) -> anyhow::Error {
    let mut tick = tokio::time::interval(clock.ttl / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {
                clock.sent(Instant::now());
                if let Err(error) = keeper.keep_alive().await {
                    return error.into();
                }
            }
            ack = acks.message() => match ack {
                Ok(Some(ack)) if ack.ttl() > 0 => clock.acknowledged(),
                Ok(Some(_)) => return anyhow::anyhow!("the election lease expired"),
                Ok(None) => return anyhow::anyhow!("the keep-alive stream closed"),
                Err(error) => return error.into(),
            },
            () = tokio::time::sleep_until(clock.trusted_until) => {
                return anyhow::anyhow!("keep-alive overdue; stepping down before the lease can expire");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trust_ends_well_before_the_lease_can_expire() {
        let start = Instant::now();
        let ttl = Duration::from_secs(3);
        let mut clock = LeaseClock::new(ttl, start);
        assert_eq!(clock.trusted_until, start + Duration::from_secs(2));
        clock.sent(start + Duration::from_secs(1));
        clock.sent(start + Duration::from_secs(2));
        clock.acknowledged();
        assert_eq!(clock.trusted_until, start + Duration::from_secs(3));
        clock.acknowledged();
        assert_eq!(clock.trusted_until, start + Duration::from_secs(4));
        clock.acknowledged();
        assert_eq!(
            clock.trusted_until,
            start + Duration::from_secs(4),
            "no ack without a send"
        );
    }
}
