//! The use cases of changes that wait, one set for the admin API, the console and the CLI:
//! submit a flip (at once, or as a change that waits for its time or for a second person),
//! list changes, approve, reject or cancel one that still waits. Making and deciding on a
//! change are operator actions, in `ops_audit`; the flips a change makes are in the switch
//! audit like any other.

use chrono::{DateTime, Utc};
use contract::{
    Actor, ChangeAccepted, ChangeState, Permission, Source, StageTarget, SwitchChange,
    SwitchChangeRow,
};
use serde_json::json;

use crate::{
    changes::{
        land,
        rules::{Timing, TimingError},
        stage::{self, Stage},
        store::{self, NewChange},
    },
    control::board::{Approval, Board, Checked, Flip},
};
use base::error::{ApiError, ApiResult};
use sale::{
    audit::ops_audit::{self, OpsAction},
    identity::authorize,
};

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
    /// An admin flips a key that needs four eyes at once (audited as such).
    pub emergency: bool,
    /// Put the value in force on these instances only, until promoted or aborted.
    pub stage: Option<StageTarget>,
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

/// The console's name for what came of it.
impl From<Submitted> for contract::FlipOutcome {
    fn from(submitted: Submitted) -> Self {
        match submitted {
            Submitted::Flipped(change) => Self::Flipped(change),
            Submitted::Waiting(accepted) => Self::Waiting(accepted),
        }
    }
}

/// A flip made now answers 200 with the write; a change that waits, 202 with its id.
impl axum::response::IntoResponse for Submitted {
    fn into_response(self) -> axum::response::Response {
        match self {
            Submitted::Flipped(change) => axum::Json(change).into_response(),
            Submitted::Waiting(accepted) => {
                (axum::http::StatusCode::ACCEPTED, axum::Json(accepted)).into_response()
            }
        }
    }
}

/// In the OpenAPI document: 2XX with either body.
impl base::route_table::DescribesAnswer for Submitted {
    fn describe_answer(shape: &mut base::route_table::RequestShape) {
        use utoipa::{PartialSchema, ToSchema};
        SwitchChange::schemas(&mut shape.schemas);
        ChangeAccepted::schemas(&mut shape.schemas);
        shape.success = Some(base::route_table::Success {
            status: "2XX",
            body: Some(
                utoipa::openapi::schema::OneOfBuilder::new()
                    .item(SwitchChange::schema())
                    .item(ChangeAccepted::schema())
                    .into(),
            ),
        });
    }
}

/// Flips now, or stores a change: for a second person when the key needs four eyes (the
/// approval applies it), else for the leader: with `at`, at that time; with a revert but no
/// `at`, at once, so the leader that reverts it also applied it. An admin's emergency flip
/// applies now whatever the key, flagged in the audit. A stage due now goes into force on
/// its instances in this request (the leader's next tick if that fails).
pub async fn submit(board: &Board<'_>, submission: Submission<'_>) -> ApiResult<Submitted> {
    let flip = submission.flip;
    let actor = flip.actor;
    authorize(actor, Permission::FlipSwitch)?;
    let timing = Timing::of(submission.at, submission.revert_after_s, submission.now)?;
    let stage = submission.stage.map(Stage::of).transpose()?;
    if stage.is_some() && (submission.emergency || submission.revert_after_s.is_some()) {
        return Err(ApiError::Invalid {
            code: "INVALID_STAGE",
            message: "a stage is promoted or aborted by hand: no `emergency`, no \
                      `revert_after_s`"
                .into(),
        });
    }
    if submission.emergency {
        if timing != Timing::Now {
            return Err(ApiError::Invalid {
                code: "INVALID_EMERGENCY",
                message: "an emergency flip applies now: no `at`, no `revert_after_s`".into(),
            });
        }
        let flipped = board.flip_as(flip, Approval::Emergency).await?;
        return Ok(Submitted::Flipped(flipped));
    }
    let checked = Checked::change(flip.path, flip.value, flip.reason)?;
    let needs_approval = match board.needs_approval(&checked.path).await {
        Ok(needs) => needs,
        Err(error) => {
            // etcd out of reach: the attempt is audited as failed, as the board's own is.
            board.audit_unreached(actor, flip.source, &checked).await;
            return Err(error);
        }
    };
    if let Some(stage) = &stage {
        stage::check_new(board, &checked.path, stage).await?;
    }
    let (state, apply_at, revert_after_s) = match (timing, needs_approval) {
        (Timing::Now, false) if stage.is_some() => {
            (ChangeState::Scheduled, Some(submission.now), None)
        }
        (Timing::Now, false) => return Ok(Submitted::Flipped(board.flip(flip).await?)),
        (Timing::Now, true) => (ChangeState::PendingApproval, None, None),
        (Timing::Waits { at, revert_after_s }, true) => {
            (ChangeState::PendingApproval, at, revert_after_s)
        }
        (Timing::Waits { at, revert_after_s }, false) => (
            ChangeState::Scheduled,
            Some(at.unwrap_or(submission.now)),
            revert_after_s,
        ),
    };
    if flip.wait.is_some() {
        return Err(ApiError::Invalid {
            code: "INVALID_WAIT",
            message: "a change that waits is followed in its list, not waited for".into(),
        });
    }
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
            apply_at,
            revert_after_s,
            stage_instances: stage.as_ref().and_then(Stage::named),
            stage_percent: stage.as_ref().and_then(Stage::percent),
        },
    )
    .await?;
    let action = match (state, &stage) {
        (ChangeState::PendingApproval, _) => "change.propose",
        (_, Some(_)) => "change.stage",
        _ => "change.schedule",
    };
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source: flip.source,
            action,
            target: &format!("change:{change_id}"),
            detail: json!({
                "path": checked.path, "value": checked.value, "reason": checked.reason,
                "at": apply_at, "revert_after_s": revert_after_s,
                "stage": stage.as_ref().map(|stage| json!({
                    "instances": stage.named(), "percent": stage.percent(),
                })),
            }),
        },
    )
    .await?;
    tx.commit().await?;
    let due_now =
        state == ChangeState::Scheduled && apply_at.is_some_and(|at| at <= submission.now);
    let state = match (stage, due_now) {
        (Some(_), true) => land_now(board, change_id, submission.now).await,
        _ => state,
    };
    Ok(Submitted::Waiting(ChangeAccepted { change_id, state }))
}

