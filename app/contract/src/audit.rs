//! The audit log: switch flips and operator actions, with who, when and why.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// One row of the audit log: a switch flip or another operator action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// `switch` (switch_audit) or `ops` (ops_audit); with `id`, unique.
    pub kind: String,
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    /// `console`, `api`, `cli`, `external` (written straight into etcd) or `system`.
    pub source: String,
    /// `set` for a flip; the operator action otherwise.
    pub action: String,
    /// The switch path, or the action's target.
    pub target: String,
    pub old_value: Option<String>,
    pub new_value: Option<String>,
    pub reason: Option<String>,
    pub etcd_revision: Option<i64>,
    /// The ops action's detail, as JSON text.
    pub detail: Option<String>,
}

/// `GET /admin/api/audit`: switch flips and operator actions merged, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub page: i64,
    pub per_page: i64,
    pub has_more: bool,
}
