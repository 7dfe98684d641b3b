//! `seckill-drain`: the "Order pipeline drain" benchmark of BENCHMARKS.md, both halves in
//! one run against the configured PostgreSQL and RabbitMQ (`scripts/bench-pipeline.sh`
//! gives it a database and an AMQP prefix of its own).
//!
//! 1. Writes N pre-orders (one buyer each) with their outbox rows, through the pre-order writer.
//! 2. Bare baselines: publishes their N create-order bodies to a scratch quorum queue, then
//!    consumes and acks them with the pipeline's prefetch, once with its batching
//!    (multiple-ack per batch: the ratio's denominator) and once acking one by one.
//! 3. Pipeline: publishes the same N messages to the create-order queue, then starts the
//!    create-order consumer and measures until every order is `UNPAID` (DB transaction per
//!    batch, pay timeouts published with confirms, multiple-ack), sampling the DB pool's
//!    connections in use.
//! 4. Checks the result in PostgreSQL and deletes its queues.
//!
//! Prints orders/s, bare msgs/s, their ratio (target >= 0.5) and the pool's peak in use.

use anyhow::Context;
use clap::Parser;
use contract::Actor;
use contract::{ActivityInput, ActivityItemInput, ActivityKind, ItemInput, Role};
use futures::{stream, StreamExt, TryStreamExt};
use lapin::{
    options::{BasicConsumeOptions, QueueDeclareOptions, QueueDeleteOptions},
    types::{AMQPValue, FieldTable, LongString},
};
use std::{
    sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};
use uuid::Uuid;

use seckill::{
    buy::preorders::{PreOrder, PreorderWriter, Reservation, Verdict},
    catalog::service as catalog,
    identity::users,
    infra::{config::Settings, db},
    orders::{
        create_order,
        mq::{
            batch::{ack_all, next_batch},
            broker::open_channel,
            message::OrderCreated,
            topology::Outgoing,
        },
        outbox,
    },
    startup,
    state::AppState,
};

#[derive(Parser)]
#[command(
    name = "seckill-drain",
    about = "Order pipeline drain vs bare consume-and-ack"
)]
struct Args {
    /// Pre-orders (and messages) in each half.
    #[arg(long, default_value_t = 20_000)]
    orders: i64,
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    seckill::infra::telemetry::init();
    let args = Args::parse();
    anyhow::ensure!(args.orders > 0, "--orders must be positive");
    let mut settings = Settings::load()?;
    settings.workers = false;
    settings.pipeline.idle_queue_expiry_ms = Some(600_000);
    if let Some(prefetch) = args.prefetch {
        settings.pipeline.prefetch = prefetch;
    }
    if let Some(batch_max) = args.batch_max {
        settings.pipeline.batch_max = batch_max;
    }
    let state = startup::connect(settings).await?;
    db::migrate(&state.db).await?;
    let n = args.orders;
    let pipeline = &state.settings.pipeline;
    println!(
        "seckill-drain: {n} orders, prefetch {}, batch_max {}, batch_wait {} ms, db pool max {}",
        pipeline.prefetch,
        pipeline.batch_max,
        pipeline.batch_wait_ms,
        state.settings.db_max_connections
    );

    let (activity_id, item_id) = create_sale(&state, n).await?;
    let started = Instant::now();
    let events = write_preorders(&state, activity_id, item_id, n).await?;
    println!(
        "pre-orders written: {n} in {:.2} s",
        started.elapsed().as_secs_f64()
    );

    let bare = bare_drain(&state, &events, Acks::Batched).await?;
    let one_by_one = bare_drain(&state, &events, Acks::OneByOne).await?;
    let (drain, peak_in_use) = pipeline_drain(&state, &events).await?;
    check(&state, activity_id, n).await?;
    delete_queues(&state).await?;

    let bare_rate = n as f64 / bare.as_secs_f64();
    let one_by_one_rate = n as f64 / one_by_one.as_secs_f64();
    let drain_rate = n as f64 / drain.as_secs_f64();
    println!(
        "bare consume+ack (batched, one multiple-ack per batch): {n} msgs in {:.2} s = {bare_rate:.0} msgs/s",
        bare.as_secs_f64()
    );
    println!(
        "bare consume+ack (one ack per message): {n} msgs in {:.2} s = {one_by_one_rate:.0} msgs/s",
        one_by_one.as_secs_f64()
    );
    println!(
        "pipeline drain: {n} orders PRE_CREATED -> UNPAID in {:.2} s = {drain_rate:.0} orders/s",
        drain.as_secs_f64()
    );
    println!(
        "ratio: {:.2} against the batched bare consumer (target >= 0.5), {:.2} against one ack per message",
        drain_rate / bare_rate,
        drain_rate / one_by_one_rate
    );
    println!(
        "db pool peak in use during the drain: {peak_in_use} of {}",
        state.settings.db_max_connections
    );
    // One line for scripts/bench-pipeline.sh to put in BENCHMARKS.md.
    println!(
        "BENCH pipeline_drain orders={n} prefetch={} batch_max={} drain_s={:.3} orders_per_s={drain_rate:.0} \
         bare_batched_s={:.3} bare_batched_per_s={bare_rate:.0} bare_single_s={:.3} bare_single_per_s={one_by_one_rate:.0} \
         ratio={:.3} ratio_single={:.3} pool_peak={peak_in_use} pool_max={}",
        pipeline.prefetch,
        pipeline.batch_max,
        drain.as_secs_f64(),
        bare.as_secs_f64(),
        one_by_one.as_secs_f64(),
        drain_rate / bare_rate,
        drain_rate / one_by_one_rate,
        state.settings.db_max_connections
    );
    Ok(())
}

