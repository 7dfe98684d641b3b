//! Changes to a switch that wait: scheduled for a time, waiting for approval, staged on
//! some instances, or with a revert still due. What `GET /admin/api/changes` lists and the
//! answer of a flip that did not apply at once.

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
    /// In force on some instances only (`stage_instances`), until promoted or aborted.
    Staged,
    /// A stage taken back, by an operator or by the leader (`decided_by: "auto"`).
    Aborted,
}

impl ChangeState {
    pub const ALL: [ChangeState; 8] = [
        ChangeState::Scheduled,
        ChangeState::PendingApproval,
        ChangeState::Applied,
        ChangeState::Reverted,
        ChangeState::Cancelled,
        ChangeState::Rejected,
        ChangeState::Staged,
        ChangeState::Aborted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeState::Scheduled => "scheduled",
            ChangeState::PendingApproval => "pending_approval",
            ChangeState::Applied => "applied",
            ChangeState::Reverted => "reverted",
            ChangeState::Cancelled => "cancelled",
            ChangeState::Rejected => "rejected",
            ChangeState::Staged => "staged",
            ChangeState::Aborted => "aborted",
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
    /// A staged change's instances: named when it was made, or chosen when it was staged
    /// for a percentage.
    #[serde(default)]
    pub stage_instances: Option<Vec<String>>,
    /// The share of the live instances it was staged for, when it named none.
    #[serde(default)]
    pub stage_percent: Option<u8>,
    /// When it went into force on its instances.
    #[serde(default)]
    pub staged_at: Option<DateTime<Utc>>,
}

/// Where a flip is tried first: named instances, or a share of the live ones (one at
/// least). Exactly one of the two.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StageTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instances: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<u8>,
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

impl StageTarget {
    /// A stage as a person types it: node ids separated by commas, or a share of the live
    /// instances (`25%`). Checked further where the stage is made.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        match text.strip_suffix('%') {
            Some(percent) => Ok(Self {
                instances: None,
                percent: Some(
                    percent
                        .trim()
                        .parse()
                        .map_err(|_| format!("`{text}` is no percentage"))?,
                ),
            }),
            None => Ok(Self {
                instances: Some(text.split(',').map(|node| node.trim().to_owned()).collect()),
                percent: None,
            }),
        }
    }
}

/// A flip as the console's form sends it, each field as typed; empty means absent.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchForm {
    pub path: String,
    pub value: String,
    pub reason: String,
    /// When, in RFC 3339 (the live page turns the operator's wall clock into it).
    #[serde(default)]
    pub at: Option<String>,
    /// When, as a `datetime-local` field has it, read as UTC: the page before it is live.
    #[serde(default)]
    pub at_wall: Option<String>,
    #[serde(default)]
    pub revert_after_s: Option<String>,
    /// Node ids separated by commas, or a share (`25%`).
    #[serde(default)]
    pub stage: Option<String>,
}

/// A [`SwitchForm`]'s timing, read: when, the revert, the stage.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FormTiming {
    pub at: Option<DateTime<Utc>>,
    pub revert_after_s: Option<u32>,
    pub stage: Option<StageTarget>,
}

impl SwitchForm {
    /// The timing fields read, or the admin API's code and a message for the one that
    /// does not parse.
    pub fn timing(&self) -> Result<FormTiming, (&'static str, String)> {
        fn given(field: &Option<String>) -> Option<&str> {
            field
                .as_deref()
                .map(str::trim)
                .filter(|text| !text.is_empty())
        }
        let at = match (given(&self.at), given(&self.at_wall)) {
            (Some(text), _) => Some(
                DateTime::parse_from_rfc3339(text)
                    .map_err(|_| ("INVALID_SCHEDULE", format!("`{text}` is no RFC 3339 time")))?
                    .with_timezone(&Utc),
            ),
            (None, Some(text)) => Some(
                chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M")
                    .map_err(|_| ("INVALID_SCHEDULE", format!("`{text}` is no date and time")))?
                    .and_utc(),
            ),
            (None, None) => None,
        };
        let revert_after_s = given(&self.revert_after_s)
            .map(|text| {
                text.parse().map_err(|_| {
                    (
                        "INVALID_REVERT",
                        format!("`{text}` is no number of seconds"),
                    )
                })
            })
            .transpose()?;
        let stage = given(&self.stage)
            .map(|text| StageTarget::parse(text).map_err(|message| ("INVALID_STAGE", message)))
            .transpose()?;
        Ok(FormTiming {
            at,
            revert_after_s,
            stage,
        })
    }
}

/// What came of a flip: in etcd now, or a change that waits (its time, a second person,
/// its stage's promotion).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum FlipOutcome {
    Flipped(crate::SwitchChange),
    Waiting(ChangeAccepted),
}

/// What an operator decides on a change from the switch board.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChangeDecision {
    Approve,
    Reject,
    Cancel,
    Promote,
    Abort,
}

impl ChangeDecision {
    pub const ALL: [ChangeDecision; 5] = [
        ChangeDecision::Approve,
        ChangeDecision::Reject,
        ChangeDecision::Cancel,
        ChangeDecision::Promote,
        ChangeDecision::Abort,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ChangeDecision::Approve => "approve",
            ChangeDecision::Reject => "reject",
            ChangeDecision::Cancel => "cancel",
            ChangeDecision::Promote => "promote",
            ChangeDecision::Abort => "abort",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL
            .into_iter()
            .find(|decision| decision.as_str() == text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_typed_stage_is_node_ids_or_a_share() {
        assert_eq!(
            StageTarget::parse(" a, b ").map(|stage| stage.instances),
            Ok(Some(vec!["a".to_owned(), "b".to_owned()]))
        );
        assert_eq!(
            StageTarget::parse("25%").map(|stage| stage.percent),
            Ok(Some(25))
        );
        assert!(StageTarget::parse("lots%").is_err());
    }

    #[test]
    fn a_forms_timing_reads_each_field_or_names_the_one_that_does_not_parse() {
        let form = |at: &str, at_wall: &str, revert: &str, stage: &str| SwitchForm {
            at: Some(at.into()),
            at_wall: Some(at_wall.into()),
            revert_after_s: Some(revert.into()),
            stage: Some(stage.into()),
            ..SwitchForm::default()
        };
        assert_eq!(form("", " ", "", "").timing(), Ok(FormTiming::default()));
        let timing = form("2026-12-24T20:00:00+08:00", "2026-12-24T20:00", "60", "n1")
            .timing()
            .expect("read");
        assert_eq!(
            timing.at.map(|at| at.to_rfc3339()),
            Some("2026-12-24T12:00:00+00:00".to_owned()),
            "RFC 3339 first"
        );
        assert_eq!(timing.revert_after_s, Some(60));
        let wall = form("", "2026-12-24T20:00", "", "").timing().expect("read");
        assert_eq!(
            wall.at.map(|at| at.to_rfc3339()),
            Some("2026-12-24T20:00:00+00:00".to_owned())
        );
        for (bad, code) in [
            (form("soon", "", "", ""), "INVALID_SCHEDULE"),
            (form("", "", "-1", ""), "INVALID_REVERT"),
            (form("", "", "", "x%"), "INVALID_STAGE"),
        ] {
            assert_eq!(bad.timing().map_err(|(code, _)| code), Err(code));
        }
    }
}
