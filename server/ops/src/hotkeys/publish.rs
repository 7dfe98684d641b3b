//! The leader's side of detection: from the cluster's summed counts and the rules in force,
//! which keys are hot, written to etcd under `hotkeys/{kind}/{key}` with a lease of the
//! rule's `hold_s`, and renewed (lease kept alive, value rewritten with the new rate and
//! expiry) about once a second while they stay hot. A key no longer hot is left to lapse
//! with its lease, so every instance drops it at the same moment, leader or not.
//!
//! A new leader adopts the keys its predecessor published (their leases are in the table
//! every instance watches) and renews them, so a takeover neither drops nor doubles a key.
//! A manual key is never overwritten by a detected one. A renewal writes only over the key
//! under the lease it holds, and a key an operator lifted is not published again while the
//! lift lasts (the key's hold), even though the requests it was refusing keep it hot: the
//! leader learns how long the lift lasts the first time its publish is refused, and asks etcd
//! nothing about that key until then.

use contract::{HotKeyId, HotKeyKind, HotKeyRule, HotKeySource};
use etcd_client::{Client, Compare, CompareOp, PutOptions, Txn, TxnOp, TxnOpResponse};
use std::{
    collections::{hash_map::Entry, HashMap},
    time::{Duration, Instant},
};

use crate::{
    control::layout::Layout,
    hotkeys::{
        store::{self, Opening},
        table::Published,
    },
    state::AppState,
};
use base::etcd::EtcdCall;

/// How often a hot key's lease and value are renewed.
const RENEW_EVERY: Duration = Duration::from_secs(1);
/// Keys published per kind at most, hottest first: a flood of addresses each above the
/// threshold costs etcd a bounded number of writes.
const MAX_PER_KIND: usize = 64;
/// How often the history's open periods of lapsed keys are closed.
const SWEEP_EVERY: Duration = Duration::from_secs(5);

/// A key this leader keeps in force.
struct Held {
    lease: i64,
    since_ms: i64,
    renewed: Instant,
    hold: Duration,
    peak: u64,
}

pub(super) struct Publisher {
    state: AppState,
    layout: Layout,
    held: HashMap<HotKeyId, Held>,
    /// Keys an operator lifted, with when their lift ends: not published again before.
    lifted: HashMap<HotKeyId, Instant>,
    last_sweep: Instant,
}

/// What became of a publish.
enum Publish {
    Written,
    /// Another key is there (a manual one, or one published since the table was read).
    Taken,
    /// An operator lifted the key; its lift lasts until the instant remembered.
    Lifted,
}

/// The keys of a sum that a rule makes hot, with their rate and rule, hottest first and at
/// most [`MAX_PER_KIND`] per kind.
pub(super) fn hot_keys(
    summed: &[(HotKeyId, u64)],
    rule_of: impl Fn(HotKeyKind) -> Option<HotKeyRule>,
) -> Vec<(HotKeyId, u64, HotKeyRule)> {
    let mut per_kind: HashMap<HotKeyKind, usize> = HashMap::new();
    summed
        .iter()
        .filter_map(|(id, rate)| {
            let rule = rule_of(id.kind())?;
            (*rate >= rule.threshold_per_s).then_some((*id, *rate, rule))
        })
        .filter(|(id, _, _)| {
            let taken = per_kind.entry(id.kind()).or_default();
            *taken += 1;
            *taken <= MAX_PER_KIND
        })
        .collect()
}

impl Publisher {
    pub(super) fn new(state: AppState) -> Self {
        let layout = Layout::new(&state.settings.etcd_prefix);
        Self {
            state,
            layout,
            held: HashMap::new(),
            lifted: HashMap::new(),
            last_sweep: Instant::now(),
        }
    }

    /// This instance stopped leading: the next leader adopts what it held.
    pub(super) fn step_down(&mut self) {
        self.held.clear();
        self.lifted.clear();
    }

