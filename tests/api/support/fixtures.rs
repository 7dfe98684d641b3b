//! What tests set up and act with, shared by every test file: staff users with API tokens
//! and console sessions, buyer tokens, merchants' items in activities (pre-warmed and open
//! when a test buys), buys one at a time or in storms, the stock they leave behind and the
//! outbox rows their orders went in, and a clock a test moves by hand.
//! A helper that only one test file needs stays beside its tests, private.

use super::app::{json, TestApp};
use base::config::Settings;
use contract::Role;
use futures::{stream, StreamExt};
use sale::{
    buy::challenge::Clock,
    identity::{buyer_token, secret_token, users},
    orders::mq::message::{CreateOrders, OrderCreated},
};
use seckill::cli::create_user;
use serde_json::{json, Value};
use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicI64, Ordering},
        Arc,
    },
    time::Duration,
};
use uuid::Uuid;

/// An admin API caller: a user with a bearer token (and a password to log in with).
pub(crate) struct Caller {
    pub(crate) token: String,
    pub(crate) username: String,
    pub(crate) password: String,
}

impl TestApp {
    /// A user of `role` (merchants belong to `merchant`) with a fresh API token.
    pub(crate) async fn caller(&self, role: Role, merchant: Option<&str>) -> Caller {
        let username = format!("{}-{}", role, &Uuid::new_v4().simple().to_string()[..8]);
        let password = format!("pw-{}", Uuid::new_v4().simple());
        let actor = create_user(&self.db, &username, &password, role, merchant)
            .await
            .expect("create user");
        let token = secret_token::generate();
        users::create_api_token(
            &self.db,
            actor.user_id,
            &secret_token::digest(&token),
            "test",
        )
        .await
        .expect("create token");
        Caller {
            token,
            username,
            password,
        }
    }

    /// A console session for `caller`, as the login page would set it.
    pub(crate) async fn console_session(&self, caller: &Caller) -> String {
        self.state
            .auth
            .login(&caller.username, &caller.password, None)
            .await
            .expect("login")
            .token
    }
}

/// A buyer's bearer token, valid for an hour.
pub(crate) fn token(app: &TestApp, user_id: i64) -> String {
    buyer_token::mint(
        &app.state.settings.jwt_secret,
        user_id,
        chrono::Duration::hours(1),
    )
    .expect("token")
}

/// Limits loose enough that a storm from one address is decided by stock, not by rate.
pub(crate) fn storm_settings(settings: &mut Settings) {
    settings.buy.per_ip_per_window = 1_000_000;
    settings.buy.per_item_per_window = 1_000_000;
}

/// One item of one activity.
#[derive(Clone, Copy)]
pub(crate) struct Sale {
    pub(crate) activity_id: i64,
    pub(crate) item_id: i64,
}

/// What an activity of one item sells, and to whom.
pub(crate) struct Listing<'a> {
    pub(crate) title: &'a str,
    pub(crate) stock: i64,
    pub(crate) per_user_limit: i64,
    pub(crate) price_cents: i64,
    /// Seat codes of a seated activity (stock must equal their count); empty: standard.
    pub(crate) seats: &'a [String],
}

impl<'a> Listing<'a> {
    /// The buyer tests' sale: 49.90 a unit.
    pub(crate) fn storm(stock: i64, per_user_limit: i64, seats: &'a [String]) -> Self {
        Self {
            title: "Storm",
            stock,
            per_user_limit,
            price_cents: 4990,
            seats,
        }
    }
}

/// A merchant's item in an activity starting in an hour, not pre-warmed.
pub(crate) async fn upcoming_activity(
    app: &TestApp,
    merchant: &Caller,
    listing: &Listing<'_>,
) -> Sale {
    upcoming_activity_of(app, merchant, listing, 1).await[0]
}

