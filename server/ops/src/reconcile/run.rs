//! One reconciliation run over one activity: per item, what the ledger's cut shows
//! (`ledger`), each difference as a finding of its class, and in a repair run what is done
//! about it; then the pipeline's classes (stuck pre-orders, unpaid orders past their
//! deadline, incomplete restores) for the whole activity.
//!
//! Repairs, by class:
//! * `REDIS_MISSING`: the item is re-derived from PostgreSQL behind the fence (`fence`),
//!   its Bloom keys added again.
//! * `REDIS_DEDUCTED_NO_ORDER`: a marker older than its grace whose order does not exist is
//!   voided and released (`settle`); a drift or a buyer record no order explains is
//!   re-derived behind the fence.
//! * `ORDER_NOT_IN_REDIS`: re-derived behind the fence (PostgreSQL is the arbiter, so Redis
//!   takes its figures).
//! * `PREORDER_STUCK`: never failed (its buyer may have been told he won): its event is
//!   sent again when it went nowhere (`rules::stuck_verdict`), a recorded one is left for the
//!   ops replay whatever the async switch says now, and one that waited
//!   `fail_stuck_after_s` since its event last reached RabbitMQ is flagged for a person.
//! * `UNPAID_PAST_DEADLINE`: settled through the payment check (paid if the center has the
//!   money, else cancelled with its stock given back).
//! * `RESTORE_INCOMPLETE`: the Redis give-back is retried (once per order id).
//!
//! Differences seen in the cut are confirmed behind the fence before anything is rewritten:
//! what the fenced re-derivation changed is what the run reports as repaired.

use crate::reconcile::redis_state::ItemStateClient;
use sale::buy::bloom::BloomClient;
use std::{collections::HashMap, time::Duration};

use contract::{Finding, FindingAction, FindingClass, RunTrigger, SaleItem, UserId};
use sqlx::{Postgres, Transaction};
use uuid::Uuid;

use crate::{
    reconcile::{
        fence::{self, Rederived},
        ledger::{self, Observed},
        rules::{self, EventState},
        service::ActivityLock,
        store,
    },
    state::AppState,
};
use sale::{
    buy::{
        bloom::{self, BloomAnswer},
        rules::{phase, Phase},
        settle::{self, Deduction, Settled},
    },
    catalog::store::StoredActivity,
    orders::{
        cancellations::GiveBack,
        pay_timeout::{self, give_back_to_redis, Trigger},
        stuck,
    },
};

/// Rows of each pipeline class one run handles at most; the next run takes the rest.
const PIPELINE_BATCH: i64 = 500;

/// How a run goes about an activity.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mode {
    pub(crate) repair: bool,
    /// The leader's pass: cheap (no buyer-by-buyer comparison), and a drift is acted on
    /// only when the previous pass saw the same.
    pub(crate) automatic: bool,
}

/// Drifts the previous automatic pass saw, per item.
pub(crate) type SeenDrifts = HashMap<SaleItem, i64>;

/// Where a run's findings go as it makes progress.
pub(crate) enum Sink {
    /// A stored run: findings and progress are written item by item.
    Stored(i64),
    /// The automatic pass: kept in memory, stored only if there are any.
    Collected(Vec<Finding>),
}

impl Sink {
    async fn item_done(&mut self, state: &AppState, findings: Vec<Finding>) -> anyhow::Result<()> {
        for finding in &findings {
            state
                .metrics
                .reconcile_findings
                .with_label_values(&[finding.class.as_str(), finding.action.as_str()])
                .inc();
        }
        let findings = rules::capped(findings, state.settings.reconcile.max_findings_per_class);
        match self {
            Sink::Stored(run_id) => store::item_done(&state.db, *run_id, &findings).await?,
            Sink::Collected(all) => all.extend(findings),
        }
        Ok(())
    }
}

