//! The live dashboard's view against the baseline: each second's buy latency, rate and
//! path held against the baseline run of every live activity that has one (its own, else
//! its kind's).

use contract::{AgainstBaseline, BuyFigures, FigureAgainst, RunPath};

use base::tally::{Call, Outcome, PathTotals};

use crate::baselines::{figures::OutcomeCounts, store::AppliedBaseline};

/// The path counters as the frame before saw them, for this second's calls per buy.
#[derive(Default)]
pub(crate) struct LivePath {
    before: [OutcomeCounts; 2],
}

impl LivePath {
    /// Calls per buy since the last call.
    pub(crate) fn second(&mut self, totals: &PathTotals) -> RunPath {
        let now = Outcome::ALL.map(|outcome| OutcomeCounts {
            requests: totals.requests(outcome),
            calls: Call::ALL.map(|call| totals.calls(outcome, call)),
        });
        let [success, refused] = [0, 1].map(|i| now[i].since(&self.before[i]).per_buy());
        self.before = now;
        RunPath { success, refused }
    }
}

/// This second (`buy`, `path`) against an activity's `applied` baseline.
pub(crate) fn against(
    applied: &AppliedBaseline,
    buy: &BuyFigures,
    path: &RunPath,
) -> AgainstBaseline {
    let baseline = &applied.run;
    let endpoint = baseline.perf.buy();
    let figure = |name: &str, unit: &str, live: Option<f64>, baseline: Option<f64>| FigureAgainst {
        name: name.to_owned(),
        unit: unit.to_owned(),
        live,
        baseline,
    };
    let base = &baseline.path;
    let mut figures = vec![
        figure(
            "buy p99",
            "ms",
            buy.p99_ms,
            endpoint.and_then(|endpoint| endpoint.p99_ms),
        ),
        figure(
            "buy rate",
            "/s",
            Some(buy.requests as f64),
            endpoint.map(|endpoint| endpoint.qps),
        ),
    ];
    for (outcome, live, base) in [
        ("successful buy", &path.success, &base.success),
        ("refused buy", &path.refused, &base.refused),
    ] {
        // A second (or a run) without buys of an outcome has no calls per buy to show.
        for ((name, now), (_, then)) in live.calls().into_iter().zip(base.calls()) {
            figures.push(figure(
                &format!("{name} per {outcome}"),
                "",
                (live.requests > 0).then_some(now),
                (base.requests > 0).then_some(then),
            ));
        }
    }
    AgainstBaseline {
        activity_id: applied.activity_id,
        run_id: baseline.id,
        run_activity_id: baseline.activity_id,
        scope: applied.scope,
        figures,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use contract::{
        ActivityKind, BaselineRun, BaselineScope, EndpointFigures, PathFigures, RunCost, RunKind,
        RunPerf,
    };

    #[test]
    fn the_second_is_held_against_the_baseline_run() {
        let run = BaselineRun {
            id: 3,
            activity_id: 7,
            kind: RunKind::Sale,
            started_at: String::new(),
            ended_at: String::new(),
            is_baseline: true,
            baseline_of_kind: Some(ActivityKind::Standard),
            perf: RunPerf {
                endpoints: vec![EndpointFigures {
                    route: "/api/seckill/buy".into(),
                    requests: 900,
                    qps: 90.0,
                    p99_ms: Some(18.0),
                    ..EndpointFigures::default()
                }],
            },
            cost: RunCost::default(),
            path: RunPath {
                success: PathFigures {
                    requests: 100,
                    redis_commands: 2.0,
                    ..PathFigures::default()
                },
                refused: PathFigures::default(),
            },
        };
        let buy = BuyFigures {
            requests: 45,
            p99_ms: Some(41.0),
        };
        let path = RunPath {
            success: PathFigures {
                requests: 10,
                redis_commands: 3.0,
                ..PathFigures::default()
            },
            refused: PathFigures::default(),
        };
        // Activity 9 has no baseline of its own: it is held against its kind's, a run of 7.
        let applied = AppliedBaseline {
            activity_id: 9,
            scope: BaselineScope::Kind,
            run,
        };
        let seen = against(&applied, &buy, &path);
        assert_eq!(
            (seen.activity_id, seen.run_id, seen.run_activity_id),
            (9, 3, 7)
        );
        assert_eq!(seen.scope, BaselineScope::Kind);
        let text: Vec<String> = seen.figures.iter().map(FigureAgainst::describe).collect();
        assert_eq!(text[0], "buy p99 41 ms, baseline 18 ms, +128 %");
        assert_eq!(text[1], "buy rate 45 /s, baseline 90 /s, -50 %");
        assert_eq!(
            text[3],
            "Redis commands per successful buy 3, baseline 2, +50 %"
        );
        // Neither this second nor the baseline had refused buys.
        let refused = &seen.figures[8];
        assert_eq!(refused.name, "Redis commands per refused buy");
        assert_eq!((refused.live, refused.baseline), (None, None));
    }

    #[test]
    fn each_second_counts_only_its_own_calls() {
        let metrics = base::metrics::Metrics::new();
        let totals = PathTotals::of(&metrics);
        let mut live = LivePath::default();
        totals.after_success(Call::RedisCommand, 4);
        totals.finished(Outcome::Success, &base::tally::Tally::default());
        totals.finished(Outcome::Success, &base::tally::Tally::default());
        assert_eq!(live.second(&totals).success.redis_commands, 2.0);
        let quiet = live.second(&totals);
        assert_eq!(quiet.success.requests, 0);
        assert_eq!(quiet.success.redis_commands, 0.0);
    }
}
