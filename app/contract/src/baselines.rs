//! Baselines (`/admin/api/baselines`): a run records how an activity's sale behaved
//! (performance per endpoint), what it cost (instances, CPU, memory, pools, Redis and
//! RabbitMQ) and what each buy cost the stores (the path), so a later sale can be held
//! against the run an operator marked as the activity's baseline, or as the baseline of
//! every activity of its kind.

use crate::ActivityKind;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The routes of buys: the busiest of them stands for a run's buy latency and rate.
pub const BUY_ROUTES: [&str; 2] = ["/api/seckill/buy", "/api/seckill/seats"];

/// What a run recorded.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// The activity's sale, from its start to its end.
    Sale,
    /// A rehearsal of the activity before its sale.
    Rehearsal,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Sale => "sale",
            RunKind::Rehearsal => "rehearsal",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [RunKind::Sale, RunKind::Rehearsal]
            .into_iter()
            .find(|kind| kind.as_str() == text)
    }
}

/// The console's Baselines page for one activity: its runs, and the run its figures are
/// held against.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ActivityBaselines {
    /// The activity's runs, newest first.
    pub runs: Vec<BaselineRun>,
    /// Its own baseline, else its kind's (then, as a rule, a run of another activity).
    pub baseline: Option<BaselineRun>,
}

/// One recorded run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BaselineRun {
    pub id: i64,
    pub activity_id: i64,
    pub kind: RunKind,
    /// RFC 3339.
    pub started_at: String,
    pub ended_at: String,
    /// The run the activity's live figures are held against.
    pub is_baseline: bool,
    /// The kind of activity this run is the baseline of: every activity of that kind
    /// without a baseline of its own is held against it.
    pub baseline_of_kind: Option<ActivityKind>,
    pub perf: RunPerf,
    pub cost: RunCost,
    pub path: RunPath,
}

/// Performance per endpoint (matched route) over the run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunPerf {
    pub endpoints: Vec<EndpointFigures>,
}

impl RunPerf {
    /// The busiest buy endpoint's figures.
    pub fn buy(&self) -> Option<&EndpointFigures> {
        self.endpoints
            .iter()
            .filter(|endpoint| BUY_ROUTES.contains(&endpoint.route.as_str()))
            .max_by_key(|endpoint| endpoint.requests)
    }
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EndpointFigures {
    pub route: String,
    pub requests: u64,
    /// Requests per second over the run's length.
    pub qps: f64,
    /// Latency quantiles from the instances' histograms; absent without requests.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub p999_ms: Option<f64>,
    /// Answers with a 4xx or 5xx status, by status.
    pub errors: BTreeMap<String, u64>,
    /// Answers with a 5xx status (the server failed) over every answer (0 to 1). Refusals
    /// (4xx: SOLD_OUT, RATE_LIMITED...) are the sale working, not errors.
    pub error_rate: f64,
}

/// What the run cost.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunCost {
    /// Every instance that reported during the run.
    pub instances: Vec<InstanceCost>,
    /// Their CPU time together.
    pub cpu_seconds: f64,
    /// PostgreSQL connections in use at once, the most any instance's reports saw.
    pub db_pool_peak_in_use: u32,
    /// Waits of the hot callers for a connection: how many and how long together.
    pub db_pool_waits: u64,
    pub db_pool_wait_ms: f64,
    /// Commands sent to Redis and messages published to RabbitMQ, by every instance.
    pub redis_commands: u64,
    pub mq_publishes: u64,
}

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InstanceCost {
    pub node_id: String,
    pub cpu_seconds: f64,
    /// The most resident memory seen during the run.
    pub peak_memory_bytes: u64,
}

/// What one buy cost the stores, per outcome.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunPath {
    /// Buys answered 200.
    pub success: PathFigures,
    /// Buys answered anything else.
    pub refused: PathFigures,
}

/// Calls per buy (averages over `requests`; a batch's call is shared by its members).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PathFigures {
    pub requests: u64,
    pub redis_round_trips: f64,
    pub redis_commands: f64,
    pub db_statements: f64,
    pub db_transactions: f64,
    pub mq_publishes: f64,
}

impl PathFigures {
    /// Each figure by name, in the order the console shows them.
    pub fn calls(&self) -> [(&'static str, f64); 5] {
        [
            ("Redis round trips", self.redis_round_trips),
            ("Redis commands", self.redis_commands),
            ("DB statements", self.db_statements),
            ("DB transactions", self.db_transactions),
            ("MQ publishes", self.mq_publishes),
        ]
    }
}

impl PathFigures {
    /// The calls per buy this run makes that `baseline` did not: every figure grown by at
    /// least half a call per buy (a new Redis call or DB statement on the path, not noise
    /// of shared batches), with the calls it grew by.
    pub fn new_calls(&self, baseline: &PathFigures) -> Vec<(&'static str, f64)> {
        self.calls()
            .into_iter()
            .zip(baseline.calls())
            .filter(|((_, now), (_, before))| now - before >= 0.5)
            .map(|((name, now), (_, before))| (name, now - before))
            .collect()
    }
}

/// A live figure held against the same figure of the activity's baseline run, as the
/// live dashboard shows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FigureAgainst {
    /// What is compared, e.g. `buy p99`.
    pub name: String,
    /// `ms`, `/s`, or empty for a count.
    pub unit: String,
    /// Absent when the live second had nothing to measure.
    pub live: Option<f64>,
    pub baseline: Option<f64>,
}

