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

/// The longest text `GET /admin/api/audit?containing=` looks for.
pub const AUDIT_CONTAINING_MAX: usize = 200;

/// Which rows of the audit log a reader asks for (`GET /admin/api/audit?kind=&containing=`):
/// one kind or both, and only rows whose who, from where, action, target, change or reason
/// contain a text, in any case. The server filters, so the pages and `has_more` count only
/// the rows kept.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditFilter {
    pub kind: Option<AuditKind>,
    /// Trimmed, never blank.
    pub containing: Option<String>,
}

impl AuditFilter {
    /// The filter from a query's words, blank ones meaning "any"; a refusal names the
    /// console's labels ("Kind", "Containing"), which is where a person typed them.
    pub fn parse(kind: Option<&str>, containing: Option<&str>) -> Result<Self, String> {
        let kind = match kind.map(str::trim).filter(|kind| !kind.is_empty()) {
            None => None,
            Some(kind) => Some(AuditKind::parse(kind).ok_or_else(|| {
                format!("Kind must be switch (switch flips) or ops (operator actions), not {kind}")
            })?),
        };
        let containing = containing
            .map(str::trim)
            .filter(|text| !text.is_empty())
            .map(str::to_owned);
        if containing
            .as_ref()
            .is_some_and(|text| text.chars().count() > AUDIT_CONTAINING_MAX)
        {
            return Err(format!(
                "Containing is longer than {AUDIT_CONTAINING_MAX} characters"
            ));
        }
        Ok(Self { kind, containing })
    }

    /// Whether it keeps every row.
    pub fn is_everything(&self) -> bool {
        self.kind.is_none() && self.containing.is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_audit_filter_reads_blank_as_any_and_refuses_in_the_forms_words() {
        assert_eq!(
            AuditFilter::parse(None, Some("  ")),
            Ok(AuditFilter::default())
        );
        assert_eq!(
            AuditFilter::parse(Some("ops"), Some(" Night drill ")),
            Ok(AuditFilter {
                kind: Some(AuditKind::Ops),
                containing: Some("Night drill".into()),
            })
        );
        let refused = AuditFilter::parse(Some("flips"), None).expect_err("unknown kind");
        assert!(refused.starts_with("Kind must be"), "{refused}");
        let long = "x".repeat(AUDIT_CONTAINING_MAX + 1);
        let refused = AuditFilter::parse(None, Some(&long)).expect_err("too long");
        assert!(refused.starts_with("Containing is longer"), "{refused}");
    }
}