    /// One decision round over the latest sum.
    pub(super) async fn evaluate(&mut self, summed: &[(HotKeyId, u64)]) {
        let rules = self.state.switches.current().hotkey_rules;
        let hot = hot_keys(summed, |kind| rules.of(kind));
        let now = Instant::now();
        // Keys no longer hot keep their lease until it runs out; forget them then.
        self.held.retain(|id, held| {
            hot.iter().any(|(hot, ..)| hot == id) || held.renewed + held.hold > now
        });
        self.lifted.retain(|_, until| *until > now);
        if hot.is_empty() && self.last_sweep.elapsed() < SWEEP_EVERY {
            return;
        }
        let mut client = match self.state.etcd.client().await {
            Ok(client) => client,
            Err(error) => {
                tracing::debug!(error = %error, "hot keys not published: etcd unreachable");
                return;
            }
        };
        for (id, rate, rule) in hot {
            let outcome = self.keep_hot(&mut client, id, rate, rule).await;
            let label = match outcome {
                Ok(Some(label)) => label,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(key = %id.path(), error = %error, "could not publish a hot key");
                    "failed"
                }
            };
            self.state
                .metrics
                .hotkeys
                .publishes
                .with_label_values(&[id.kind().as_str(), label])
                .inc();
        }
        if self.last_sweep.elapsed() >= SWEEP_EVERY {
            self.last_sweep = Instant::now();
            let in_force: Vec<String> = self
                .state
                .hotkeys
                .table
                .snapshot()
                .keys()
                .map(HotKeyId::path)
                .collect();
            if let Err(error) = store::close_lapsed(&self.state.db, &in_force).await {
                tracing::warn!(error = %error, "could not close the history of lapsed hot keys");
            }
        }
    }

    /// Publishes, adopts or renews one hot key; `None` when nothing was due.
    async fn keep_hot(
        &mut self,
        client: &mut Client,
        id: HotKeyId,
        rate: u64,
        rule: HotKeyRule,
    ) -> anyhow::Result<Option<&'static str>> {
        let in_force = self.state.hotkeys.table.get(&id);
        if in_force
            .as_ref()
            .is_some_and(|hot| hot.value.source == HotKeySource::Manual)
        {
            return Ok(None);
        }
        if self.lifted.contains_key(&id) {
            return Ok(None);
        }
        let hold = Duration::from_secs(rule.hold_s);
        if let (Entry::Vacant(slot), Some(hot)) = (self.held.entry(id), in_force) {
            // Published by an earlier leader: renewed from now on by this one.
            slot.insert(Held {
                lease: hot.lease,
                since_ms: hot.value.since_ms,
                // Due for renewal at once.
                renewed: Instant::now()
                    .checked_sub(RENEW_EVERY)
                    .unwrap_or_else(Instant::now),
                hold,
                peak: rate,
            });
        }
        let Some(held) = self.held.get_mut(&id) else {
            return Ok(Some(self.publish(client, id, rate, rule).await?.label()));
        };
        held.peak = held.peak.max(rate);
        if held.renewed.elapsed() < RENEW_EVERY && held.hold == hold {
            return Ok(None);
        }
        let (lease, since_ms, peak) = (held.lease, held.since_ms, held.peak);
        let etcd = &self.state.etcd;
        let alive = async {
            let (mut keeper, mut answers) = client.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            answers.message().await
        };
        let ttl = etcd
            .timed(EtcdCall::Lease, alive)
            .await?
            .map_or(0, |answer| answer.ttl());
        if ttl <= 0 {
            // The lease ran out in between (etcd was slow, or the hold was short): anew.
            self.held.remove(&id);
            return Ok(Some(self.publish(client, id, rate, rule).await?.label()));
        }
        let value = self.value(rate, rule, since_ms);
        let key = self.layout.hotkey_key(id);
        // Only over the key this leader holds: one an operator lifted (deleted) or replaced
        // since is theirs, and a plain put would bring it back within a second.
        let renew = Txn::new()
            .when(vec![Compare::lease(key.clone(), CompareOp::Equal, lease)])
            .and_then(vec![TxnOp::put(
                key,
                serde_json::to_vec(&value)?,
                Some(PutOptions::new().with_lease(lease)),
            )]);
        if !etcd
            .timed(EtcdCall::Txn, client.txn(renew))
            .await?
            .succeeded()
        {
            self.held.remove(&id);
            let _ = client.lease_revoke(lease).await;
            return Ok(Some("lost"));
        }
        if let Some(held) = self.held.get_mut(&id) {
            held.renewed = Instant::now();
            held.hold = hold;
        }
        store::raise_peak(&self.state.db, id, peak).await?;
        Ok(Some("renewed"))
    }

    /// Writes a newly hot key under a fresh lease, unless a key is there already or an
    /// operator lifted it within its hold.
    async fn publish(
        &mut self,
        client: &mut Client,
        id: HotKeyId,
        rate: u64,
        rule: HotKeyRule,
    ) -> anyhow::Result<Publish> {
        let etcd = &self.state.etcd;
        let ttl = i64::try_from(rule.hold_s).unwrap_or(i64::MAX);
        let lease = etcd
            .timed(EtcdCall::Lease, client.lease_grant(ttl, None))
            .await?
            .id();
        let since_ms = chrono::Utc::now().timestamp_millis();
        let value = self.value(rate, rule, since_ms);
        let key = self.layout.hotkey_key(id);
        let lift_key = self.layout.lifted_hotkey_key(id);
        // Not over a key already there (a manual one, written since the table was read), nor
        // while an operator's lift of it lasts; when refused, the lift marker tells which.
        let txn = Txn::new()
            .when(vec![
                Compare::version(key.clone(), CompareOp::Equal, 0),
                Compare::version(lift_key.clone(), CompareOp::Equal, 0),
            ])
            .and_then(vec![TxnOp::put(
                key,
                serde_json::to_vec(&value)?,
                Some(PutOptions::new().with_lease(lease)),
            )])
            .or_else(vec![TxnOp::get(lift_key, None)]);
        let written = etcd.timed(EtcdCall::Txn, client.txn(txn)).await?;
        if !written.succeeded() {
            // Someone else's key: this lease holds nothing.
            let _ = client.lease_revoke(lease).await;
            let marker = written.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Get(read) => read.kvs().first().map(|kv| kv.lease()),
                _ => None,
            });
            let Some(marker_lease) = marker else {
                return Ok(Publish::Taken);
            };
            // The marker lives as long as the lift: one question, then quiet until it ends.
            let left = etcd
                .timed(
                    EtcdCall::Lease,
                    client.lease_time_to_live(marker_lease, None),
                )
                .await?
                .ttl();
            let left = Duration::from_secs(u64::try_from(left).unwrap_or(0).max(1));
            self.lifted.insert(id, Instant::now() + left);
            return Ok(Publish::Lifted);
        }
        self.held.insert(
            id,
            Held {
                lease,
                since_ms,
                renewed: Instant::now(),
                hold: Duration::from_secs(rule.hold_s),
                peak: rate,
            },
        );
        tracing::info!(key = %id.path(), rate, action = %rule.action, "hot key published");
        store::open(
            &self.state.db,
            &Opening {
                id,
                action: rule.action,
                source: HotKeySource::Detected,
                rate_per_s: rate,
                actor: None,
                reason: None,
            },
        )
        .await?;
        Ok(Publish::Written)
    }

    fn value(&self, rate: u64, rule: HotKeyRule, since_ms: i64) -> Published {
        let hold_ms = i64::try_from(rule.hold_s.saturating_mul(1000)).unwrap_or(i64::MAX);
        Published {
            action: rule.action,
            limit_per_s: rule.limit_per_s,
            source: HotKeySource::Detected,
            rate_per_s: rate,
            since_ms,
            expires_ms: chrono::Utc::now()
                .timestamp_millis()
                .saturating_add(hold_ms),
            actor: None,
            reason: None,
        }
    }
}

