//! `seckill-load`, the product's load generator: many buyers with pre-minted tokens hammer
//! one hot item or a spread of items of one activity (or `/healthz`, as a baseline), then it
//! reports throughput, latency percentiles and outcomes by code and, with `--check`, checks
//! the stock invariants against PostgreSQL and Redis. See `seckill-load --help`.
//!
//! Its modules: the command line, the plan of who buys what, the HTTP side, the bounded load
//! load loops (closed or open), the tally of what came back, the invariant check, and the report.

mod args;
mod check;
mod http;
mod plan;
mod report;
mod runner;
mod tally;

use anyhow::Context;
use clap::Parser;
use seckill_bench::machine::MachineTicks;
use std::process::ExitCode;

use args::Args;
use plan::{Plan, Shape};
use report::{Report, Setup};

#[tokio::main]
async fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    let settings = args.settings()?;
    let base_url = args.base_url.trim_end_matches('/');
    let client = http::client(usize::try_from(args.concurrency)?, args.timeout())?;
    let items = if args.spread {
        http::activity_items(&client, base_url, args.activity_id)
            .await
            .context("--spread: reading the activity's items")?
    } else {
        args.item_ids.clone()
    };
    let plan = Plan::new(
        shape(&args, items.clone()),
        &settings.jwt_secret,
        token_ttl(&args),
    )?;
    let setup = setup(&args, base_url, items, &plan);
    eprintln!("seckill-load: {} tokens minted, sending", setup.users);
    let target = http::Target::new(client, base_url, args.endpoint, args.activity_id);
    let before = MachineTicks::now();
    let (tally, wall) = runner::run(target, plan, args.pace(), args.duration()).await?;
    let machine_busy = MachineTicks::now().busy_share_since(before);
    let (summary, order_ids) = tally.summarize(wall, machine_busy);
    let checks = if args.check {
        let checks = check::run(
            settings,
            args.activity_id,
            &setup.items,
            &order_ids,
            args.settle(),
        );
        Some(checks.await?)
    } else {
        None
    };
    let report = Report {
        setup,
        summary,
        checks,
    };
    if args.json {
        report.print_json()?;
    } else {
        report.print_text();
    }
    Ok(if report.failed() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn shape(args: &Args, items: Vec<i64>) -> Shape {
    Shape {
        activity_id: args.activity_id,
        items,
        quantity: args.quantity,
        first_user: args.first_user,
        users: args.users,
        retries_per_user: args.retries_per_user,
        request_cap: args.request_cap(),
        forwarded: args.forwarded_for.clone(),
    }
}

fn setup(args: &Args, base_url: &str, items: Vec<i64>, plan: &Plan) -> Setup {
    Setup {
        base_url: base_url.to_owned(),
        endpoint: args.endpoint,
        activity_id: args.activity_id,
        items,
        users: plan.users(),
        concurrency: args.concurrency,
        rate: args.rate,
        quantity: args.quantity,
        request_limit: plan.limit(),
        duration_s: args.duration_s,
    }
}

/// Tokens outlive the run: an hour, plus the run's duration when one is set.
fn token_ttl(args: &Args) -> chrono::Duration {
    let run = args
        .duration_s
        .and_then(|s| i64::try_from(s).ok())
        .unwrap_or(0);
    chrono::Duration::hours(1) + chrono::Duration::seconds(run)
}
