//! The use cases of changes that wait, one set for the admin API, the console and the CLI:
//! submit a flip (at once, or as a change the leader applies later), list changes, cancel
//! one that still waits. Making and cancelling a change are operator actions, in
//! `ops_audit`; the flips a change makes are in the switch audit like any other.

use chrono::{DateTime, Utc};
use contract::{
    Actor, ChangeAccepted, ChangeState, Permission, Source, SwitchChange, SwitchChangeRow,
};
use serde_json::json;

use crate::{
    admin::{
        authorize,
        ops_audit::{self, OpsAction},
    },
    changes::{
        rules::{Timing, TimingError},
        store::{self, NewChange},
    },
    control::board::{Board, Checked, Flip},
};
use base::error::{ApiError, ApiResult};

/// Changes a list shows at most.
const LIST_LIMIT: i64 = 200;

impl From<TimingError> for ApiError {
    fn from(error: TimingError) -> Self {
        ApiError::Invalid {
            code: error.code(),
            message: error.to_string(),
        }
    }
}

/// A flip as submitted, with its timing.
pub struct Submission<'a> {
    /// The flip; its wait is for a flip made now only.
    pub flip: Flip<'a>,
    /// Apply at this time instead of now.
    pub at: Option<DateTime<Utc>>,
    /// Set the key back this many seconds after applying.
    pub revert_after_s: Option<u32>,
    /// The time `at` is checked against.
    pub now: DateTime<Utc>,
}

/// What came of a submission.
#[derive(Debug)]
pub enum Submitted {
    /// In etcd now.
    Flipped(SwitchChange),
    /// A change that waits (for its time).
    Waiting(ChangeAccepted),
}

/// Flips now, or stores a change for the leader: with `at`, at that time; with a revert
/// but no `at`, at once, so the leader that reverts it also applied it.
pub async fn submit(board: &Board<'_>, submission: Submission<'_>) -> ApiResult<Submitted> {
    let flip = submission.flip;
    let actor = flip.actor;
    authorize(actor, Permission::FlipSwitch)?;
    let timing = Timing::of(submission.at, submission.revert_after_s, submission.now)?;
    let Timing::Waits { at, revert_after_s } = timing else {
        return Ok(Submitted::Flipped(board.flip(flip).await?));
    };
    let checked = Checked::change(flip.path, flip.value, flip.reason)?;
    if flip.wait.is_some() {
        return Err(ApiError::Invalid {
            code: "INVALID_WAIT",
            message: "a change that waits is followed in its list, not waited for".into(),
        });
    }
    let state = ChangeState::Scheduled;
    let apply_at = at.unwrap_or(submission.now);
    let mut tx = board.db.begin().await?;
    let change_id = store::insert(
        &mut *tx,
        &NewChange {
            path: &checked.path,
            value: &checked.value,
            reason: checked.reason,
            proposer: &actor.username,
            source: flip.source,
            state,
            apply_at: Some(apply_at),
            revert_after_s,
        },
    )
    .await?;
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source: flip.source,
            action: "change.schedule",
            target: &format!("change:{change_id}"),
            detail: json!({
                "path": checked.path, "value": checked.value, "reason": checked.reason,
                "at": apply_at, "revert_after_s": revert_after_s,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(Submitted::Waiting(ChangeAccepted { change_id, state }))
}

/// The latest changes, of one state or all, newest first.
pub async fn list(
    board: &Board<'_>,
    actor: &Actor,
    state: Option<ChangeState>,
) -> ApiResult<Vec<SwitchChangeRow>> {
    authorize(actor, Permission::ReadSwitches)?;
    Ok(store::list(board.db, state, LIST_LIMIT).await?)
}

/// Takes back a change that has not applied yet; 404 for no such change, 409
/// `CHANGE_NOT_WAITING` for one applied or decided already.
pub async fn cancel(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    id: i64,
    reason: &str,
) -> ApiResult<()> {
    authorize(actor, Permission::FlipSwitch)?;
    let reason = crate::admin::reason::audited_reason(reason)?;
    let waiting = [ChangeState::Scheduled, ChangeState::PendingApproval];
    let mut tx = board.db.begin().await?;
    let cancelled = store::decide(
        &mut *tx,
        id,
        &waiting,
        ChangeState::Cancelled,
        &actor.username,
        reason,
    )
    .await?;
    if !cancelled {
        return Err(not_waiting(board, id).await);
    }
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "change.cancel",
            target: &format!("change:{id}"),
            detail: json!({ "reason": reason }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Why a change cannot be decided on: gone, or no longer waiting.
async fn not_waiting(board: &Board<'_>, id: i64) -> ApiError {
    match store::get(board.db, id).await {
        Ok(Some(change)) => ApiError::Conflict {
            code: "CHANGE_NOT_WAITING",
            message: format!("change #{id} is {} already", change.state.as_str()),
        },
        Ok(None) => ApiError::NotFound("change"),
        Err(error) => ApiError::Internal(error.into()),
    }
}
