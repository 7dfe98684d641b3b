//! The command line of `seckill-load`: what to hit, how hard, for how long, and whether to
//! check the stock invariants afterwards.

use base::config::Settings;
use clap::{ArgGroup, Parser, ValueEnum};
use serde::Serialize;
use std::time::Duration;

use super::runner::{Pace, Schedule};

/// Requests sent when neither `--requests` nor `--duration-s` is given.
const DEFAULT_REQUESTS: u64 = 20_000;

#[derive(Parser, Debug)]
#[command(
    name = "seckill-load",
    version,
    about = "Load generator for the seckill buyer API: many buyers, one hot item or a spread, \
             a report of throughput, latency and outcomes, and an invariant check at the end"
)]
#[command(group(ArgGroup::new("target").required(true).args(["item_ids", "spread"])))]
pub struct Args {
    /// Base URL of a running `seckill serve`.
    #[arg(long, default_value = "http://127.0.0.1:3000")]
    pub base_url: String,
    /// The activity to buy from.
    #[arg(long = "activity", value_name = "ID")]
    pub activity_id: i64,
    /// An item to buy; repeat for several.
    #[arg(long = "item", value_name = "ID")]
    pub item_ids: Vec<i64>,
    /// Spread the load over every item of the activity (from `GET /api/activities/{id}`).
    #[arg(long)]
    pub spread: bool,
    /// Distinct buyers (user ids `--first-user` onwards), each with its own token.
    #[arg(long, default_value_t = 2000, value_parser = clap::value_parser!(u64).range(1..))]
    pub users: u64,
    /// The first buyer's user id.
    #[arg(long, default_value_t = 1_000_000)]
    pub first_user: i64,
    /// Total requests [default: 20000 unless --duration-s is given].
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: Option<u64>,
    /// Stop sending after this many seconds (requests in flight still finish).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub duration_s: Option<u64>,
    /// Requests in flight at once (also the size of the connection pool); with `--rate`,
    /// the most in flight at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=10_000))]
    pub concurrency: u64,
    /// Open loop: this many requests fall due a second whatever the server's pace, as a
    /// sale's crowd arrives, and each one's latency counts from when it fell due. One due
    /// while `--concurrency` are in flight is shed (counted, not sent). Without it, each of
    /// `--concurrency` workers sends its next request once the last is answered.
    #[arg(long, value_name = "PER_S", value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub rate: Option<u64>,
    /// Send every request with an `X-Forwarded-For`, as a load balancer in front of the
    /// server adds it (the server believes it when it trusts the load's address,
    /// `SECKILL_TRUSTED_PROXIES`): `per-buyer` gives each buyer an address of his own
    /// (10.x.y.z from his user id); an address gives every buyer that one.
    #[arg(long, value_name = "per-buyer|ADDRESS")]
    pub forwarded_for: Option<String>,
    /// Units per buy request.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub quantity: u32,
    /// Requests one buyer may send, each with its own `X-Request-ID`; the run ends when
    /// every buyer has used them.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub retries_per_user: u64,
    /// `buy` posts to /api/seckill/buy; `healthz` sends the same load to GET /healthz as a
    /// baseline; `sale-page` GETs the activity's published page `/sale/{activity}/`;
    /// `register` posts a lottery registration for the item to
    /// `/api/activities/{activity}/registrations`.
    #[arg(long, value_enum, default_value_t = Endpoint::Buy)]
    pub endpoint: Endpoint,
    /// Give up on one request after this many milliseconds (counted as a transport error).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// Check the invariants against PostgreSQL and Redis at the end; exit non-zero on a failure.
    #[arg(long)]
    pub check: bool,
    /// How long the check waits for Redis stock and orders to agree before warning.
    #[arg(long, default_value_t = 5)]
    pub settle_s: u64,
    /// PostgreSQL, for --check [default: as the server's settings].
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Redis, for --check [default: as the server's settings].
    #[arg(long, env = "REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// Prefix of the server's Redis keys [default: as the server's settings, `seckill:`].
    #[arg(long, env = "SECKILL_REDIS_PREFIX")]
    pub redis_prefix: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The route under load.
#[derive(ValueEnum, Serialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    Buy,
    Healthz,
    #[serde(rename = "sale-page")]
    SalePage,
    Register,
}

impl Endpoint {
    pub fn label(self) -> &'static str {
        match self {
            Self::Buy => "buy",
            Self::Healthz => "healthz",
            Self::SalePage => "sale-page",
            Self::Register => "register",
        }
    }
}

impl Args {
    /// The server's settings (so `SECKILL_JWT_SECRET` and the rest are honoured), with the
    /// store locations given on the command line on top.
    pub fn settings(&self) -> anyhow::Result<Settings> {
        let mut settings = Settings::load()?;
        if let Some(url) = &self.database_url {
            settings.database_url = url.clone().into();
        }
        if let Some(url) = &self.redis_url {
            settings.redis_url = url.clone().into();
        }
        if let Some(prefix) = &self.redis_prefix {
            settings.redis_prefix = prefix.clone();
        }
        Ok(settings)
    }

    /// Most requests the run may send, before the per-buyer budget is applied.
    pub fn request_cap(&self) -> u64 {
        match (self.requests, self.duration_s) {
            (Some(requests), _) => requests,
            (None, Some(_)) => u64::MAX,
            (None, None) => DEFAULT_REQUESTS,
        }
    }

    pub fn duration(&self) -> Option<Duration> {
        self.duration_s.map(Duration::from_secs)
    }

    pub fn pace(&self) -> Pace {
        match self.rate {
            Some(per_s) => Pace::Open {
                schedule: Schedule::new(per_s),
                max_in_flight: self.concurrency,
            },
            None => Pace::Closed {
                concurrency: self.concurrency,
            },
        }
    }

    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms)
    }

    pub fn settle(&self) -> Duration {
        Duration::from_secs(self.settle_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_consistent() {
        Args::command().debug_assert();
    }

    #[test]
    fn one_of_item_or_spread_is_required_and_they_exclude_each_other() {
        let parse = |extra: &[&str]| {
            Args::try_parse_from(["seckill-load", "--activity", "1"].iter().chain(extra))
        };
        assert!(parse(&[]).is_err());
        assert!(parse(&["--item", "2", "--spread"]).is_err());
        let args = parse(&["--item", "2", "--item", "3"]).expect("items");
        assert_eq!(args.item_ids, [2, 3]);
    }

    #[test]
    fn the_request_cap_defaults_only_without_a_duration() {
        let parse = |extra: &[&str]| {
            Args::try_parse_from(
                ["seckill-load", "--activity", "1", "--item", "2"]
                    .iter()
                    .chain(extra),
            )
            .expect("valid")
        };
        assert_eq!(parse(&[]).request_cap(), DEFAULT_REQUESTS);
        assert_eq!(parse(&["--duration-s", "3"]).request_cap(), u64::MAX);
        assert_eq!(
            parse(&["--duration-s", "3", "--requests", "7"]).request_cap(),
            7
        );
    }
}