impl Publish {
    /// The outcome label of `seckill_hotkey_publishes_total`.
    fn label(&self) -> &'static str {
        match self {
            Self::Written => "published",
            Self::Taken => "taken",
            Self::Lifted => "lifted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::HotKeyAction;

    #[test]
    fn only_keys_at_their_kinds_threshold_are_hot() {
        let rule = HotKeyRule {
            threshold_per_s: 50,
            action: HotKeyAction::Block,
            limit_per_s: None,
            hold_s: 3,
        };
        let summed = [
            (HotKeyId::User(1), 61),
            (HotKeyId::Item(2), 500),
            (HotKeyId::User(3), 50),
            (HotKeyId::User(4), 49),
        ];
        let hot = hot_keys(&summed, |kind| (kind == HotKeyKind::User).then_some(rule));
        let ids: Vec<HotKeyId> = hot.iter().map(|(id, ..)| *id).collect();
        assert_eq!(ids, [HotKeyId::User(1), HotKeyId::User(3)]);
    }

    #[test]
    fn at_most_a_bounded_number_of_keys_per_kind_is_published() {
        let rule = HotKeyRule {
            threshold_per_s: 1,
            action: HotKeyAction::Watch,
            limit_per_s: None,
            hold_s: 3,
        };
        let summed: Vec<(HotKeyId, u64)> = (1..=200).map(|n| (HotKeyId::User(n), 10)).collect();
        assert_eq!(hot_keys(&summed, |_| Some(rule)).len(), MAX_PER_KIND);
    }
}
