//! The task that follows `switches/deduction` and runs the db → redis hand-over of
//! [`DeductionGate`](sale::buy::deduction::DeductionGate): wait for this instance's database-path
//! pre-orders, re-derive Redis from PostgreSQL, then open the Redis path.

use std::time::Duration;

use crate::{prewarm, reconcile, state::AppState};
use base::{config::DeductionMode, error::ApiResult};
use sale::catalog::{copies::Copies, store as catalog};

/// Pause before retrying a failed re-derivation.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Follows the deduction switch for the life of the process.
pub fn spawn(state: AppState) {
    tokio::spawn(async move {
        let mut changes = state.switches.subscribe();
        loop {
            let switched = changes.borrow_and_update().deduction;
            let gate = &state.deduction;
            if gate.mode(switched) != switched {
                if let Err(error) = reopen_redis(&state).await {
                    tracing::error!(error = %error, "re-deriving Redis for the deduction switch failed; staying on the database path");
                    tokio::time::sleep(RETRY_AFTER).await;
                    continue;
                }
            }
            tokio::select! {
                changed = changes.changed() => if changed.is_err() { return },
                () = gate.closed.notified() => {}
            }
        }
    });
}

/// Steps (1) to (3) of the db → redis hand-over, as `buy::deduction` lays them out.
async fn reopen_redis(state: &AppState) -> ApiResult<()> {
    let gate = &state.deduction;
    if !gate.drained().await {
        tracing::warn!("database-path pre-orders still in flight after the drain wait; re-deriving anyway, the arbiter covers them");
    }
    let mut activities = 0;
    // Open or pre-warmed: what Redis serves, a running rehearsal's copy included. Not only what Redis still holds, since the
    // reason to flip to `db` may have been Redis losing its data.
    for id in reconcile::store::live_activity_ids(&state.db, Copies::Included).await? {
        let Some(activity) = catalog::get_activity(&state.db, id, None).await? else {
            continue;
        };
        prewarm::load(state, &activity).await?;
        activities += 1;
    }
    // A flip back to `db` during the re-derivation wins: open only if still on `redis`.
    if state.switches.current().deduction == DeductionMode::Redis {
        gate.open_redis();
    }
    tracing::info!(
        activities,
        "deduction back on redis; Redis re-derived from PostgreSQL"
    );
    Ok(())
}
