//! The order pipeline drain against a bare consume-and-ack, both halves in one run against
//! the shared PostgreSQL and RabbitMQ, with a database, AMQP prefix and etcd prefix of its
//! own:
//!
//! 1. Writes N pre-orders (one buyer each, with their outbox rows already sent) in SQL, as
//!    the buy path leaves them once it has published.
//! 2. Bare baselines: publishes their N create-order bodies to a scratch quorum queue, then
//!    consumes and acks them with the pipeline's prefetch, once with its batching
//!    (multiple-ack per batch: the ratio's denominator) and once acking one by one.
//! 3. Pipeline: publishes the same N messages to the create-order queue, then starts the
//!    real worker (`seckill worker`) and measures from its consumer attaching until every
//!    order is `UNPAID` (DB transaction per batch, pay timeouts published with confirms,
//!    multiple-ack), sampling the worker's database connections in use.
//! 4. Checks the result in PostgreSQL and deletes its queues.
//!
//! Prints orders/s, bare msgs/s, their ratio (target >= 0.5) and the peak connections in use.

use anyhow::Context;
use base::config::Settings;
use clap::Args;
use futures::StreamExt;
use lapin::{
    options::{
        BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
        ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
    },
    types::{AMQPValue, FieldTable, LongString},
    BasicProperties, Channel, Consumer,
};
use secrecy::ExposeSecret;
use serde::Serialize;
use sqlx::{postgres::PgPoolOptions, PgPool};
use std::time::{Duration, Instant};
use uuid::Uuid;

use crate::{
    binaries, doc,
    process::{self, Daemon},
    run::{grouped, Run},
    stores, Common,
};

#[derive(Args)]
pub struct PipelineArgs {
    /// Pre-orders (and messages) in each half.
    #[arg(long, env = "BENCH_PIPELINE_ORDERS", default_value_t = 20_000)]
    orders: i64,
    /// The pipeline benchmark's database (dropped and recreated).
    #[arg(
        long = "pipeline-db",
        env = "BENCH_PIPELINE_DB",
        default_value = "seckill_bench_pipeline"
    )]
    db: String,
    /// Unacked deliveries per consumer; default: the pipeline settings' prefetch.
    #[arg(long)]
    prefetch: Option<u16>,
    /// Deliveries per batch; default: the pipeline settings' batch_max.
    #[arg(long)]
    batch_max: Option<usize>,
}

/// Messages published per confirmed chunk.
const PUBLISH_CHUNK: usize = 2_000;
/// Longest either half may take before the benchmark gives up.
const GIVE_UP: Duration = Duration::from_secs(600);
/// The activity's pay timeout: its pay-timeout messages go to this delay queue.
const PAY_TIMEOUT_S: u32 = 900;
/// The create-order consumer's name in `processed_events`.
const CONSUMER: &str = "create-order";

/// A create-order message body, as the consumer reads it (the pre-order's outbox payload).
#[derive(Serialize)]
struct OrderCreated {
    order_id: Uuid,
    activity_id: i64,
    item_id: i64,
    user_id: i64,
    quantity: i64,
    amount_cents: i64,
}

pub async fn run(common: &Common, args: &PipelineArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.orders > 0, "--orders must be positive");
    let mut settings = Settings::load()?;
    if let Some(prefetch) = args.prefetch {
        settings.pipeline.prefetch = prefetch;
    }
    if let Some(batch_max) = args.batch_max {
        settings.pipeline.batch_max = batch_max;
    }
    let bins = binaries::prepare(&common.root, common.build, &["seckill"])?;
    let run = Run::start(&common.root, "pipeline-")?;
    run.progress(format!("recreating database {}", args.db));
    let db_url = stores::recreate_database(settings.database_url.expose_secret(), &args.db).await?;
    let id = std::process::id();
    let drain = Drain {
        prefix: format!("bench-pipeline.{id}"),
        etcd_prefix: format!("/bench-pipeline-{id}"),
        amqp: stores::amqp(settings.amqp_url.expose_secret()).await?,
        db: PgPoolOptions::new()
            .max_connections(2)
            .connect_lazy(&db_url)?,
        seckill: bins[0].clone(),
        n: args.orders,
        run,
        db_url,
        settings,
        rust_log: common.rust_log.clone(),
    };
    let measured = drain.measure().await;
    let cleaned = drain.clean_up().await;
    let figures = measured?;
    cleaned?;
    let finished = drain.run.finish();
    let pipeline = &drain.settings.pipeline;
    let header = drain.run.header(
        &finished,
        Some("release"),
        &format!(
            ", prefetch {}, batch_max {}",
            pipeline.prefetch, pipeline.batch_max
        ),
    );
    let block = figures.block(&header, drain.n, drain.settings.db_max_connections);
    drain.run.say(&block);
    if common.update_doc {
        doc::replace_block(
            &common.root.join("BENCHMARKS.md"),
            "bench-pipeline.sh",
            &block,
        )?;
    }
    Ok(())
}

