//! A key's history, from the switch audit, and the rollback to one of its revisions: a
//! new change with the value that revision held, under the same rules as any other (a key
//! that needs four eyes waits for a second person).

use contract::{Actor, Permission, SwitchRevision};

use crate::{
    changes::service::{self, Submission, Submitted},
    control::{
        board::{Board, Flip},
        keys::SwitchKey,
    },
};
use base::error::{ApiError, ApiResult};
use sale::{audit, identity::authorize};

/// Revisions a history shows at most.
const HISTORY_LIMIT: i64 = 100;

/// The values etcd took for the key through the control plane or from outside, newest
/// first.
pub async fn history(
    board: &Board<'_>,
    actor: &Actor,
    path: &str,
) -> ApiResult<Vec<SwitchRevision>> {
    authorize(actor, Permission::ReadSwitches)?;
    let path = SwitchKey::parse(path.trim_matches('/'))?.path();
    Ok(audit::revisions(board.db, &path, None, HISTORY_LIMIT).await?)
}

/// Sets the value the key held at `revision` again, as a new audited change; 404 when
/// the key's history has no such revision.
pub async fn rollback(
    board: &Board<'_>,
    flip: Flip<'_>,
    revision: i64,
    now: chrono::DateTime<chrono::Utc>,
) -> ApiResult<Submitted> {
    authorize(flip.actor, Permission::FlipSwitch)?;
    let reason = sale::audit::reason::audited_reason(flip.reason)?;
    let path = SwitchKey::parse(flip.path.trim_matches('/'))?.path();
    let held = audit::revisions(board.db, &path, Some(revision), 1)
        .await?
        .into_iter()
        .next()
        .ok_or(ApiError::NotFound("revision of this key"))?;
    let reason = format!("rollback to revision {revision}: {reason}");
    service::submit(
        board,
        Submission {
            flip: Flip {
                path: &path,
                value: &held.value,
                reason: &reason,
                ..flip
            },
            at: None,
            revert_after_s: None,
            emergency: false,
            stage: None,
            now,
        },
    )
    .await
}
