//! A waiting change's steps written into etcd exactly once, whichever leader writes them.
//!
//! The leader holds the change's row locked while it writes, but a leader can die after
//! etcd took the write and before its transaction committed: the next leader then claims
//! the same row. So each step writes a marker key, `changes/{id}/{step}`, in the same etcd
//! transaction as the value, on the condition that the marker is absent and the key is
//! still at the revision just read. A leader that finds the marker knows the step landed,
//! and at which revision (the marker's own), and only records it.

use contract::SwitchChangeRow;
use etcd_client::{Compare, CompareOp, Txn, TxnOp, TxnOpResponse};
use serde::{Deserialize, Serialize};

use crate::control::{
    board::{put_with_note, Board, Guard, Put},
    keys::SwitchKey,
    layout::{now_us, Layout, WriteNote},
};
use base::etcd::EtcdCall;
use sale::{
    audit::{self, PendingFlip},
    switches::SwitchValues,
};

/// What the marker of a step remembers: the value the step replaced, and for a stage the
/// instances it chose.
#[derive(Serialize, Deserialize)]
struct Marker {
    replaced: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    instances: Vec<String>,
}

/// A step written into etcd, now or by an earlier leader.
pub(crate) struct Landed {
    pub(crate) revision: i64,
    /// The value it replaced (absent: the key was absent).
    pub(crate) replaced: Option<String>,
}

/// What a revert found.
pub(crate) enum Reverted {
    /// Set back, now or by an earlier leader.
    Done,
    /// Someone changed the key after the change applied: nothing written.
    ChangedMeanwhile {
        value: Option<String>,
        revision: i64,
    },
}

/// The key and a step's marker as etcd holds them, read together.
struct Seen {
    value: Option<String>,
    mod_revision: i64,
    marker: Option<(i64, Marker)>,
}

/// The change's value, once.
pub(crate) async fn apply(board: &Board<'_>, change: &SwitchChangeRow) -> anyhow::Result<Landed> {
    let step = Step {
        board,
        change,
        name: "apply",
        value: change.value.clone(),
        reason: approved_reason(change),
        also: Vec::new(),
    };
    let seen = step.read().await?;
    let expected = seen.mod_revision;
    step.write(seen, expected).await
}

fn approved_reason(change: &SwitchChangeRow) -> String {
    match &change.decided_by {
        Some(approver) => format!(
            "change #{} approved by {approver}: {}",
            change.id, change.reason
        ),
        None => format!("change #{}: {}", change.id, change.reason),
    }
}

/// The change's value on `instances` only, once: `staged/{path}` and the marker in one
/// etcd transaction. The key's own value stays; the instances named apply the staged one
/// in its place. Returns the instances, the ones an earlier leader chose if it landed.
pub(crate) async fn stage(
    board: &Board<'_>,
    change: &SwitchChangeRow,
    instances: Vec<String>,
) -> anyhow::Result<Vec<String>> {
    let layout = Layout::new(&board.settings.etcd_prefix);
    let marker_key = layout.change_marker(change.id, "stage");
    let mut client = board.etcd.client().await?;
    let staged = contract::SwitchStage {
        change_id: change.id,
        value: change.value.clone(),
        instances,
    };
    let marker = Marker {
        replaced: None,
        instances: staged.instances.clone(),
    };
    let txn = Txn::new()
        .when(vec![Compare::create_revision(
            marker_key.clone(),
            CompareOp::Equal,
            0,
        )])
        .and_then(vec![
            TxnOp::put(
                layout.staged_key(&change.path),
                serde_json::to_vec(&staged)?,
                None,
            ),
            TxnOp::put(marker_key.clone(), serde_json::to_vec(&marker)?, None),
        ])
        .or_else(vec![TxnOp::get(marker_key, None)]);
    let response = board.etcd.timed(EtcdCall::Txn, client.txn(txn)).await?;
    if response.succeeded() {
        return Ok(staged.instances);
    }
    // An earlier attempt staged it: its marker says on which instances.
    let earlier = response
        .op_responses()
        .into_iter()
        .find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        })
        .ok_or_else(|| anyhow::anyhow!("change #{}: its stage marker vanished", change.id))?;
    let Marker { instances, .. } = serde_json::from_slice(earlier.value())?;
    Ok(instances)
}

/// A staged change's value on every instance, once: the key's value, its note and the
/// marker written, and the stage taken away, in one etcd transaction.
pub(crate) async fn promote(
    board: &Board<'_>,
    change: &SwitchChangeRow,
    promoter: &str,
) -> anyhow::Result<Landed> {
    let layout = Layout::new(&board.settings.etcd_prefix);
    let step = Step {
        board,
        change,
        name: "promote",
        value: change.value.clone(),
        reason: format!(
            "change #{} promoted by {promoter}: {}",
            change.id, change.reason
        ),
        also: vec![TxnOp::delete(layout.staged_key(&change.path), None)],
    };
    let seen = step.read().await?;
    let expected = seen.mod_revision;
    step.write(seen, expected).await
}

/// Takes a stage away: its instances apply the key's own value again. Deleting a stage
/// already gone changes nothing, so an abort tried again is harmless.
pub(crate) async fn unstage(board: &Board<'_>, change: &SwitchChangeRow) -> anyhow::Result<()> {
    let layout = Layout::new(&board.settings.etcd_prefix);
    let mut client = board.etcd.client().await?;
    let txn = Txn::new().and_then(vec![TxnOp::delete(layout.staged_key(&change.path), None)]);
    board.etcd.timed(EtcdCall::Txn, client.txn(txn)).await?;
    Ok(())
}

