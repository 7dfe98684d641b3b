//! A lottery sale's costs (docs/lottery.md):
//!
//! * **registrations against the sold-out storm**: `seckill-load --endpoint register` (each
//!   buyer registers once for a lottery item, a fresh range of buyers per load) against the
//!   sold-out storm of benchmark 1, the same number of requests at the same concurrency on
//!   the same server, in pairs taken back to back with the order alternating (target ≥ 0.8).
//!   Twice, each with a server of its own: first with every registration a Redis call of its
//!   own (`[buy] registration_call_max = 1`), then grouped as served (the default), so the
//!   grouping's gain is read in the same run. Each load's CPU time per request of the server,
//!   Redis and the load tool says where a registration's cost goes beside a refusal's;
//! * **the draw of a million**: the lottery item's list filled to `draw_registrants` (the
//!   loads' registrants, then synthetic ones written straight into the list, as many
//!   registrations would leave it), its window closed, and the leader's draw timed from the
//!   close to the draw committed in PostgreSQL and to its result published in Redis (target
//!   ≤ 10 s to published).

use anyhow::Context;
use chrono::{Duration as Span, Utc};
use clap::Args;
use serde_json::json;
use sqlx::{Connection, PgConnection};
use std::time::{Duration, Instant};

use super::{dashboard::load, Funnel, FunnelArgs, FUNNEL};
use crate::{run::grouped, Common};

#[derive(Args)]
pub struct LotteryArgs {
    #[command(flatten)]
    funnel: FunnelArgs,
    /// Pairs of loads (one storm, one of registrations).
    #[arg(long, env = "BENCH_LOTTERY_PAIRS", default_value_t = 3)]
    pairs: usize,
    /// Registrants of the drawn item.
    #[arg(long, env = "BENCH_DRAW_REGISTRANTS", default_value_t = 1_000_000)]
    draw_registrants: i64,
}

/// Units of the lottery item: the draw's winners.
const LOTTERY_STOCK: i64 = 1_000;
/// The first buyer of the registration loads; pair `n` registers buyers from
/// `REGISTRANTS_FROM + n × requests`, so no load repeats an earlier one's buyers.
const REGISTRANTS_FROM: i64 = 20_000_000;
/// The first synthetic registrant written straight into the list.
const SYNTHETIC_FROM: i64 = 500_000_000;
/// How long the draw may take before the benchmark gives up on it.
const DRAW_MAX: Duration = Duration::from_secs(300);

/// How registrations reach Redis on the server of a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Calls {
    /// `[buy] registration_call_max = 1`: each registration a call of its own.
    Alone,
    /// The server's default: those arriving together in one call.
    Grouped,
}

impl Calls {
    /// The setting's line in the server's settings file (none: the default).
    fn setting(self) -> &'static str {
        match self {
            Self::Alone => "registration_call_max = 1\n",
            Self::Grouped => "",
        }
    }

    fn label(self) -> &'static str {
        match self {
            Self::Alone => "one call each",
            Self::Grouped => "grouped",
        }
    }
}

/// One load's throughput and its CPU time per request of the server, Redis and the load
/// tool (µs).
#[derive(Default)]
struct Load {
    rps: f64,
    cpu_us: [f64; 3],
}

impl Load {
    fn of(bench: &Funnel<'_>, rps: f64) -> Self {
        Self {
            rps,
            cpu_us: bench
                .latest()
                .and_then(|m| m.cpu_us_by_process())
                .unwrap_or_default(),
        }
    }

    fn cpu(&self) -> String {
        let [server, redis, tool] = self.cpu_us;
        format!("{server:.1} / {redis:.1} / {tool:.1}")
    }
}

/// One pair's loads, with the mean registrations per Redis call of its registration load.
struct Pair {
    calls: Calls,
    storm: Load,
    registrations: Load,
    per_call: Option<f64>,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.registrations.rps / self.storm.rps.max(1.0)
    }
}

/// The two sides of a pair.
#[derive(Clone, Copy, Debug)]
enum Side {
    Storm,
    Registrations,
}

/// The draw, timed from the window's close.
struct Drawn {
    registrants: i64,
    committed: Duration,
    published: Duration,
}

pub async fn run(common: &Common, args: &LotteryArgs) -> anyhow::Result<()> {
    let mut bench = Funnel::prepare(common, &args.funnel, &FUNNEL).await?;
    let measured = measure(&mut bench, args).await;
    let cleaned = bench.clean_up().await;
    let (pairs, drawn) = measured?;
    cleaned?;
    report(common, &bench, &pairs, &drawn)
}

