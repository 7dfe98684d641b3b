//! Buyer events (`GET /api/events`, docs/buyer-events.md) against the real stores: an
//! order's change made on one instance reaches the stream another instance holds within a
//! second; `Last-Event-ID` resumes with exactly the missed events; a buyer's second stream
//! replaces his first; `[events] max_streams` answers 503 `OVERLOADED`; bad input is refused
//! with a code and opens nothing; an idle stream gets its heartbeat.

use crate::{
    payment::sale_with_timeout,
    support::{
        app::{json, spawn_app_with, TestApp},
        fixtures::{buy_body, open_sale, storm_settings, token, Sale},
        wait::{until, PATIENCE},
    },
};
use base::config::Settings;
use contract::{
    ActivityId, BuyerEvent, OrderStatus, RegistrationEvent, RegistrationStatus, UserId,
};
use reqwest::{RequestBuilder, Response};
use serde_json::Value;
use uuid::Uuid;

/// The SSE frames of one open stream, read as they come.
struct Stream {
    response: Response,
    buffer: String,
}

/// One frame: its fields (`id`, `event`, `data`) and comments.
#[derive(Debug, Default)]
struct Frame {
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
    comments: Vec<String>,
}

impl Frame {
    fn data(&self) -> Value {
        serde_json::from_str(self.data.as_deref().expect("data")).expect("JSON data")
    }
}

impl Stream {
    /// Opens buyer `user`'s stream of the activity on `app`, after `Last-Event-ID: resume`
    /// if given, and reads its opening comment: from then on the instance holds it.
    async fn open(app: &TestApp, user: i64, activity_id: i64, resume: Option<&str>) -> Self {
        let response = ask(app, activity_id, Some(&token(app, user)), resume).await;
        assert_eq!(response.status(), 200, "{:?}", response.text().await);
        let content_type = response.headers()["content-type"].to_str().expect("text");
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}"
        );
        let mut stream = Self {
            response,
            buffer: String::new(),
        };
        let opening = stream.frame().await.expect("the opening frame");
        assert_eq!(opening.comments, ["open"], "{opening:?}");
        stream
    }

    /// The next frame; `None` once the server ended the stream.
    async fn frame(&mut self) -> Option<Frame> {
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let text: String = self.buffer.drain(..end + 2).collect();
                let mut frame = Frame::default();
                for line in text.lines() {
                    if let Some(comment) = line.strip_prefix(':') {
                        frame.comments.push(comment.trim().to_owned());
                        continue;
                    }
                    let (field, value) = line.split_once(':').unwrap_or((line, ""));
                    let value = value.strip_prefix(' ').unwrap_or(value).to_owned();
                    match field {
                        "id" => frame.id = Some(value),
                        "event" => frame.event = Some(value),
                        "data" => frame.data = Some(value),
                        _ => {}
                    }
                }
                return Some(frame);
            }
            let chunk = tokio::time::timeout(PATIENCE, self.response.chunk())
                .await
                .expect("a frame in time")
                .expect("the stream reads")?;
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// The next event of the buyer's own (comments and the sale's `units` skipped).
    async fn event(&mut self) -> Frame {
        loop {
            let frame = self.frame().await.expect("the stream stays open");
            if frame.event.is_some() && frame.event.as_deref() != Some("units") {
                return frame;
            }
        }
    }

    /// The next event, which must be an `order` event; (its id, order id, status).
    async fn order(&mut self) -> (String, Uuid, String) {
        let frame = self.event().await;
        assert_eq!(frame.event.as_deref(), Some("order"), "{frame:?}");
        let data = frame.data();
        (
            frame.id.clone().expect("an id"),
            data["order_id"]
                .as_str()
                .expect("order id")
                .parse()
                .expect("uuid"),
            data["status"].as_str().expect("status").to_owned(),
        )
    }
}