/// `count` items of a merchant, each listed alike, in one activity starting in an hour, not
/// pre-warmed.
async fn upcoming_activity_of(
    app: &TestApp,
    merchant: &Caller,
    listing: &Listing<'_>,
    count: usize,
) -> Vec<Sale> {
    let kind = if listing.seats.is_empty() {
        "standard"
    } else {
        "seated"
    };
    let mut items = Vec::with_capacity(count);
    for _ in 0..count {
        let (status, item) = json(
            app.post_json(
                "/admin/api/items",
                Some(merchant),
                &json!({ "name": format!("{} item", listing.title), "price_cents": listing.price_cents }),
            )
            .await,
        )
        .await;
        assert_eq!(status, 201, "{item}");
        items.push(item["id"].as_i64().expect("item id"));
    }
    let starts = chrono::Utc::now() + chrono::Duration::hours(1);
    let listed: Vec<Value> = items
        .iter()
        .map(|item_id| {
            json!({
                "item_id": item_id, "stock": listing.stock,
                "per_user_limit": listing.per_user_limit, "price_cents": listing.price_cents,
            })
        })
        .collect();
    let (status, activity) = json(
        app.post_json(
            "/admin/api/activities",
            Some(merchant),
            &json!({
                "title": listing.title, "kind": kind, "pay_timeout_s": 900, "seats": listing.seats,
                "starts_at": starts, "ends_at": starts + chrono::Duration::hours(1),
                "items": listed,
            }),
        )
        .await,
    )
    .await;
    assert_eq!(status, 201, "{activity}");
    let activity_id = activity["id"].as_i64().expect("id");
    items
        .into_iter()
        .map(|item_id| Sale {
            activity_id,
            item_id,
        })
        .collect()
}

/// Pre-warms the sale's activity as `ops`.
pub(crate) async fn prewarm(app: &TestApp, ops: &Caller, sale: &Sale) {
    let activity_id = sale.activity_id;
    let (status, report) = json(
        app.post_json(
            &format!("/admin/api/activities/{activity_id}/prewarm"),
            Some(ops),
            &json!({}),
        )
        .await,
    )
    .await;
    assert_eq!(status, 200, "{report}");
}

/// Pre-warms the sale's activity as `ops`, then opens it (its start moved into the past).
async fn prewarm_and_open(app: &TestApp, ops: &Caller, sale: &Sale) {
    let activity_id = sale.activity_id;
    prewarm(app, ops, sale).await;
    sqlx::query("UPDATE activities SET starts_at = now() - interval '1 minute', ends_at = now() + interval '1 hour' WHERE id = $1")
        .bind(activity_id)
        .execute(&app.db)
        .await
        .expect("open the sale");
}

/// An activity with one item, pre-warmed by ops, then opened.
pub(crate) async fn open_sale(app: &TestApp, stock: i64, per_user_limit: i64) -> Sale {
    open_activity(app, stock, per_user_limit, &[]).await
}

/// The same, seated when `seats` is not empty (stock must then equal the seat count).
pub(crate) async fn open_activity(
    app: &TestApp,
    stock: i64,
    per_user_limit: i64,
    seats: &[String],
) -> Sale {
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let sale = upcoming_activity(
        app,
        &merchant,
        &Listing::storm(stock, per_user_limit, seats),
    )
    .await;
    prewarm_and_open(app, &ops, &sale).await;
    sale
}

/// An activity of `count` items, each with `stock` units and `per_user_limit`, pre-warmed by
/// ops, then opened.
pub(crate) async fn open_sale_of(
    app: &TestApp,
    count: usize,
    stock: i64,
    per_user_limit: i64,
) -> Vec<Sale> {
    let merchant = app.caller(Role::Merchant, Some("acme")).await;
    let ops = app.caller(Role::Ops, None).await;
    let listing = Listing::storm(stock, per_user_limit, &[]);
    let sales = upcoming_activity_of(app, &merchant, &listing, count).await;
    prewarm_and_open(app, &ops, &sales[0]).await;
    sales
}

/// One merchant's activity with one item (500 units at 9.90, five per buyer), upcoming.
pub(crate) struct Shop {
    pub(crate) merchant: Caller,
    pub(crate) sale: Sale,
}

pub(crate) async fn shop(app: &TestApp, merchant_name: &str, title: &str) -> Shop {
    let merchant = app.caller(Role::Merchant, Some(merchant_name)).await;
    let listing = Listing {
        title,
        stock: 500,
        per_user_limit: 5,
        price_cents: 990,
        seats: &[],
    };
    let sale = upcoming_activity(app, &merchant, &listing).await;
    Shop { merchant, sale }
}

/// Pre-warms the shop's activity (as `ops`) and opens it.
pub(crate) async fn open_for_sale(app: &TestApp, shop: &Shop, ops: &Caller) {
    prewarm_and_open(app, ops, &shop.sale).await;
}

/// The body of a buy of `quantity` units of the sale's item.
pub(crate) fn buy_body(sale: &Sale, quantity: i64) -> Value {
    json!({ "activity_id": sale.activity_id, "item_id": sale.item_id, "quantity": quantity })
}

/// The order id of a successful buy's answer.
pub(crate) fn order_id(body: &Value) -> Uuid {
    body["order_id"]
        .as_str()
        .expect("order id")
        .parse()
        .expect("uuid")
}

