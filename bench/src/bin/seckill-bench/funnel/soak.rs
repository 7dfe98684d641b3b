//! `seckill-bench soak`: days of sales compressed into `--duration-s`, to see whether anything
//! grows without end. Cycle after cycle on one server: a new activity is created, its page
//! published, a rehearsal run against it while it is upcoming, it is pre-warmed and opened,
//! a storm of buyers buys it out, half the orders are paid (the other half time out after
//! the activity's 10 s pay timeout), a reconciliation report runs over it, and it ends. The
//! server's retention keeps nothing past 0 days (`[retention] *_days = 0`, assets after
//! 5 s), so a day of retention passes in a few seconds. At the end of the first cycle and at
//! the end of the run: every table's rows (counted) and the server's resident memory.

use anyhow::Context;
use base::config::Settings;
use chrono::{Duration as Span, Utc};
use clap::Args;
use sale::identity::buyer_token;
use serde_json::{json, Value};
use sqlx::{Connection, Executor, PgConnection};
use std::{
    collections::BTreeMap,
    process::Stdio,
    time::{Duration, Instant},
};

use super::{Funnel, FunnelArgs, Namespace};
use crate::{process, run::grouped, stores, Common};

#[derive(Args)]
pub struct SoakArgs {
    #[command(flatten)]
    funnel: FunnelArgs,
    /// How long the cycles go on, in seconds (a cycle under way finishes).
    #[arg(long, env = "BENCH_SOAK_S", default_value_t = 1800)]
    duration_s: u64,
    /// Buyers of each cycle's storm (the item has half as many units).
    #[arg(long, env = "BENCH_SOAK_BUYERS", default_value_t = 2000)]
    buyers: u64,
}

/// Key spaces of its own, so a soak may run beside the other benchmarks.
const SOAK: Namespace = Namespace {
    redis: "soak:",
    amqp: "soak",
    etcd: "/soak",
    run: "soak-",
};

/// The activity's pay timeout: the shortest there is, so unpaid orders time out within a cycle.
const PAY_TIMEOUT_S: u32 = 10;

/// Rows of every table, and the server's resident memory in kB.
struct Figures {
    rows: BTreeMap<String, i64>,
    rss_kb: u64,
}

pub async fn run(common: &Common, args: &SoakArgs) -> anyhow::Result<()> {
    let mut bench = Funnel::prepare(common, &args.funnel, &SOAK).await?;
    let soaked = soak(&mut bench, args).await;
    let cleaned = bench.clean_up().await;
    // The delay queue of its own pay timeout too.
    let amqp = stores::amqp(&bench.amqp_url).await?;
    stores::delete_topology(&amqp, SOAK.amqp, &[PAY_TIMEOUT_S]).await?;
    let (start, end, cycles) = soaked?;
    cleaned?;
    report(common, &bench, args, &start, &end, cycles)
}

async fn soak(bench: &mut Funnel<'_>, args: &SoakArgs) -> anyhow::Result<(Figures, Figures, u64)> {
    bench.write_meta()?;
    bench.env.push((
        "SECKILL_SALE_DIR".into(),
        bench.run.file("sale").to_string_lossy().into_owned(),
    ));
    let merchant = bench.fresh_stores().await?;
    let ops = process::api_token(&bench.seckill, &bench.env, "bench-ops", "ops", None).await?;
    let config = bench.write_config("soak.toml", 256)?;
    let mut text = std::fs::read_to_string(&config)?;
    text.push_str(
        "\n[retention]\ninterval_ms = 2000\nprocessed_events_days = 0\nsent_outbox_days = 0\n\
         order_events_days = 0\ndead_letters_days = 0\nhotkey_periods_days = 0\n\
         reconciliation_runs_days = 0\nsale_assets_grace_s = 5\n",
    );
    std::fs::write(&config, text)?;
    bench.start_server("soak", &config, &[]).await?;
    let secret = Settings::load()?.jwt_secret;
    let started = Instant::now();
    let mut cycles = 0;
    let mut start = None;
    while cycles == 0 || started.elapsed() < Duration::from_secs(args.duration_s) {
        cycle(bench, args, &merchant, &ops, &secret, cycles).await?;
        cycles += 1;
        if start.is_none() {
            start = Some(figures(bench).await?);
        }
        bench.run.progress(format!(
            "cycle {cycles} done at {} s",
            started.elapsed().as_secs()
        ));
    }
    // The last cycle's unpaid orders time out, and the retention passes once more after.
    tokio::time::sleep(Duration::from_secs(u64::from(PAY_TIMEOUT_S) + 5)).await;
    let end = figures(bench).await?;
    Ok((start.context("one cycle at least")?, end, cycles))
}

