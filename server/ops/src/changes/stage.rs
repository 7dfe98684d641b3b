//! Staged rollouts: a change in force on chosen instances first (named, or a share of the
//! live ones), then promoted to every instance or aborted. While it lasts, the value waits
//! in etcd under `staged/{path}`; the instances it names apply it in place of the key's own
//! value and say so in their reports, the others do not. Promoting writes the key itself
//! and takes the stage away in one etcd transaction; aborting takes the stage away.

use chrono::{DateTime, Utc};
use contract::{Actor, ChangeState, Permission, Source, StageTarget, SwitchChangeRow};
use serde_json::json;

use crate::{
    changes::{apply, store},
    control::{board::Board, layout::Layout, nodes},
};
use base::error::{ApiError, ApiResult};
use sale::{
    audit::ops_audit::{self, OpsAction},
    identity::authorize,
};

/// The most instances a stage may name.
const MAX_NAMED: usize = 100;

/// Where a stage goes, checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    Instances(Vec<String>),
    Percent(u8),
}

impl Stage {
    /// Exactly one of named instances (1 to 100, each once) or a percentage (1 to 99: a
    /// hundred is a plain flip).
    pub(crate) fn of(target: StageTarget) -> ApiResult<Self> {
        let invalid = |message: &str| ApiError::Invalid {
            code: "INVALID_STAGE",
            message: message.to_owned(),
        };
        match (target.instances, target.percent) {
            (Some(named), None) => {
                let mut unique = named.clone();
                unique.sort();
                unique.dedup();
                if named.is_empty() || named.len() > MAX_NAMED || unique.len() != named.len() {
                    return Err(invalid(
                        "`stage.instances` names 1 to 100 instances, each once",
                    ));
                }
                if named.iter().any(|node| node.trim().is_empty()) {
                    return Err(invalid("`stage.instances` holds an empty node id"));
                }
                Ok(Self::Instances(named))
            }
            (None, Some(percent)) if (1..=99).contains(&percent) => Ok(Self::Percent(percent)),
            (None, Some(_)) => Err(invalid("`stage.percent` is between 1 and 99")),
            _ => Err(invalid(
                "a stage is `{\"instances\": [...]}` or `{\"percent\": N}`",
            )),
        }
    }

    pub(crate) fn named(&self) -> Option<&[String]> {
        match self {
            Self::Instances(named) => Some(named),
            Self::Percent(_) => None,
        }
    }

    pub(crate) fn percent(&self) -> Option<u8> {
        match self {
            Self::Instances(_) => None,
            Self::Percent(percent) => Some(*percent),
        }
    }
}

/// The first `percent` of the live instances in node-id order, one at least: the same
/// instances whoever chooses them from the same reports.
pub(crate) fn choose(percent: u8, mut live: Vec<String>) -> Vec<String> {
    live.sort();
    let wanted = (live.len() * usize::from(percent)).div_ceil(100).max(1);
    live.truncate(wanted);
    live
}

/// Whether a change is a stage (rather than a value for every instance).
pub(crate) fn is_stage(change: &SwitchChangeRow) -> bool {
    change.stage_instances.is_some() || change.stage_percent.is_some()
}

/// The live instances' node ids, from their heartbeats.
pub(crate) async fn live_instances(board: &Board<'_>) -> anyhow::Result<Vec<String>> {
    let layout = Layout::new(&board.settings.etcd_prefix);
    let mut client = board.etcd.client().await?;
    let (live, _) = nodes::live(&mut client, &layout).await?;
    Ok(live.into_keys().collect())
}

/// A stage's instances as it goes into force: the named ones, or its share of the live
/// ones now.
pub(crate) async fn instances_of(
    board: &Board<'_>,
    change: &SwitchChangeRow,
) -> anyhow::Result<Vec<String>> {
    match (&change.stage_instances, change.stage_percent) {
        (Some(named), _) => Ok(named.clone()),
        (None, Some(percent)) => Ok(choose(percent, live_instances(board).await?)),
        (None, None) => anyhow::bail!("change #{} is no stage", change.id),
    }
}

/// Checks a stage before it is stored: one stage per key at a time, and named instances
/// alive now.
pub(crate) async fn check_new(board: &Board<'_>, path: &str, stage: &Stage) -> ApiResult<()> {
    if let Some(id) = store::stage_on(board.db, path).await? {
        return Err(ApiError::Conflict {
            code: "STAGE_IN_PROGRESS",
            message: format!("change #{id} stages {path} already: promote or abort it first"),
        });
    }
    if let Some(named) = stage.named() {
        let live = live_instances(board)
            .await
            .map_err(crate::control::board::etcd_unavailable)?;
        if let Some(unknown) = named.iter().find(|node| !live.contains(node)) {
            return Err(ApiError::Invalid {
                code: "UNKNOWN_INSTANCE",
                message: format!("no live instance `{unknown}` (see the switch board's instances)"),
            });
        }
    }
    Ok(())
}