/// Puts a committed change due now in force in this request; what it stands at after. A
/// failure leaves it `scheduled`, due: the leader's next tick lands it.
async fn land_now(board: &Board<'_>, id: i64, now: DateTime<Utc>) -> ChangeState {
    let landed = async {
        let mut tx = board.db.begin().await?;
        let Some(change) = store::lock(&mut tx, id).await? else {
            anyhow::bail!("change #{id} vanished");
        };
        if change.state != ChangeState::Scheduled {
            return Ok(change.state);
        }
        let state = land(board, &mut tx, &change, now).await?;
        tx.commit().await?;
        Ok::<_, anyhow::Error>(state)
    };
    match landed.await {
        Ok(state) => state,
        Err(error) => {
            tracing::warn!(change_id = id, error = %format!("{error:#}"), "a change due now waits for the leader");
            ChangeState::Scheduled
        }
    }
}

/// A second person's yes to a change that waits for one: applied at once (its own time
/// when that is still ahead: the leader applies it then). 403 `SELF_APPROVAL` for the
/// proposer, 409 `CHANGE_NOT_WAITING` when it no longer waits for approval.
pub async fn approve(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    id: i64,
    reason: &str,
    now: DateTime<Utc>,
) -> ApiResult<SwitchChangeRow> {
    authorize(actor, Permission::FlipSwitch)?;
    let reason = sale::audit::reason::audited_reason(reason)?;
    let mut tx = board.db.begin().await?;
    let change = store::lock(&mut tx, id)
        .await?
        .ok_or(ApiError::NotFound("change"))?;
    if change.state != ChangeState::PendingApproval {
        return Err(not_waiting(id, change.state));
    }
    if change.proposer == actor.username {
        return Err(ApiError::Refused {
            code: "SELF_APPROVAL",
            message: format!("change #{id} is yours: another person allowed to flip approves it"),
        });
    }
    let apply_at = change.apply_at.filter(|at| *at > now).unwrap_or(now);
    store::approve(&mut tx, id, &actor.username, reason, apply_at).await?;
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "change.approve",
            target: &format!("change:{id}"),
            detail: json!({ "reason": reason, "proposer": change.proposer, "at": apply_at }),
        },
    )
    .await?;
    if apply_at <= now {
        // The row stays locked: the leader skips it meanwhile, and the marker makes the
        // write once even if this commit is lost.
        let approved = SwitchChangeRow {
            decided_by: Some(actor.username.clone()),
            ..change
        };
        land(board, &mut tx, &approved, now)
            .await
            .map_err(ApiError::Unavailable)?;
    }
    tx.commit().await?;
    store::get(board.db, id)
        .await?
        .ok_or(ApiError::NotFound("change"))
}

/// What an operator decides on a change that waits, other than approving it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Taken back before it applied (scheduled, or waiting for approval).
    Cancel,
    /// The second person's no.
    Reject,
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

/// Cancels or rejects a change that still waits; 404 for no such change, 409
/// `CHANGE_NOT_WAITING` for one applied or decided already.
pub async fn decide(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    id: i64,
    decision: Decision,
    reason: &str,
) -> ApiResult<()> {
    authorize(actor, Permission::FlipSwitch)?;
    let reason = sale::audit::reason::audited_reason(reason)?;
    let (waiting, to, action): (&[ChangeState], _, _) = match decision {
        Decision::Cancel => (
            &[ChangeState::Scheduled, ChangeState::PendingApproval],
            ChangeState::Cancelled,
            "change.cancel",
        ),
        Decision::Reject => (
            &[ChangeState::PendingApproval],
            ChangeState::Rejected,
            "change.reject",
        ),
    };
    let mut tx = board.db.begin().await?;
    let decided = store::decide(&mut *tx, id, waiting, to, &actor.username, reason).await?;
    if !decided {
        return Err(match store::get(board.db, id).await? {
            Some(change) => not_waiting(id, change.state),
            None => ApiError::NotFound("change"),
        });
    }
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action,
            target: &format!("change:{id}"),
            detail: json!({ "reason": reason }),
        },
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

fn not_waiting(id: i64, state: ChangeState) -> ApiError {
    ApiError::Conflict {
        code: "CHANGE_NOT_WAITING",
        message: format!("change #{id} is {} already", state.as_str()),
    }
}