async fn measure(bench: &mut Funnel<'_>, args: &LotteryArgs) -> anyhow::Result<(Vec<Pair>, Drawn)> {
    bench.write_meta()?;
    let token = bench.fresh_stores().await?;
    let mut pairs = Vec::new();
    let mut sale = None;
    for calls in [Calls::Alone, Calls::Grouped] {
        let config = bench.write_config(&format!("bench-{calls:?}.toml").to_lowercase(), 256)?;
        // Every registration comes from 127.0.0.1: the address's window is opened wide, as
        // the buy windows are.
        let settings = std::fs::read_to_string(&config)?.replacen(
            "[buy]\n",
            &format!(
                "[buy]\nregistrations_per_ip_per_window = 1000000000\n{}",
                calls.setting()
            ),
            1,
        );
        std::fs::write(&config, settings)?;
        bench.stop_server().await?;
        bench
            .start_server(&format!("{calls:?}").to_lowercase(), &config, &[])
            .await?;
        let (storm, lottery, item) = match sale {
            Some(sale) => sale,
            None => {
                let [storm, ..] = bench.open_sale(&token).await?;
                bench.sell_out(storm.id).await;
                let (lottery, item) = lottery_activity(bench, &token).await?;
                *sale.insert((storm.id, lottery, item))
            }
        };
        let storm_activity = bench.activity;
        bench.warm_up(storm, &["buy"]).await;
        let storm_args = bench.storm_args();
        let requests = bench.args.storm_requests;
        for _ in 0..args.pairs {
            let pair = pairs.len();
            let order = super::alternating(pair, [Side::Storm, Side::Registrations]);
            let mut measured = Pair {
                calls,
                storm: Load::default(),
                registrations: Load::default(),
                per_call: None,
            };
            for side in order {
                let name = format!("{pair}-{calls:?}-{side:?}").to_lowercase();
                match side {
                    Side::Storm => {
                        let rps = load(bench, &name, storm, &storm_args).await?;
                        measured.storm = Load::of(bench, rps);
                    }
                    Side::Registrations => {
                        let first = REGISTRANTS_FROM + i64::try_from(pair as u64 * requests)?;
                        let register_args: Vec<String> = [
                            "--endpoint",
                            "register",
                            "--requests",
                            &requests.to_string(),
                            "--users",
                            &requests.to_string(),
                            "--first-user",
                            &first.to_string(),
                            "--retries-per-user",
                            "1",
                        ]
                        .map(str::to_owned)
                        .to_vec();
                        // The loads name the bench's activity: the lottery's for this side.
                        bench.activity = lottery;
                        let rps = load(bench, &name, item, &register_args).await;
                        bench.activity = storm_activity;
                        measured.registrations = Load::of(bench, rps?);
                        measured.per_call = bench
                            .latest()
                            .and_then(|m| m.registration_calls())
                            .map(|(_, mean)| mean);
                    }
                }
            }
            bench.run.progress(format!(
                "pair {pair} ({}): storm {:.0}/s, registrations {:.0}/s, ratio {:.3}",
                calls.label(),
                measured.storm.rps,
                measured.registrations.rps,
                measured.ratio()
            ));
            pairs.push(measured);
        }
    }
    let (_, lottery, item) = sale.context("no phase ran")?;
    let drawn = draw(bench, lottery, item, args.draw_registrants).await?;
    Ok((pairs, drawn))
}

/// A lottery activity of one item whose registration is open now and closes in an hour,
/// before its sale: (activity, item).
async fn lottery_activity(bench: &Funnel<'_>, token: &str) -> anyhow::Result<(i64, i64)> {
    let item = bench
        .admin(
            token,
            "/admin/api/items",
            json!({ "name": "lottery", "description": "bench", "price_cents": 100 }),
        )
        .await?;
    let item = item["id"].as_i64().context("an item id")?;
    let now = Utc::now();
    let activity = bench
        .admin(
            token,
            "/admin/api/activities",
            json!({
                "title": "bench lottery",
                "starts_at": now + Span::hours(2),
                "ends_at": now + Span::hours(6),
                "kind": "standard",
                "pay_timeout_s": 900,
                "items": [{ "item_id": item, "stock": LOTTERY_STOCK, "per_user_limit": 1, "price_cents": 100 }],
                "mode": "lottery",
                "registration_opens_at": now - Span::minutes(1),
                "registration_closes_at": now + Span::hours(1),
                "code_ttl_s": 900,
            }),
        )
        .await?;
    let activity = activity["id"].as_i64().context("an activity id")?;
    // Pre-warmed at once rather than waiting for the leader to make the registration
    // reachable (a pass after the window opens): the benchmark measures registrations, and
    // the buys after the draw need the stock in Redis anyway.
    let prewarm = crate::process::seckill(
        &bench.seckill,
        &["prewarm", &activity.to_string()],
        &bench.env,
    );
    crate::process::output(prewarm, None).await?;
    // The buyer API reads its activities from a cache it refreshes every second.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    Ok((activity, item))
}

