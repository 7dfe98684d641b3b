//! Reconciliation and the live stock ledger (docs/reconciliation.md): the figures every part
//! of the platform agrees on per activity item, and the runs that compare Redis with
//! PostgreSQL, report each difference by class and repair the safe ones.

use serde::{Deserialize, Serialize};

/// The kind of difference a finding reports; the `class` field of the JSON.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum FindingClass {
    /// Redis holds a deduction or a buyer record that no order accounts for.
    RedisDeductedNoOrder,
    /// An order whose units Redis does not count as taken: Redis would sell them again.
    OrderNotInRedis,
    /// A pre-order that never reached the pipeline, or whose outbox row failed.
    PreorderStuck,
    /// An unpaid order past its pay deadline.
    UnpaidPastDeadline,
    /// A cancel whose give-back did not reach Redis.
    RestoreIncomplete,
    /// The item's Redis state is gone (Redis restarted without persistence, a flush, an
    /// activity that opened without a pre-warm).
    RedisMissing,
}

impl FindingClass {
    pub const ALL: [FindingClass; 6] = [
        FindingClass::RedisDeductedNoOrder,
        FindingClass::OrderNotInRedis,
        FindingClass::PreorderStuck,
        FindingClass::UnpaidPastDeadline,
        FindingClass::RestoreIncomplete,
        FindingClass::RedisMissing,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FindingClass::RedisDeductedNoOrder => "REDIS_DEDUCTED_NO_ORDER",
            FindingClass::OrderNotInRedis => "ORDER_NOT_IN_REDIS",
            FindingClass::PreorderStuck => "PREORDER_STUCK",
            FindingClass::UnpaidPastDeadline => "UNPAID_PAST_DEADLINE",
            FindingClass::RestoreIncomplete => "RESTORE_INCOMPLETE",
            FindingClass::RedisMissing => "REDIS_MISSING",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|class| class.as_str() == text)
    }
}

/// What a run did about a finding.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FindingAction {
    /// Repaired by this run.
    Repaired,
    /// Left for a person: the detail says why.
    Flagged,
    /// Reported only (a report run, or nothing to do any more).
    None,
}

impl FindingAction {
    pub fn as_str(self) -> &'static str {
        match self {
            FindingAction::Repaired => "repaired",
            FindingAction::Flagged => "flagged",
            FindingAction::None => "none",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Repaired, Self::Flagged, Self::None]
            .into_iter()
            .find(|action| action.as_str() == text)
    }
}

/// One difference between the stores.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding {
    pub class: FindingClass,
    pub item_id: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_id: Option<i64>,
    pub units: i64,
    pub action: FindingAction,
    pub detail: String,
}

/// Where a run stands.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunStatus {
    Running,
    Done,
    Failed,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Done => "done",
            RunStatus::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Running, Self::Done, Self::Failed]
            .into_iter()
            .find(|status| status.as_str() == text)
    }
}

/// Who started a run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunTrigger {
    Console,
    Api,
    Cli,
    /// The leader's automatic pass.
    Auto,
}

impl RunTrigger {
    pub fn as_str(self) -> &'static str {
        match self {
            RunTrigger::Console => "console",
            RunTrigger::Api => "api",
            RunTrigger::Cli => "cli",
            RunTrigger::Auto => "auto",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Console, Self::Api, Self::Cli, Self::Auto]
            .into_iter()
            .find(|trigger| trigger.as_str() == text)
    }
}

/// Items done out of items to do.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progress {
    pub done: i64,
    pub total: i64,
}

/// A reconciliation run: `GET /admin/api/reconciliations/{id}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconciliationRun {
    pub id: i64,
    pub activity_id: i64,
    pub status: RunStatus,
    pub repair: bool,
    pub trigger: RunTrigger,
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub progress: Progress,
    pub findings: Vec<Finding>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// A run in a list: the run without its findings, with their count per class.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunSummary {
    pub id: i64,
    pub activity_id: i64,
    pub status: RunStatus,
    pub repair: bool,
    pub trigger: RunTrigger,
    pub actor: String,
    pub progress: Progress,
    pub findings: i64,
    pub repaired: i64,
    pub flagged: i64,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// Body of `POST /admin/api/reconciliations`. A repair needs a reason (audited).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartReconciliation {
    pub activity_id: i64,
    #[serde(default)]
    pub repair: bool,
    #[serde(default)]
    pub reason: Option<String>,
}

/// Answer of `POST /admin/api/reconciliations` (202).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRun {
    pub id: i64,
}

/// One item's stock as every store counts it: `GET /admin/api/activities/{id}/ledger`.
///
/// Where nothing is in flight, `total = redis_stock + allocated + in_flight + restore_owed`
/// for an item that Redis serves; `drift` is what is missing from that sum (positive:
/// units nobody holds, negative: Redis would sell units the orders hold).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerItem {
    pub item_id: i64,
    pub name: String,
    pub total: i64,
    /// Stock left in Redis; `None` when the item's Redis state is missing.
    pub redis_stock: Option<i64>,
    /// Units Redis records as bought, summed over buyers; `None` when the item has too many
    /// buyers to sum on every refresh (full runs compare them buyer by buyer).
    pub redis_buyer_units: Option<i64>,
    /// Buyers Redis records.
    pub redis_buyers: i64,
    /// Units held by pre-orders and orders that keep stock (PostgreSQL).
    pub allocated: i64,
    /// Units of orders the pipeline completed (PostgreSQL).
    pub sold: i64,
    /// Units deducted in Redis whose pre-order is not committed (yet).
    pub in_flight: i64,
    /// Units given back by cancels and failures (the restore journal).
    pub restored: i64,
    /// Restored units Redis has not been given back yet.
    pub restore_owed: i64,
    pub drift: i64,
}

/// The ledger of every item of an activity.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityLedger {
    pub activity_id: i64,
    /// The deduction layer the ledger reads Redis for (`redis` or `db`).
    pub deduction: String,
    pub items: Vec<LedgerItem>,
    pub at_ms: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_and_actions_keep_their_wire_names() {
        for class in FindingClass::ALL {
            let json = serde_json::to_value(class).expect("json");
            assert_eq!(json, serde_json::json!(class.as_str()));
            assert_eq!(FindingClass::parse(class.as_str()), Some(class));
        }
        assert_eq!(
            serde_json::to_value(FindingAction::Repaired).expect("json"),
            serde_json::json!("repaired")
        );
        assert_eq!(RunStatus::parse("done"), Some(RunStatus::Done));
        assert_eq!(RunTrigger::parse("auto"), Some(RunTrigger::Auto));
    }
}