/// The value the change replaced, once, if the key still holds the change's write; a key
/// that was absent gets its setting's value, which is what was in force.
pub(crate) async fn revert(
    board: &Board<'_>,
    change: &SwitchChangeRow,
) -> anyhow::Result<Reverted> {
    let value = match &change.replaced_value {
        Some(value) => value.clone(),
        None => SwitchKey::parse(&change.path)?
            .value_in(&SwitchValues::from_settings(&board.settings.buy)),
    };
    let step = Step {
        board,
        change,
        name: "revert",
        value,
        reason: format!("revert of change #{}: {}", change.id, change.reason),
        also: Vec::new(),
    };
    let seen = step.read().await?;
    let applied = change
        .applied_revision
        .ok_or_else(|| anyhow::anyhow!("change #{} was never applied", change.id))?;
    if seen.marker.is_none() && seen.mod_revision != applied {
        return Ok(Reverted::ChangedMeanwhile {
            value: seen.value,
            revision: seen.mod_revision,
        });
    }
    step.write(seen, applied).await?;
    Ok(Reverted::Done)
}

/// Takes a finished change's markers away; one left behind (a leader died first) is
/// a few bytes that nothing reads again.
pub(crate) async fn forget_markers(board: &Board<'_>, change_id: i64) {
    let layout = Layout::new(&board.settings.etcd_prefix);
    let deleted = async {
        let mut client = board.etcd.client().await?;
        let options = etcd_client::DeleteOptions::new().with_prefix();
        let txn = Txn::new().and_then(vec![TxnOp::delete(
            layout.change_markers(change_id),
            Some(options),
        )]);
        board.etcd.timed(EtcdCall::Txn, client.txn(txn)).await?;
        anyhow::Ok(())
    };
    if let Err(error) = deleted.await {
        tracing::debug!(change_id, error = %error, "a change's markers stay behind");
    }
}

/// One step of one change.
struct Step<'a> {
    board: &'a Board<'a>,
    change: &'a SwitchChangeRow,
    name: &'static str,
    value: String,
    reason: String,
    /// More writes in the step's transaction (a promote takes its stage away).
    also: Vec<TxnOp>,
}

impl Step<'_> {
    fn layout(&self) -> Layout {
        Layout::new(&self.board.settings.etcd_prefix)
    }

    fn marker_key(&self) -> String {
        self.layout().change_marker(self.change.id, self.name)
    }

    fn audited(&self) -> PendingFlip<'_> {
        PendingFlip {
            actor: &self.change.proposer,
            source: self.change.source,
            path: &self.change.path,
            new_value: &self.value,
            reason: &self.reason,
            change_id: Some(self.change.id),
            emergency: false,
        }
    }

    async fn read(&self) -> anyhow::Result<Seen> {
        let etcd = self.board.etcd;
        let mut client = etcd.client().await?;
        let txn = Txn::new().and_then(vec![
            TxnOp::get(self.layout().key(&self.change.path), None),
            TxnOp::get(self.marker_key(), None),
        ]);
        let response = etcd.timed(EtcdCall::Txn, client.txn(txn)).await?;
        let mut gets = response.op_responses().into_iter().map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().cloned(),
            _ => None,
        });
        let (key, marker) = (gets.next().flatten(), gets.next().flatten());
        let marker = match marker {
            Some(kv) => Some((kv.mod_revision(), serde_json::from_slice(kv.value())?)),
            None => None,
        };
        Ok(Seen {
            value: key
                .as_ref()
                .and_then(|kv| kv.value_str().ok())
                .map(str::to_owned),
            mod_revision: key.map_or(0, |kv| kv.mod_revision()),
            marker,
        })
    }

    /// Writes the step if the key is still at `expected` (0: absent) and no marker says it
    /// landed already; audited like a flip. A marker found means an earlier leader wrote
    /// it: its audit row (left `pending`) becomes `applied`, and nothing is written.
    async fn write(mut self, seen: Seen, expected: i64) -> anyhow::Result<Landed> {
        let db = self.board.db;
        let audit = audit::open_change_flip(db, &self.audited()).await?;
        if let Some((revision, marker)) = seen.marker {
            let Marker { replaced, .. } = marker;
            audit.applied(db, replaced.as_deref(), revision).await?;
            return Ok(Landed { revision, replaced });
        }
        let layout = self.layout();
        let note = WriteNote {
            actor: self.change.proposer.clone(),
            source: self.change.source,
            reason: self.reason.clone(),
            written_at_us: now_us(),
        };
        let marker = Marker {
            replaced: seen.value.clone(),
            instances: Vec::new(),
        };
        let mut also = vec![TxnOp::put(
            self.marker_key(),
            serde_json::to_vec(&marker)?,
            None,
        )];
        also.append(&mut self.also);
        let guard = Guard {
            compares: vec![
                Compare::create_revision(self.marker_key(), CompareOp::Equal, 0),
                Compare::mod_revision(layout.key(&self.change.path), CompareOp::Equal, expected),
            ],
            also,
        };
        let mut client = self.board.etcd.client().await?;
        // An unanswered write leaves the row pending: the next attempt finds the marker if
        // it landed, and takes the row over either way.
        let put = put_with_note(
            self.board.etcd,
            &mut client,
            &layout,
            (&self.change.path, &self.value),
            serde_json::to_vec(&note)?,
            guard,
        )
        .await?;
        match put {
            Put::Written { revision, .. } => {
                audit.applied(db, seen.value.as_deref(), revision).await?;
                Ok(Landed {
                    revision,
                    replaced: seen.value,
                })
            }
            Put::Refused => {
                audit.failed(db).await;
                anyhow::bail!(
                    "{} of change #{}: {} changed between the read and the write; tried again",
                    self.name,
                    self.change.id,
                    self.change.path
                )
            }
        }
    }
}
