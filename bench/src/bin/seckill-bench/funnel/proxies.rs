//! What resolving client addresses behind a balancer costs the buy path (`seckill-bench
//! proxies`): the sold-out storm and the success path of `funnel`, with the resolver in
//! (`SECKILL_TRUSTED_PROXIES=127.0.0.1`, every request carrying an `X-Forwarded-For`, so
//! each request's address is read from the header) against without (nobody trusted, no header: the TCP
//! peer). The server is restarted for each side with the stores kept; the sides are taken
//! back to back in pairs, the order alternating from pair to pair, so a drift of the machine
//! favours neither. Target: with / without ≥ 0.97 on both.
//!
//! It runs in key spaces of its own (database `seckill_bench_proxies`, port 3960, prefixes
//! `bench-proxies`), so it never meets another benchmark's server or keys.

use clap::Args;

use super::{dashboard::load, Funnel, FunnelArgs, Item, Namespace, Pace, Probes};
use crate::{run::grouped, Common};

#[derive(Args)]
#[command(
    mut_arg("db", |arg| arg
        .default_value("seckill_bench_proxies")
        .env("BENCH_PROXIES_DB")
        .help("The benchmark's database (dropped and recreated)")),
    mut_arg("port", |arg| arg
        .default_value("3960")
        .env("BENCH_PROXIES_PORT")
        .help("Where its server listens, on 127.0.0.1")),
)]
pub struct ProxiesArgs {
    #[command(flatten)]
    funnel: FunnelArgs,
    /// Pairs of loads (resolver in, resolver out).
    #[arg(long, env = "BENCH_PROXIES_PAIRS", default_value_t = 3)]
    pairs: usize,
}

const NAMESPACE: Namespace = Namespace {
    redis: "bench-proxies:",
    amqp: "bench-proxies",
    etcd: "/bench-proxies",
    run: "proxies-",
};

/// What every request of the "in" side is forwarded for: one address for every buyer, as the
/// "out" side's loopback is one, so the two sides differ by the resolver alone and not by how
/// many addresses the windows and hot keys count (that costs the sketch; see BENCHMARKS.md).
const FORWARDED_FOR: &str = "10.0.0.1";

/// The two sides of a pair.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resolver {
    /// The load's address trusted, every request forwarded for a buyer of its own.
    In,
    /// Nobody trusted, no forwarding header: the TCP peer, as before the resolver.
    Out,
}

impl Resolver {
    fn label(self) -> &'static str {
        match self {
            Self::In => "in",
            Self::Out => "out",
        }
    }

    fn trusted(self) -> &'static str {
        match self {
            Self::In => "127.0.0.1",
            Self::Out => "",
        }
    }
}

/// Throughputs of one side, and the server's CPU per request (steadier than throughput on
/// a shared machine).
#[derive(Default, Clone, Copy)]
struct Side {
    storm: f64,
    storm_us: Option<f64>,
    success: f64,
    success_us: Option<f64>,
}

#[derive(Default)]
struct Pair {
    in_first: bool,
    with: Side,
    without: Side,
}

pub async fn run(common: &Common, args: &ProxiesArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.pairs > 0, "--pairs must be positive");
    let mut bench = Funnel::prepare(common, &args.funnel, &NAMESPACE).await?;
    let measured = measure(&mut bench, args).await;
    let cleaned = bench.clean_up().await;
    let pairs = measured?;
    cleaned?;
    bench.publish(common, "proxies", report(&pairs))
}