/// One sale, from its creation to its end.
async fn cycle(
    bench: &mut Funnel<'_>,
    args: &SoakArgs,
    merchant: &str,
    ops: &str,
    secret: &secrecy::SecretString,
    number: u64,
) -> anyhow::Result<()> {
    let item = bench
        .admin(
            merchant,
            "/admin/api/items",
            json!({ "name": format!("soak {number}"), "description": "soak", "price_cents": 100 }),
        )
        .await?["id"]
        .as_i64()
        .context("an item id")?;
    let now = Utc::now();
    let activity = bench
        .admin(
            merchant,
            "/admin/api/activities",
            json!({
                "title": format!("soak {number}"),
                "starts_at": now + Span::hours(2),
                "ends_at": now + Span::hours(3),
                "kind": "standard",
                "pay_timeout_s": PAY_TIMEOUT_S,
                "items": [{ "item_id": item, "stock": (args.buyers / 2).max(1),
                            "per_user_limit": 1, "price_cents": 100 }],
            }),
        )
        .await?["id"]
        .as_i64()
        .context("an activity id")?;
    bench.activity = activity;
    bench
        .admin(
            merchant,
            &format!("/admin/api/activities/{activity}/publish"),
            json!({}),
        )
        .await?;
    rehearse(bench, ops, activity).await;
    let prewarm = process::seckill(
        &bench.seckill,
        &["prewarm", &activity.to_string()],
        &bench.env,
    );
    process::output(prewarm, None).await?;
    let mut db = PgConnection::connect(&bench.db_url).await?;
    db.execute(
        sqlx::query("UPDATE activities SET starts_at = now() - interval '1 second' WHERE id = $1")
            .bind(activity),
    )
    .await?;
    // The buy API trusts its activity cache for a second.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // The storm: every buyer of the cycle (users of their own) tries twice.
    let first_user = 1_000_000 + number * args.buyers;
    let mut storm = bench.load_command(item, 60);
    storm
        .args(["--users", &args.buyers.to_string()])
        .args(["--first-user", &first_user.to_string()])
        .args(["--retries-per-user", "2"])
        .args(["--requests", &(args.buyers * 2).to_string()]);
    let out = storm.stderr(Stdio::null()).output().await?;
    std::fs::write(bench.run.file(&format!("storm-{number}.json")), &out.stdout)?;

    // Half the orders are paid once completed; the rest time out.
    let unpaid: Vec<(uuid::Uuid, i64)> = wait_completed(&mut db, activity).await?;
    for (order, user) in unpaid.iter().step_by(2) {
        let token = buyer_token::mint(secret, *user, Span::minutes(10))?;
        let _ = bench
            .http
            .post(format!("{}/api/orders/{order}/pay", bench.base_url))
            .bearer_auth(token)
            .send()
            .await;
    }
    let run = bench
        .admin(
            ops,
            "/admin/api/reconciliations",
            json!({ "activity_id": activity, "repair": false }),
        )
        .await?;
    wait_for(
        bench,
        ops,
        &format!("/admin/api/reconciliations/{}", run["id"]),
        |run| run["status"] != "running",
    )
    .await;
    // The day is over for this sale.
    db.execute(sqlx::query("UPDATE activities SET ends_at = now() WHERE id = $1").bind(activity))
        .await?;
    Ok(())
}