/// Runs over every item of the activity, then over its pipeline classes. Returns the
/// ledger's drift per item as the cut saw it (for the gauge and the next automatic pass).
/// A repair re-derives items only with the activity's `lock`.
pub(crate) async fn execute(
    state: &AppState,
    activity: &StoredActivity,
    mode: Mode,
    lock: Option<&ActivityLock>,
    seen: &SeenDrifts,
    sink: &mut Sink,
) -> anyhow::Result<SeenDrifts> {
    let live = phase(
        activity.starts_at,
        activity.ends_at,
        chrono::Utc::now(),
        true,
    ) == Phase::Open;
    let loaded = live || store::prewarmed_at(&state.db, activity.id).await?.is_some();
    let (observed, mut tx) = ledger::observe(state, activity.id).await?;
    // What needs the cut's snapshot is read now, for every item; the snapshot is closed
    // before the long work (buyer-by-buyer comparisons, re-derivations), which reads in
    // short snapshots of its own: one held for minutes would hold back the vacuum of the
    // hot item rows.
    let mut agreed = Vec::with_capacity(observed.len());
    for item in &observed {
        agreed.push(!mode.automatic && buyer_counts_agree(&mut tx, activity.id, item).await?);
    }
    tx.rollback().await?;
    let mut drifts = SeenDrifts::new();
    for (item, buyer_counts_agree) in observed.iter().zip(agreed) {
        let sale = SaleItem::new(activity.id, item.ledger.item_id);
        let check = ItemCheck {
            state,
            activity,
            item,
            sale,
            mode,
            lock,
            loaded,
            buyer_counts_agree,
        };
        let previous = seen.get(&sale).copied();
        let findings = check.run(previous).await?;
        // Redis's distance from PostgreSQL is no drift while Redis is not kept: exported as
        // one, it would page the operator who chose the database path.
        let drift = if redis_judged(state) {
            item.ledger.drift
        } else {
            0
        };
        drifts.insert(sale, drift);
        sink.item_done(state, findings).await?;
    }
    let findings = pipeline_findings(state, activity, mode).await?;
    sink.item_done(state, findings).await?;
    Ok(drifts)
}

/// Whether Redis is compared with PostgreSQL now: not while the database path deducts,
/// which leaves Redis alone; it is re-derived when the switch comes back.
fn redis_judged(state: &AppState) -> bool {
    state
        .deduction
        .redis_serves(state.switches.current().deduction)
}

struct ItemCheck<'a> {
    state: &'a AppState,
    activity: &'a StoredActivity,
    item: &'a Observed,
    sale: SaleItem,
    mode: Mode,
    lock: Option<&'a ActivityLock>,
    /// The item should be in Redis: the sale is open, or it was pre-warmed.
    loaded: bool,
    /// In the cut, the item had no drift and as many buyer records in Redis as holders in
    /// PostgreSQL plus new buyers in flight ([`buyer_counts_agree`]).
    buyer_counts_agree: bool,
}

