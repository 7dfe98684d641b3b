//! Baselines: a sale run end to end records a run whose path figures per buy are what
//! Redis, PostgreSQL and RabbitMQ themselves saw, and marking it the baseline shows on the
//! list and in the live dashboard's comparison; a run marked as the baseline of a kind of
//! activity is what the activities of that kind without a baseline of their own are held
//! against.
//!
//! Redis's side: `INFO commandstats` also counts the commands a Lua script runs, so the
//! commands the server sent are read from `MONITOR` on a private Redis (each command sent
//! once, a script's own calls marked `lua`), checked against `INFO commandstats` for
//! EVALSHA, which no script sends. PostgreSQL's side: the transactions that wrote the
//! sale's rows, by their `xmin` (a pre-order batch writes its buyers' holdings, the
//! publisher marks its outbox rows sent). RabbitMQ's side: the create-order messages the
//! broker routed into a queue of the test's own bound beside the pipeline's, as the broker
//! counts them.

use crate::{
    dashboard::Frames,
    support::{
        app::{json, spawn_app, spawn_app_with, TestApp},
        fixtures::{prewarm, storm, storm_settings, upcoming_activity, Caller, Listing},
        redis_server::RedisInstance,
        wait::{self, PATIENCE},
    },
};
use contract::{
    ActivityKind, BaselineRun, BaselineScope, EndpointFigures, PathFigures, Readiness,
    ReadinessCheckName, Role, RunCost, RunPath, RunPerf,
};
use lapin::{
    options::{QueueBindOptions, QueueDeclareOptions},
    types::FieldTable,
    Channel, Connection,
};
use sale::orders::mq::broker::queue_states;
use serde_json::json;
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// Units on sale: every buyer of the first phase gets one.
const STOCK: i64 = 40;
/// Buyers of the second phase, all refused (sold out).
const REFUSED: i64 = 30;

/// Every line of `MONITOR` on the private Redis, as it comes.
struct Monitor {
    lines: Arc<Mutex<Vec<String>>>,
    harness: redis::aio::MultiplexedConnection,
    marks: u32,
}

/// A point in the stream: the lines seen before it, the server's count of the commands it
/// sent then, and Redis's count of EVALSHA.
struct Mark {
    line: usize,
    sent: f64,
    evalsha: u64,
}