/// An activity of `n` units, one per buyer, for a merchant of its own.
async fn create_sale(state: &AppState, n: i64) -> anyhow::Result<(i64, i64)> {
    let merchant = users::ensure_merchant(&state.db, "Drain benchmark").await?;
    let admin = Actor {
        user_id: 0,
        username: "seckill-drain".into(),
        role: Role::Admin,
        merchant_id: None,
    };
    let item_id = catalog::create_item(
        state,
        &admin,
        ItemInput {
            name: "Drained item".into(),
            description: String::new(),
            price_cents: 4990,
            merchant_id: Some(merchant),
        },
    )
    .await?;
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let activity_id = catalog::create_activity(
        state,
        &admin,
        ActivityInput {
            title: "Drain benchmark".into(),
            starts_at,
            ends_at: starts_at + chrono::Duration::hours(1),
            kind: ActivityKind::Standard,
            pay_timeout_s: 900,
            items: vec![ActivityItemInput {
                item_id,
                stock: n,
                per_user_limit: 1,
                price_cents: 4990,
            }],
            seats: vec![],
            merchant_id: Some(merchant),
        },
    )
    .await?;
    Ok((activity_id, item_id))
}

/// `n` pre-orders with their outbox rows, as the buy path writes them (database allocation).
async fn write_preorders(
    state: &AppState,
    activity_id: i64,
    item_id: i64,
    n: i64,
) -> anyhow::Result<Vec<OrderCreated>> {
    let writer = PreorderWriter::spawn(
        state.db.clone(),
        256,
        Duration::from_millis(2),
        state.metrics.preorder_batch_size.clone(),
    );
    stream::iter(1..=n)
        .map(|user_id| {
            let writer = writer.clone();
            async move {
                let order = PreOrder {
                    id: Uuid::new_v4(),
                    activity_id,
                    item_id,
                    user_id,
                    quantity: 1,
                    amount_cents: 4990,
                    request_id: format!("drain-{activity_id}-{user_id}"),
                    seats: vec![],
                    reservation: Reservation::Database { per_user_limit: 1 },
                    recorded: false,
                };
                let event = OrderCreated {
                    order_id: order.id,
                    activity_id,
                    item_id,
                    user_id,
                    quantity: 1,
                    amount_cents: 4990,
                };
                match writer.write(order).await? {
                    Verdict::Written => Ok(event),
                    refused => Err(anyhow::anyhow!("pre-order refused: {refused:?}")),
                }
            }
        })
        .buffer_unordered(1024)
        .try_collect()
        .await
}

/// Publishes with confirms in chunks; fails unless every message was confirmed.
async fn publish_all(state: &AppState, messages: &[Outgoing]) -> anyhow::Result<Duration> {
    let started = Instant::now();
    for chunk in messages.chunks(PUBLISH_CHUNK) {
        let confirmed = state.pipeline.control.publish(chunk).await?;
        anyhow::ensure!(
            confirmed.iter().all(|ok| *ok),
            "RabbitMQ did not confirm every message"
        );
    }
    Ok(started.elapsed())
}

/// How the bare consumer acks.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Acks {
    /// Gathered like the pipeline's batches, one multiple-ack per batch.
    Batched,
    /// Each delivery acked on its own, as a plain consumer does.
    OneByOne,
}