impl ItemCheck<'_> {
    /// Re-derives the item behind the fence, under the activity's lock.
    async fn rederive(&self) -> anyhow::Result<Rederived> {
        let lock = self
            .lock
            .ok_or_else(|| anyhow::anyhow!("a repair re-derives only under the activity lock"))?;
        fence::rederive_item(self.state, lock, self.activity, self.sale.item.0).await
    }

    async fn run(&self, previous_drift: Option<i64>) -> anyhow::Result<Vec<Finding>> {
        let state = self.state;
        if let Some(missing) = self.redis_missing().await? {
            return self.missing(missing).await;
        }
        if self.item.counters.stock.is_none() {
            // Never loaded and not due yet: nothing of it is in Redis to compare.
            return Ok(Vec::new());
        }
        let mut findings = self.overdue_markers().await?;
        if self.mode.repair {
            let settled: Vec<Uuid> = self.item.settled.iter().map(|m| m.order).collect();
            ItemStateClient(&state.redis)
                .forget_markers(self.sale, &settled)
                .await?;
        }
        if !redis_judged(state) {
            return Ok(findings);
        }
        let drift = self.item.ledger.drift;
        // A repair of a drift re-derives behind the fence anyway, which finds the buyer
        // differences exactly: comparing them first would be the same work done twice.
        let buyers = if self.mode.automatic || (self.mode.repair && drift != 0) {
            Vec::new()
        } else {
            self.buyer_differences().await?
        };
        if drift == 0 && buyers.is_empty() {
            return Ok(findings);
        }
        if self.mode.automatic && previous_drift != Some(drift) {
            // One cut can catch a cancel between its reads; act once two agree.
            return Ok(findings);
        }
        if self.mode.repair {
            let rederived = self.rederive().await?;
            findings.extend(self.rederived_findings(&rederived, drift));
        } else {
            findings.extend(self.reported_drift(drift));
            findings.extend(buyers.into_iter().map(|(buyer, redis, held)| {
                buyer_finding(self.sale, buyer, redis, held, FindingAction::None)
            }));
        }
        Ok(findings)
    }

    /// Why the item's Redis state counts as gone, if it does.
    async fn redis_missing(&self) -> anyhow::Result<Option<&'static str>> {
        if !self.loaded {
            return Ok(None);
        }
        if self.item.counters.stock.is_none() {
            return Ok(Some("the item's stock key is gone from Redis"));
        }
        let shape = self.state.catalogue.bloom();
        let key = bloom::item_key(self.sale.activity.0, self.sale.item.0);
        if BloomClient(&self.state.redis)
            .bloom_lookup(&shape.positions(&key))
            .await?
            != BloomAnswer::MaybePresent
        {
            return Ok(Some("the item's Bloom filter bits are gone from Redis"));
        }
        Ok(None)
    }

    async fn missing(&self, why: &str) -> anyhow::Result<Vec<Finding>> {
        let ledger = &self.item.ledger;
        let mut finding = Finding {
            class: FindingClass::RedisMissing,
            item_id: ledger.item_id,
            order_id: None,
            user_id: None,
            units: ledger.total - ledger.allocated,
            action: FindingAction::None,
            detail: why.to_owned(),
        };
        if !self.mode.repair {
            return Ok(vec![finding]);
        }
        let rederived = self.rederive().await?;
        let shape = self.state.catalogue.bloom();
        for key in [
            bloom::activity_key(self.activity.id),
            bloom::item_key(self.activity.id, ledger.item_id),
        ] {
            BloomClient(&self.state.redis)
                .bloom_add(&shape.positions(&key))
                .await?;
        }
        self.state.catalogue.forget(self.activity.id);
        finding.action = FindingAction::Repaired;
        finding.units = rederived.stock_after;
        finding.detail = format!(
            "{why}; re-derived from PostgreSQL: stock {}, {} buyer records, {} deductions in flight voided",
            rederived.stock_after,
            rederived.buyers,
            rederived.voided.len()
        );
        Ok(vec![finding])
    }

    /// Markers older than their grace with no order: their pre-order is not coming.
    async fn overdue_markers(&self) -> anyhow::Result<Vec<Finding>> {
        let grace = Duration::from_millis(self.state.settings.reconcile.marker_grace_ms);
        let mut findings = Vec::new();
        for marker in self.item.overdue(grace) {
            let deduction = Deduction {
                sale: self.sale,
                order: marker.order,
                buyer: UserId(marker.buyer),
                units: marker.units,
            };
            let (action, detail) = if self.mode.repair {
                match settle::void_and_release(&self.state.db, &self.state.redis, &deduction)
                    .await?
                {
                    Settled::Released(_) => (
                        FindingAction::Repaired,
                        "deducted in Redis, no pre-order: voided and given back".to_owned(),
                    ),
                    Settled::NothingOwed => (
                        FindingAction::None,
                        "voided; Redis had given it back already".to_owned(),
                    ),
                    Settled::OrderExists => (
                        FindingAction::None,
                        "its pre-order committed meanwhile".to_owned(),
                    ),
                }
            } else {
                (
                    FindingAction::None,
                    format!(
                        "deducted in Redis {} s ago, no pre-order",
                        (self.item.redis_now_ms - marker.at_ms) / 1000
                    ),
                )
            };
            findings.push(Finding {
                class: FindingClass::RedisDeductedNoOrder,
                item_id: self.sale.item.0,
                order_id: Some(marker.order.to_string()),
                user_id: Some(marker.buyer),
                units: marker.units,
                action,
                detail,
            });
        }
        Ok(findings)
    }

    /// Buyers whose Redis record differs from their holding, after the deductions in
    /// flight: (buyer, Redis, PostgreSQL). First the counts, in the cut
    /// ([`buyer_counts_agree`]); only when they disagree, or the stock drifts, buyer by buyer
    /// in chunks, so memory stays bounded whatever their number. Each chunk is its own short
    /// cut: a snapshot, then the markers (those whose order the snapshot does not see are in
    /// flight), then the chunk's Redis records. What the counts cannot see: a missing
    /// record and an extra one at once, with no stock drift.
    async fn buyer_differences(&self) -> anyhow::Result<Vec<(i64, i64, i64)>> {
        if self.buyer_counts_agree {
            return Ok(Vec::new());
        }
        let (activity_id, item_id) = (self.sale.activity.0, self.sale.item.0);
        let state = self.state;
        let mut differences = Vec::new();
        let mut cursor = 0;
        loop {
            let mut tx = taken_snapshot(state).await?;
            let in_flight = self.in_flight(&mut tx).await?;
            let (next, chunk) = ItemStateClient(&state.redis)
                .scan_buyers(self.sale, cursor)
                .await?;
            let buyers: Vec<i64> = chunk.iter().map(|(buyer, _)| *buyer).collect();
            let held = store::holdings_of(&mut tx, activity_id, item_id, &buyers).await?;
            tx.rollback().await?;
            for (buyer, recorded) in chunk {
                let expected = held.get(&buyer).copied().unwrap_or(0)
                    + in_flight.get(&buyer).copied().unwrap_or(0);
                if recorded != expected {
                    differences.push((buyer, recorded, expected));
                }
            }
            if next == 0 {
                break;
            }
            cursor = next;
        }
        // Holders with no Redis record at all: found in buyer order, a snapshot per chunk.
        let mut after = i64::MIN;
        loop {
            let mut tx = store::snapshot(&state.db).await?;
            let chunk = store::holders_after(&mut tx, activity_id, item_id, after, 1000).await?;
            tx.rollback().await?;
            let Some(last) = chunk.last() else { break };
            after = last.0;
            let buyers: Vec<i64> = chunk.iter().map(|(buyer, _)| *buyer).collect();
            let recorded = ItemStateClient(&state.redis)
                .buyer_units(self.sale, &buyers)
                .await?;
            for ((buyer, held), recorded) in chunk.into_iter().zip(recorded) {
                if recorded == 0 {
                    differences.push((buyer, 0, held));
                }
            }
        }
        if differences.is_empty() {
            return Ok(differences);
        }
        // A buyer who deducted after a chunk's Redis read has a marker its snapshot did not
        // see: in flight, not a difference.
        let mut tx = taken_snapshot(state).await?;
        let moving = self.in_flight(&mut tx).await?;
        tx.rollback().await?;
        differences.retain(|(buyer, ..)| !moving.contains_key(buyer));
        differences.sort_unstable();
        differences.dedup();
        Ok(differences)
    }

    /// Units per buyer of the item's markers whose order `tx`'s snapshot does not see.
    async fn in_flight(
        &self,
        tx: &mut Transaction<'static, Postgres>,
    ) -> anyhow::Result<HashMap<i64, i64>> {
        let (now, _) = ItemStateClient(&self.state.redis)
            .item_counters(self.sale)
            .await?;
        let orders: Vec<Uuid> = now.markers.iter().map(|m| m.order).collect();
        let visible = store::visible_orders(tx, &orders).await?;
        let mut in_flight: HashMap<i64, i64> = HashMap::new();
        for marker in now.markers.iter().filter(|m| !visible.contains(&m.order)) {
            *in_flight.entry(marker.buyer).or_default() += marker.units;
        }
        Ok(in_flight)
    }

    fn reported_drift(&self, drift: i64) -> Option<Finding> {
        let class = rules::drift_class(drift)?;
        let detail = if drift > 0 {
            format!("{drift} units are neither in Redis stock nor held by an order")
        } else {
            format!("Redis counts {} units as free that orders hold", -drift)
        };
        Some(Finding {
            class,
            item_id: self.sale.item.0,
            order_id: None,
            user_id: None,
            units: drift.abs(),
            action: FindingAction::None,
            detail,
        })
    }

    /// What a fenced re-derivation changed, as repaired findings; a difference of the cut
    /// that the fence did not confirm is reported as such.
    fn rederived_findings(&self, rederived: &Rederived, drift: i64) -> Vec<Finding> {
        let item_id = self.sale.item.0;
        let mut findings: Vec<Finding> = rederived
            .voided
            .iter()
            .map(|voided| Finding {
                class: FindingClass::RedisDeductedNoOrder,
                item_id,
                order_id: Some(voided.order.to_string()),
                user_id: Some(voided.buyer.0),
                units: voided.units,
                action: FindingAction::Repaired,
                detail: "in flight at the fence without a pre-order: voided and given back"
                    .to_owned(),
            })
            .collect();
        let correction = rederived.stock_after - rederived.stock_before.unwrap_or(0);
        if let Some(class) = rules::drift_class(correction) {
            findings.push(Finding {
                class,
                item_id,
                order_id: None,
                user_id: None,
                units: correction.abs(),
                action: FindingAction::Repaired,
                detail: format!(
                    "Redis stock {} re-derived to {} from PostgreSQL",
                    rederived.stock_before.unwrap_or(0),
                    rederived.stock_after
                ),
            });
        }
        findings.extend(rederived.buyers_changed.iter().map(|(buyer, redis, held)| {
            buyer_finding(self.sale, *buyer, *redis, *held, FindingAction::Repaired)
        }));
        if findings.is_empty() {
            if let Some(class) = rules::drift_class(drift) {
                findings.push(Finding {
                    class,
                    item_id,
                    order_id: None,
                    user_id: None,
                    units: drift.abs(),
                    action: FindingAction::None,
                    detail: format!(
                        "a drift of {drift} seen without the fence was not confirmed behind it"
                    ),
                });
            }
        }
        findings
    }
}

