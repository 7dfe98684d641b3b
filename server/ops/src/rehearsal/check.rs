//! The invariant check at a rehearsal's end: wait for the order pipeline to complete every
//! pre-order of the shadow and for the reconciliation ledger to see every item settled,
//! then gather the figures the verdicts (`rules::verdicts`) are made of.

use std::time::Duration;

use crate::{
    reconcile::ledger,
    rehearsal::{
        load::Tally,
        rules::{Figures, ItemFigures},
        store,
    },
    state::AppState,
};

/// How often the settling is looked at.
const POLL: Duration = Duration::from_millis(250);

/// Waits up to `settle` for the pipeline and Redis to settle, then reads the figures.
/// An item that has not settled by then is a failed check, not an error: the figures say
/// what was left.
pub(crate) async fn figures(
    state: &AppState,
    rehearsal_id: i64,
    shadow: i64,
    tally: &Tally,
    settle: Duration,
) -> anyhow::Result<Figures> {
    let deadline = tokio::time::Instant::now() + settle;
    loop {
        let pending = store::pre_created(&state.db, shadow).await?;
        let settled = pending == 0 && ledger_settled(state, shadow).await?;
        if settled || tokio::time::Instant::now() >= deadline {
            break;
        }
        // The progress moves while waiting: the rehearsal is not abandoned.
        store::set_stage(&state.db, rehearsal_id, contract::RehearsalStage::Settling).await?;
        tokio::time::sleep(POLL).await;
    }
    let pre_created_left = store::pre_created(&state.db, shadow).await?;
    let (observed, tx) = ledger::observe(state, shadow).await?;
    tx.rollback().await?;
    let held = store::held_units(&state.db, shadow).await?;
    let over_limit = store::over_limit(&state.db, shadow).await?;
    let limits: std::collections::HashMap<i64, i64> =
        sale::catalog::store::get_activity(&state.db, shadow, None)
            .await?
            .map(|activity| {
                activity
                    .lines
                    .iter()
                    .map(|line| (line.item_id, i64::from(line.per_user_limit)))
                    .collect()
            })
            .unwrap_or_default();
    let items = observed
        .into_iter()
        .map(|item| {
            let item_id = item.ledger.item_id;
            ItemFigures {
                item_id,
                total: item.ledger.total,
                per_user_limit: limits.get(&item_id).copied().unwrap_or(0),
                held: held.get(&item_id).copied().unwrap_or(0),
                allocated: item.ledger.allocated,
                over_limit: over_limit
                    .iter()
                    .filter(|(item, ..)| *item == item_id)
                    .map(|(_, buyer, units)| (*buyer, *units))
                    .collect(),
                redis_stock: item.ledger.redis_stock,
                in_flight: item.ledger.in_flight,
                drift: item.ledger.drift,
            }
        })
        .collect();
    let holding: std::collections::HashSet<uuid::Uuid> =
        store::holding_orders(&state.db, &tally.ok_orders)
            .await?
            .into_iter()
            .collect();
    let ok_without_order = tally
        .ok_orders
        .iter()
        .filter(|order| !holding.contains(order))
        .copied()
        .collect();
    Ok(Figures {
        items,
        ok_orders: tally.ok_orders.len(),
        ok_without_order,
        replays: tally.replays,
        replays_differing: tally.replays_differing,
        pre_created_left,
    })
}

/// Whether one ledger cut sees every item of the activity with nothing in flight and no
/// drift.
async fn ledger_settled(state: &AppState, activity_id: i64) -> anyhow::Result<bool> {
    let (observed, tx) = ledger::observe(state, activity_id).await?;
    tx.rollback().await?;
    Ok(observed
        .iter()
        .all(|item| item.ledger.in_flight == 0 && item.ledger.drift == 0))
}