struct Drain {
    run: Run,
    settings: Settings,
    seckill: std::path::PathBuf,
    db_url: String,
    /// AMQP prefix of this run; its Redis prefix and etcd prefix are derived from it.
    prefix: String,
    etcd_prefix: String,
    rust_log: String,
    amqp: lapin::Connection,
    db: PgPool,
    n: i64,
}

/// What the run measured.
struct Figures {
    drain: Duration,
    bare_batched: Duration,
    bare_single: Duration,
    pool_peak: i64,
}

/// How the bare consumer acks.
#[derive(Clone, Copy)]
enum Acks {
    /// Gathered like the pipeline's batches, one multiple-ack per batch.
    Batched,
    /// Each delivery acked on its own, as a plain consumer does.
    OneByOne,
}

impl Drain {
    fn exchange(&self) -> String {
        format!("{}.order", self.prefix)
    }

    fn create_queue(&self) -> String {
        format!("{}.order.create", self.prefix)
    }

    fn scratch_queue(&self) -> String {
        format!("{}.drain-baseline", self.prefix)
    }

    async fn measure(&self) -> anyhow::Result<Figures> {
        let pipeline = &self.settings.pipeline;
        self.run.say(format!(
            "seckill-bench pipeline: {} orders, prefetch {}, batch_max {}, batch_wait {} ms, db pool max {}",
            self.n,
            pipeline.prefetch,
            pipeline.batch_max,
            pipeline.batch_wait_ms,
            self.settings.db_max_connections
        ));
        // A first worker migrates the database and declares the pipeline's topology, so the
        // create-order queue exists (with the server's own arguments) before it is filled.
        let mut worker = self.spawn_worker("topology")?;
        self.await_consumers(&mut worker).await?;
        worker.stop().await?;
        let channel = self.amqp.create_channel().await?;
        let gone = Instant::now();
        while consumers(&channel, &self.create_queue()).await != Some(0) {
            anyhow::ensure!(
                gone.elapsed() < Duration::from_secs(10),
                "the first worker's consumer stays"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        let started = Instant::now();
        let events = self.write_preorders().await?;
        self.run.say(format!(
            "pre-orders written: {} in {:.2} s",
            self.n,
            started.elapsed().as_secs_f64()
        ));
        let bodies: Vec<(String, Vec<u8>)> = events
            .iter()
            .map(|e| Ok((e.order_id.to_string(), serde_json::to_vec(e)?)))
            .collect::<anyhow::Result<_>>()?;

        let bare_batched = self.bare_drain(&bodies, Acks::Batched).await?;
        let bare_single = self.bare_drain(&bodies, Acks::OneByOne).await?;
        let (drain, pool_peak) = self.pipeline_drain(&bodies).await?;
        self.check().await?;
        let figures = Figures {
            drain,
            bare_batched,
            bare_single,
            pool_peak,
        };
        figures.print(&self.run, self.n, self.settings.db_max_connections);
        Ok(figures)
    }

    /// `seckill worker` with this run's database and prefixes, started.
    fn spawn_worker(&self, label: &str) -> anyhow::Result<Daemon> {
        let pipeline = &self.settings.pipeline;
        let config = self.run.file("worker.toml");
        // The run's settings, whole: the worker works with the values this report prints.
        // Its queues expire after 10 idle minutes if the run dies before deleting them.
        std::fs::write(
            &config,
            format!(
                "db_max_connections = {}\n\n[pipeline]\nprefetch = {}\nbatch_max = {}\n\
                 batch_wait_ms = {}\nidle_queue_expiry_ms = 600000\n\n[control]\nsnapshot_path = {:?}\n",
                self.settings.db_max_connections,
                pipeline.prefetch,
                pipeline.batch_max,
                pipeline.batch_wait_ms,
                self.run.file("control-snapshot.json").display().to_string(),
            ),
        )?;
        let env = [
            ("DATABASE_URL", self.db_url.clone()),
            ("SECKILL_AMQP_PREFIX", self.prefix.clone()),
            ("SECKILL_REDIS_PREFIX", format!("{}:", self.prefix)),
            ("SECKILL_ETCD_PREFIX", self.etcd_prefix.clone()),
            ("SECKILL_CONFIG", config.display().to_string()),
            ("RUST_LOG", self.rust_log.clone()),
        ]
        .map(|(k, v)| (k.to_owned(), v));
        let command = process::seckill(&self.seckill, &["worker"], &env);
        let log = self.run.file(&format!("worker-{label}.log"));
        Daemon::spawn(command, &format!("the worker ({label})"), &log)
    }

    /// Waits until the create-order queue exists and `worker` consumes from it.
    async fn await_consumers(&self, worker: &mut Daemon) -> anyhow::Result<()> {
        let queue = self.create_queue();
        worker
            .wait_until(Duration::from_secs(60), || {
                let (channel, queue) = (&self.amqp, queue.clone());
                async move {
                    // A failed probe (no queue yet) closed its channel: each gets its own.
                    let Ok(channel) = channel.create_channel().await else {
                        return false;
                    };
                    consumers(&channel, &queue).await.is_some_and(|n| n > 0)
                }
            })
            .await
    }

    /// One sale of `n` units, one per buyer, and its `n` pre-orders with their outbox rows
    /// sent: the state the buy path leaves after publishing.
    async fn write_preorders(&self) -> anyhow::Result<Vec<OrderCreated>> {
        let mut tx = self.db.begin().await?;
        let merchant: i64 = sqlx::query_scalar(
            "INSERT INTO merchants (name) VALUES ('Drain benchmark') RETURNING id",
        )
        .fetch_one(&mut *tx)
        .await?;
        let item_id: i64 = sqlx::query_scalar(
            "INSERT INTO items (merchant_id, name, price_cents) VALUES ($1, 'Drained item', 4990)
             RETURNING id",
        )
        .bind(merchant)
        .fetch_one(&mut *tx)
        .await?;
        let activity_id: i64 = sqlx::query_scalar(
            "INSERT INTO activities (merchant_id, title, kind, starts_at, ends_at, pay_timeout_s)
             VALUES ($1, 'Drain benchmark', 'standard', now() + interval '1 hour',
                     now() + interval '2 hours', $2)
             RETURNING id",
        )
        .bind(merchant)
        .bind(i32::try_from(PAY_TIMEOUT_S)?)
        .fetch_one(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO activity_items
                 (activity_id, item_id, total_stock, allocated, per_user_limit, price_cents)
             VALUES ($1, $2, $3, $3, 1, 4990)",
        )
        .bind(activity_id)
        .bind(item_id)
        .bind(i32::try_from(self.n)?)
        .execute(&mut *tx)
        .await?;
        let orders: Vec<(Uuid, i64)> = sqlx::query_as(
            "INSERT INTO orders (id, activity_id, item_id, user_id, quantity, amount_cents, status, request_id)
             SELECT gen_random_uuid(), $1, $2, u, 1, 4990, 'PRE_CREATED', 'drain-' || $1 || '-' || u
             FROM generate_series(1, $3::BIGINT) AS u
             RETURNING id, user_id",
        )
        .bind(activity_id)
        .bind(item_id)
        .bind(self.n)
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query(
            "INSERT INTO buyer_holdings (activity_id, item_id, user_id, units, per_user_limit)
             SELECT $1, $2, u, 1, 1 FROM generate_series(1, $3::BIGINT) AS u",
        )
        .bind(activity_id)
        .bind(item_id)
        .bind(self.n)
        .execute(&mut *tx)
        .await?;
        let events: Vec<OrderCreated> = orders
            .into_iter()
            .map(|(order_id, user_id)| OrderCreated {
                order_id,
                activity_id,
                item_id,
                user_id,
                quantity: 1,
                amount_cents: 4990,
            })
            .collect();
        let ids: Vec<Uuid> = events.iter().map(|e| e.order_id).collect();
        let payloads: Vec<serde_json::Value> = events
            .iter()
            .map(serde_json::to_value)
            .collect::<Result<_, _>>()?;
        sqlx::query(
            "INSERT INTO outbox (event_id, topic, payload, status, sent_at)
             SELECT id, 'order.create', payload, 'sent', now()
             FROM UNNEST($1::UUID[], $2::JSONB[]) AS o (id, payload)",
        )
        .bind(&ids)
        .bind(&payloads)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(events)
    }

    /// A channel in confirm mode with `prefetch`.
    async fn channel(&self, prefetch: Option<u16>) -> anyhow::Result<Channel> {
        let channel = self.amqp.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        if let Some(prefetch) = prefetch {
            channel
                .basic_qos(prefetch, BasicQosOptions::default())
                .await?;
        }
        Ok(channel)
    }

    /// Publishes persistent JSON bodies (with their event id as message id) in confirmed
    /// chunks; fails unless every message was confirmed and routed.
    async fn publish_all(
        &self,
        exchange: &str,
        routing_key: &str,
        bodies: &[(String, Vec<u8>)],
    ) -> anyhow::Result<Duration> {
        let channel = self.channel(None).await?;
        let started = Instant::now();
        for chunk in bodies.chunks(PUBLISH_CHUNK) {
            let mut confirms = Vec::with_capacity(chunk.len());
            for (message_id, body) in chunk {
                let properties = BasicProperties::default()
                    .with_delivery_mode(2)
                    .with_content_type("application/json".into())
                    .with_message_id(message_id.as_str().into());
                let mandatory = BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                };
                confirms.push(
                    channel
                        .basic_publish(exchange, routing_key, mandatory, body, properties)
                        .await?,
                );
            }
            for confirm in confirms {
                let confirmation = confirm.await?;
                anyhow::ensure!(
                    confirmation.is_ack() && confirmation.take_message().is_none(),
                    "RabbitMQ did not route and confirm every message"
                );
            }
        }
        let elapsed = started.elapsed();
        let _ = channel.close(200, "published").await;
        Ok(elapsed)
    }

    /// The baseline: consume and ack the same bodies from a scratch quorum queue with the
    /// same prefetch, doing nothing else.
    async fn bare_drain(
        &self,
        bodies: &[(String, Vec<u8>)],
        acks: Acks,
    ) -> anyhow::Result<Duration> {
        let pipeline = &self.settings.pipeline;
        let scratch = self.scratch_queue();
        let channel = self.channel(Some(pipeline.prefetch)).await?;
        let mut arguments = FieldTable::default();
        arguments.insert(
            "x-queue-type".into(),
            AMQPValue::LongString(LongString::from("quorum")),
        );
        arguments.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(i64::from(pipeline.delivery_limit)),
        );
        arguments.insert("x-expires".into(), AMQPValue::LongLongInt(600_000));
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel.queue_declare(&scratch, durable, arguments).await?;
        let published = self.publish_all("", &scratch, bodies).await?;
        self.run.say(format!(
            "published to the scratch queue: {} in {:.2} s",
            bodies.len(),
            published.as_secs_f64()
        ));
        let mut consumer = channel
            .basic_consume(
                &scratch,
                "drain-baseline",
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await?;
        let batch_max = match acks {
            Acks::Batched => pipeline.batch_max.max(1),
            Acks::OneByOne => 1,
        };
        let wait = Duration::from_millis(pipeline.batch_wait_ms);
        let started = Instant::now();
        let mut acked = 0;
        while acked < bodies.len() {
            anyhow::ensure!(started.elapsed() < GIVE_UP, "the bare drain took too long");
            let (count, last) = next_batch(&mut consumer, batch_max, wait).await?;
            acked += count;
            last.acker.ack(BasicAckOptions { multiple: true }).await?;
        }
        let elapsed = started.elapsed();
        channel
            .queue_delete(&scratch, QueueDeleteOptions::default())
            .await?;
        let _ = channel.close(200, "drained").await;
        Ok(elapsed)
    }

    /// The pipeline: the same messages into the create-order queue, then the real worker
    /// until every order is completed. Returns the time from its consumer attaching to the
    /// last completion, and the peak of its database connections in use.
    async fn pipeline_drain(
        &self,
        bodies: &[(String, Vec<u8>)],
    ) -> anyhow::Result<(Duration, i64)> {
        let published = self.publish_all(&self.exchange(), "create", bodies).await?;
        self.run.say(format!(
            "published to the create-order queue: {} in {:.2} s",
            bodies.len(),
            published.as_secs_f64()
        ));
        let watch = self.amqp.create_channel().await?;
        let queue = self.create_queue();
        let mut worker = self.spawn_worker("drain")?;
        // The clock starts when the worker's consumer is there: its process start-up is
        // not the pipeline's work.
        let wait_start = Instant::now();
        while consumers(&watch, &queue).await.is_none_or(|n| n == 0) {
            worker.ensure_running()?;
            anyhow::ensure!(wait_start.elapsed() < GIVE_UP, "the worker never consumed");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let started = Instant::now();
        // One query per tick on one connection: the units sold (moved in each batch's
        // transaction) and the other backends of the database that are not idle.
        let mut peak = 0;
        let mut sampler = self.db.acquire().await?;
        loop {
            anyhow::ensure!(
                started.elapsed() < GIVE_UP,
                "the pipeline drain took too long"
            );
            let (sold, in_use): (i64, i64) = sqlx::query_as(
                "SELECT (SELECT COALESCE(SUM(sold), 0)::BIGINT FROM activity_items),
                        (SELECT count(*) FROM pg_stat_activity
                          WHERE datname = current_database() AND backend_type = 'client backend'
                            AND pid <> pg_backend_pid() AND state <> 'idle')",
            )
            .fetch_one(&mut *sampler)
            .await?;
            peak = peak.max(in_use);
            worker.ensure_running()?;
            if sold >= self.n {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let elapsed = started.elapsed();
        drop(sampler);
        worker.stop().await?;
        Ok((elapsed, peak))
    }

    /// Every order completed once, the stock moved once, every event recorded once.
    async fn check(&self) -> anyhow::Result<()> {
        // An event is an outbox row; this drain writes one per order.
        let (unpaid, sold, processed, completions): (i64, i64, i64, i64) = sqlx::query_as(
            "SELECT (SELECT count(*) FROM orders WHERE status = 'UNPAID'),
                    (SELECT COALESCE(SUM(sold), 0)::BIGINT FROM activity_items),
                    (SELECT count(*) FROM processed_events WHERE consumer = $1),
                    (SELECT count(*) FROM order_history WHERE to_status = 'UNPAID')",
        )
        .bind(CONSUMER)
        .fetch_one(&self.db)
        .await?;
        self.run.say(format!(
            "check: {unpaid} UNPAID, sold {sold}, {processed} events processed, {completions} completions"
        ));
        let n = self.n;
        anyhow::ensure!(
            unpaid == n && sold == n && processed == n && completions == n,
            "the drain did not complete every order exactly once"
        );
        Ok(())
    }

    /// Removes this run's queues, exchanges and etcd keys (the pay timeouts would otherwise
    /// wait 900 s).
    async fn clean_up(&self) -> anyhow::Result<()> {
        let channel = self.amqp.create_channel().await?;
        channel
            .queue_delete(&self.scratch_queue(), QueueDeleteOptions::default())
            .await?;
        stores::delete_topology(&self.amqp, &self.prefix, &[PAY_TIMEOUT_S]).await?;
        stores::delete_etcd_prefix(&self.settings.etcd_endpoints, &self.etcd_prefix)
            .await
            .context("deleting the worker's etcd keys")
    }
}

/// Consumers of `queue`, or `None` while it does not exist (the failed passive declare
/// closes that channel, so the caller's next probe needs the queue to exist first).
async fn consumers(channel: &Channel, queue: &str) -> Option<u32> {
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(queue, passive, FieldTable::default())
        .await
        .ok()
        .map(|q| q.consumer_count())
}

/// The next batch as the pipeline gathers one: a first delivery, then up to `max` within
/// `wait`. Returns its size and its last delivery (whose multiple-ack settles it).
async fn next_batch(
    consumer: &mut Consumer,
    max: usize,
    wait: Duration,
) -> anyhow::Result<(usize, lapin::message::Delivery)> {
    let mut last = consumer.next().await.context("the consumer ended")??;
    let mut count = 1;
    let deadline = tokio::time::Instant::now() + wait;
    while count < max {
        match tokio::time::timeout_at(deadline, consumer.next()).await {
            Ok(Some(delivery)) => {
                last = delivery?;
                count += 1;
            }
            Ok(None) | Err(_) => break,
        }
    }
    Ok((count, last))
}

impl Figures {
    fn rates(&self, n: i64) -> (f64, f64, f64) {
        let per_s = |d: Duration| n as f64 / d.as_secs_f64();
        (
            per_s(self.drain),
            per_s(self.bare_batched),
            per_s(self.bare_single),
        )
    }

    fn print(&self, run: &Run, n: i64, pool_max: u32) {
        let (drain, batched, single) = self.rates(n);
        run.say(format!(
            "bare consume+ack (batched, one multiple-ack per batch): {n} msgs in {:.2} s = {batched:.0} msgs/s",
            self.bare_batched.as_secs_f64()
        ));
        run.say(format!(
            "bare consume+ack (one ack per message): {n} msgs in {:.2} s = {single:.0} msgs/s",
            self.bare_single.as_secs_f64()
        ));
        run.say(format!(
            "pipeline drain: {n} orders PRE_CREATED -> UNPAID in {:.2} s = {drain:.0} orders/s",
            self.drain.as_secs_f64()
        ));
        run.say(format!(
            "ratio: {:.2} against the batched bare consumer (target >= 0.5), {:.2} against one ack per message",
            drain / batched,
            drain / single
        ));
        run.say(format!(
            "db connections in use during the drain, peak: {} of {pool_max}",
            self.pool_peak
        ));
    }

    /// The result block of BENCHMARKS.md's "Order pipeline drain" section.
    fn block(&self, header: &str, n: i64, pool_max: u32) -> String {
        let (drain, batched, single) = self.rates(n);
        let (ratio, ratio_single) = (drain / batched, drain / single);
        let thousands = |x: f64| grouped(x, 0);
        [
            header.to_owned(),
            String::new(),
            format!("| measurement ({} messages each) | seconds | per second |", thousands(n as f64)),
            "|---|---|---|".into(),
            format!(
                "| pipeline drain: PRE_CREATED → UNPAID (transaction per batch, pay timeouts confirmed, \
                 multiple-ack) | {:.2} | {} orders |",
                self.drain.as_secs_f64(),
                thousands(drain)
            ),
            format!(
                "| bare consume + one multiple-ack per batch (same prefetch and batching) | {:.2} | {} msgs |",
                self.bare_batched.as_secs_f64(),
                thousands(batched)
            ),
            format!(
                "| bare consume + one ack per message (same prefetch) | {:.2} | {} msgs |",
                self.bare_single.as_secs_f64(),
                thousands(single)
            ),
            String::new(),
            format!(
                "Ratio {ratio:.2} against the batched bare consumer (target ≥ 0.5: {}); {ratio_single:.2} \
                 against one ack per message. DB pool peak in use during the drain: {} of {pool_max}.",
                if ratio >= 0.5 { "met" } else { "**missed**" },
                self.pool_peak
            ),
        ]
        .join("\n")
    }
}