async fn measure(bench: &mut Funnel<'_>, args: &ProxiesArgs) -> anyhow::Result<Vec<Pair>> {
    bench.write_meta()?;
    let merchant = bench.fresh_stores().await?;
    let config = bench.write_config("bench.toml", 256)?;
    bench.start_server("setup", &config, &[]).await?;
    let [storm, success, ..] = bench.open_sale(&merchant).await?;
    bench.sell_out(storm.id).await;
    bench.stop_server().await?;
    let mut pairs = Vec::new();
    let mut round = 0;
    for pair in 0..args.pairs {
        let order = super::alternating(pair, [Resolver::In, Resolver::Out]);
        let mut measured = Pair {
            in_first: order[0] == Resolver::In,
            ..Pair::default()
        };
        for resolver in order {
            let side = one_side(bench, &config, &storm, &success, resolver, pair, round).await?;
            round += 1;
            match resolver {
                Resolver::In => measured.with = side,
                Resolver::Out => measured.without = side,
            }
        }
        bench.run.progress(format!(
            "pair {pair}: storm {:.0}/s in, {:.0}/s out; success {:.0}/s in, {:.0}/s out",
            measured.with.storm,
            measured.without.storm,
            measured.with.success,
            measured.without.success
        ));
        pairs.push(measured);
    }
    Ok(pairs)
}

/// The storm, then the success path, on a server started for `resolver`'s side.
async fn one_side(
    bench: &mut Funnel<'_>,
    config: &std::path::Path,
    storm: &Item,
    success: &Item,
    resolver: Resolver,
    pair: usize,
    round: u32,
) -> anyhow::Result<Side> {
    let label = format!("{pair}-{}", resolver.label());
    bench
        .start_server(
            &label,
            config,
            &[("SECKILL_TRUSTED_PROXIES", resolver.trusted())],
        )
        .await?;
    bench.forwarded_for = (resolver == Resolver::In).then_some(FORWARDED_FOR);
    bench.warm_up(storm.id, &["buy"]).await;
    let storm_args = bench.storm_args();
    let storm_rps = load(bench, &format!("storm-{label}"), storm.id, &storm_args).await?;
    let storm_us = bench.latest().and_then(|m| m.server_us_per_request());
    bench
        .success(
            &format!("success-{label}"),
            success,
            round,
            Probes::NONE,
            false,
            Pace::Closed,
        )
        .await?;
    let success_rps = bench.latest().and_then(|m| m.rps()).unwrap_or(0.0);
    let success_us = bench.latest().and_then(|m| m.server_us_per_request());
    bench.forwarded_for = None;
    bench.stop_server().await?;
    Ok(Side {
        storm: storm_rps,
        storm_us,
        success: success_rps,
        success_us,
    })
}

fn report(pairs: &[Pair]) -> Vec<String> {
    let mut lines = vec![
        "The sold-out storm and the success path of `funnel`, the client-address resolver in \
         (`SECKILL_TRUSTED_PROXIES=127.0.0.1`, every request forwarded for 10.0.0.1) against out \
         (nobody trusted, no header), the server restarted for each side, in pairs back to \
         back, the order alternating. Server CPU in µs per request."
            .to_owned(),
        String::new(),
        "| pair | order | storm in (req/s) | storm out (req/s) | ratio | success in (req/s) | \
         success out (req/s) | ratio | server µs/req in / out: storm, success |"
            .to_owned(),
        "|---|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    let storm_ratio = |pair: &Pair| pair.with.storm / pair.without.storm.max(1.0);
    let success_ratio = |pair: &Pair| pair.with.success / pair.without.success.max(1.0);
    let us = |t: Option<f64>| t.map_or("n/a".into(), |t| format!("{t:.1}"));
    for (index, pair) in pairs.iter().enumerate() {
        lines.push(format!(
            "| {} | {} | {} | {} | {:.3} | {} | {} | {:.3} | {} / {}, {} / {} |",
            index + 1,
            if pair.in_first { "in, out" } else { "out, in" },
            grouped(pair.with.storm, 0),
            grouped(pair.without.storm, 0),
            storm_ratio(pair),
            grouped(pair.with.success, 0),
            grouped(pair.without.success, 0),
            success_ratio(pair),
            us(pair.with.storm_us),
            us(pair.without.storm_us),
            us(pair.with.success_us),
            us(pair.without.success_us),
        ));
    }
    lines.push(String::new());
    lines.extend(super::ratio_line(
        Some("Sold-out storm in / out"),
        pairs.iter().map(storm_ratio).collect(),
        0.97,
    ));
    lines.push(String::new());
    lines.extend(super::ratio_line(
        Some("Success path in / out"),
        pairs.iter().map(success_ratio).collect(),
        0.97,
    ));
    lines
}