/// `GET /api/events?activity_id=` with `token` and `Last-Event-ID` if given.
async fn ask(
    app: &TestApp,
    activity_id: impl std::fmt::Display,
    token: Option<&str>,
    resume: Option<&str>,
) -> Response {
    let mut request: RequestBuilder = app.client.get(format!(
        "{}/api/events?activity_id={activity_id}",
        app.address
    ));
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    if let Some(resume) = resume {
        request = request.header("Last-Event-ID", resume);
    }
    request.send().await.expect("sent")
}

impl TestApp {
    /// A buy of one unit that must succeed; its order id.
    async fn one_unit(&self, sale: &Sale, user: i64, request_id: &str) -> Uuid {
        self.bought(user, request_id, &buy_body(sale, 1)).await
    }

    /// When the order last changed, by the database's clock.
    async fn changed_at(&self, order_id: Uuid) -> chrono::DateTime<chrono::Utc> {
        sqlx::query_scalar("SELECT updated_at FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_one(&self.db)
            .await
            .expect("order")
    }

    /// Waits until the buyer's log of the activity holds `count` events.
    async fn logged(&self, sale: &Sale, user: i64, count: usize) {
        let key = self
            .state
            .redis
            .key(format_args!("{{e{}}}:u{user}:events", sale.activity_id));
        until(&format!("{count} events in {key}"), PATIENCE, || async {
            let held: usize = redis::cmd("XLEN")
                .arg(&key)
                .query_async(&mut self.state.redis.connection())
                .await
                .expect("XLEN");
            held == count
        })
        .await;
    }

    /// `seckill_event_streams_open` now.
    async fn streams_open(&self) -> f64 {
        self.metric("seckill_event_streams_open").await
    }
}

/// Storm limits, and a heartbeat every second: a stream whose client went away is let go at
/// its next write, so a test waiting for that waits a second, not fifteen.
fn beating_every_second(settings: &mut Settings) {
    storm_settings(settings);
    settings.events.heartbeat_s = 1;
}

/// Asserts the stream's next event is `order_id` in `status`, arrived within a second of
/// the change the database recorded; its event id.
async fn within_a_second(
    stream: &mut Stream,
    app: &TestApp,
    order_id: Uuid,
    status: &str,
) -> String {
    let (id, order, said) = stream.order().await;
    let arrived = chrono::Utc::now();
    assert_eq!((order, said.as_str()), (order_id, status));
    let late = arrived - app.changed_at(order_id).await;
    assert!(
        late < chrono::Duration::seconds(1),
        "{status} of {order_id} reached the stream {late} after the change"
    );
    id
}

#[tokio::test]
async fn an_order_changed_on_one_instance_reaches_a_stream_held_by_another_within_a_second() {
    // The instance that changes orders: the pipeline's consumers, the pay timeout and the
    // payment center's callbacks run there; the one holding the streams runs no worker.
    let changer = spawn_app_with(storm_settings).await;
    let holder = changer
        .spawn_sibling(|settings| settings.workers = false)
        .await;
    let sale = sale_with_timeout(&changer, 10, 2).await;
    let (payer, idler) = (31, 32);
    let mut paying = Stream::open(&holder, payer, sale.activity_id, None).await;
    let mut idling = Stream::open(&holder, idler, sale.activity_id, None).await;

    // Bought through the holder, completed by the changer's consumer.
    let paid = holder.one_unit(&sale, payer, "events-pay").await;
    within_a_second(&mut paying, &changer, paid, "UNPAID").await;
    let (status, body) = changer.pay(payer, paid).await;
    assert_eq!(status, 200, "{body}");
    within_a_second(&mut paying, &changer, paid, "PAID").await;

    // Not paid: cancelled by the changer's pay timeout.
    let unpaid = holder.one_unit(&sale, idler, "events-idle").await;
    within_a_second(&mut idling, &changer, unpaid, "UNPAID").await;
    within_a_second(&mut idling, &changer, unpaid, "CANCELLED").await;
    assert!(holder.metric("seckill_buyer_events_delivered_total").await >= 4.0);
}

#[tokio::test]
async fn last_event_id_resumes_with_exactly_the_events_missed() {
    let app = spawn_app_with(beating_every_second).await;
    let sale = open_sale(&app, 10, 2).await;
    let buyer = 41;
    let mut first = Stream::open(&app, buyer, sale.activity_id, None).await;
    let earlier = app.one_unit(&sale, buyer, "resume-1").await;
    let (seen, _, _) = first.order().await;
    drop(first);
    until("the stream to be let go", PATIENCE, || async {
        app.streams_open().await == 0.0
    })
    .await;

    // While no stream is open: the first order paid, a second bought and completed.
    let (status, body) = app.pay(buyer, earlier).await;
    assert_eq!(status, 200, "{body}");
    let later = app.one_unit(&sale, buyer, "resume-2").await;
    app.logged(&sale, buyer, 3).await;

    let mut resumed = Stream::open(&app, buyer, sale.activity_id, Some(&seen)).await;
    let mut missed = vec![resumed.order().await, resumed.order().await];
    assert!(missed[0].0.parse::<Id>().expect("id") > seen.parse().expect("id"));
    assert!(missed[1].0.parse::<Id>().expect("id") > missed[0].0.parse().expect("id"));
    missed.sort_by_key(|(_, order, _)| *order == later);
    let missed: Vec<(Uuid, String)> = missed.into_iter().map(|(_, o, s)| (o, s)).collect();
    assert_eq!(
        missed,
        [(earlier, "PAID".to_owned()), (later, "UNPAID".to_owned())]
    );
    // Nothing more of the log: the next event is one published now.
    let marker = publish_marker(&app, &sale, buyer);
    let next = resumed.event().await;
    assert_eq!(next.event.as_deref(), Some("registration"), "{next:?}");
    assert_eq!(next.data(), marker);

    // A stream without Last-Event-ID starts with what comes next, not the log.
    drop(resumed);
    let mut fresh = Stream::open(&app, buyer, sale.activity_id, None).await;
    let marker = publish_marker(&app, &sale, buyer);
    assert_eq!(fresh.event().await.data(), marker);
    assert_eq!(
        app.metric("seckill_buyer_events_delivered_total{kind=\"order\",via=\"resumed\"}")
            .await,
        2.0
    );
}

/// A `registration` event published now through the product's publisher; its data.
fn publish_marker(app: &TestApp, sale: &Sale, buyer: i64) -> Value {
    let event = RegistrationEvent {
        item_id: sale.item_id,
        status: RegistrationStatus::Registered,
        code: None,
        code_valid_from_ms: None,
        code_expires_ms: None,
        waitlist_position: None,
    };
    let data = serde_json::to_value(&event).expect("JSON");
    app.state.events.publish(
        ActivityId(sale.activity_id),
        UserId(buyer),
        BuyerEvent::Registration(event),
    );
    data
}

/// An event id as the stream writes it, ordered as the server orders them.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Id(u64, u64);

impl std::str::FromStr for Id {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let (ms, seq) = text.split_once('-').ok_or(text)?;
        Ok(Id(
            ms.parse().map_err(|_| text.to_owned())?,
            seq.parse().map_err(|_| text.to_owned())?,
        ))
    }
}

