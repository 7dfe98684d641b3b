//! `seckill-bench`: the benchmarks recorded in BENCHMARKS.md, one subcommand each. Every
//! benchmark is self-contained: a database, Redis key prefix, AMQP prefix, etcd prefix and
//! port of its own, cleaned up afterwards; it prints its result block and writes it between
//! its markers in BENCHMARKS.md.
//!
//! * `funnel`: the four buy-path ratios (sold-out storm, success path, group commit, DB
//!   deduction), each against its baseline, with CPU, Redis, `/metrics` and PostgreSQL wait
//!   figures per measurement;
//! * `pipeline`: the order pipeline's drain against a bare consume-and-ack;
//! * `control`: switch propagation over three instances against a bare etcd put and watch;
//! * `reconcile`: a reconciliation report run over a million orders against a plain
//!   `count(*)` of them, and the buy latency with and without runs;
//! * `dashboard`: the sold-out storm with five live dashboard streams open against none;
//! * `salepage`: GETs of a published sale page against `/healthz`, same load, same server;
//! * `hotkeys`: how fast two instances both refuse a buyer hot only in their sum, and the
//!   sold-out storm and success path with hot-key detection on against off;
//! * `proxies`: the sold-out storm and success path with the client-address resolver in
//!   (every request forwarded by a trusted proxy) against out;
//! * `lottery`: lottery registrations against the sold-out storm, and the draw of a
//!   million registrants;
//! * `soak`: days of sales compressed (publish, rehearse, pre-warm, storm, pay, time out,
//!   reconcile, end, repeat), every table's rows and the server's memory at the start and
//!   the end;
//! * `all`: the first four, one after the other, so they never share the machine.
//!
//! Modules: the shared run bookkeeping (`run`), the BENCHMARKS.md block (`doc`), the
//! binaries under test (`binaries`), the child processes (`process`), the stores' set-up
//! and clean-up (`stores`) and the `/proc` CPU accounting (`cpu`); then one module per
//! benchmark.

mod binaries;
mod control;
mod cpu;
mod doc;
mod funnel;
mod pipeline;
mod process;
mod reconcile;
mod run;
mod stores;

use clap::{builder::BoolishValueParser, ArgAction, Args, Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "seckill-bench",
    about = "The benchmarks of BENCHMARKS.md: funnel, pipeline, control, reconcile, dashboard, salepage, hotkeys, proxies, lottery, soak, or all"
)]
struct Cli {
    #[command(flatten)]
    common: Common,
    #[command(subcommand)]
    bench: Bench,
}

/// Knobs every benchmark shares.
#[derive(Args)]
pub struct Common {
    /// Build the release binaries under test first (`cargo build --release`).
    #[arg(long, global = true, env = "BENCH_BUILD", default_value = "1", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub build: bool,
    /// Rewrite the benchmark's result block in BENCHMARKS.md.
    #[arg(long, global = true, env = "BENCH_UPDATE_DOC", default_value = "1", action = ArgAction::Set, value_parser = BoolishValueParser::new())]
    pub update_doc: bool,
    /// The repository: BENCHMARKS.md, `lua/`, and where `cargo build` runs.
    #[arg(long, global = true, env = "SECKILL_ROOT", default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/.."))]
    pub root: PathBuf,
    /// `RUST_LOG` of the servers and workers it starts.
    #[arg(long, global = true, env = "BENCH_RUST_LOG", default_value = "warn")]
    pub rust_log: String,
}

#[derive(Subcommand)]
enum Bench {
    /// The four buy-path benchmarks.
    Funnel(funnel::FunnelArgs),
    /// The order pipeline drain.
    Pipeline(pipeline::PipelineArgs),
    /// Switch propagation.
    Control(control::ControlArgs),
    /// A reconciliation report run over a million orders.
    Reconcile(reconcile::ReconcileArgs),
    /// The sold-out storm with live dashboard streams open against none.
    Dashboard(funnel::dashboard::DashboardArgs),
    /// A published sale page served against `/healthz`.
    Salepage(funnel::sale_page::SalePageArgs),
    /// Hot-key detection latency over two instances, and its cost on the buy path.
    Hotkeys(funnel::hotkeys::HotKeysArgs),
    /// The buy path with client addresses resolved behind a trusted proxy against without.
    Proxies(funnel::proxies::ProxiesArgs),
    /// Lottery registrations against the sold-out storm, and the draw of a million.
    Lottery(funnel::lottery::LotteryArgs),
    /// Days of sales compressed, with every table's rows and the server's memory.
    Soak(funnel::soak::SoakArgs),
    /// funnel, then pipeline, then control, then reconcile.
    All {
        #[command(flatten)]
        funnel: funnel::FunnelArgs,
        #[command(flatten)]
        pipeline: pipeline::PipelineArgs,
        #[command(flatten)]
        control: control::ControlArgs,
        #[command(flatten)]
        reconcile: reconcile::ReconcileArgs,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let common = &cli.common;
    match &cli.bench {
        Bench::Funnel(args) => funnel::run(common, args).await,
        Bench::Pipeline(args) => pipeline::run(common, args).await,
        Bench::Control(args) => control::run(common, args).await,
        Bench::Reconcile(args) => reconcile::run(common, args).await,
        Bench::Dashboard(args) => funnel::dashboard::run(common, args).await,
        Bench::Salepage(args) => funnel::sale_page::run(common, args).await,
        Bench::Hotkeys(args) => funnel::hotkeys::run(common, args).await,
        Bench::Proxies(args) => funnel::proxies::run(common, args).await,
        Bench::Lottery(args) => funnel::lottery::run(common, args).await,
        Bench::Soak(args) => funnel::soak::run(common, args).await,
        Bench::All {
            funnel,
            pipeline,
            control,
            reconcile,
        } => {
            // Each runs even when one before it failed; the command fails if any did.
            let results = [
                ("funnel", funnel::run(common, funnel).await),
                ("pipeline", pipeline::run(common, pipeline).await),
                ("control", control::run(common, control).await),
                ("reconcile", reconcile::run(common, reconcile).await),
            ];
            let failed: Vec<String> = results
                .into_iter()
                .filter_map(|(name, result)| result.err().map(|e| format!("{name}: {e:#}")))
                .collect();
            anyhow::ensure!(failed.is_empty(), "failed: {}", failed.join("; "));
            Ok(())
        }
    }
}