/// Fills the item's registration list to `registrants`, closes its window and times the
/// leader's draw.
async fn draw(
    bench: &mut Funnel<'_>,
    activity: i64,
    item: i64,
    registrants: i64,
) -> anyhow::Result<Drawn> {
    let list = format!("{}{{a{activity}.i{item}}}:lot:regs", bench.namespace.redis);
    let redis = redis::Client::open(bench.redis_url.as_str())?;
    let mut redis = redis.get_multiplexed_async_connection().await?;
    let listed: i64 = redis::cmd("HLEN")
        .arg(&list)
        .query_async(&mut redis)
        .await?;
    let missing = (registrants - listed).max(0);
    bench.run.progress(format!(
        "draw: {listed} registered by the loads, writing {missing} more into {list}"
    ));
    for chunk in (0..missing).collect::<Vec<_>>().chunks(10_000) {
        let mut hset = redis::cmd("HSET");
        hset.arg(&list);
        for offset in chunk {
            hset.arg(SYNTHETIC_FROM + offset).arg("r");
        }
        let () = hset.query_async(&mut redis).await?;
    }
    let mut db = PgConnection::connect(&bench.db_url).await?;
    let closed: chrono::DateTime<Utc> = sqlx::query_scalar(
        "UPDATE activities SET registration_closes_at = now() WHERE id = $1
         RETURNING registration_closes_at",
    )
    .bind(activity)
    .fetch_one(&mut db)
    .await?;
    let started = Instant::now();
    bench
        .run
        .progress("draw: window closed, waiting for the leader's draw");
    loop {
        let row: Option<(i32, chrono::DateTime<Utc>, Option<chrono::DateTime<Utc>>)> =
            sqlx::query_as(
                "SELECT registrants, drawn_at, published_at FROM lottery_draws
                 WHERE activity_id = $1 AND item_id = $2",
            )
            .bind(activity)
            .bind(item)
            .fetch_optional(&mut db)
            .await?;
        if let Some((drawn, committed, Some(published))) = row {
            let since = |at: chrono::DateTime<Utc>| (at - closed).to_std().unwrap_or_default();
            return Ok(Drawn {
                registrants: drawn.into(),
                committed: since(committed),
                published: since(published),
            });
        }
        anyhow::ensure!(
            started.elapsed() < DRAW_MAX,
            "no draw published within {DRAW_MAX:?} of the close"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn report(
    common: &Common,
    bench: &Funnel<'_>,
    pairs: &[Pair],
    drawn: &Drawn,
) -> anyhow::Result<()> {
    let mut table = vec![
        format!(
            "Draw of {} registrants ({LOTTERY_STOCK} winners): committed in PostgreSQL {:.2} s and published in Redis {:.2} s after the window closed (target ≤ 10 s).",
            grouped(drawn.registrants as f64, 0),
            drawn.committed.as_secs_f64(),
            drawn.published.as_secs_f64(),
        ),
        String::new(),
        "| pair | registrations reach Redis | sold-out storm (req/s) | registrations (req/s) | ratio | registrations per call | CPU µs per refusal: server / Redis / load tool | per registration |".to_owned(),
        "|---|---|---|---|---|---|---|---|".to_owned(),
    ];
    for (index, pair) in pairs.iter().enumerate() {
        table.push(format!(
            "| {} | {} | {} | {} | {:.3} | {} | {} | {} |",
            index + 1,
            pair.calls.label(),
            grouped(pair.storm.rps, 0),
            grouped(pair.registrations.rps, 0),
            pair.ratio(),
            pair.per_call
                .map_or("-".to_owned(), |mean| format!("{mean:.1}")),
            pair.storm.cpu(),
            pair.registrations.cpu(),
        ));
    }
    table.push(String::new());
    for calls in [Calls::Alone, Calls::Grouped] {
        let ratios = pairs
            .iter()
            .filter(|pair| pair.calls == calls)
            .map(Pair::ratio)
            .collect();
        let what = format!("Registrations {}", calls.label());
        table.extend(super::ratio_line(Some(&what), ratios, 0.8));
        table.push(String::new());
    }
    table.pop();
    bench.publish(common, "lottery", table)
}
