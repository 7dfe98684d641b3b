//! The audit log: switch flips and operator actions, with who, when and why.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Page;

/// One row of the audit log: a switch flip or another operator action.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// With `id`, unique.
    pub kind: AuditKind,
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    pub source: Source,
    /// For a flip: `set` once etcd took it, `set_pending` while its outcome is unknown,
    /// `set_failed` when etcd did not confirm it. The operator action otherwise.
    pub action: String,
    /// The switch path, or the action's target.
    pub target: String,
    pub old_value: Option<String>,
    pub new_value: Option<String>,
    pub reason: Option<String>,
    pub etcd_revision: Option<i64>,
    /// The ops action's detail, as JSON text.
    pub detail: Option<String>,
    /// A flip: the waiting change it applied or reverted, if any.
    #[serde(default)]
    pub change_id: Option<i64>,
    /// A flip an admin made at once on a key that needs four eyes.
    #[serde(default)]
    pub emergency: bool,
}

/// `GET /admin/api/audit`: switch flips and operator actions merged, newest first.
pub type AuditPage = Page<AuditEntries>;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntries {
    pub entries: Vec<AuditEntry>,
}

/// Where a flip or another operator action came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    Console,
    Api,
    Cli,
    /// A switch written straight into etcd, noticed by the watchers (flips only).
    External,
    /// The platform itself: the leader's automatic repairs (operator actions only).
    System,
}

impl Source {
    pub const ALL: [Source; 5] = [
        Source::Console,
        Source::Api,
        Source::Cli,
        Source::External,
        Source::System,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Source::Console => "console",
            Source::Api => "api",
            Source::Cli => "cli",
            Source::External => "external",
            Source::System => "system",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|source| source.as_str() == text)
    }
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which log an audit row comes from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuditKind {
    /// A switch or limit flip (`switch_audit`).
    Switch,
    /// Another operator action (`ops_audit`): a requeue, a replay.
    Ops,
}

impl AuditKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AuditKind::Switch => "switch",
            AuditKind::Ops => "ops",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [AuditKind::Switch, AuditKind::Ops]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}
