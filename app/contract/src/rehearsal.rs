//! Rehearsals (docs/admin-api.md): the built-in load generator run against a shadow copy of
//! an activity before its day, with the invariant check at the end; what is asked, how far
//! it is, and what came of it.

use serde::{Deserialize, Serialize};

use crate::{Progress, Source};

/// Body of `POST /admin/api/activities/{id}/rehearsals`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StartRehearsal {
    /// Synthetic buyers, each with a buyer token the server mints for the rehearsal.
    pub buyers: i64,
    /// Buy requests sent per second.
    pub rate_per_s: i64,
    /// Why (audited).
    pub reason: String,
}

/// Where a rehearsal stands: running, or over with its check passed or failed, or stopped by
/// an error before its check could be made.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RehearsalStatus {
    Running,
    Passed,
    Failed,
    Error,
}

impl RehearsalStatus {
    pub const ALL: [RehearsalStatus; 4] = [
        RehearsalStatus::Running,
        RehearsalStatus::Passed,
        RehearsalStatus::Failed,
        RehearsalStatus::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RehearsalStatus::Running => "running",
            RehearsalStatus::Passed => "passed",
            RehearsalStatus::Failed => "failed",
            RehearsalStatus::Error => "error",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }
}

/// The step a rehearsal is at, in order.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RehearsalStage {
    /// Copying the activity and pre-warming the copy.
    Preparing,
    /// The load generator sends.
    Loading,
    /// Waiting for the order pipeline to complete every pre-order.
    Settling,
    /// The invariant check.
    Checking,
    /// Removing the shadow's rows and keys.
    Cleaning,
    /// The clean-up failed, or the instance running the rehearsal died: the leader retries
    /// it until the shadow is gone.
    #[serde(rename = "cleanup_failed")]
    CleanupFailed,
    Done,
}

impl RehearsalStage {
    pub const ALL: [RehearsalStage; 7] = [
        RehearsalStage::Preparing,
        RehearsalStage::Loading,
        RehearsalStage::Settling,
        RehearsalStage::Checking,
        RehearsalStage::Cleaning,
        RehearsalStage::CleanupFailed,
        RehearsalStage::Done,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RehearsalStage::Preparing => "preparing",
            RehearsalStage::Loading => "loading",
            RehearsalStage::Settling => "settling",
            RehearsalStage::Checking => "checking",
            RehearsalStage::Cleaning => "cleaning",
            RehearsalStage::CleanupFailed => "cleanup_failed",
            RehearsalStage::Done => "done",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|stage| stage.as_str() == text)
    }
}

/// The invariants a rehearsal checks at its end.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InvariantName {
    /// Units held by orders never exceed the item's stock.
    NotOversold,
    /// No buyer holds more than the per-user limit.
    WithinLimit,
    /// Every 200 names an order that holds stock.
    EveryOkHasItsOrder,
    /// A request id sent again got the first answer back.
    ReplaysAnswerAlike,
    /// The order pipeline completed every pre-order.
    PipelineCompleted,
    /// Redis stock equals stock minus the units orders hold, nothing in flight.
    RedisSettled,
}

impl InvariantName {
    pub fn as_str(self) -> &'static str {
        match self {
            InvariantName::NotOversold => "not_oversold",
            InvariantName::WithinLimit => "within_limit",
            InvariantName::EveryOkHasItsOrder => "every_ok_has_its_order",
            InvariantName::ReplaysAnswerAlike => "replays_answer_alike",
            InvariantName::PipelineCompleted => "pipeline_completed",
            InvariantName::RedisSettled => "redis_settled",
        }
    }
}

/// One invariant's verdict, for one item or for the whole rehearsal.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvariantCheck {
    pub name: InvariantName,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub item_id: Option<i64>,
    pub ok: bool,
    pub detail: String,
}

/// How many answers had one status and code (`OK` for a 200).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeCount {
    pub status: u16,
    pub code: String,
    pub count: i64,
}

/// Latency percentiles of the answered requests (nearest rank), in milliseconds.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyMs {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

/// What a rehearsal came to.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RehearsalResult {
    pub requests: i64,
    /// Requests that got no HTTP answer (timeout, connection refused).
    pub unanswered: i64,
    /// From the first request sent to the last answer.
    pub load_s: f64,
    pub outcomes: Vec<OutcomeCount>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<LatencyMs>,
    pub checks: Vec<InvariantCheck>,
    pub passed: bool,
}

/// A rehearsal: `GET /admin/api/rehearsals/{id}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Rehearsal {
    pub id: i64,
    pub activity_id: i64,
    /// The shadow copy's id (gone once cleaned up).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_activity_id: Option<i64>,
    pub buyers: i64,
    pub rate_per_s: i64,
    pub source: Source,
    pub actor: String,
    pub reason: String,
    pub status: RehearsalStatus,
    pub stage: RehearsalStage,
    /// Requests sent of the requests planned.
    pub progress: Progress,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<RehearsalResult>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Whether the shadow's rows and keys are removed.
    pub cleaned_up: bool,
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
}

/// Answer of `POST /admin/api/activities/{id}/rehearsals` (202).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartedRehearsal {
    pub id: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_and_stages_keep_their_wire_names() {
        for status in RehearsalStatus::ALL {
            let json = serde_json::to_value(status).expect("json");
            assert_eq!(json, serde_json::json!(status.as_str()));
            assert_eq!(RehearsalStatus::parse(status.as_str()), Some(status));
        }
        for stage in RehearsalStage::ALL {
            let json = serde_json::to_value(stage).expect("json");
            assert_eq!(json, serde_json::json!(stage.as_str()));
            assert_eq!(RehearsalStage::parse(stage.as_str()), Some(stage));
        }
        assert_eq!(
            serde_json::to_value(InvariantName::EveryOkHasItsOrder).expect("json"),
            serde_json::json!(InvariantName::EveryOkHasItsOrder.as_str())
        );
    }
}