impl TestApp {
    /// A buy as buyer `user_id` with `request_id`; the status and the JSON answer.
    pub(crate) async fn buy(&self, user_id: i64, request_id: &str, body: &Value) -> (u16, Value) {
        self.buyer_post("/api/seckill/buy", user_id, request_id, body)
            .await
    }

    /// A buyer's POST to `path` as `user_id` with `request_id`; the status and the answer.
    pub(crate) async fn buyer_post(
        &self,
        path: &str,
        user_id: i64,
        request_id: &str,
        body: &Value,
    ) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}{path}", self.address))
            .bearer_auth(token(self, user_id))
            .header("X-Request-ID", request_id)
            .json(body)
            .send()
            .await
            .expect("sent");
        json(response).await
    }

    /// A human challenge asked for buyer `user_id` in `activity_id` (`GET /api/challenge`):
    /// its id and the right answer, worked out from the question.
    pub(crate) async fn challenge_for(&self, activity_id: i64, user_id: i64) -> (String, i64) {
        let response = self
            .client
            .get(format!(
                "{}/api/challenge?activity_id={activity_id}",
                self.address
            ))
            .bearer_auth(token(self, user_id))
            .send()
            .await
            .expect("sent");
        let challenge: Value = response.json().await.expect("json");
        let question = challenge["question"].as_str().expect("question");
        let numbers: Vec<i64> = question
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().expect("number"))
            .collect();
        (
            challenge["challenge_id"].as_str().expect("id").to_owned(),
            numbers[0] * numbers[1],
        )
    }

    /// A buy that must succeed; its order id.
    pub(crate) async fn bought(&self, user_id: i64, request_id: &str, body: &Value) -> Uuid {
        let (status, answer) = self.buy(user_id, request_id, body).await;
        assert_eq!(status, 200, "{answer}");
        order_id(&answer)
    }

    /// Waits until the answer of buyer `user_id`'s successful request `request_id` is kept
    /// in Redis for its replays: the buyer is answered first, the answer stored after. Reads
    /// on a connection of its own, so the server's count of the commands it sent stays its
    /// own.
    pub(crate) async fn answer_kept(&self, sale: &Sale, user_id: i64, request_id: &str) {
        use secrecy::ExposeSecret;
        let key = self.request_key(sale, user_id, request_id);
        let connection = redis::Client::open(self.state.settings.redis_url.expose_secret())
            .expect("redis url")
            .get_multiplexed_async_connection()
            .await
            .expect("a connection of the test's own");
        super::wait::until("the answer kept for replays", super::wait::PATIENCE, || {
            let (key, mut connection) = (&key, connection.clone());
            async move {
                let stored: Option<Vec<u8>> = redis::cmd("GET")
                    .arg(key)
                    .query_async(&mut connection)
                    .await
                    .expect("redis");
                stored.is_some_and(|stored| stored.starts_with(b"200 "))
            }
        })
        .await;
    }

    /// Deletes the stored answer of a successful request once it is kept, as when it never
    /// reached Redis, or expired with its request id's claim.
    pub(crate) async fn forget_answer(&self, sale: &Sale, user_id: i64, request_id: &str) {
        self.answer_kept(sale, user_id, request_id).await;
        let _: i64 = redis::cmd("DEL")
            .arg(self.request_key(sale, user_id, request_id))
            .query_async(&mut self.state.redis.connection())
            .await
            .expect("del");
    }

    fn request_key(&self, sale: &Sale, user_id: i64, request_id: &str) -> String {
        self.state.redis.request_key(
            contract::SaleItem::new(sale.activity_id, sale.item_id),
            user_id,
            request_id,
        )
    }

    /// The sale's stock left in Redis (the sale must be pre-warmed).
    pub(crate) async fn redis_stock(&self, sale: &Sale) -> i64 {
        let stock = self
            .state
            .redis
            .get_integers(&[self
                .state
                .redis
                .stock_key(contract::SaleItem::new(sale.activity_id, sale.item_id))])
            .await
            .expect("redis");
        stock[0].expect("pre-warmed")
    }

    /// Units of the sale that PostgreSQL counts as allocated to orders.
    /// A transaction holding the sale's item row, as a batch decided member by member
    /// holds it: every writer of the item's stock waits until it ends.
    pub(crate) async fn hold_item_row(
        &self,
        sale: &Sale,
    ) -> sqlx::Transaction<'static, sqlx::Postgres> {
        let mut holder = self.db.begin().await.expect("begin");
        sqlx::query(
            "SELECT 1 FROM activity_items WHERE activity_id = $1 AND item_id = $2 FOR UPDATE",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .execute(&mut *holder)
        .await
        .expect("lock the item row");
        holder
    }

    pub(crate) async fn allocated(&self, sale: &Sale) -> i64 {
        sqlx::query_scalar(
            "SELECT allocated::BIGINT FROM activity_items WHERE activity_id = $1 AND item_id = $2",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .fetch_one(&self.db)
        .await
        .expect("allocated")
    }

    /// Units in the sale's orders that hold stock. A `FAILED` row (the void of a deduction
    /// whose pre-order was made certain never to commit) or a cancelled order gave its
    /// units back, so it is not counted.
    pub(crate) async fn held_by_orders(&self, sale: &Sale) -> i64 {
        sqlx::query_scalar("SELECT COALESCE(SUM(quantity), 0)::BIGINT FROM orders WHERE activity_id = $1 AND item_id = $2 AND status IN ('PRE_CREATED', 'UNPAID', 'PAID')")
            .bind(sale.activity_id)
            .bind(sale.item_id)
            .fetch_one(&self.db)
            .await
            .expect("sum")
    }

    /// Orders whose outbox row (their batch's, or one of their own) meets `condition`, SQL
    /// on the row `x`.
    pub(crate) async fn orders_whose_outbox(&self, condition: &str) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT count(*) FROM orders o
             JOIN outbox x ON x.event_id = COALESCE(o.outbox_event_id, o.id) WHERE {condition}"
        ))
        .fetch_one(&self.db)
        .await
        .expect("orders with their outbox rows")
    }

    /// The outbox rows that carry the sale's orders.
    pub(crate) async fn outbox_rows_of(&self, sale: &Sale) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM outbox WHERE event_id IN
                 (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE activity_id = $1)",
        )
        .bind(sale.activity_id)
        .fetch_one(&self.db)
        .await
        .expect("outbox rows")
    }

    /// The create-order events of these orders as their outbox rows carry them, in the order
    /// asked.
    pub(crate) async fn outbox_events(&self, orders: &[Uuid]) -> Vec<OrderCreated> {
        let payloads: Vec<Value> = sqlx::query_scalar(
            "SELECT payload FROM outbox WHERE event_id IN
                 (SELECT COALESCE(outbox_event_id, id) FROM orders WHERE id = ANY($1))",
        )
        .bind(orders)
        .fetch_all(&self.db)
        .await
        .expect("outbox payloads");
        let events: Vec<OrderCreated> = payloads
            .into_iter()
            .flat_map(|payload| {
                match serde_json::from_value(payload).expect("a create-order message") {
                    CreateOrders::Batch { orders } => orders,
                    CreateOrders::One(order) => vec![order],
                }
            })
            .collect();
        orders
            .iter()
            .map(|id| {
                events
                    .iter()
                    .find(|event| event.order_id == *id)
                    .cloned()
                    .expect("every order's event is in its outbox row")
            })
            .collect()
    }
}