/// Whether, in the cut, the item had no drift and as many buyer records in Redis as
/// holders in PostgreSQL plus new buyers in flight: then no buyer-by-buyer comparison is
/// needed.
async fn buyer_counts_agree(
    tx: &mut Transaction<'static, Postgres>,
    activity_id: i64,
    item: &Observed,
) -> anyhow::Result<bool> {
    let item_id = item.ledger.item_id;
    if item.ledger.drift != 0 {
        return Ok(false);
    }
    let holders = store::holder_count(tx, activity_id, item_id).await?;
    let mut moving: Vec<i64> = item.in_flight.iter().map(|m| m.buyer).collect();
    moving.sort_unstable();
    moving.dedup();
    let moving_holders = store::holdings_of(tx, activity_id, item_id, &moving).await?;
    let new_buyers = (moving.len() - moving_holders.len()) as i64;
    Ok(item.counters.buyers == holders + new_buyers)
}

/// A snapshot already taken (its first statement runs now), so that what is read from
/// Redis afterwards is no older than it.
async fn taken_snapshot(state: &AppState) -> anyhow::Result<Transaction<'static, Postgres>> {
    let mut tx = store::snapshot(&state.db).await?;
    sqlx::query("SELECT 1").execute(&mut *tx).await?;
    Ok(tx)
}

