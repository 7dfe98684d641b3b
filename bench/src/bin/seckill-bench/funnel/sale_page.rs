//! The static sale page's cost: `seckill-load --endpoint sale-page` (GET of the published
//! `/sale/{activity}/`, served from the server's memory) against `--endpoint healthz` (the
//! cheapest route there is), the same load on the same server, in pairs taken back to back
//! with the order alternating from pair to pair, so a drift of the machine favours neither
//! side. The page is a map lookup and a copy of a few kB, so the ratio should stay near 1
//! (target >= 0.9).

use clap::Args;
use serde_json::json;

use super::{dashboard::load, Funnel, FunnelArgs, FUNNEL};
use crate::{run::grouped, Common};

#[derive(Args)]
pub struct SalePageArgs {
    #[command(flatten)]
    funnel: FunnelArgs,
    /// Pairs of loads (one of /healthz, one of the page).
    #[arg(long, env = "BENCH_SALEPAGE_PAIRS", default_value_t = 3)]
    pairs: usize,
}

/// One pair's throughputs.
#[derive(Default)]
struct Pair {
    healthz: f64,
    page: f64,
}

impl Pair {
    fn ratio(&self) -> f64 {
        self.page / self.healthz.max(1.0)
    }
}

/// The two sides of a pair.
#[derive(Clone, Copy, Debug)]
enum Side {
    Healthz,
    Page,
}

impl Side {
    fn endpoint(self) -> &'static str {
        match self {
            Side::Healthz => "healthz",
            Side::Page => "sale-page",
        }
    }
}

pub async fn run(common: &Common, args: &SalePageArgs) -> anyhow::Result<()> {
    let mut bench = Funnel::prepare(common, &args.funnel, &FUNNEL).await?;
    let measured = measure(&mut bench, args).await;
    let cleaned = bench.clean_up().await;
    let (pairs, page_bytes) = measured?;
    cleaned?;
    report(common, &bench, &pairs, page_bytes)
}

async fn measure(
    bench: &mut Funnel<'_>,
    args: &SalePageArgs,
) -> anyhow::Result<(Vec<Pair>, usize)> {
    bench.write_meta()?;
    let sale_dir = bench.run.file("sale");
    bench.env.push((
        "SECKILL_SALE_DIR".into(),
        sale_dir.to_string_lossy().into_owned(),
    ));
    let token = bench.fresh_stores().await?;
    let config = bench.write_config("bench.toml", 256)?;
    bench.start_server("salepage", &config, &[]).await?;
    let [storm, ..] = bench.open_sale(&token).await?;
    let published = bench
        .admin(
            &token,
            &format!("/admin/api/activities/{}/publish", bench.activity),
            json!({}),
        )
        .await?;
    let url = format!(
        "{}{}",
        bench.base_url,
        published["url"].as_str().unwrap_or_default()
    );
    let page_bytes = bench
        .http
        .get(&url)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?
        .len();
    bench.warm_up(storm.id, &["healthz", "sale-page"]).await;
    let mut pairs = Vec::new();
    for pair in 0..args.pairs {
        let order = super::alternating(pair, [Side::Healthz, Side::Page]);
        let mut measured = Pair::default();
        for side in order {
            let name = format!("{pair}-{side:?}").to_lowercase();
            let mut load_args = bench.storm_args();
            load_args.extend(["--endpoint".into(), side.endpoint().into()]);
            let rps = load(bench, &name, storm.id, &load_args).await?;
            match side {
                Side::Healthz => measured.healthz = rps,
                Side::Page => measured.page = rps,
            }
        }
        bench.run.progress(format!(
            "pair {pair}: healthz {:.0}/s, page {:.0}/s, ratio {:.3}",
            measured.healthz,
            measured.page,
            measured.ratio()
        ));
        pairs.push(measured);
    }
    Ok((pairs, page_bytes))
}

fn report(
    common: &Common,
    bench: &Funnel<'_>,
    pairs: &[Pair],
    page_bytes: usize,
) -> anyhow::Result<()> {
    let mut table = vec![
        format!("| pair | GET /healthz (req/s) | GET /sale/{{id}}/, {page_bytes} bytes (req/s) | ratio |"),
        "|---|---|---|---|".to_owned(),
    ];
    for (index, pair) in pairs.iter().enumerate() {
        table.push(format!(
            "| {} | {} | {} | {:.3} |",
            index + 1,
            grouped(pair.healthz, 0),
            grouped(pair.page, 0),
            pair.ratio(),
        ));
    }
    let ratios = pairs.iter().map(Pair::ratio).collect();
    bench.report_pairs(common, "salepage", table, ratios, 0.9)
}