/// Fires `requests` (user, request id) at the sale from `concurrency` tasks; returns
/// (user, status, answer) of each.
pub(crate) async fn storm(
    app: &TestApp,
    sale: &Sale,
    requests: Vec<(i64, String)>,
    concurrency: usize,
) -> Vec<(i64, u16, Value)> {
    stream::iter(requests)
        .map(|(user, request_id)| async move {
            let (status, body) = app.buy(user, &request_id, &buy_body(sale, 1)).await;
            (user, status, body)
        })
        .buffer_unordered(concurrency)
        .collect()
        .await
}

/// How many answers of a storm had each code (`OK` for a success).
pub(crate) fn count_codes(results: &[(i64, u16, Value)]) -> HashMap<String, usize> {
    let mut codes = HashMap::new();
    for (_, status, body) in results {
        let code = if *status == 200 {
            "OK".to_owned()
        } else {
            body["code"].as_str().unwrap_or("?").to_owned()
        };
        *codes.entry(code).or_default() += 1;
    }
    codes
}

/// A clock that stands still until the test moves it, for rules about time (the
/// challenge's thinking time): the test moves it forward instead of sleeping.
pub(crate) struct TestClock(AtomicI64);

impl TestClock {
    /// Standing at the wall clock's now.
    pub(crate) fn starting_now() -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(chrono::Utc::now().timestamp_millis())))
    }

    /// Standing at `ms` since the epoch.
    pub(crate) fn at(ms: i64) -> Arc<Self> {
        Arc::new(Self(AtomicI64::new(ms)))
    }

    pub(crate) fn advance(&self, by: Duration) {
        let by = i64::try_from(by.as_millis()).expect("a test-sized step");
        self.0.fetch_add(by, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}