impl Monitor {
    async fn start(redis: &RedisInstance) -> Self {
        let address = redis.url()["redis://".len()..]
            .trim_end_matches("/0")
            .to_owned();
        let mut stream = tokio::net::TcpStream::connect(&address)
            .await
            .expect("private Redis");
        stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let seen = lines.clone();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stream).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                seen.lock().expect("lines").push(line);
            }
        });
        let started = lines.clone();
        wait::until("MONITOR started", PATIENCE, || {
            std::future::ready(
                started
                    .lock()
                    .expect("lines")
                    .iter()
                    .any(|line| line == "+OK"),
            )
        })
        .await;
        let harness = redis::Client::open(redis.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("harness connection");
        Self {
            lines,
            harness,
            marks: 0,
        }
    }

    /// Marks the stream with an ECHO at a moment the server's count of sent commands is the
    /// same before and after it: no command of the server's background tasks is on its
    /// way meanwhile, so the commands it counted before the mark are the ones Redis ran
    /// before it.
    async fn mark(&mut self, app: &TestApp) -> Mark {
        loop {
            let sent = app.metric("seckill_redis_commands_total").await;
            self.marks += 1;
            let echo = format!("baseline-mark-{}", self.marks);
            redis::cmd("ECHO")
                .arg(&echo)
                .query_async::<String>(&mut self.harness)
                .await
                .expect("ECHO");
            let stats: String = redis::cmd("INFO")
                .arg("commandstats")
                .query_async(&mut self.harness)
                .await
                .expect("INFO");
            let evalsha = stats
                .lines()
                .find_map(|line| line.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |calls| calls.parse().expect("calls"));
            let lines = self.lines.clone();
            let mut line = 0;
            wait::until("the mark in the MONITOR stream", PATIENCE, || {
                let found = lines
                    .lock()
                    .expect("lines")
                    .iter()
                    .position(|seen| seen.contains(&echo));
                if let Some(found) = found {
                    line = found;
                }
                std::future::ready(found.is_some())
            })
            .await;
            if app.metric("seckill_redis_commands_total").await == sent {
                return Mark {
                    line,
                    sent,
                    evalsha,
                };
            }
        }
    }

    /// The commands the server sent between two marks, as Redis ran them: not a script's
    /// own calls (`lua`), not the test's ECHO and INFO.
    fn sent_between(&self, from: &Mark, to: &Mark) -> Vec<String> {
        let lines = self.lines.lock().expect("lines");
        lines[from.line + 1..to.line]
            .iter()
            .filter(|line| !line.contains(" lua] "))
            .filter(|line| !command_is(line, "echo") && !command_is(line, "info"))
            .cloned()
            .collect()
    }

    /// How many of the commands Redis ran since a mark were `command`.
    fn count_since(&self, from: &Mark, command: &str) -> usize {
        let lines = self.lines.lock().expect("lines");
        lines[from.line + 1..]
            .iter()
            .filter(|line| command_is(line, command))
            .count()
    }

    /// How many calls the buy scripts made between two marks (the lines MONITOR marks
    /// `lua`; the buyer events' script is the pipeline's, not a buy's).
    fn script_calls_between(&self, from: &Mark, to: &Mark) -> usize {
        let lines = self.lines.lock().expect("lines");
        lines[from.line + 1..to.line]
            .iter()
            .filter(|line| line.contains(" lua] ") && !is_buyer_event(line))
            .count()
    }

    /// How many of the server's commands between two marks were `command`.
    fn count_between(&self, from: &Mark, to: &Mark, command: &str) -> usize {
        self.sent_between(from, to)
            .iter()
            .filter(|line| command_is(line, command))
            .count()
    }

    /// What Redis ran for buys between two marks: the server's commands less those of its
    /// background tasks in this test (the hot-key reports' PUBLISH, the buyer events the
    /// create-order consumer publishes, the dashboard's stock reads in one MULTI/EXEC: the
    /// server has one connection, so a transaction's commands are the lines from its MULTI
    /// to its EXEC).
    fn for_buys_between(&self, from: &Mark, to: &Mark) -> f64 {
        let mut in_transaction = false;
        let mut for_buys = 0;
        for line in self.sent_between(from, to) {
            if command_is(&line, "multi") {
                in_transaction = true;
            } else if command_is(&line, "exec") {
                in_transaction = false;
            } else if !in_transaction && !command_is(&line, "publish") && !is_buyer_event(&line) {
                for_buys += 1;
            }
        }
        for_buys as f64
    }

    /// Checks the server's count of the commands it sent, whoever sent them, against what
    /// Redis ran between two marks, and Redis's count of EVALSHA against the stream's.
    fn check_counts(&self, from: &Mark, to: &Mark) {
        let sent = self.sent_between(from, to);
        let counted = to.sent - from.sent;
        assert!(
            within(counted, sent.len() as f64, 0.05),
            "the server counted {counted} commands sent, Redis ran {}",
            sent.len()
        );
        let evalsha = sent
            .iter()
            .filter(|line| command_is(line, "evalsha"))
            .count();
        let stats = to.evalsha - from.evalsha;
        assert!(
            within(stats as f64, evalsha as f64, 0.05),
            "INFO commandstats counted {stats} EVALSHA, MONITOR showed {evalsha}"
        );
    }
}

