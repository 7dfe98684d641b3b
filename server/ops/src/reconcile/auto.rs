//! The leader's automatic reconciliation: every `reconcile.interval_ms`, a repair pass of
//! the safe classes over every live activity (open, or pre-warmed and not ended), cheap
//! enough to run every few seconds: counters and markers, never a scan of every order or
//! buyer. A drift is re-derived only once two passes in a row saw the same. A pass that
//! repaired something, or found something the activity's previous pass did not, is stored
//! as a run (trigger `auto`) and audited (the same findings pass after pass are one run,
//! not one every `interval_ms`); the drift of every live
//! item is exported as `seckill_stock_drift_units` (0 while the database path deducts and
//! Redis is not compared), each completed pass counted in `seckill_reconcile_passes_total`.

use std::{
    collections::{HashMap, HashSet},
    time::Duration,
};

use contract::{SaleItem, Source};
use serde_json::json;

use crate::{
    reconcile::{
        rules::{worth_storing, FindingKey},
        run::{self, Mode, SeenDrifts, Sink},
        service::ActivityLock,
        store::{self, NewRun},
    },
    state::AppState,
};
use sale::{
    audit::ops_audit::{self, OpsAction},
    catalog::copies::{self, Copies},
    catalog::store as catalog,
    orders::mq::consume::QuietWarnings,
};

/// The actor the audit names for the leader's repairs.
const ACTOR: &str = "leader";
/// A run whose progress has not moved for this long lost its instance (an item of a million
/// buyers compared one by one takes well under this).
const ABANDONED_AFTER: Duration = Duration::from_secs(600);

pub fn spawn(state: &AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run_while_leading(state.clone()))
}

async fn run_while_leading(state: AppState) {
    let interval_ms = state.settings.reconcile.interval_ms;
    if interval_ms == 0 {
        return;
    }
    let mut ticks = tokio::time::interval(Duration::from_millis(interval_ms));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leadership = state.leadership.clone();
    let mut warnings = QuietWarnings::new("reconciliation");
    let mut seen = SeenDrifts::new();
    let mut found = Found::new();
    let mut gauged: HashSet<SaleItem> = HashSet::new();
    loop {
        leadership.until_leader().await;
        ticks.tick().await;
        if !state.leadership.is_leader() {
            continue;
        }
        match pass(&state, &seen, &mut found).await {
            Ok((drifts, copies)) => {
                state.metrics.reconcile_passes.inc();
                warnings.recovered();
                export(&state, &drifts, &copies, &mut gauged);
                seen = drifts;
            }
            Err(error) => warnings.failed(&format!("{error:#}")),
        }
    }
}

/// What the previous pass found, per activity.
type Found = HashMap<i64, HashSet<FindingKey>>;

/// One pass over every live activity, rehearsals' copies included (their stock is kept
/// right like a sale's); the drifts it saw, and which of the activities were copies.
/// `found` goes from what the previous pass found to what this one did.
async fn pass(
    state: &AppState,
    seen: &SeenDrifts,
    found: &mut Found,
) -> anyhow::Result<(SeenDrifts, HashSet<i64>)> {
    store::fail_abandoned(&state.db, ABANDONED_AFTER).await?;
    let mut drifts = SeenDrifts::new();
    let mut copies = HashSet::new();
    let live = store::live_activity_ids(&state.db, Copies::Included).await?;
    found.retain(|activity_id, _| live.contains(activity_id));
    for activity_id in live {
        let Some(activity) = catalog::get_activity(&state.db, activity_id, None).await? else {
            continue;
        };
        if copies::is_rehearsal(activity.rehearsal_of) {
            copies.insert(activity_id);
        }
        // An operator's repair of this activity is running: it does the work this time.
        let Some(lock) = ActivityLock::wait(&state.db, activity_id, Duration::ZERO).await? else {
            continue;
        };
        let mut sink = Sink::Collected(Vec::new());
        let mode = Mode {
            repair: true,
            automatic: true,
        };
        let outcome = run::execute(state, &activity, mode, Some(&lock), seen, &mut sink).await;
        lock.release().await;
        drifts.extend(outcome?);
        if let Sink::Collected(findings) = sink {
            let previous = found.remove(&activity_id).unwrap_or_default();
            if worth_storing(&previous, &findings) {
                record(state, &activity, &findings).await?;
            }
            found.insert(activity_id, findings.iter().map(FindingKey::from).collect());
        }
    }
    Ok((drifts, copies))
}

/// Stores a pass as a run, and audits what it repaired.
async fn record(
    state: &AppState,
    activity: &catalog::StoredActivity,
    findings: &[contract::Finding],
) -> anyhow::Result<()> {
    let run_id = store::insert_run(
        &state.db,
        &NewRun {
            activity_id: activity.id,
            repair: true,
            trigger: contract::RunTrigger::Auto,
            actor: ACTOR,
            reason: Some("automatic reconciliation of a live activity"),
            items: activity.lines.len() as i64 + 1,
        },
    )
    .await?;
    store::item_done(&state.db, run_id, findings).await?;
    store::finish(&state.db, run_id, None).await?;
    let repaired = findings
        .iter()
        .filter(|f| f.action == contract::FindingAction::Repaired)
        .count();
    if repaired > 0 {
        ops_audit::record(
            &state.db,
            &OpsAction {
                actor: ACTOR,
                source: Source::System,
                action: "reconcile.repair",
                target: &format!("activity:{}", activity.id),
                detail: json!({ "run_id": run_id, "repaired": repaired, "findings": findings.len() }),
            },
        )
        .await?;
    }
    Ok(())
}

/// Sets the drift gauge of every live item of a real sale (a rehearsal's copy is not
/// one), and drops items no longer live.
fn export(
    state: &AppState,
    drifts: &SeenDrifts,
    copies: &HashSet<i64>,
    gauged: &mut HashSet<SaleItem>,
) {
    let gauge = &state.metrics.stock_drift;
    let drifts: SeenDrifts = drifts
        .iter()
        .filter(|(sale, _)| !copies.contains(&sale.activity.0))
        .map(|(sale, drift)| (*sale, *drift))
        .collect();
    for (sale, drift) in &drifts {
        gauge
            .with_label_values(&[&sale.activity.to_string(), &sale.item.to_string()])
            .set(*drift);
    }
    for gone in gauged.iter().filter(|sale| !drifts.contains_key(sale)) {
        let _ = gauge.remove_label_values(&[&gone.activity.to_string(), &gone.item.to_string()]);
    }
    *gauged = drifts.keys().copied().collect();
}
