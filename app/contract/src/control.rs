//! The switch board: every switch and limit in etcd, and which instance applied what.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Source;

/// `GET /admin/api/switches`: every switch and limit, where etcd stands, and
/// which live instance has applied what.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchBoard {
    /// The etcd prefix of this deployment, e.g. `/seckill`.
    pub prefix: String,
    pub etcd: EtcdReach,
    /// The answering instance's own control plane; absent where none runs (the CLI).
    pub instance: Option<InstanceSync>,
    pub switches: Vec<SwitchRow>,
    /// Live instances (their node key's lease is alive), by node id.
    pub nodes: Vec<NodeState>,
}

/// Whether etcd answered this request, and at which revision.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdReach {
    pub reachable: bool,
    pub revision: Option<i64>,
    pub error: Option<String>,
}

/// How current one instance's switches are. `synced_ago_ms` is the time since etcd last
/// confirmed this instance had every change (a watch event or progress report); it grows
/// while etcd is unreachable, and the last values stay in force meanwhile.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceSync {
    pub node_id: String,
    pub connected: bool,
    pub applied_revision: i64,
    pub synced_ago_ms: Option<u64>,
    pub values_from: ValuesFrom,
    pub leader: bool,
}

/// One switch or limit.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchRow {
    /// Relative to the prefix: `switches/entry`, `switches/entry/42`, `limits/max_in_flight`.
    pub path: String,
    /// What the key accepts, for people: e.g. `open | closed` or `1..=1000000`.
    pub accepts: String,
    /// The values a switch takes, in order (`["open", "closed"]`); empty for a limit,
    /// whose value is a number within `accepts`.
    pub choices: Vec<String>,
    /// What the key does and how it degrades, for people.
    #[serde(default)]
    pub meaning: String,
    /// What each of `choices` does, in the same order.
    #[serde(default)]
    pub choice_notes: Vec<String>,
    /// A limit's accepted range, `[min, max]`; absent for a switch or a rule.
    #[serde(default)]
    pub range: Option<[u64; 2]>,
    /// The value when the key is absent from etcd: the process settings.
    pub default_value: String,
    /// The raw value in etcd (absent: the default applies).
    pub etcd_value: Option<String>,
    /// False when the etcd value is malformed: instances ignore it and keep the last valid one.
    pub valid: bool,
    /// What the answering instance applies now (absent where no control plane runs).
    pub in_force: Option<String>,
    pub mod_revision: Option<i64>,
    /// The last write through the control plane (API, console, CLI) at `mod_revision`;
    /// absent for a key written straight into etcd.
    pub written: Option<SwitchWrite>,
    /// Per live instance: has it applied `mod_revision`, and how long after the write.
    pub applied: Vec<NodeApplied>,
    /// A value staged on some instances only, in place of `etcd_value` there.
    #[serde(default)]
    pub staged: Option<SwitchStage>,
}

/// A value in force on chosen instances only: what `staged/{path}` holds in etcd.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchStage {
    pub change_id: i64,
    pub value: String,
    /// Node ids of the instances that apply it.
    pub instances: Vec<String>,
}

/// A staged value one instance applies, as its heartbeat reports it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StagedValue {
    pub path: String,
    pub value: String,
    pub change_id: i64,
}

/// Buy answers one instance counted since it started, as its heartbeat reports them.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BuyAnswers {
    pub answered: u64,
    /// Answers with a 5xx status.
    pub server_errors: u64,
    /// Buy requests answered per second over about the last minute.
    pub rate_per_s: f64,
    /// Buy requests in flight when the report was written.
    pub in_flight: u64,
    /// The same per activity, for each with buys over about the last minute or in flight.
    #[serde(default)]
    pub activities: Vec<ActivityBuys>,
}

/// One activity's buy traffic on one instance.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivityBuys {
    pub activity_id: i64,
    /// Its buy requests per second over about the last minute.
    pub rate_per_s: f64,
    /// Its buy requests in flight when the report was written.
    pub in_flight: u64,
}

/// `GET /admin/api/switches/{path}/impact?value=`: what a flip would touch, for the
/// confirmation before it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchImpact {
    pub path: String,
    /// The value in force now (etcd's, else the setting's).
    pub current: String,
    pub value: String,
    /// False when the value is the one in force: the flip would change nothing.
    pub changes_anything: bool,
    /// What the new value does, for people.
    pub effect: String,
    /// The live and upcoming activities the key governs, each with its buy traffic.
    pub activities: Vec<ImpactedActivity>,
    /// Every live instance applies the key (a stage names its own): each one's buy
    /// traffic of those activities.
    pub instances: Vec<ImpactedInstance>,
    /// Buy requests of those activities per second over about the last minute, every
    /// instance together.
    pub buy_rate_per_s: f64,
    /// Buy requests of those activities in flight now, every instance together.
    pub in_flight: u64,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImpactedActivity {
    pub id: i64,
    pub title: String,
    /// `live` or `upcoming`.
    pub window: String,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    /// Its buy requests per second over about the last minute, every instance together.
    pub buy_rate_per_s: f64,
    /// Its buy requests in flight now, every instance together.
    pub in_flight: u64,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ImpactedInstance {
    pub node_id: String,
    pub buy_rate_per_s: f64,
    pub in_flight: u64,
}

/// Who wrote a switch through the control plane, and when.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchWrite {
    pub actor: String,
    pub source: Source,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// One instance's view of one write.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeApplied {
    pub node_id: String,
    pub applied: bool,
    /// The revision the instance has applied everything up to.
    pub applied_revision: i64,
    /// Milliseconds from the write to the instance applying it, when both are known (the
    /// write's time is recorded only for writes through the control plane, and the
    /// instance keeps its recent applies only).
    pub took_ms: Option<f64>,
}

/// A live instance as its heartbeat describes it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeState {
    pub node_id: String,
    pub address: String,
    pub applied_revision: i64,
    pub connected: bool,
    pub leader: bool,
    pub heartbeat_at: DateTime<Utc>,
    pub synced_ago_ms: Option<u64>,
    /// When the instance's process started (absent from instances that do not say).
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    /// The staged values it applies in place of etcd's.
    #[serde(default)]
    pub staged: Vec<StagedValue>,
    /// Its buy answers, for a stage's error rate and a flip's impact.
    #[serde(default)]
    pub buys: BuyAnswers,
}

/// `PUT /admin/api/switches/{path}`: a new value with the reason for it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchInput {
    pub value: String,
    pub reason: String,
}

/// The answer to a flip: in etcd at `revision`, audited; with a wait, who applied it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchChange {
    pub path: String,
    pub old_value: Option<String>,
    pub new_value: String,
    pub revision: i64,
    pub audit_id: i64,
    pub propagation: Option<Propagation>,
}

/// How a flip reached the live instances within the wait.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Propagation {
    /// Every live instance applied the revision before the wait ran out.
    pub complete: bool,
    pub waited_ms: f64,
    pub nodes: Vec<NodeApplied>,
}

/// Where the switch values an instance applies came from.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ValuesFrom {
    /// Nothing read yet: the process settings.
    Settings,
    /// The local snapshot, etcd unreachable at start-up.
    Disk,
    Etcd,
}

impl ValuesFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            ValuesFrom::Settings => "settings",
            ValuesFrom::Disk => "disk",
            ValuesFrom::Etcd => "etcd",
        }
    }
}