/// A queue of the test's own bound to the pipeline's order exchange with the create-order
/// routing key: RabbitMQ routes a copy of every create-order message the deployment
/// publishes into it, and no one consumes it, so its length is the broker's count of them
/// (messages, whatever number of orders each carries).
struct CreateOrderTap {
    channel: Channel,
    queue: String,
    /// The tap is exclusive to this connection: it goes with it.
    _connection: Connection,
}

/// The create-order routing key of the order exchange (`orders::mq::topology`).
const CREATE_ORDER_KEY: &str = "create";

impl CreateOrderTap {
    async fn bind(app: &TestApp) -> Self {
        let topology = &app.state.pipeline.topology;
        // The exchange is there once the pipeline's create-order consumer is attached.
        wait::until("the create-order consumer attached", PATIENCE, || async {
            let create = [topology.create_queue.as_str()];
            queue_states(&app.state.amqp, topology, &create, Duration::from_secs(5))
                .await
                .is_ok_and(|states| states[0].consumers > 0)
        })
        .await;
        let connection = app.amqp_connection().await;
        let channel = connection.create_channel().await.expect("a channel");
        let exclusive = QueueDeclareOptions {
            exclusive: true,
            ..QueueDeclareOptions::default()
        };
        let queue = channel
            .queue_declare("", exclusive, FieldTable::default())
            .await
            .expect("the tap")
            .name()
            .to_string();
        channel
            .queue_bind(
                &queue,
                &topology.exchange,
                CREATE_ORDER_KEY,
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .expect("the tap bound");
        Self {
            channel,
            queue,
            _connection: connection,
        }
    }

    /// Create-order messages RabbitMQ routed since the tap was bound.
    async fn messages(&self) -> u32 {
        let passive = QueueDeclareOptions {
            passive: true,
            ..QueueDeclareOptions::default()
        };
        self.channel
            .queue_declare(&self.queue, passive, FieldTable::default())
            .await
            .expect("the tap")
            .message_count()
    }
}

/// Whether a MONITOR line (`+1700000000.123456 [0 127.0.0.1:5000] "EVALSHA" ...`) runs
/// `command`.
/// A MONITOR line of the buyer events' script (`lua/buyer_event.lua`): its call names the
/// events channel, and its own calls the channel or the buyer's log (`...:events`).
fn is_buyer_event(line: &str) -> bool {
    line.contains("buyer_events") || line.contains(":events\"")
}

fn command_is(line: &str, command: &str) -> bool {
    line.split("] \"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .is_some_and(|name| name.eq_ignore_ascii_case(command))
}

/// `a` is `b` within `share` of `b` (and within one call, for counts near zero).
fn within(a: f64, b: f64, share: f64) -> bool {
    (a - b).abs() <= (b.abs() * share).max(1.0)
}

async fn runs(app: &TestApp, ops: &Caller, activity_id: i64) -> Vec<BaselineRun> {
    let response = app
        .get(
            &format!("/admin/api/baselines?activity_id={activity_id}"),
            Some(ops),
        )
        .await;
    assert_eq!(response.status(), 200);
    response.json().await.expect("runs")
}

/// Rows of the sale's table written by distinct transactions.
async fn transactions(app: &TestApp, query: &str, activity_id: i64) -> i64 {
    sqlx::query_scalar(query)
        .bind(activity_id)
        .fetch_one(&app.db)
        .await
        .expect("transactions")
}

#[tokio::test]
async fn a_sale_records_a_run_whose_path_is_what_redis_and_postgresql_saw_per_buy() {
    let redis = RedisInstance::start().await;
    let app = spawn_app_with(|settings| {
        settings.redis_url = redis.url().into();
        storm_settings(settings);
        settings.baselines.report_interval_ms = 200;
        // The activity stays in the catalogue for the whole test: no buy reads it again.
        settings.buy.activity_cache_ms = 600_000;
        // No reconciliation pass sends its own scripts during the sale.
        settings.reconcile.interval_ms = 0;
    })
    .await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let sale = upcoming_activity(&app, &merchant, &Listing::storm(STOCK, 1, &[])).await;
    prewarm(&app, &ops, &sale).await;
    let activity_id = sale.activity_id;
    // The sale starts now, and ends once the buying is over.
    sqlx::query("UPDATE activities SET starts_at = now(), ends_at = now() + interval '1 hour' WHERE id = $1")
        .bind(activity_id)
        .execute(&app.db)
        .await
        .expect("open the sale");
    let page = app
        .get(&format!("/api/activities/{activity_id}"), None)
        .await;
    assert_eq!(page.status(), 200);

    let tap = CreateOrderTap::bind(&app).await;
    let mut monitor = Monitor::start(&redis).await;
    let before = monitor.mark(&app).await;
    let winners: Vec<(i64, String)> = (1..=STOCK)
        .map(|user| (user, format!("win-{user}")))
        .collect();
    let bought = storm(&app, &sale, winners, 8).await;
    assert!(
        bought.iter().all(|(_, status, _)| *status == 200),
        "{bought:?}"
    );
    // Each winner is answered first and his answer kept for replays after: all kept before
    // the mark, so the keeping counts for the successes.
    wait::until("every winner's answer kept", PATIENCE, || {
        std::future::ready(monitor.count_since(&before, "setex") == STOCK as usize)
    })
    .await;
    let sold_out = monitor.mark(&app).await;
    let losers: Vec<(i64, String)> = (1..=REFUSED)
        .map(|user| (1000 + user, format!("lose-{user}")))
        .collect();
    let refused = storm(&app, &sale, losers, 8).await;
    assert!(
        refused.iter().all(|(_, status, _)| *status != 200),
        "{refused:?}"
    );
    let after = monitor.mark(&app).await;
    sqlx::query("UPDATE activities SET ends_at = now() WHERE id = $1")
        .bind(activity_id)
        .execute(&app.db)
        .await
        .expect("end the sale");

    monitor.check_counts(&before, &after);
    let redis_for_successes = monitor.for_buys_between(&before, &sold_out);
    let redis_for_refusals = monitor.for_buys_between(&sold_out, &after);
    let kept_answers = monitor.count_between(&before, &sold_out, "setex");
    assert_eq!(kept_answers, STOCK as usize, "one answer kept per winner");
    // Inside Redis, a successful buy of a new buyer is twelve calls of `buy.lua`: the read,
    // three windows, the holding, the hashes' existence, the deduction, the buyer record,
    // the clock, the marker, the holders' version and the claim. The first deduction of
    // the item creates its hashes and version and hands them the stock key's expiry (five
    // calls more, once).
    let script_calls = monitor.script_calls_between(&before, &sold_out);
    assert!(
        (12 * STOCK as usize..=12 * STOCK as usize + 5).contains(&script_calls),
        "{script_calls} calls inside Redis for {STOCK} successful buys"
    );

    // Every order completed by the consumer (each published once), every outbox row sent.
    wait::until(
        "every order completed and its outbox row sent",
        PATIENCE,
        || async {
            let unpaid: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM orders WHERE activity_id = $1 AND status = 'UNPAID'",
            )
            .bind(activity_id)
            .fetch_one(&app.db)
            .await
            .expect("orders");
            let sent: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM orders o JOIN outbox x ON x.event_id = o.outbox_event_id
             WHERE o.activity_id = $1 AND x.status = 'sent'",
            )
            .bind(activity_id)
            .fetch_one(&app.db)
            .await
            .expect("outbox");
            unpaid == STOCK && sent == STOCK
        },
    )
    .await;
    let batches = transactions(
        &app,
        "SELECT COUNT(DISTINCT xmin::TEXT) FROM buyer_holdings WHERE activity_id = $1",
        activity_id,
    )
    .await;
    let marked_sent = transactions(
        &app,
        "SELECT COUNT(DISTINCT xmin::TEXT) FROM outbox
         WHERE event_id IN (SELECT outbox_event_id FROM orders WHERE activity_id = $1)",
        activity_id,
    )
    .await;