#[tokio::test]
async fn a_buyers_second_stream_replaces_his_first() {
    let app = spawn_app_with(storm_settings).await;
    let sale = open_sale(&app, 10, 1).await;
    let buyer = 51;
    let mut first = Stream::open(&app, buyer, sale.activity_id, None).await;
    let mut second = Stream::open(&app, buyer, sale.activity_id, None).await;
    let replaced = first.event().await;
    assert_eq!(replaced.event.as_deref(), Some("replaced"), "{replaced:?}");
    assert!(first.frame().await.is_none(), "the first stream ended");
    assert_eq!(app.streams_open().await, 1.0);
    let order = app.one_unit(&sale, buyer, "replace").await;
    let (_, got, status) = second.order().await;
    assert_eq!(
        (got, status.as_str()),
        (order, OrderStatus::Unpaid.as_str())
    );
    assert_eq!(
        app.metric("seckill_event_streams_total{outcome=\"replaced\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn past_max_streams_an_instance_answers_503_overloaded() {
    let app = spawn_app_with(|settings: &mut Settings| {
        beating_every_second(settings);
        settings.events.max_streams = 2;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let _first = Stream::open(&app, 61, sale.activity_id, None).await;
    let second = Stream::open(&app, 62, sale.activity_id, None).await;
    let (status, body) =
        json(ask(&app, sale.activity_id, Some(&token(&app, 63)), None).await).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (503, Some("OVERLOADED")),
        "{body}"
    );
    // A buyer who holds one replaces it, full or not.
    let _again = Stream::open(&app, 61, sale.activity_id, None).await;
    drop(second);
    until("a stream to be let go", PATIENCE, || async {
        app.streams_open().await == 1.0
    })
    .await;
    let _third = Stream::open(&app, 63, sale.activity_id, None).await;
    assert_eq!(
        app.metric("seckill_event_streams_total{outcome=\"overloaded\"}")
            .await,
        1.0
    );
}

#[tokio::test]
async fn bad_asks_for_a_stream_are_refused_with_a_code_and_hold_nothing() {
    let app = spawn_app_with(beating_every_second).await;
    let sale = open_sale(&app, 10, 1).await;
    let good = token(&app, 71);
    let forged = sale::identity::buyer_token::mint(
        &"not the deployment's secret".to_owned().into(),
        71,
        chrono::Duration::hours(1),
    )
    .expect("token");
    let activity = sale.activity_id.to_string();
    for (activity_id, token, resume, status, code) in [
        (activity.as_str(), None, None, 401, "UNAUTHENTICATED"),
        (
            activity.as_str(),
            Some(forged.as_str()),
            None,
            401,
            "UNAUTHENTICATED",
        ),
        ("", Some(good.as_str()), None, 400, "BAD_REQUEST"),
        ("seven", Some(good.as_str()), None, 400, "BAD_REQUEST"),
        ("9999999", Some(good.as_str()), None, 404, "NOT_FOUND"),
        (
            activity.as_str(),
            Some(good.as_str()),
            Some("last"),
            400,
            "INVALID_LAST_EVENT_ID",
        ),
        (
            activity.as_str(),
            Some(good.as_str()),
            Some("1-2-3"),
            400,
            "INVALID_LAST_EVENT_ID",
        ),
    ] {
        let (got, body) = json(ask(&app, activity_id, token, resume).await).await;
        assert_eq!(
            (got, body["code"].as_str()),
            (status, Some(code)),
            "{activity_id:?} {resume:?}: {body}"
        );
    }
    let (got, body) = json(
        app.client
            .get(format!("{}/api/events", app.address))
            .bearer_auth(&good)
            .send()
            .await
            .expect("sent"),
    )
    .await;
    assert_eq!(
        (got, body["code"].as_str()),
        (400, Some("BAD_REQUEST")),
        "{body}"
    );
    assert_eq!(app.streams_open().await, 0.0);
    assert_eq!(app.metric("seckill_event_streams_total").await, 0.0);

    // A good one, left idle, is told the sale's units left (no id: they are in no buyer's
    // log) and hears its heartbeat.
    let mut idle = Stream::open(&app, 71, sale.activity_id, None).await;
    let (mut units, mut beat) = (None, None);
    while units.is_none() || beat.is_none() {
        let frame = idle.frame().await.expect("a frame");
        match frame.event.as_deref() {
            Some("units") => units = Some(frame),
            _ => beat = Some(frame),
        }
    }
    let (units, beat) = (units.expect("units"), beat.expect("heartbeat"));
    assert_eq!(units.id, None, "{units:?}");
    assert_eq!(
        units.data()["items"][0]["item_id"].as_i64(),
        Some(sale.item_id),
        "{units:?}"
    );
    assert_eq!(units.data()["items"][0]["sold_out"], false, "{units:?}");
    assert_eq!(beat.comments, ["heartbeat"], "{beat:?}");
    assert!(beat.event.is_none(), "{beat:?}");
}