fn buyer_finding(
    sale: SaleItem,
    buyer: i64,
    redis: i64,
    held: i64,
    action: FindingAction,
) -> Finding {
    let (class, detail) = if redis > held {
        (
            FindingClass::RedisDeductedNoOrder,
            format!("Redis records {redis} units for this buyer, orders hold {held}"),
        )
    } else {
        (
            FindingClass::OrderNotInRedis,
            format!("orders hold {held} units of this buyer, Redis records {redis}"),
        )
    };
    Finding {
        class,
        item_id: sale.item.0,
        order_id: None,
        user_id: Some(buyer),
        units: (redis - held).abs(),
        action,
        detail,
    }
}

/// The pipeline's classes over the whole activity.
async fn pipeline_findings(
    state: &AppState,
    activity: &StoredActivity,
    mode: Mode,
) -> anyhow::Result<Vec<Finding>> {
    let mut findings = stuck_preorders(state, activity, mode).await?;
    let grace = Duration::from_millis(state.settings.pipeline.timeout_scan_interval_ms.max(1)) * 2;
    for (order_id, item_id, user_id, quantity) in
        store::overdue_unpaid(&state.db, activity.id, grace, PIPELINE_BATCH).await?
    {
        let (action, detail) = if mode.repair {
            match pay_timeout::settle_overdue(state, order_id, Trigger::Reconcile).await? {
                pay_timeout::Verdict::Cancelled { given_back } => (
                    FindingAction::Repaired,
                    format!("confirmed unpaid with the payment center and cancelled; Redis given back: {given_back}"),
                ),
                pay_timeout::Verdict::PaidAtCenter => (
                    FindingAction::Repaired,
                    "the payment center had the money: recorded as paid".to_owned(),
                ),
                _ => (FindingAction::None, "settled meanwhile".to_owned()),
            }
        } else {
            (
                FindingAction::None,
                "unpaid past its pay deadline".to_owned(),
            )
        };
        findings.push(Finding {
            class: FindingClass::UnpaidPastDeadline,
            item_id,
            order_id: Some(order_id.to_string()),
            user_id: Some(user_id),
            units: quantity.into(),
            action,
            detail,
        });
    }
    for owed in store::owed_restores(&state.db, activity.id, grace, PIPELINE_BATCH).await? {
        let (action, detail) = if !mode.repair {
            (
                FindingAction::None,
                "cancelled in PostgreSQL, not given back to Redis".to_owned(),
            )
        } else if give_back_to_redis(state, &owed).await {
            (FindingAction::Repaired, "given back to Redis".to_owned())
        } else {
            (
                FindingAction::Flagged,
                "the Redis give-back failed again; Redis is away?".to_owned(),
            )
        };
        findings.push(restore_finding(&owed, action, detail));
    }
    Ok(findings)
}