/// The baseline: consume and ack the same bodies from a scratch quorum queue with the same
/// prefetch, doing nothing else.
async fn bare_drain(
    state: &AppState,
    events: &[OrderCreated],
    acks: Acks,
) -> anyhow::Result<Duration> {
    let settings = &state.settings.pipeline;
    let topology = &state.pipeline.topology;
    let scratch = format!("{}.drain-baseline", topology.exchange);
    let timeout = Duration::from_millis(settings.confirm_timeout_ms);
    let channel = open_channel(
        &state.amqp,
        topology,
        false,
        Some(settings.prefetch),
        timeout,
    )
    .await?;
    let mut arguments = FieldTable::default();
    arguments.insert(
        "x-queue-type".into(),
        AMQPValue::LongString(LongString::from("quorum")),
    );
    arguments.insert(
        "x-delivery-limit".into(),
        AMQPValue::LongLongInt(i64::from(settings.delivery_limit)),
    );
    let durable = QueueDeclareOptions {
        durable: true,
        ..QueueDeclareOptions::default()
    };
    channel.queue_declare(&scratch, durable, arguments).await?;
    let messages: Vec<Outgoing> = events
        .iter()
        .map(|event| Outgoing {
            exchange: String::new(),
            routing_key: scratch.clone(),
            ..topology.order_created(event)
        })
        .collect();
    let published = publish_all(state, &messages).await?;
    println!(
        "published to the scratch queue: {} in {:.2} s",
        messages.len(),
        published.as_secs_f64()
    );
    let mut consumer = channel
        .basic_consume(
            &scratch,
            "drain-baseline",
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    let started = Instant::now();
    let mut acked = 0;
    let batch_max = match acks {
        Acks::Batched => settings.batch_max.max(1),
        Acks::OneByOne => 1,
    };
    while acked < events.len() {
        anyhow::ensure!(started.elapsed() < GIVE_UP, "the bare drain took too long");
        let batch = next_batch(
            &mut consumer,
            batch_max,
            Duration::from_millis(settings.batch_wait_ms),
        )
        .await
        .context("the scratch consumer ended")?;
        acked += batch.len();
        ack_all(&batch.iter().collect::<Vec<_>>()).await;
    }
    let elapsed = started.elapsed();
    channel
        .queue_delete(&scratch, QueueDeleteOptions::default())
        .await?;
    Ok(elapsed)
}

/// The pipeline: the same messages into the create-order queue, then the consumer until every
/// order is completed. Returns the time and the pool's peak connections in use.
async fn pipeline_drain(
    state: &AppState,
    events: &[OrderCreated],
) -> anyhow::Result<(Duration, u32)> {
    let topology = &state.pipeline.topology;
    let messages: Vec<Outgoing> = events.iter().map(|e| topology.order_created(e)).collect();
    let published = publish_all(state, &messages).await?;
    let ids: Vec<Uuid> = events.iter().map(|e| e.order_id).collect();
    outbox::mark_sent(&state.db, &ids).await?;
    println!(
        "published to the create-order queue: {} in {:.2} s",
        messages.len(),
        published.as_secs_f64()
    );

    let peak = Arc::new(AtomicU32::new(0));
    let sampler = {
        let (pool, peak) = (state.db.clone(), peak.clone());
        tokio::spawn(async move {
            loop {
                let in_use = pool.size().saturating_sub(pool.num_idle() as u32);
                peak.fetch_max(in_use, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let completed = state
        .metrics
        .pipeline
        .orders_completed
        .with_label_values(&["unpaid"]);
    let target = completed.get() + events.len() as u64;
    let started = Instant::now();
    let consumer = create_order::spawn(state);
    while completed.get() < target {
        anyhow::ensure!(
            started.elapsed() < GIVE_UP,
            "the pipeline drain took too long"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let elapsed = started.elapsed();
    consumer.abort();
    sampler.abort();
    Ok((elapsed, peak.load(Ordering::Relaxed)))
}

/// Every order completed once, the stock moved once, every event recorded once.
async fn check(state: &AppState, activity_id: i64, n: i64) -> anyhow::Result<()> {
    let (unpaid, sold, processed, completions): (i64, i64, i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM orders WHERE activity_id = $1 AND status = 'UNPAID'),
                (SELECT sold::BIGINT FROM activity_items WHERE activity_id = $1),
                (SELECT count(*) FROM processed_events WHERE consumer = $2),
                (SELECT count(*) FROM order_events e JOIN orders o ON o.id = e.order_id
                  WHERE o.activity_id = $1 AND e.to_status = 'UNPAID')",
    )
    .bind(activity_id)
    .bind(create_order::CONSUMER)
    .fetch_one(&state.db)
    .await?;
    println!("check: {unpaid} UNPAID, sold {sold}, {processed} events processed, {completions} completions");
    anyhow::ensure!(
        unpaid == n && sold == n && processed == n && completions == n,
        "the drain did not complete every order exactly once"
    );
    Ok(())
}

/// Removes this run's queues and exchanges (the pay timeouts would otherwise wait 900 s).
async fn delete_queues(state: &AppState) -> anyhow::Result<()> {
    let topology = &state.pipeline.topology;
    let timeout = Duration::from_millis(state.settings.pipeline.confirm_timeout_ms);
    let channel = open_channel(&state.amqp, topology, false, None, timeout).await?;
    for queue in [
        topology.create_queue.clone(),
        topology.pay_timeout_queue.clone(),
        topology.dead_queue.clone(),
        topology.delay_queue(900),
    ] {
        channel
            .queue_delete(&queue, QueueDeleteOptions::default())
            .await?;
    }
    for exchange in [&topology.exchange, &topology.dead_exchange] {
        channel
            .exchange_delete(exchange, lapin::options::ExchangeDeleteOptions::default())
            .await?;
    }
    Ok(())
}