    wait::until("the sale's run recorded", PATIENCE, || async {
        !runs(&app, &ops, activity_id).await.is_empty()
    })
    .await;
    let run = runs(&app, &ops, activity_id).await.remove(0);
    assert!(!run.is_baseline);
    let (success, refusal) = (&run.path.success, &run.path.refused);
    assert_eq!(success.requests, STOCK as u64, "{run:?}");
    assert_eq!(refusal.requests, REFUSED as u64, "{run:?}");
    // The buy path sends every command on its own (a script is one EVALSHA), but for the
    // kept answers (SETEX), which go in pipelines of one or more: of what Redis saw, each
    // line but those is a round trip. The counters count a round trip per request the
    // connection sends, and its commands (a pipeline's each).
    let trips = success.redis_round_trips * STOCK as f64;
    let alone = redis_for_successes - kept_answers as f64;
    assert!(
        trips >= alone * 0.95 && trips <= redis_for_successes * 1.05,
        "Redis round trips for the successful buys: the run says {trips}, Redis saw {alone} \
         commands sent alone and {kept_answers} kept answers"
    );
    for (figure, per_buy, seen, buys) in [
        (
            "Redis commands per successful buy",
            success.redis_commands,
            redis_for_successes,
            STOCK,
        ),
        (
            "Redis commands per refused buy",
            refusal.redis_commands,
            redis_for_refusals,
            REFUSED,
        ),
        (
            "Redis round trips per refused buy",
            refusal.redis_round_trips,
            redis_for_refusals,
            REFUSED,
        ),
    ] {
        assert!(
            within(per_buy * buys as f64, seen, 0.05),
            "{figure}: the run says {per_buy}, Redis saw {seen} for {buys} buys"
        );
    }
    let pg_per_success = (batches + marked_sent) as f64 / STOCK as f64;
    assert!(
        within(success.db_transactions * STOCK as f64, pg_per_success * STOCK as f64, 0.05),
        "DB transactions per successful buy: the run says {}, PostgreSQL wrote the sale's rows in {pg_per_success}",
        success.db_transactions
    );
    assert_eq!(refusal.db_statements, 0.0, "{run:?}");
    // Every publish confirmed (the outbox rows are sent), so the tap holds them all. Orders
    // committed together are published as one message: at most one message per order.
    let routed = tap.messages().await;
    assert!(routed > 0 && i64::from(routed) <= STOCK, "{routed}");
    assert!(
        within(success.mq_publishes * STOCK as f64, f64::from(routed), 0.05),
        "MQ publishes per successful buy: the run says {}, RabbitMQ routed {routed} create-order messages for {STOCK} buys",
        success.mq_publishes
    );
    assert_eq!(refusal.mq_publishes, 0.0, "{run:?}");
    // The rest of the run: the buy endpoint's figures, and the one instance's cost.
    let buy = run
        .perf
        .endpoints
        .iter()
        .find(|endpoint| endpoint.route == "/api/seckill/buy")
        .expect("the buy endpoint");
    assert_eq!(buy.requests, (STOCK + REFUSED) as u64);
    assert_eq!(buy.errors.values().sum::<u64>(), REFUSED as u64);
    assert!(buy.p99_ms.is_some_and(|ms| ms > 0.0), "{buy:?}");
    assert_eq!(run.cost.instances.len(), 1, "{:?}", run.cost);
    assert!(run.cost.cpu_seconds > 0.0 && run.cost.instances[0].peak_memory_bytes > 0);
    // Every publish of the instance: the create-order messages and the pay timeouts.
    assert!(run.cost.redis_commands > 0 && run.cost.mq_publishes >= u64::from(routed));

