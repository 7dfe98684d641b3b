//! The report of a run: its setup, the numbers, and the check results, printed as text or
//! as one JSON document. Nothing here sends a request.

use serde::Serialize;

use super::{
    args::Endpoint,
    check::{Check, Verdict},
    tally::Summary,
};

/// What the run was asked to do.
#[derive(Serialize)]
pub struct Setup {
    pub base_url: String,
    pub endpoint: Endpoint,
    pub activity_id: i64,
    pub items: Vec<i64>,
    pub users: usize,
    pub concurrency: u64,
    /// Requests due a second (open loop); `None`: closed loop.
    pub rate: Option<u64>,
    pub quantity: u32,
    pub request_limit: u64,
    pub duration_s: Option<u64>,
}

#[derive(Serialize)]
pub struct Report {
    pub setup: Setup,
    pub summary: Summary,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checks: Option<Vec<Check>>,
}

impl Setup {
    /// One line saying what is about to happen.
    pub fn banner(&self) -> String {
        let duration = self
            .duration_s
            .map(|s| format!(" for at most {s} s"))
            .unwrap_or_default();
        let pace = match self.rate {
            Some(per_s) => format!(
                "{per_s} due a second, at most {} in flight",
                self.concurrency
            ),
            None => format!("{} concurrent", self.concurrency),
        };
        format!(
            "{} {}: activity {}, items {:?}, {} users, {pace}, up to {} requests{duration}",
            self.endpoint.label(),
            self.base_url,
            self.activity_id,
            self.items,
            self.users,
            self.request_limit,
        )
    }
}

impl Report {
    /// True when nothing answered or a hard check failed (warnings do not count).
    pub fn failed(&self) -> bool {
        self.summary.answered == 0
            || self
                .checks
                .iter()
                .flatten()
                .any(|check| check.verdict == Verdict::Fail)
    }

    pub fn print_json(&self) -> serde_json::Result<()> {
        println!("{}", serde_json::to_string_pretty(self)?);
        Ok(())
    }

    pub fn print_text(&self) {
        println!("{}", self.setup.banner());
        self.print_summary();
        if let Some(checks) = &self.checks {
            println!("checks");
            for check in checks {
                println!(
                    "  {}  {}: {}",
                    check.verdict.label(),
                    check.name,
                    check.detail
                );
            }
        }
    }

    fn print_summary(&self) {
        let s = &self.summary;
        println!(
            "requests     {} in {:.2} s ({:.1} req/s), {} answered",
            s.requests, s.wall_s, s.throughput_rps, s.answered
        );
        match &s.latency_ms {
            Some(l) => println!(
                "latency ms   p50 {:.2}  p90 {:.2}  p99 {:.2}  max {:.2}",
                l.p50, l.p90, l.p99, l.max
            ),
            None => println!("latency ms   no answers"),
        }
        println!("outcomes");
        for outcome in &s.outcomes {
            println!(
                "  {} {:<24} {:>9}",
                outcome.status, outcome.code, outcome.count
            );
        }
        let errors: Vec<String> = s
            .transport_errors
            .iter()
            .map(|(kind, count)| format!("{} {count}", kind.label()))
            .collect();
        println!(
            "transport    {}",
            if errors.is_empty() {
                "no errors".to_owned()
            } else {
                errors.join(", ")
            }
        );
        println!(
            "orders       {} OK, {} distinct order ids",
            s.ok, s.distinct_order_ids
        );
        if self.setup.rate.is_some() {
            println!("shed         {} due while the most were in flight", s.shed);
        }
    }
}
