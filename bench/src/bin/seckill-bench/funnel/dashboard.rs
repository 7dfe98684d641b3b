//! The live dashboard's cost: the sold-out storm of benchmark 1 with `viewers` streams of
//! `GET /admin/api/dashboard/stream` open, against the same storm with none, in pairs taken
//! back to back on the same server (the order alternating from pair to pair, so a drift of
//! the machine does not favour one side). The stream is sampled once a second per instance
//! whatever the number of viewers, so the ratio should stay near 1 (target >= 0.97).

use clap::Args;
use std::time::Duration;
use tokio::task::JoinHandle;

use super::{Funnel, FunnelArgs, Probes, FUNNEL, STORM_MAX_S};
use crate::{process, run::grouped, Common};

#[derive(Args)]
pub struct DashboardArgs {
    #[command(flatten)]
    funnel: FunnelArgs,
    /// Dashboard streams open during the watched storms.
    #[arg(long, env = "BENCH_DASHBOARD_VIEWERS", default_value_t = 5)]
    viewers: usize,
    /// Pairs of storms (one alone, one watched).
    #[arg(long, env = "BENCH_DASHBOARD_PAIRS", default_value_t = 3)]
    pairs: usize,
}

/// One pair's throughputs, and the frames each viewer received during its watched storm.
#[derive(Default)]
struct Pair {
    alone: f64,
    watched: f64,
    frames: Vec<usize>,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.watched / self.alone.max(1.0)
    }
}

pub async fn run(common: &Common, args: &DashboardArgs) -> anyhow::Result<()> {
    let mut bench = Funnel::prepare(common, &args.funnel, &FUNNEL).await?;
    let pairs = measure(&mut bench, args).await;
    let cleaned = bench.clean_up().await;
    let pairs = pairs?;
    cleaned?;
    report(common, &bench, args, &pairs)
}

async fn measure(bench: &mut Funnel<'_>, args: &DashboardArgs) -> anyhow::Result<Vec<Pair>> {
    bench.write_meta()?;
    let token = bench.fresh_stores().await?;
    let config = bench.write_config("bench.toml", 256)?;
    bench.start_server("dashboard", &config, &[]).await?;
    let [storm, ..] = bench.open_sale(&token).await?;
    bench.sell_out(storm.id).await;
    bench.warm_up(storm.id, &["buy"]).await;
    let sre = process::api_token(&bench.seckill, &bench.env, "bench-sre", "sre", None).await?;
    let stream = format!("{}/admin/api/dashboard/stream", bench.base_url);
    let storm_args = bench.storm_args();
    let mut pairs = Vec::new();
    for pair in 0..args.pairs {
        let order = super::alternating(pair, [Side::Alone, Side::Watched]);
        let mut measured = Pair::default();
        for side in order {
            let name = format!("{pair}-{side:?}").to_lowercase();
            match side {
                Side::Alone => measured.alone = load(bench, &name, storm.id, &storm_args).await?,
                Side::Watched => {
                    let viewers = Viewers::open(&bench.http, &stream, &sre, args.viewers).await?;
                    let rps = load(bench, &name, storm.id, &storm_args).await;
                    measured.frames = viewers.close();
                    measured.watched = rps?;
                }
            }
        }
        bench.run.progress(format!(
            "pair {pair}: alone {:.0}/s, watched {:.0}/s, ratio {:.3}",
            measured.alone,
            measured.watched,
            measured.ratio()
        ));
        pairs.push(measured);
    }
    Ok(pairs)
}

/// The two sides of a pair.
#[derive(Clone, Copy, Debug)]
enum Side {
    Alone,
    Watched,
}

/// One storm; its throughput.
pub(super) async fn load(
    bench: &mut Funnel<'_>,
    name: &str,
    item: i64,
    storm_args: &[String],
) -> anyhow::Result<f64> {
    bench
        .load(name, item, STORM_MAX_S, Probes::NONE, storm_args)
        .await?;
    Ok(bench.latest().and_then(|m| m.rps()).unwrap_or(0.0))
}

/// Streams held open by tasks that count the frames they receive.
struct Viewers(
    Vec<(
        JoinHandle<()>,
        std::sync::Arc<std::sync::atomic::AtomicUsize>,
    )>,
);

impl Viewers {
    /// Opens `count` streams and waits until each one has received its backlog.
    async fn open(
        http: &reqwest::Client,
        url: &str,
        token: &str,
        count: usize,
    ) -> anyhow::Result<Self> {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let mut viewers = Vec::new();
        for _ in 0..count {
            let mut response = http
                .get(url)
                .bearer_auth(token)
                .send()
                .await?
                .error_for_status()?;
            let frames = std::sync::Arc::new(AtomicUsize::new(0));
            let counted = frames.clone();
            let task = tokio::spawn(async move {
                while let Ok(Some(chunk)) = response.chunk().await {
                    let events = chunk.windows(5).filter(|w| w == b"data:").count();
                    counted.fetch_add(events, Ordering::Relaxed);
                }
            });
            viewers.push((task, frames));
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while viewers
            .iter()
            .any(|(_, frames)| frames.load(Ordering::Relaxed) == 0)
        {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "a dashboard stream sent nothing within 10 s"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // The backlog (up to five minutes of frames) goes out in a burst after the first
        // frame: let it pass, so the storm meets only the live frames, one a second.
        tokio::time::sleep(Duration::from_secs(3)).await;
        // Count the frames of the storm, not the backlog.
        for (_, frames) in &viewers {
            frames.store(0, Ordering::Relaxed);
        }
        Ok(Self(viewers))
    }

    /// Closes every stream; the frames each received since it was opened.
    fn close(self) -> Vec<usize> {
        self.0
            .into_iter()
            .map(|(task, frames)| {
                task.abort();
                frames.load(std::sync::atomic::Ordering::Relaxed)
            })
            .collect()
    }
}

fn report(
    common: &Common,
    bench: &Funnel<'_>,
    args: &DashboardArgs,
    pairs: &[Pair],
) -> anyhow::Result<()> {
    let mut table = vec![
        format!(
            "| pair | storm alone (req/s) | storm with {} dashboard streams (req/s) | ratio | frames per viewer |",
            args.viewers
        ),
        "|---|---|---|---|---|".to_owned(),
    ];
    for (index, pair) in pairs.iter().enumerate() {
        let frames: Vec<String> = pair.frames.iter().map(usize::to_string).collect();
        table.push(format!(
            "| {} | {} | {} | {:.3} | {} |",
            index + 1,
            grouped(pair.alone, 0),
            grouped(pair.watched, 0),
            pair.ratio(),
            frames.join(", ")
        ));
    }
    let ratios = pairs.iter().map(Pair::ratio).collect();
    bench.report_pairs(common, "dashboard", table, ratios, 0.97)
}