/// A small rehearsal of the upcoming activity, waited for; a refusal is noted and the cycle
/// goes on (what is measured is what stays behind).
async fn rehearse(bench: &Funnel<'_>, ops: &str, activity: i64) {
    let started = bench
        .admin(
            ops,
            &format!("/admin/api/activities/{activity}/rehearsals"),
            json!({ "buyers": 200, "rate_per_s": 200, "reason": "soak" }),
        )
        .await;
    match started {
        Ok(rehearsal) => {
            wait_for(
                bench,
                ops,
                &format!("/admin/api/rehearsals/{}", rehearsal["id"]),
                |r| r["status"] != "running",
            )
            .await;
        }
        Err(error) => bench.run.progress(format!("rehearsal refused: {error:#}")),
    }
}

/// Polls an admin GET until `done` says so, 120 s at most.
async fn wait_for(bench: &Funnel<'_>, token: &str, path: &str, done: impl Fn(&Value) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let answer = bench
            .http
            .get(format!("{}{path}", bench.base_url))
            .bearer_auth(token)
            .send()
            .await;
        if let Ok(response) = answer {
            if let Ok(body) = response.json::<Value>().await {
                if done(&body) {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bench.run.progress(format!("gave up waiting on {path}"));
}

/// The activity's orders once none is `PRE_CREATED` any more (30 s at most): the unpaid
/// ones with their buyers.
async fn wait_completed(
    db: &mut PgConnection,
    activity: i64,
) -> anyhow::Result<Vec<(uuid::Uuid, i64)>> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'PRE_CREATED'",
        )
        .bind(activity)
        .fetch_one(&mut *db)
        .await?;
        if waiting == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(sqlx::query_as(
        "SELECT id, user_id FROM orders WHERE activity_id = $1 AND status = 'UNPAID' ORDER BY id",
    )
    .bind(activity)
    .fetch_all(&mut *db)
    .await?)
}

/// Every table's rows (counted) and the server's resident memory.
async fn figures(bench: &Funnel<'_>) -> anyhow::Result<Figures> {
    let mut db = PgConnection::connect(&bench.db_url).await?;
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::TEXT FROM pg_tables WHERE schemaname = current_schema()
         AND tablename NOT LIKE '\\_%' AND tablename <> 'bench_hot' ORDER BY tablename",
    )
    .fetch_all(&mut db)
    .await?;
    let mut rows = BTreeMap::new();
    for table in tables {
        let count: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM \"{table}\""))
            .fetch_one(&mut db)
            .await?;
        rows.insert(table, count);
    }
    let pid = bench.server.as_ref().map_or(0, |server| server.pid());
    let rss_kb = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("VmRSS:"))
                .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0);
    Ok(Figures { rows, rss_kb })
}

fn report(
    common: &Common,
    bench: &Funnel<'_>,
    args: &SoakArgs,
    start: &Figures,
    end: &Figures,
    cycles: u64,
) -> anyhow::Result<()> {
    let mut body = vec![
        format!(
            "{cycles} cycles in {} s, {} buyers each (a sale created, published, rehearsed, \
             pre-warmed, stormed, half paid, half timed out, reconciled, ended); retention \
             0 days, every 2 s.",
            args.duration_s, args.buyers
        ),
        String::new(),
        "| table | rows after cycle 1 | rows at the end |".to_owned(),
        "|---|---|---|".to_owned(),
    ];
    for (table, rows) in &end.rows {
        let first = start.rows.get(table).copied().unwrap_or(0);
        body.push(format!(
            "| `{table}` | {} | {} |",
            grouped(first as f64, 0),
            grouped(*rows as f64, 0)
        ));
    }
    body.push(format!(
        "| server RSS (kB) | {} | {} |",
        grouped(start.rss_kb as f64, 0),
        grouped(end.rss_kb as f64, 0)
    ));
    bench.publish(common, "soak", body)
}
