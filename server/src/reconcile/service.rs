//! The use cases the admin API, the console and the CLI share: start a run, read runs, read
//! the live ledger. Each asks the permission table first.

use contract::{
    ActivityLedger, Actor, ReconciliationRun, RunSummary, Source, StartReconciliation, StartedRun,
};

use crate::{error::ApiResult, state::AppState};

/// Starts a run in the background; answers its id at once (the run is stored `running`).
/// A repair needs [`Permission::RepairStock`](contract::Permission::RepairStock) and a
/// reason; a report needs `Reconcile`.
pub(crate) async fn start(
    state: &AppState,
    actor: &Actor,
    source: Source,
    request: StartReconciliation,
) -> ApiResult<StartedRun> {
    let _ = (state, actor, source, request);
    todo!()
}

/// One run with its progress and findings.
pub(crate) async fn get(state: &AppState, actor: &Actor, id: i64) -> ApiResult<ReconciliationRun> {
    let _ = (state, actor, id);
    todo!()
}

/// Runs, newest first, of one activity or of all.
pub(crate) async fn list(
    state: &AppState,
    actor: &Actor,
    activity_id: Option<i64>,
) -> ApiResult<Vec<RunSummary>> {
    let _ = (state, actor, activity_id);
    todo!()
}

/// The live stock ledger of an activity's items.
pub(crate) async fn ledger(
    state: &AppState,
    actor: &Actor,
    activity_id: i64,
) -> ApiResult<ActivityLedger> {
    let _ = (state, actor, activity_id);
    todo!()
}
