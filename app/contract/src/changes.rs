//! Changes to a switch that wait: scheduled for a time, or with a revert still due. What
//! `GET /admin/api/changes` lists and the answer of a flip that did not apply at once.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Source;

/// Where a change stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeState {
    /// Waits for its time; the leader applies it then.
    Scheduled,
    /// Waits for a second person allowed to flip (the key needs four eyes).
    PendingApproval,
    /// In force in etcd; a revert may still be due (`revert_at`).
    Applied,
    /// Applied, then set back to the value it replaced.
    Reverted,
    /// Taken back by an operator before it applied.
    Cancelled,
    /// Refused by the second person.
    Rejected,
}

impl ChangeState {
    pub const ALL: [ChangeState; 6] = [
        ChangeState::Scheduled,
        ChangeState::PendingApproval,
        ChangeState::Applied,
        ChangeState::Reverted,
        ChangeState::Cancelled,
        ChangeState::Rejected,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeState::Scheduled => "scheduled",
            ChangeState::PendingApproval => "pending_approval",
            ChangeState::Applied => "applied",
            ChangeState::Reverted => "reverted",
            ChangeState::Cancelled => "cancelled",
            ChangeState::Rejected => "rejected",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }
}

/// The answer (202) to a flip that waits: its change and where it stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeAccepted {
    pub change_id: i64,
    pub state: ChangeState,
}

/// One change as the switch board lists it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchChangeRow {
    pub id: i64,
    /// Relative to the prefix, e.g. `switches/entry/42`.
    pub path: String,
    pub value: String,
    pub reason: String,
    pub proposer: String,
    pub source: Source,
    pub state: ChangeState,
    pub apply_at: Option<DateTime<Utc>>,
    pub revert_after_s: Option<u32>,
    pub created_at: DateTime<Utc>,
    pub applied_at: Option<DateTime<Utc>>,
    pub applied_revision: Option<i64>,
    /// The value the change replaced; absent when the key was absent (its setting applied).
    pub replaced_value: Option<String>,
    /// When the leader sets the key back, if it still holds this change's value then.
    pub revert_at: Option<DateTime<Utc>>,
    /// Why a due revert was dropped (the key was changed meanwhile).
    pub revert_dropped: Option<String>,
    /// Who approved, rejected or cancelled it, and why.
    pub decided_by: Option<String>,
    pub decided_reason: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
}

/// `GET /admin/api/changes`: newest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeList {
    pub changes: Vec<SwitchChangeRow>,
}

/// One value a key held, from the switch audit: `GET /admin/api/switches/{path}/history`
/// answers them newest first.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchRevision {
    /// The etcd revision the value was written at; a rollback names it.
    pub revision: i64,
    pub value: String,
    pub by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
    pub source: Source,
}