/// Promotes a staged change: its value on every instance (the key itself), audited as a
/// flip of the change and as the operator's decision. 409 `CHANGE_NOT_STAGED` otherwise.
pub async fn promote(
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
    let change = locked_stage(&mut tx, id).await?;
    let landed = apply::promote(board, &change, &actor.username)
        .await
        .map_err(ApiError::Unavailable)?;
    store::mark_applied(
        &mut tx,
        id,
        now,
        landed.revision,
        landed.replaced.as_deref(),
    )
    .await?;
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor: &actor.username,
            source,
            action: "change.promote",
            target: &format!("change:{id}"),
            detail: json!({
                "reason": reason, "path": change.path, "value": change.value,
                "revision": landed.revision,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    apply::forget_markers(board, id).await;
    store::get(board.db, id)
        .await?
        .ok_or(ApiError::NotFound("change"))
}

/// Who aborts a stage.
pub(crate) enum Aborter<'a> {
    Operator(&'a Actor, Source),
    /// The leader, on a worse error rate: audited as `auto`, with the figures.
    Leader(serde_json::Value),
}

/// The name an automatic abort is audited under.
pub(crate) const AUTO: &str = "auto";

/// Aborts a staged change by an operator's hand. 409 `CHANGE_NOT_STAGED` otherwise.
pub async fn abort(
    board: &Board<'_>,
    actor: &Actor,
    source: Source,
    id: i64,
    reason: &str,
) -> ApiResult<SwitchChangeRow> {
    authorize(actor, Permission::FlipSwitch)?;
    let reason = sale::audit::reason::audited_reason(reason)?;
    abort_as(board, Aborter::Operator(actor, source), id, reason).await
}

/// Takes a stage away: its instances apply the key's own value again; the change is
/// `aborted`, decided by the operator or by `auto`.
pub(crate) async fn abort_as(
    board: &Board<'_>,
    by: Aborter<'_>,
    id: i64,
    reason: &str,
) -> ApiResult<SwitchChangeRow> {
    let (actor, source, figures) = match &by {
        Aborter::Operator(actor, source) => (actor.username.as_str(), *source, None),
        Aborter::Leader(figures) => (AUTO, Source::System, Some(figures.clone())),
    };
    let mut tx = board.db.begin().await?;
    let change = locked_stage(&mut tx, id).await?;
    apply::unstage(board, &change)
        .await
        .map_err(ApiError::Unavailable)?;
    store::decide(
        &mut *tx,
        id,
        &[ChangeState::Staged],
        ChangeState::Aborted,
        actor,
        reason,
    )
    .await?;
    ops_audit::record(
        &mut *tx,
        &OpsAction {
            actor,
            source,
            action: "change.abort",
            target: &format!("change:{id}"),
            detail: json!({
                "reason": reason, "path": change.path, "value": change.value,
                "instances": change.stage_instances, "auto": figures.is_some(),
                "figures": figures,
            }),
        },
    )
    .await?;
    tx.commit().await?;
    apply::forget_markers(board, id).await;
    store::get(board.db, id)
        .await?
        .ok_or(ApiError::NotFound("change"))
}

/// The change, locked, if it is staged now.
async fn locked_stage(
    tx: &mut sqlx::Transaction<'_, sqlx::Postgres>,
    id: i64,
) -> ApiResult<SwitchChangeRow> {
    let change = store::lock(tx, id)
        .await?
        .ok_or(ApiError::NotFound("change"))?;
    if change.state != ChangeState::Staged {
        return Err(ApiError::Conflict {
            code: "CHANGE_NOT_STAGED",
            message: format!("change #{id} is {}, not staged", change.state.as_str()),
        });
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(instances: Option<&[&str]>, percent: Option<u8>) -> StageTarget {
        StageTarget {
            instances: instances.map(|named| named.iter().map(|n| n.to_string()).collect()),
            percent,
        }
    }

    #[test]
    fn a_stage_names_instances_or_a_share_never_both_nor_neither() {
        assert_eq!(
            Stage::of(target(Some(&["a"]), None)).ok(),
            Some(Stage::Instances(vec!["a".into()]))
        );
        assert_eq!(
            Stage::of(target(None, Some(34))).ok(),
            Some(Stage::Percent(34))
        );
        for bad in [
            target(None, None),
            target(Some(&["a"]), Some(10)),
            target(Some(&[]), None),
            target(Some(&["a", "a"]), None),
            target(Some(&[" "]), None),
            target(None, Some(0)),
            target(None, Some(100)),
        ] {
            assert_eq!(
                Stage::of(bad.clone()).map_err(|e| e.code()),
                Err("INVALID_STAGE"),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn a_share_takes_the_first_instances_in_order_and_one_at_least() {
        let live = |ids: &[&str]| ids.iter().map(|id| id.to_string()).collect::<Vec<_>>();
        assert_eq!(choose(34, live(&["c", "a", "b"])), live(&["a", "b"]));
        assert_eq!(choose(33, live(&["c", "a", "b"])), live(&["a"]));
        assert_eq!(choose(1, live(&["c", "a", "b"])), live(&["a"]));
        assert_eq!(choose(50, live(&["d", "c", "b", "a"])), live(&["a", "b"]));
        assert!(choose(50, Vec::new()).is_empty());
    }
}
