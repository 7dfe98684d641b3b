//! The live dashboard's stream: frames read over HTTP as a browser's `EventSource` would,
//! while buys happen; and the console page around it.

use crate::support::{
    app::{spawn_app, TestApp},
    fixtures::{buy_body, open_sale, Caller},
    wait::{until, PATIENCE},
};
use contract::{AgainstBaseline, DashboardFrame, Role};
use reqwest::Response;
use std::{
    collections::BTreeMap,
    time::{Duration, Instant},
};

const STREAM: &str = "/admin/api/dashboard/stream";

/// The events of one open stream, read as they come.
pub(crate) struct Frames {
    response: Response,
    buffer: String,
}

impl Frames {
    pub(crate) async fn open(app: &TestApp, caller: &Caller) -> Self {
        let response = app.get(STREAM, Some(caller)).await;
        assert_eq!(response.status(), 200);
        let content_type = response.headers()["content-type"].to_str().expect("text");
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        Self {
            response,
            buffer: String::new(),
        }
    }

    /// The first frame's view of `activity_id` against its baseline run (within 20 s).
    pub(crate) async fn against_baseline_of(&mut self, activity_id: i64) -> AgainstBaseline {
        let is_of = |against: &AgainstBaseline| against.activity_id == activity_id;
        let views = self.against_baselines_with(is_of).await;
        views
            .into_iter()
            .find(is_of)
            .expect("the view it was chosen by")
    }

    /// The views against a baseline of every activity, in the first frame (within 20 s)
    /// with a view that `wanted` accepts.
    pub(crate) async fn against_baselines_with(
        &mut self,
        wanted: impl Fn(&AgainstBaseline) -> bool,
    ) -> Vec<AgainstBaseline> {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let frame = self.next().await;
            if frame.against_baseline.iter().any(&wanted) {
                return frame.against_baseline;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no frame against the baseline"
            );
        }
    }

    /// The next `frame` event (keep-alive comments skipped).
    pub(crate) async fn next(&mut self) -> DashboardFrame {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                let data: Vec<&str> = event
                    .lines()
                    .filter_map(|line| line.strip_prefix("data:"))
                    .map(|data| data.strip_prefix(' ').unwrap_or(data))
                    .collect();
                if data.is_empty() {
                    continue;
                }
                assert!(event.contains("event: frame"), "{event}");
                return serde_json::from_str(&data.join("\n")).expect("a frame");
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .expect("a frame within 10 s")
                .expect("the stream reads")
                .expect("the stream stays open");
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }
}

/// `seckill_funnel_requests_total` per (stage, outcome) as `/metrics` says now.
async fn funnel_on_metrics(app: &TestApp) -> BTreeMap<(String, String), u64> {
    let text = app
        .get("/metrics", None)
        .await
        .text()
        .await
        .expect("metrics");
    text.lines()
        .filter_map(|line| line.strip_prefix("seckill_funnel_requests_total{"))
        .map(|rest| {
            let (labels, value) = rest.split_once("} ").expect("a sample");
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                    .and_then(|value| value.strip_suffix('"'))
                    .expect("label")
                    .to_owned()
            };
            let count = value.trim().parse::<f64>().expect("count") as u64;
            ((label("stage"), label("outcome")), count)
        })
        .collect()
}

/// What the frames say each (stage, outcome) counted, summed over the frames.
fn add_up(totals: &mut BTreeMap<(String, String), u64>, frame: &DashboardFrame) {
    for stage in &frame.funnel {
        let passed = std::iter::once(("pass".to_owned(), stage.passed));
        for (outcome, count) in passed.chain(stage.stopped.clone()) {
            *totals.entry((stage.stage.clone(), outcome)).or_default() += count;
        }
    }
    totals.retain(|_, count| *count > 0);
}