fn restore_finding(owed: &GiveBack, action: FindingAction, detail: String) -> Finding {
    Finding {
        class: FindingClass::RestoreIncomplete,
        item_id: owed.item_id,
        order_id: Some(owed.order_id.to_string()),
        user_id: Some(owed.user_id),
        units: owed.quantity.into(),
        action,
        detail,
    }
}

/// Stuck pre-orders: each sent again or left to whoever sends it, and flagged once it has
/// waited too long. Never failed: its buyer may have been told he won.
async fn stuck_preorders(
    state: &AppState,
    activity: &StoredActivity,
    mode: Mode,
) -> anyhow::Result<Vec<Finding>> {
    let settings = &state.settings.reconcile;
    let stuck_after = Duration::from_secs(settings.stuck_after_s);
    let flag_after = Duration::from_secs(settings.fail_stuck_after_s);
    let mut findings = Vec::new();
    for stuck in stuck::stuck_preorders(&state.db, activity.id, stuck_after, PIPELINE_BATCH).await?
    {
        let since_sent = Duration::from_secs_f64(stuck.since_sent_s.max(0.0));
        let event = EventState::of(stuck.outbox_status.as_deref(), stuck.resent);
        let verdict = rules::stuck_verdict(event, since_sent, flag_after);
        let resent =
            mode.repair && verdict.resend && stuck::republish(&state.db, stuck.order_id).await?;
        let action = if verdict.flagged {
            FindingAction::Flagged
        } else if resent {
            FindingAction::Repaired
        } else if mode.automatic {
            // Left to the relay or the replay, nothing done, no one to tell yet: the
            // leader's pass stores no finding for it (a report run lists it).
            continue;
        } else {
            FindingAction::None
        };
        let mut detail = format!(
            "waits {} s since its event was last sent (or written), outbox {}: {}",
            since_sent.as_secs(),
            stuck.outbox_status.as_deref().unwrap_or("missing"),
            verdict.why
        );
        if verdict.resend {
            detail.push_str(match (mode.repair, resent) {
                (true, true) => "; sent again",
                (true, false) => "; its outbox row moved meanwhile",
                (false, _) => "; a repair sends it again",
            });
        }
        if verdict.flagged {
            detail.push_str(&format!(
                "; past fail_stuck_after_s ({} s): it is never failed by a timer, a person decides",
                flag_after.as_secs()
            ));
        }
        findings.push(Finding {
            class: FindingClass::PreorderStuck,
            item_id: stuck.item_id,
            order_id: Some(stuck.order_id.to_string()),
            user_id: Some(stuck.user_id),
            units: stuck.quantity.into(),
            action,
            detail,
        });
    }
    Ok(findings)
}

/// Who started a run, as stored.
pub(crate) fn trigger_of(source: contract::Source) -> RunTrigger {
    match source {
        contract::Source::Console => RunTrigger::Console,
        contract::Source::Api => RunTrigger::Api,
        // Nothing outside an operator's tools starts a run but the leader's pass.
        contract::Source::External | contract::Source::System => RunTrigger::Auto,
        contract::Source::Cli => RunTrigger::Cli,
    }
}