impl FigureAgainst {
    /// `live` against `baseline` in percent (`+128` for 41 against 18); absent without both,
    /// or with a baseline of zero.
    pub fn change_percent(&self) -> Option<f64> {
        match (self.live, self.baseline) {
            (Some(live), Some(baseline)) if baseline != 0.0 => {
                Some((live - baseline) / baseline * 100.0)
            }
            _ => None,
        }
    }

    /// `buy p99 41 ms, baseline 18 ms, +128 %`.
    pub fn describe(&self) -> String {
        let figure = |value: Option<f64>| match value {
            Some(value) if self.unit.is_empty() => round(value),
            Some(value) => format!("{} {}", round(value), self.unit),
            None => "–".to_owned(),
        };
        let mut text = format!(
            "{} {}, baseline {}",
            self.name,
            figure(self.live),
            figure(self.baseline)
        );
        if let Some(change) = self.change_percent() {
            text.push_str(&format!(", {change:+.0} %"));
        }
        text
    }
}

/// Whole numbers as such, small ones with two decimals.
fn round(value: f64) -> String {
    if value.fract() == 0.0 || value.abs() >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// Whose baseline a run is made, and which baseline an activity is held against.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BaselineScope {
    /// The run's own activity's.
    #[default]
    Activity,
    /// Every activity of the run's activity's kind that has no baseline of its own.
    Kind,
}

impl BaselineScope {
    pub fn as_str(self) -> &'static str {
        match self {
            BaselineScope::Activity => "activity",
            BaselineScope::Kind => "kind",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [BaselineScope::Activity, BaselineScope::Kind]
            .into_iter()
            .find(|scope| scope.as_str() == text)
    }

    /// How an activity's baseline run is named to an operator: `run #3`, or, for its
    /// kind's, `run #3 (its kind's baseline, a run of activity #7)`.
    pub fn name_run(self, run_id: i64, run_activity_id: i64) -> String {
        match self {
            BaselineScope::Activity => format!("run #{run_id}"),
            BaselineScope::Kind => {
                format!("run #{run_id} (its kind's baseline, a run of activity #{run_activity_id})")
            }
        }
    }
}

/// One live activity's figures against its baseline run.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AgainstBaseline {
    pub activity_id: i64,
    /// The baseline run.
    pub run_id: i64,
    /// The activity the run is a run of: another activity of the same kind when the
    /// baseline is the kind's.
    pub run_activity_id: i64,
    /// The activity's own baseline, or its kind's (it has none of its own).
    pub scope: BaselineScope,
    pub figures: Vec<FigureAgainst>,
}

impl AgainstBaseline {
    /// `run #3`, or `run #3 (its kind's baseline, a run of activity #7)`.
    pub fn run_name(&self) -> String {
        self.scope.name_run(self.run_id, self.run_activity_id)
    }
}

/// `POST /admin/api/baselines/{id}/mark`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MarkBaseline {
    pub reason: String,
    /// `activity` (the default): the baseline of the run's activity; `kind`: of every
    /// activity of its activity's kind.
    #[serde(default)]
    pub scope: BaselineScope,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_without_a_scope_is_the_activity_s_and_a_bad_scope_is_refused() {
        let plain: MarkBaseline = serde_json::from_str(r#"{"reason": "clean"}"#).expect("a mark");
        assert_eq!(plain.scope, BaselineScope::Activity);
        let kind: MarkBaseline =
            serde_json::from_str(r#"{"reason": "clean", "scope": "kind"}"#).expect("a mark");
        assert_eq!(kind.scope, BaselineScope::Kind);
        assert!(
            serde_json::from_str::<MarkBaseline>(r#"{"reason": "x", "scope": "all"}"#).is_err()
        );
        for scope in [BaselineScope::Activity, BaselineScope::Kind] {
            assert_eq!(BaselineScope::parse(scope.as_str()), Some(scope));
        }
    }

    #[test]
    fn a_kind_s_baseline_names_the_activity_it_is_a_run_of() {
        assert_eq!(BaselineScope::Activity.name_run(3, 7), "run #3");
        assert_eq!(
            BaselineScope::Kind.name_run(3, 7),
            "run #3 (its kind's baseline, a run of activity #7)"
        );
    }

    #[test]
    fn a_figure_reads_against_its_baseline() {
        let p99 = FigureAgainst {
            name: "buy p99".into(),
            unit: "ms".into(),
            live: Some(41.0),
            baseline: Some(18.0),
        };
        assert_eq!(p99.describe(), "buy p99 41 ms, baseline 18 ms, +128 %");
        let quiet = FigureAgainst {
            live: None,
            ..p99.clone()
        };
        assert_eq!(quiet.describe(), "buy p99 –, baseline 18 ms");
        let calls = FigureAgainst {
            name: "Redis commands per buy".into(),
            unit: String::new(),
            live: Some(2.5),
            baseline: Some(2.0),
        };
        assert_eq!(
            calls.describe(),
            "Redis commands per buy 2.50, baseline 2, +25 %"
        );
    }

    #[test]
    fn a_new_call_on_the_path_is_flagged_and_batch_noise_is_not() {
        let baseline = PathFigures {
            requests: 100,
            redis_round_trips: 2.0,
            redis_commands: 2.0,
            db_statements: 0.02,
            db_transactions: 0.02,
            mq_publishes: 1.0,
        };
        let now = PathFigures {
            redis_round_trips: 3.0,
            redis_commands: 3.0,
            db_statements: 0.3,
            ..baseline.clone()
        };
        assert_eq!(
            now.new_calls(&baseline),
            [("Redis round trips", 1.0), ("Redis commands", 1.0)]
        );
        assert!(baseline.new_calls(&baseline).is_empty());
    }
}