#[tokio::test]
async fn frames_come_once_a_second_after_the_recent_ones_and_add_up_to_the_metrics() {
    let app = spawn_app().await;
    let sale = open_sale(&app, 10, 1).await;
    let sre = app.caller(Role::Sre, None).await;

    // A first viewer sees frames arrive about once a second.
    let mut first = Frames::open(&app, &sre).await;
    let mut seen = Vec::new();
    while seen.len() < 4 {
        seen.push(first.next().await);
    }
    drop(first);

    // Buys while nobody watches: six buyers for ten units, one of them twice.
    let body = buy_body(&sale, 1);
    for user in 1..=6 {
        app.bought(user, &format!("dash-{user}"), &body).await;
    }
    let (status, _) = app.buy(1, "dash-again", &body).await;
    assert_eq!(status, 409, "one unit per buyer");
    let expected = funnel_on_metrics(&app).await;
    assert!(expected.values().sum::<u64>() > 0);

    // A new viewer gets the recent frames at once, then live ones, until the funnel counts
    // summed over every frame since the instance started equal the metrics.
    let connected_ms = chrono::Utc::now().timestamp_millis();
    let opened = Instant::now();
    let mut second = Frames::open(&app, &sre).await;
    let backlog = [
        second.next().await,
        second.next().await,
        second.next().await,
    ];
    // Live frames, one a second, would take two seconds for three; a loaded machine may
    // take a while to open the stream, so the bound stays well under that, not under one.
    assert!(
        opened.elapsed() < Duration::from_millis(1800),
        "the recent frames come at once, not one a second"
    );
    assert!(
        backlog[0].at_ms < connected_ms - 2000,
        "{}",
        backlog[0].at_ms
    );
    let mut summed = BTreeMap::new();
    let mut frames: Vec<DashboardFrame> = backlog.to_vec();
    for frame in &frames {
        add_up(&mut summed, frame);
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while summed != expected {
        assert!(
            Instant::now() < deadline,
            "frames say {summed:?}, metrics {expected:?}"
        );
        let frame = second.next().await;
        add_up(&mut summed, &frame);
        frames.push(frame);
    }
    // Every frame the instance took is there once, a second apart (the first viewer's too).
    for pair in frames.windows(2) {
        let step = pair[1].at_ms - pair[0].at_ms;
        assert!((500..=3000).contains(&step), "frames {step} ms apart");
    }
    assert!(seen.iter().all(|frame| frames.contains(frame)));
    let buys: u64 = frames.iter().map(|frame| frame.buy.requests).sum();
    assert_eq!(buys, 7, "every buy request counted once");
    assert!(frames
        .iter()
        .any(|frame| frame.buy.p99_ms.is_some_and(|p99| p99 > 0.0)));

    // The live figures: the sale's stock as Redis holds it, this instance, the pool.
    let last = second.next().await;
    let item = last
        .items
        .iter()
        .find(|item| item.activity_id == sale.activity_id && item.item_id == sale.item_id)
        .expect("the live item");
    assert_eq!(item.redis_stock, Some(app.redis_stock(&sale).await));
    assert_eq!((item.total, item.redis_stock), (10, Some(4)));
    assert!(last
        .instances
        .iter()
        .any(|instance| instance.node_id == last.node_id));
    assert!(last.db_pool.size >= last.db_pool.idle && last.db_pool.max >= last.db_pool.size);
    assert!(
        last.switches.contains_key("switches/deduction"),
        "{:?}",
        last.switches
    );
    assert_eq!(last.funnel[0].stage, "admission", "stages in funnel order");
}

#[tokio::test]
async fn only_roles_that_watch_operations_get_the_stream() {
    let app = spawn_app().await;
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let response = app.get(STREAM, Some(&merchant)).await;
    assert_eq!(response.status(), 403);
    assert_eq!(app.get(STREAM, None).await.status(), 401);
    let ops = app.caller(Role::Ops, None).await;
    let mut frames = Frames::open(&app, &ops).await;
    assert!(frames.next().await.at_ms > 0);
}

#[tokio::test]
async fn the_console_page_draws_the_recent_frames_for_sre_and_refuses_merchants() {
    let app = spawn_app().await;
    let sale = open_sale(&app, 5, 1).await;
    app.bought(1, "dash-page", &buy_body(&sale, 1)).await;
    let sre = app.caller(Role::Sre, None).await;
    // Once a frame has counted the buy, the page has something to draw.
    let mut frames = Frames::open(&app, &sre).await;
    while frames.next().await.buy.requests == 0 {}
    drop(frames);

    let session = app.console_session(&sre).await;
    let html = app.console_page("/dashboard", &session).await;
    assert!(html.contains(r#"id="dashboard""#), "{html}");
    assert!(html.contains(r#"data-link="connecting""#), "{html}");
    for part in [
        r#"data-stage="admission""#,
        r#"id="chart-qps""#,
        r#"id="chart-p99""#,
        "<polyline",
        &format!(r#"data-item="{}-{}""#, sale.activity_id, sale.item_id),
        r#"id="instances""#,
        "switches/deduction",
    ] {
        assert!(html.contains(part), "{part} missing from {html}");
    }
    assert!(!html.contains("Not built yet"), "{html}");

    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let session = app.console_session(&merchant).await;
    let html = app.console_page("/dashboard", &session).await;
    assert!(!html.contains(r#"id="dashboard""#), "{html}");
    assert!(html.contains("your role may not do this"), "{html}");
}

#[tokio::test]
async fn paid_units_keep_their_last_count_between_the_counts() {
    let app = spawn_app().await;
    let sale = open_sale(&app, 10, 1).await;
    let sre = app.caller(Role::Sre, None).await;
    let order = app.bought(1, "dash-paid", &buy_body(&sale, 1)).await;
    // Once the pipeline has made it UNPAID, the order is paid as the payment's notice would.
    until("the order is paid", PATIENCE, || async {
        sqlx::query("UPDATE orders SET status = 'PAID' WHERE id = $1 AND status = 'UNPAID'")
            .bind(order)
            .execute(&app.db)
            .await
            .expect("pay")
            .rows_affected()
            == 1
    })
    .await;

    // Paid units are counted every tenth frame: the first frame that shows the order, then
    // the frames after it, which did not count, must still show it.
    let paid_of = |frame: &DashboardFrame| {
        frame
            .items
            .iter()
            .find(|item| item.activity_id == sale.activity_id && item.item_id == sale.item_id)
            .map(|item| item.paid)
    };
    let mut frames = Frames::open(&app, &sre).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    while paid_of(&frames.next().await) != Some(1) {
        assert!(Instant::now() < deadline, "no frame counted the paid order");
    }
    for after in 1..=3 {
        let frame = frames.next().await;
        assert_eq!(paid_of(&frame), Some(1), "frame {after} after the count");
    }
    let series = format!(
        r#"seckill_item_units{{activity="{}",figure="paid",item="{}"}}"#,
        sale.activity_id, sale.item_id
    );
    assert_eq!(
        app.metric(&series).await,
        1.0,
        "{series} between the counts"
    );
}