    // Marking: a reason is required, SRE may not, ops may.
    let mark = format!("/admin/api/baselines/{}/mark", run.id);
    let (status, refused_mark) = json(
        app.post_json(&mark, Some(&ops), &json!({ "reason": " " }))
            .await,
    )
    .await;
    assert_eq!(
        (status, refused_mark["code"].as_str()),
        (400, Some("REASON_REQUIRED"))
    );
    let status = app
        .post_json(&mark, Some(&sre), &json!({ "reason": "x" }))
        .await
        .status();
    assert_eq!(status, 403);
    assert!(!runs(&app, &ops, activity_id).await[0].is_baseline);
    let (status, marked) = json(
        app.post_json(
            &mark,
            Some(&ops),
            &json!({ "reason": "the first clean sale" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{marked}");
    assert_eq!(marked["is_baseline"], true);
    assert!(runs(&app, &ops, activity_id).await[0].is_baseline);
    let audited: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM ops_audit WHERE action = 'baseline.mark' AND detail->>'reason' = 'the first clean sale'",
    )
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 1);

    // Live again: the dashboard holds each second against the baseline run.
    sqlx::query("UPDATE activities SET ends_at = now() + interval '1 hour' WHERE id = $1")
        .bind(activity_id)
        .execute(&app.db)
        .await
        .expect("reopen the activity");
    let against = Frames::open(&app, &ops)
        .await
        .against_baseline_of(activity_id)
        .await;
    assert_eq!(against.run_id, run.id);
    let p99 = against
        .figures
        .iter()
        .find(|figure| figure.name == "buy p99")
        .expect("the p99 against the baseline");
    assert_eq!(p99.baseline, buy.p99_ms);
    let commands = against
        .figures
        .iter()
        .find(|figure| figure.name == "Redis commands per successful buy")
        .expect("the path against the baseline");
    assert_eq!(commands.baseline, Some(success.redis_commands));

    // The Baselines page: the runs side by side, and a run whose buys make one more Redis
    // call each than the baseline's is flagged there (a rehearsal written as one would be).
    let mut path = run.path.clone();
    path.success.redis_commands += 1.0;
    sqlx::query(
        "INSERT INTO baseline_runs (activity_id, kind, started_at, ended_at, perf, cost, path)
         SELECT activity_id, 'rehearsal', started_at, ended_at, perf, cost, $2
         FROM baseline_runs WHERE id = $1",
    )
    .bind(run.id)
    .bind(sqlx::types::Json(&path))
    .execute(&app.db)
    .await
    .expect("a rehearsal run");
    let session = app.console_session(&ops).await;
    let page = app
        .console_page(&format!("/baselines?activity_id={activity_id}"), &session)
        .await;
    assert!(!page.contains("Not built yet"), "{page}");
    assert!(page.contains(&format!("data-run=\"{}\"", run.id)), "{page}");
    assert_eq!(
        page.matches("data-new-call=\"Redis commands\"").count(),
        1,
        "{page}"
    );
    assert!(page.contains("Mark as baseline"), "{page}");
}

/// A run as the leader records one, of `activity_id` (of its rehearsal `rehearsal_id`),
/// whose buys answered with this p99; its id.
async fn recorded_run(
    app: &TestApp,
    activity_id: i64,
    rehearsal_id: Option<i64>,
    p99_ms: f64,
) -> i64 {
    let perf = RunPerf {
        endpoints: vec![EndpointFigures {
            route: "/api/seckill/buy".into(),
            requests: 100,
            qps: 10.0,
            p99_ms: Some(p99_ms),
            ..EndpointFigures::default()
        }],
    };
    let buys = PathFigures {
        requests: 100,
        redis_round_trips: 2.0,
        redis_commands: 2.0,
        ..PathFigures::default()
    };
    let path = RunPath {
        success: buys.clone(),
        refused: buys,
    };
    let kind = if rehearsal_id.is_some() {
        "rehearsal"
    } else {
        "sale"
    };
    sqlx::query_scalar(
        "INSERT INTO baseline_runs (activity_id, kind, rehearsal_id, started_at, ended_at, perf, cost, path)
         VALUES ($1, $2, $3, now() - interval '2 hours', now() - interval '1 hour', $4, $5, $6)
         RETURNING id",
    )
    .bind(activity_id)
    .bind(kind)
    .bind(rehearsal_id)
    .bind(sqlx::types::Json(&perf))
    .bind(sqlx::types::Json(&RunCost::default()))
    .bind(sqlx::types::Json(&path))
    .fetch_one(&app.db)
    .await
    .expect("a run")
}

/// The readiness check's `rehearsal` verdict for `activity_id`.
async fn rehearsal_check(app: &TestApp, caller: &Caller, activity_id: i64) -> String {
    let path = format!("/admin/api/readiness?activity_id={activity_id}");
    let (status, body) = json(app.get(&path, Some(caller)).await).await;
    assert_eq!(status, 200, "{body}");
    let report: Readiness = serde_json::from_value(body).expect("a readiness report");
    let check = (report.checks.into_iter())
        .find(|check| check.name == ReadinessCheckName::Rehearsal)
        .expect("the rehearsal check");
    assert!(check.ok, "{}", check.detail);
    check.detail
}

#[tokio::test]
async fn an_activity_without_a_baseline_of_its_own_is_held_against_its_kind_s() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sre = app.caller(Role::Sre, None).await;
    let standard = Listing::storm(10, 1, &[]);
    let seats = ["A1".to_owned()];
    let last_week = upcoming_activity(&app, &merchant, &standard).await;
    let today = upcoming_activity(&app, &merchant, &standard).await;
    let seated = upcoming_activity(&app, &merchant, &Listing::storm(1, 1, &seats)).await;
    let (last_week, today, seated) = (last_week.activity_id, today.activity_id, seated.activity_id);
    let kind_run = recorded_run(&app, last_week, None, 18.0).await;

    // Marking for the kind: a scope other than the two is refused and changes nothing, SRE
    // may not, ops may, with the scope and the kind in the audit.
    let mark = format!("/admin/api/baselines/{kind_run}/mark");
    let (status, refused) = json(
        app.post_json(
            &mark,
            Some(&ops),
            &json!({ "reason": "x", "scope": "everything" }),
        )
        .await,
    )
    .await;
    assert_eq!(
        (status, refused["code"].as_str()),
        (400, Some("BAD_REQUEST"))
    );
    let status = app
        .post_json(
            &mark,
            Some(&sre),
            &json!({ "reason": "x", "scope": "kind" }),
        )
        .await
        .status();
    assert_eq!(status, 403);
    let listed = runs(&app, &ops, last_week).await;
    assert_eq!(listed[0].baseline_of_kind, None, "{listed:?}");
    let (status, marked) = json(
        app.post_json(
            &mark,
            Some(&ops),
            &json!({ "reason": "the standard sale to beat", "scope": "kind" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{marked}");
    assert_eq!(
        (
            marked["baseline_of_kind"].as_str(),
            marked["is_baseline"].as_bool()
        ),
        (Some("standard"), Some(false))
    );
    let listed = runs(&app, &ops, last_week).await;
    assert_eq!(
        (listed[0].baseline_of_kind, listed[0].is_baseline),
        (Some(ActivityKind::Standard), false)
    );
    let audited: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM ops_audit WHERE action = 'baseline.mark' AND target = $1
           AND detail->>'scope' = 'kind' AND detail->>'kind' = 'standard'
           AND detail->>'reason' = 'the standard sale to beat'
           AND (detail->>'activity_id')::BIGINT = $2",
    )
    .bind(format!("baseline_run:{kind_run}"))
    .bind(last_week)
    .fetch_one(&app.db)
    .await
    .expect("audit");
    assert_eq!(audited, 1);
    let session = app.console_session(&ops).await;
    let page = app
        .console_page(&format!("/baselines?activity_id={last_week}"), &session)
        .await;
    assert!(page.contains("data-kind-baseline=\"standard\""), "{page}");
    // The run's times as every console time: a `<time>` the browser shows in the viewer's zone.
    for time in [&listed[0].started_at, &listed[0].ended_at] {
        assert!(
            page.contains(&format!(r#"<time datetime="{time}""#)),
            "{time} not in a time cell: {page}"
        );
    }

    // Today's sale has no baseline of its own: its rehearsal is held against the kind's.
    let rehearsal: i64 = sqlx::query_scalar(
        "INSERT INTO rehearsals (activity_id, buyers, rate_per_s, source, actor, reason, status, stage)
         VALUES ($1, 10, 10, 'api', 'ops', 'drill', 'passed', 'done') RETURNING id",
    )
    .bind(today)
    .fetch_one(&app.db)
    .await
    .expect("a rehearsal");
    recorded_run(&app, today, Some(rehearsal), 20.0).await;
    let detail = rehearsal_check(&app, &sre, today).await;
    assert!(
        detail.contains(&format!(
            "within baseline run #{kind_run} (its kind's baseline, a run of activity #{last_week})"
        )),
        "{detail}"
    );
    let page = app
        .console_page(&format!("/baselines?activity_id={today}"), &session)
        .await;
    assert!(
        page.contains("Mark as baseline of all standard activities"),
        "{page}"
    );
    // Its page shows the kind's run beside its own, and flags a call per buy the kind's run
    // did not have.
    assert!(
        page.contains(&format!("#{kind_run} sale of activity #{last_week}")),
        "{page}"
    );
    assert_eq!(page.matches("data-new-call=").count(), 0, "{page}");
    let more_calls = |commands: f64| {
        sqlx::query(
            "UPDATE baseline_runs SET path = jsonb_set(path, '{success,redis_commands}', to_jsonb($2::FLOAT8))
             WHERE rehearsal_id = $1",
        )
        .bind(rehearsal)
        .bind(commands)
        .execute(&app.db)
    };
    more_calls(3.0)
        .await
        .expect("one more Redis command per buy");
    let page = app
        .console_page(&format!("/baselines?activity_id={today}"), &session)
        .await;
    assert_eq!(
        page.matches("data-new-call=\"Redis commands\"").count(),
        1,
        "{page}"
    );
    more_calls(2.0).await.expect("as before");

    // On sale: today's is held against the standard kind's run; the seated one, of another
    // kind, against nothing.
    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 minute' WHERE id = ANY($1)")
        .bind(vec![today, seated])
        .execute(&app.db)
        .await
        .expect("open the sales");
    let mut frames = Frames::open(&app, &ops).await;
    let views = frames
        .against_baselines_with(|against| against.activity_id == today)
        .await;
    let against = views
        .iter()
        .find(|against| against.activity_id == today)
        .expect("today's");
    assert_eq!(
        (against.run_id, against.run_activity_id, against.scope),
        (kind_run, last_week, BaselineScope::Kind)
    );
    assert!(
        views.iter().all(|against| against.activity_id != seated),
        "{views:?}"
    );

    // Its own baseline, once marked, wins over its kind's.
    let own_run = recorded_run(&app, today, None, 25.0).await;
    let (status, marked) = json(
        app.post_json(
            &format!("/admin/api/baselines/{own_run}/mark"),
            Some(&ops),
            &json!({ "reason": "today's own" }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{marked}");
    let views = frames
        .against_baselines_with(|against| against.activity_id == today && against.run_id == own_run)
        .await;
    let against = views
        .iter()
        .find(|against| against.activity_id == today)
        .expect("today's");
    assert_eq!(
        (against.run_activity_id, against.scope),
        (today, BaselineScope::Activity)
    );
    let detail = rehearsal_check(&app, &sre, today).await;
    assert!(
        detail.contains(&format!("within baseline run #{own_run}:")),
        "{detail}"
    );
}
