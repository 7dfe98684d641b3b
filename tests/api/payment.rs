//! Payment and the pay timeout against real PostgreSQL, Redis and RabbitMQ:
//! the simulated center pays through a signed callback; forged or wrong callbacks change
//! nothing; unpaid orders are cancelled exactly once, whatever duplicates arrive, and their
//! stock comes back exactly once in both PostgreSQL and Redis; an order paid at the last
//! moment is paid, not cancelled; money after a cancellation flags a refund.

use crate::support::{
    app::{json, spawn_app_with, TestApp},
    fixtures::{buy_body, count_codes, open_sale, order_id, storm, storm_settings, token, Sale},
    wait::{self, PATIENCE},
};
use base::config::Settings;
use futures::{stream, StreamExt};
use ops::reconcile::redis_state::ItemStateClient;
use sale::orders::release_scripts::ReleaseClient;
use sale::{
    orders::{
        mq::{
            broker::Broker,
            message::PayTimeout,
            topology::{Outgoing, Topology, PAY_TIMEOUT_KEY},
        },
        pay_timeout::{settle_overdue, Trigger, Verdict},
    },
    payment::signature,
};
use serde_json::{json, Value};
use std::{sync::Arc, time::Duration};
use uuid::Uuid;

/// Storm limits, and a payment center that calls back after `delay_ms`.
fn pay_settings(delay_ms: u64) -> impl FnOnce(&mut Settings) {
    move |settings| {
        storm_settings(settings);
        settings.payment.delay_ms = delay_ms;
    }
}

/// A sale whose unpaid orders time out after `pay_timeout_s`.
pub(crate) async fn sale_with_timeout(app: &TestApp, stock: i64, pay_timeout_s: i32) -> Sale {
    let sale = open_sale(app, stock, 1).await;
    sqlx::query("UPDATE activities SET pay_timeout_s = $2 WHERE id = $1")
        .bind(sale.activity_id)
        .bind(pay_timeout_s)
        .execute(&app.db)
        .await
        .expect("set the pay timeout");
    sale
}

impl TestApp {
    async fn order_status(&self, order_id: Uuid) -> String {
        sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_one(&self.db)
            .await
            .expect("order")
    }

    async fn count_where(&self, sql: &str, order_ids: &[Uuid]) -> i64 {
        sqlx::query_scalar(sql)
            .bind(order_ids)
            .fetch_one(&self.db)
            .await
            .expect("count")
    }

    async fn count_status(&self, order_ids: &[Uuid], status: &str) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM orders WHERE id = ANY($1) AND status = $2")
            .bind(order_ids)
            .bind(status)
            .fetch_one(&self.db)
            .await
            .expect("count")
    }

    /// Waits until every order has reached `status`; on timeout, says where they are.
    pub(crate) async fn all_reach(&self, order_ids: &[Uuid], status: &str) {
        let what = format!(
            "{} orders to be {status}; seen (order, outbox, attempts, count)",
            order_ids.len()
        );
        wait::until(&what, PATIENCE, || async {
            if self.count_status(order_ids, status).await == order_ids.len() as i64 {
                return Ok(());
            }
            let found: Vec<(String, Option<String>, Option<i32>, i64)> = sqlx::query_as(
                "SELECT o.status, ob.status, ob.attempts, count(*) FROM orders o
                 LEFT JOIN outbox ob ON ob.event_id = COALESCE(o.outbox_event_id, o.id)
                 WHERE o.id = ANY($1) GROUP BY 1, 2, 3",
            )
            .bind(order_ids)
            .fetch_all(&self.db)
            .await
            .expect("statuses");
            Err(found)
        })
        .await;
    }

    /// One order per buyer in `users`, completed by the pipeline (`UNPAID`).
    pub(crate) async fn unpaid_orders(
        &self,
        sale: &Sale,
        users: std::ops::RangeInclusive<i64>,
    ) -> Vec<Uuid> {
        let mut ids = Vec::new();
        for user in users {
            let (status, body) = self
                .buy(user, &format!("buy-{user}"), &buy_body(sale, 1))
                .await;
            assert_eq!(status, 200, "{body}");
            ids.push(order_id(&body));
        }
        self.all_reach(&ids, "UNPAID").await;
        ids
    }

    pub(crate) async fn pay(&self, user_id: i64, order_id: Uuid) -> (u16, Value) {
        let response = self
            .client
            .post(format!("{}/api/orders/{order_id}/pay", self.address))
            .bearer_auth(token(self, user_id))
            .send()
            .await
            .expect("sent");
        json(response).await
    }

    /// Posts a callback body as given, with `signature` in `X-Pay-Signature` if any.
    async fn notify(&self, body: &str, signature: Option<&str>) -> (u16, Value) {
        let mut request = self
            .client
            .post(format!("{}/api/pay/notify", self.address))
            .header("Content-Type", "application/json")
            .body(body.to_owned());
        if let Some(signature) = signature {
            request = request.header(signature::HEADER, signature);
        }
        json(request.send().await.expect("sent")).await
    }

    /// Posts a callback signed with the server's pay secret.
    async fn signed_notify(&self, notice: &Value) -> (u16, Value) {
        let body = notice.to_string();
        let signature = signature::sign(&self.state.settings.pay_secret, body.as_bytes());
        self.notify(&body, Some(&signature)).await
    }

    /// (status, notify_attempts, notified) of a trade.
    async fn trade(&self, trade_no: &str) -> (String, i32, bool) {
        sqlx::query_as(
            "SELECT status, notify_attempts, notified_at IS NOT NULL FROM payment_trades WHERE trade_no = $1",
        )
        .bind(trade_no)
        .fetch_one(&self.db)
        .await
        .expect("trade")
    }

    /// The order's status changes, in order.
    async fn transitions(&self, order_id: Uuid) -> Vec<(String, String)> {
        sqlx::query_as(
            "SELECT from_status, to_status FROM order_history WHERE order_id = $1 ORDER BY step",
        )
        .bind(order_id)
        .fetch_all(&self.db)
        .await
        .expect("events")
    }

    /// (total_stock - sold, total_stock - allocated) in PostgreSQL.
    pub(crate) async fn db_stock_left(&self, sale: &Sale) -> (i64, i64) {
        sqlx::query_as(
            "SELECT (total_stock - sold)::BIGINT, (total_stock - allocated)::BIGINT
             FROM activity_items WHERE activity_id = $1 AND item_id = $2",
        )
        .bind(sale.activity_id)
        .bind(sale.item_id)
        .fetch_one(&self.db)
        .await
        .expect("stock")
    }

    /// Publishes the pay timeout of each order `copies` times, due at once.
    async fn publish_timeouts(&self, order_ids: &[Uuid], copies: usize) {
        let settings = &self.state.settings;
        let topology = Arc::new(Topology::new(&settings.amqp_prefix, &settings.pipeline));
        let messages: Vec<Outgoing> = order_ids
            .iter()
            .flat_map(|order_id| std::iter::repeat_n(*order_id, copies))
            .map(|order_id| Outgoing {
                exchange: topology.exchange.clone(),
                routing_key: PAY_TIMEOUT_KEY.to_owned(),
                payload: serde_json::to_vec(&PayTimeout { order_id }).expect("json"),
                message_id: order_id.to_string(),
            })
            .collect();
        let broker = Broker::new(
            self.state.amqp.clone(),
            topology,
            "test",
            Duration::from_secs(5),
            self.state.metrics.clone(),
        );
        let confirmed = broker.publish(&messages).await.expect("published");
        assert!(confirmed.iter().all(|ok| *ok), "{confirmed:?}");
    }
}

fn notice(trade_no: &str, order_id: Uuid, amount_cents: i64, status: &str) -> Value {
    json!({
        "trade_no": trade_no, "order_id": order_id, "amount_cents": amount_cents,
        "status": status, "paid_at_ms": chrono::Utc::now().timestamp_millis(),
    })
}

#[tokio::test]
async fn paying_an_order_marks_it_paid_once() {
    let app = spawn_app_with(pay_settings(100)).await;
    let sale = open_sale(&app, 10, 1).await;
    let order = app.unpaid_orders(&sale, 1..=1).await[0];

    // Only the owner may pay; anyone else learns nothing.
    let (status, body) = app.pay(2, order).await;
    assert_eq!((status, body["code"].as_str()), (404, Some("NOT_FOUND")));
    let anonymous = app
        .client
        .post(format!("{}/api/orders/{order}/pay", app.address))
        .send()
        .await
        .expect("sent");
    assert_eq!(anonymous.status().as_u16(), 401);

    let (status, body) = app.pay(1, order).await;
    assert_eq!(status, 200, "{body}");
    let trade_no = body["trade_no"].as_str().expect("trade_no").to_owned();
    let (_, again) = app.pay(1, order).await;
    assert_eq!(
        again["trade_no"],
        trade_no.as_str(),
        "one open trade per order"
    );

    app.all_reach(&[order], "PAID").await;
    wait::until(
        "the callback to be counted as delivered",
        PATIENCE,
        || async { app.trade(&trade_no).await.2 },
    )
    .await;
    let (trade_status, attempts, _) = app.trade(&trade_no).await;
    assert_eq!(trade_status, "paid");
    assert!(attempts >= 1);

    // The center's callback again: accepted, nothing changes.
    let (status, body) = app
        .signed_notify(&notice(&trade_no, order, 4990, "paid"))
        .await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("already_applied"))
    );
    assert_eq!(app.order_status(order).await, "PAID");
    assert_eq!(
        app.transitions(order).await,
        [
            ("PRE_CREATED".to_owned(), "UNPAID".to_owned()),
            ("UNPAID".to_owned(), "PAID".to_owned())
        ]
    );
    let (status, body) = app.pay(1, order).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ORDER_NOT_PAYABLE"))
    );
    let trades: i64 = app
        .count_where(
            "SELECT count(*) FROM payment_trades WHERE order_id = ANY($1)",
            &[order],
        )
        .await;
    assert_eq!(trades, 1);
}

#[tokio::test]
async fn forged_wrong_or_unknown_callbacks_change_nothing() {
    // The center's own callback must not come during this test.
    let app = spawn_app_with(pay_settings(600_000)).await;
    let sale = open_sale(&app, 10, 1).await;
    let order = app.unpaid_orders(&sale, 1..=1).await[0];
    let (_, body) = app.pay(1, order).await;
    let trade_no = body["trade_no"].as_str().expect("trade_no").to_owned();
    let secret = &app.state.settings.pay_secret;

    let good = notice(&trade_no, order, 4990, "paid").to_string();
    let good_signature = signature::sign(secret, good.as_bytes());
    let tampered = good.replace("4990", "1");
    let wrong_amount = notice(&trade_no, order, 1, "paid").to_string();
    let unknown_trade = notice("SIM-nope", order, 4990, "paid").to_string();
    let unknown_order = notice(&trade_no, Uuid::new_v4(), 4990, "paid").to_string();
    let no_paid_at =
        json!({ "trade_no": trade_no, "order_id": order, "amount_cents": 4990, "status": "paid" })
            .to_string();
    let sign = |body: &str| signature::sign(secret, body.as_bytes());
    let cases: Vec<(&str, &str, Option<String>, u16, &str)> = vec![
        (
            "forged signature",
            &good,
            Some(signature::sign(&"guess".into(), good.as_bytes())),
            401,
            "BAD_SIGNATURE",
        ),
        (
            "tampered body",
            &tampered,
            Some(good_signature.clone()),
            401,
            "BAD_SIGNATURE",
        ),
        (
            "uppercase signature",
            &good,
            Some(good_signature.to_uppercase()),
            401,
            "BAD_SIGNATURE",
        ),
        ("no signature", &good, None, 401, "BAD_SIGNATURE"),
        (
            "wrong amount",
            &wrong_amount,
            Some(sign(&wrong_amount)),
            409,
            "AMOUNT_MISMATCH",
        ),
        (
            "unknown trade",
            &unknown_trade,
            Some(sign(&unknown_trade)),
            404,
            "NOT_FOUND",
        ),
        (
            "unknown order",
            &unknown_order,
            Some(sign(&unknown_order)),
            404,
            "NOT_FOUND",
        ),
        (
            "malformed json",
            "{oops",
            Some(sign("{oops")),
            400,
            "BAD_REQUEST",
        ),
        (
            "paid without paid_at_ms",
            &no_paid_at,
            Some(sign(&no_paid_at)),
            400,
            "BAD_REQUEST",
        ),
    ];
    for (case, body, signature, status, code) in cases {
        let (got, answer) = app.notify(body, signature.as_deref()).await;
        assert_eq!(
            (got, answer["code"].as_str()),
            (status, Some(code)),
            "{case}: {answer}"
        );
        assert_eq!(app.order_status(order).await, "UNPAID", "{case}");
        assert_eq!(app.trade(&trade_no).await.0, "pending", "{case}");
    }
    assert_eq!(
        app.transitions(order).await.len(),
        1,
        "only PRE_CREATED → UNPAID"
    );
    let metrics = app
        .get("/metrics", None)
        .await
        .text()
        .await
        .expect("metrics");
    assert!(
        metrics.contains(r#"seckill_pay_notify_rejected_total{reason="bad_signature"} 4"#),
        "{metrics}"
    );

    // The genuine notice still works afterwards.
    let (status, body) = app.notify(&good, Some(&good_signature)).await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("paid")),
        "{body}"
    );
    assert_eq!(app.order_status(order).await, "PAID");
}

#[tokio::test]
async fn unpaid_orders_time_out_exactly_once_despite_duplicate_messages() {
    let app = spawn_app_with(pay_settings(100)).await;
    let sale = sale_with_timeout(&app, 10, 2).await;
    let orders = app.unpaid_orders(&sale, 1..=5).await;
    assert_eq!(app.redis_stock(&sale).await, 5);
    // Every order's timeout three more times, due at once, racing the real one.
    app.publish_timeouts(&orders, 3).await;
    app.all_reach(&orders, "CANCELLED").await;
    // Direct duplicates too, all at once.
    let verdicts: Vec<Verdict> = stream::iter(orders.iter().flat_map(|id| [*id; 4]))
        .map(|id| {
            let state = app.state.clone();
            async move {
                settle_overdue(&state, id, Trigger::Message)
                    .await
                    .expect("settles")
            }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    assert!(
        verdicts.iter().all(|v| *v == Verdict::NothingToDo),
        "{verdicts:?}"
    );
    // The duplicates on the queue were all due at the deadline: once the consumer is done
    // with every message (the orders' own, one or a few carrying several orders, and the
    // fifteen copies), none of them changed a thing.
    wait::until(
        "the consumer done with every pay-timeout message",
        PATIENCE,
        || async {
            let own = app
                .metric("seckill_mq_published_total{outcome=\"confirmed\",role=\"scheduler\"}")
                .await;
            own >= 1.0
                && app
                    .metric("seckill_pay_timeout_messages_total{outcome=\"acked\"}")
                    .await
                    >= 15.0 + own
        },
    )
    .await;

    for order in &orders {
        assert_eq!(
            app.transitions(*order).await,
            [
                ("PRE_CREATED".to_owned(), "UNPAID".to_owned()),
                ("UNPAID".to_owned(), "CANCELLED".to_owned())
            ]
        );
    }
    let journaled = app
        .count_where(
            "SELECT count(*) FROM stock_restore_journal WHERE order_id = ANY($1) AND redis_restored_at IS NOT NULL",
            &orders,
        )
        .await;
    assert_eq!(journaled, 5);
    assert_eq!(
        app.redis_stock(&sale).await,
        10,
        "Redis got each unit back once"
    );
    assert_eq!(app.db_stock_left(&sale).await, (10, 10));
    assert_eq!(app.metric("seckill_order_cancellations_total").await, 5.0);
    let buyers: i64 = redis::cmd("HLEN")
        .arg(
            app.state
                .redis
                .bought_key(contract::SaleItem::new(sale.activity_id, sale.item_id)),
        )
        .query_async(&mut app.state.redis.connection())
        .await
        .expect("hlen");
    assert_eq!(buyers, 0, "the buyers may buy again");
    let (status, body) = app.buy(1, "again", &buy_body(&sale, 1)).await;
    assert_eq!(status, 200, "{body}");
}

#[tokio::test]
async fn an_order_paid_at_the_last_moment_is_paid_not_cancelled() {
    // The money arrives at once; the callback would come ten minutes later.
    let app = spawn_app_with(|settings| {
        pay_settings(0)(settings);
        settings.payment.notify_delay_ms = 600_000;
    })
    .await;
    let sale = sale_with_timeout(&app, 10, 2).await;
    let orders = app.unpaid_orders(&sale, 1..=2).await;
    let (paid, unpaid) = (orders[0], orders[1]);
    let (status, body) = app.pay(1, paid).await;
    assert_eq!(status, 200, "{body}");
    let trade_no = body["trade_no"].as_str().expect("trade_no").to_owned();
    wait::until("the center to receive the money", PATIENCE, || async {
        app.trade(&trade_no).await.0 == "paid"
    })
    .await;
    assert_eq!(app.order_status(paid).await, "UNPAID", "no callback yet");

    app.all_reach(&[unpaid], "CANCELLED").await;
    app.all_reach(&[paid], "PAID").await;
    assert!(
        !app.trade(&trade_no).await.2,
        "learnt from the center, not a callback"
    );
    let journaled = app
        .count_where(
            "SELECT count(*) FROM stock_restore_journal WHERE order_id = ANY($1)",
            &orders,
        )
        .await;
    assert_eq!(journaled, 1, "only the unpaid order gave its stock back");
    assert_eq!(app.redis_stock(&sale).await, 9);
    assert_eq!(app.db_stock_left(&sale).await, (9, 9));
}

#[tokio::test]
async fn a_trade_still_pending_at_the_deadline_is_closed_and_never_charged() {
    // The buyer starts paying, but the money would come only after the deadline.
    let app = spawn_app_with(pay_settings(6_000)).await;
    let sale = sale_with_timeout(&app, 10, 2).await;
    let order = app.unpaid_orders(&sale, 1..=1).await[0];
    let (_, body) = app.pay(1, order).await;
    let trade_no = body["trade_no"].as_str().expect("trade_no").to_owned();
    app.all_reach(&[order], "CANCELLED").await;
    assert_eq!(
        app.trade(&trade_no).await.0,
        "failed",
        "closed before cancelling"
    );
    // The money's moment comes: the center finds the trade closed and takes nothing.
    wait::until("the center to find the trade closed", PATIENCE, || async {
        app.metric("seckill_pay_center_settlements_total{outcome=\"closed\"}")
            .await
            >= 1.0
    })
    .await;
    assert_eq!(app.trade(&trade_no).await, ("failed".to_owned(), 0, false));
    assert_eq!(app.order_status(order).await, "CANCELLED");
    let (status, body) = app.pay(1, order).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("ORDER_NOT_PAYABLE"))
    );
}

/// Found in the code: the pay route checked `UNPAID` and the deadline on the application's
/// clock, then opened the trade with no guard, while the pay timeout closed the order's open
/// trades and only then cancelled it. A trade opened between the two was paid later, and its
/// order, cancelled with its unit back on sale, went to `REFUND_PENDING`: the buyer was charged
/// for an order he had lost. Each round makes that interleaving certain rather than lucky:
/// every pay is held just before it writes its trade (behind an uncommitted trade of the
/// test's), every timeout behind the test's share lock on the order rows, until all of them
/// wait on a lock; then the pays go on first, and the timeouts after. Opening a trade and
/// cancelling now both decide under the order row, on the database's clock: the cancel closes
/// the trade, or finds it paid and records the payment instead.
#[tokio::test]
async fn a_trade_opened_while_the_timeout_cancels_never_charges_a_cancelled_order() {
    const ROUNDS: usize = 5;
    const PER_ROUND: usize = 10;
    let app = spawn_app_with(|settings| {
        // The money arrives as soon as a trade opens; the callback follows at once.
        pay_settings(0)(settings);
        // Every pay and every timeout of a round waits on a connection of its own.
        settings.db_max_connections = 2 * PER_ROUND as u32 + 8;
        // Only the test times its orders out: the leader's scanner looks again in an hour.
        settings.pipeline.timeout_scan_interval_ms = 3_600_000;
    })
    .await;
    // The orders' own timeout messages come in an hour.
    let sale = sale_with_timeout(&app, (ROUNDS * PER_ROUND) as i64, 3_600).await;
    let orders = app
        .unpaid_orders(&sale, 1..=(ROUNDS * PER_ROUND) as i64)
        .await;
    let buyers: Vec<(i64, Uuid)> = (1..).zip(orders.iter().copied()).collect();
    for round in buyers.chunks(PER_ROUND) {
        app.pay_while_timing_out(round).await;
    }
    wait::until(
        "every trade settled and its callback taken",
        PATIENCE,
        || async {
            app.count_where(
                "SELECT count(*) FROM payment_trades WHERE order_id = ANY($1)
                   AND (status = 'pending' OR (status = 'paid' AND notified_at IS NULL))",
                &orders,
            )
            .await
                == 0
        },
    )
    .await;
    let outcomes: Vec<(Uuid, String, Vec<String>)> = sqlx::query_as(
        "SELECT o.id, o.status, array_agg(t.status ORDER BY t.created_at)
         FROM orders o JOIN payment_trades t ON t.order_id = o.id
         WHERE o.id = ANY($1) GROUP BY o.id, o.status",
    )
    .bind(&orders)
    .fetch_all(&app.db)
    .await
    .expect("outcomes");
    assert_eq!(outcomes.len(), orders.len(), "a trade for every order");
    for (order, status, trades) in &outcomes {
        let paid = trades.iter().any(|trade| trade == "paid");
        let pending = trades.iter().any(|trade| trade == "pending");
        let fine = match status.as_str() {
            "PAID" => paid,
            "CANCELLED" => !paid && !pending,
            _ => false,
        };
        assert!(fine, "order {order} ended {status} with trades {trades:?}");
    }
}

impl TestApp {
    /// Pays and times out each order of `round` (buyer, order) at once, the pays first: see
    /// `a_trade_opened_while_the_timeout_cancels_never_charges_a_cancelled_order`.
    async fn pay_while_timing_out(&self, round: &[(i64, Uuid)]) {
        let ids: Vec<Uuid> = round.iter().map(|(_, order)| *order).collect();
        sqlx::query(
            "UPDATE orders SET pay_deadline = now() + interval '2 seconds' WHERE id = ANY($1)",
        )
        .bind(&ids)
        .execute(&self.db)
        .await
        .expect("deadlines");
        // Open trades of the test's own, not committed: each pay waits on one to write its own.
        let mut held_trades = self.db.begin().await.expect("begin");
        sqlx::query(
            "INSERT INTO payment_trades (trade_no, order_id, amount_cents, status)
             SELECT 'HELD-' || id, id, amount_cents, 'pending' FROM orders WHERE id = ANY($1)",
        )
        .bind(&ids)
        .execute(&mut *held_trades)
        .await
        .expect("held trades");
        // The order rows under a share lock: each timeout waits on it to cancel.
        let mut held_rows = self.db.begin().await.expect("begin");
        sqlx::query("SELECT 1 FROM orders WHERE id = ANY($1) FOR SHARE")
            .bind(&ids)
            .execute(&mut *held_rows)
            .await
            .expect("share lock");
        let pays =
            futures::future::join_all(round.iter().map(|(buyer, order)| self.pay(*buyer, *order)));
        let timeouts = async {
            self.until_waiting_on_locks(round.len(), "every pay").await;
            wait::until(
                "the deadlines past by the database's clock",
                PATIENCE,
                || async {
                    self.count_where(
                        "SELECT count(*) FROM orders WHERE id = ANY($1) AND pay_deadline < now()",
                        &ids,
                    )
                    .await
                        == ids.len() as i64
                },
            )
            .await;
            futures::future::join_all(
                ids.iter()
                    .map(|order| settle_overdue(&self.state, *order, Trigger::Message)),
            )
            .await
        };
        let release = async {
            self.until_waiting_on_locks(2 * round.len(), "every pay and every timeout")
                .await;
            held_trades.rollback().await.expect("rollback");
            wait::until("every pay's trade written", PATIENCE, || async {
                self.count_where(
                    "SELECT count(*) FROM payment_trades WHERE order_id = ANY($1)",
                    &ids,
                )
                .await
                    == ids.len() as i64
            })
            .await;
            held_rows.rollback().await.expect("rollback");
        };
        let (paid, settled, ()) = tokio::join!(pays, timeouts, release);
        for ((status, body), (_, order)) in paid.into_iter().zip(round) {
            assert_eq!(
                status, 200,
                "order {order}, paid before its deadline: {body}"
            );
        }
        for (verdict, order) in settled.into_iter().zip(&ids) {
            verdict.unwrap_or_else(|error| panic!("order {order} not settled: {error:#}"));
        }
        for (buyer, order) in round {
            let (status, body) = self.pay(*buyer, *order).await;
            assert_eq!(
                (status, body["code"].as_str()),
                (409, Some("ORDER_NOT_PAYABLE")),
                "order {order}, settled: {body}"
            );
        }
    }

    /// Waits until at least `count` backends of this test's database wait for a lock.
    async fn until_waiting_on_locks(&self, count: usize, who: &str) {
        wait::until(&format!("{who} waiting on a lock"), PATIENCE, || async {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity
                 WHERE datname = current_database() AND wait_event_type = 'Lock'",
            )
            .fetch_one(&self.db)
            .await
            .expect("pg_stat_activity");
            waiting >= count as i64
        })
        .await;
    }
}

#[tokio::test]
async fn money_after_the_cancellation_flags_a_refund() {
    let app = spawn_app_with(pay_settings(100)).await;
    let sale = sale_with_timeout(&app, 10, 2).await;
    let order = app.unpaid_orders(&sale, 1..=1).await[0];
    app.all_reach(&[order], "CANCELLED").await;
    // A center that took the money anyway (its close came too late) and says so.
    sqlx::query(
        "INSERT INTO payment_trades (trade_no, order_id, amount_cents, status, paid_at)
         VALUES ('LATE-1', $1, 4990, 'paid', now())",
    )
    .bind(order)
    .execute(&app.db)
    .await
    .expect("trade");
    let (status, body) = app
        .signed_notify(&notice("LATE-1", order, 4990, "paid"))
        .await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("refund_pending")),
        "{body}"
    );
    let (status, body) = app
        .signed_notify(&notice("LATE-1", order, 4990, "paid"))
        .await;
    assert_eq!(
        (status, body["result"].as_str()),
        (200, Some("already_applied")),
        "{body}"
    );
    assert_eq!(app.order_status(order).await, "REFUND_PENDING");
    // The stock stays given back: the refund is money, not units.
    assert_eq!(app.redis_stock(&sale).await, 10);
    assert_eq!(app.db_stock_left(&sale).await, (10, 10));
}

#[tokio::test]
async fn the_leader_scanner_cancels_orders_whose_timeout_was_lost_and_retries_give_backs() {
    // Another instance leads while the test sets the scene, so the scanner cannot act on a
    // half-made state; it steps down once the scene is set, and this instance takes over.
    let prefix = format!("/seckill-test/{}", Uuid::new_v4().simple());
    let endpoints = Settings::load().expect("settings").etcd_endpoints;
    let mut other = etcd_client::Client::connect(&endpoints, None)
        .await
        .expect("etcd");
    let lease = other.lease_grant(60, None).await.expect("lease").id();
    let held = other
        .campaign(
            format!("{prefix}/election/leader"),
            "another instance",
            lease,
        )
        .await
        .expect("campaign");
    let leader_key = held.leader().expect("elected").clone();
    let app = spawn_app_with(|settings| {
        pay_settings(100)(settings);
        settings.pipeline.timeout_scan_interval_ms = 200;
        // The leader's automatic reconciliation settles overdue orders too, every 2 s: off,
        // so that the cancellation this test counts is the scanner's whichever runs first.
        settings.reconcile.interval_ms = 0;
        settings.etcd_prefix = prefix.clone();
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let orders = app.unpaid_orders(&sale, 1..=2).await;
    let (lost, half_restored) = (orders[0], orders[1]);
    // `lost`: its message would come in 15 minutes; its deadline passed long ago.
    sqlx::query("UPDATE orders SET pay_deadline = now() - interval '1 minute' WHERE id = $1")
        .bind(lost)
        .execute(&app.db)
        .await
        .expect("deadline");
    // `half_restored`: cancelled in PostgreSQL, but its Redis give-back "failed".
    sqlx::query("UPDATE orders SET pay_deadline = now() - interval '1 minute' WHERE id = $1")
        .bind(half_restored)
        .execute(&app.db)
        .await
        .expect("deadline");
    let verdict = settle_overdue(&app.state, half_restored, Trigger::Message)
        .await
        .expect("settles");
    assert_eq!(verdict, Verdict::Cancelled { given_back: true });
    undo_redis_give_back(&app, &sale, half_restored, 1).await;
    sqlx::query("UPDATE stock_restore_journal SET redis_restored_at = NULL, restored_at = now() - interval '1 minute' WHERE order_id = $1")
        .bind(half_restored)
        .execute(&app.db)
        .await
        .expect("journal");
    assert_eq!(app.redis_stock(&sale).await, 8);

    let (status, body) = app.pay(1, lost).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("PAY_DEADLINE_PASSED"))
    );
    // The scanner runs on the leader only: the other instance steps down, this one leads.
    other
        .resign(Some(
            etcd_client::ResignOptions::new().with_leader(leader_key),
        ))
        .await
        .expect("resign");
    wait::until("this instance to lead", PATIENCE, || async {
        app.state.leadership.is_leader()
    })
    .await;
    app.all_reach(&[lost], "CANCELLED").await;
    wait::until("the owed give-back to be retried", PATIENCE, || async {
        app.count_where(
            "SELECT count(*) FROM stock_restore_journal WHERE order_id = ANY($1) AND redis_restored_at IS NULL",
            &orders,
        )
        .await
            == 0
    })
    .await;
    assert_eq!(app.redis_stock(&sale).await, 10);
    assert_eq!(app.db_stock_left(&sale).await, (10, 10));
    assert!(
        app.metric("seckill_order_cancellations_total{trigger=\"scan\"}")
            .await
            >= 1.0
    );
}

/// Puts Redis back to how it was before an order's give-back, as if that give-back failed.
async fn undo_redis_give_back(app: &TestApp, sale: &Sale, order_id: Uuid, user_id: i64) {
    let redis = &app.state.redis;
    redis::pipe()
        .atomic()
        .cmd("DECRBY")
        .arg(redis.stock_key(contract::SaleItem::new(sale.activity_id, sale.item_id)))
        .arg(1)
        .cmd("HINCRBY")
        .arg(redis.bought_key(contract::SaleItem::new(sale.activity_id, sale.item_id)))
        .arg(user_id)
        .arg(1)
        .cmd("SREM")
        .arg(redis.restored_key(contract::SaleItem::new(sale.activity_id, sale.item_id)))
        .arg(order_id.to_string())
        .query_async::<()>(&mut redis.connection())
        .await
        .expect("undo");
}

#[tokio::test]
async fn a_storm_then_half_paid_gives_the_unpaid_half_back_everywhere() {
    let app = spawn_app_with(pay_settings(50)).await;
    let sale = sale_with_timeout(&app, 200, 15).await;
    let requests = (1..=1_000)
        .map(|user| (user, format!("s-{user}")))
        .collect();
    let results = storm(&app, &sale, requests, 64).await;
    let codes = count_codes(&results);
    assert_eq!(codes.get("OK"), Some(&200), "{codes:?}");
    let winners: Vec<(i64, Uuid)> = results
        .iter()
        .filter(|(_, status, _)| *status == 200)
        .map(|(user, _, body)| (*user, order_id(body)))
        .collect();
    let ids: Vec<Uuid> = winners.iter().map(|(_, id)| *id).collect();
    app.all_reach(&ids, "UNPAID").await;
    assert_eq!(app.redis_stock(&sale).await, 0);

    let (payers, idlers) = winners.split_at(100);
    let paid: Vec<(u16, Value)> = stream::iter(payers)
        .map(|(user, order)| app.pay(*user, *order))
        .buffer_unordered(16)
        .collect()
        .await;
    assert!(paid.iter().all(|(status, _)| *status == 200), "{paid:?}");
    let payer_ids: Vec<Uuid> = payers.iter().map(|(_, id)| *id).collect();
    let idler_ids: Vec<Uuid> = idlers.iter().map(|(_, id)| *id).collect();
    app.all_reach(&payer_ids, "PAID").await;
    app.all_reach(&idler_ids, "CANCELLED").await;
    wait::until("every give-back to reach Redis", PATIENCE, || async {
        app.count_where(
            "SELECT count(*) FROM stock_restore_journal WHERE order_id = ANY($1) AND redis_restored_at IS NOT NULL",
            &idler_ids,
        )
        .await
            == 100
    })
    .await;
    assert_eq!(app.redis_stock(&sale).await, 100);
    assert_eq!(app.db_stock_left(&sale).await, (100, 100));
    assert_eq!(
        app.count_status(&payer_ids, "PAID").await,
        100,
        "paid orders stay paid"
    );
}

#[tokio::test]
async fn restore_order_gives_back_once_and_only_seats_the_buyer_still_holds() {
    let app = spawn_app_with(|_| {}).await;
    let redis = &app.state.redis;
    let sale = contract::SaleItem::new(7, 8);
    let seats = ["A1".to_owned(), "A2".to_owned(), "A3".to_owned()];
    let restore = |order: &'static str, quantity: i64, seats: Vec<String>| async move {
        let held = sale::orders::Holding {
            sale,
            buyer: contract::UserId(42),
            quantity,
        };
        ReleaseClient(redis)
            .restore_order(order, held, &seats)
            .await
            .expect("script runs")
    };
    assert_eq!(
        restore("o1", 1, vec![]).await,
        -4,
        "not pre-warmed: nothing written"
    );
    // A re-derivation writes only behind a fence of its own run.
    ItemStateClient(redis)
        .raise_fence(sale, "load", 10_000)
        .await
        .expect("fence");
    let loaded = ItemStateClient(redis)
        .rederive(
            sale,
            "load",
            &ops::reconcile::redis_state::Derived {
                stock: 0,
                holders: &[(42, 3)],
                seats: &[
                    (seats[0].clone(), Some(42)),
                    (seats[1].clone(), Some(42)),
                    (seats[2].clone(), Some(7)),
                ],
                restored: &[],
                expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
            },
        )
        .await
        .expect("load");
    assert!(loaded, "written behind the run's own fence");
    assert!(ItemStateClient(redis)
        .lower_fence(sale, "load")
        .await
        .expect("lower"));
    // A seated order of three seats, one of which someone else holds now.
    assert_eq!(restore("o2", 3, seats.to_vec()).await, 2);
    assert_eq!(
        restore("o2", 3, seats.to_vec()).await,
        -7,
        "given back before"
    );
    assert_eq!(
        restore("o3", 1, vec![]).await,
        3,
        "a standard order of one unit"
    );
    assert_eq!(restore("o3", 1, vec![]).await, -7);
    let holders = ItemStateClient(redis).holders(sale).await.expect("holders");
    assert!(holders.is_empty(), "{holders:?}");
    let seat_map: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(redis.seats_key(sale))
        .query_async(&mut redis.connection())
        .await
        .expect("seats");
    assert_eq!(seat_map["A1"], "");
    assert_eq!(seat_map["A2"], "");
    assert_eq!(seat_map["A3"], "7", "someone else's seat stays theirs");
}

#[tokio::test]
async fn a_failed_trade_leaves_the_order_payable_again() {
    let app = spawn_app_with(|settings| {
        pay_settings(50)(settings);
        settings.payment.failure_rate = 1.0;
    })
    .await;
    let sale = open_sale(&app, 10, 1).await;
    let order = app.unpaid_orders(&sale, 1..=1).await[0];
    let (_, body) = app.pay(1, order).await;
    let first = body["trade_no"].as_str().expect("trade_no").to_owned();
    wait::until(
        "the failed trade's callback to be delivered",
        PATIENCE,
        || async {
            let (status, attempts, notified) = app.trade(&first).await;
            status == "failed" && attempts >= 1 && notified
        },
    )
    .await;
    assert_eq!(app.order_status(order).await, "UNPAID");
    let (status, body) = app.pay(1, order).await;
    assert_eq!(status, 200, "{body}");
    assert_ne!(
        body["trade_no"],
        first.as_str(),
        "a new trade after a failed one"
    );
}

#[tokio::test]
async fn an_early_timeout_message_never_cancels_before_the_deadline() {
    let app = spawn_app_with(pay_settings(100)).await;
    let sale = sale_with_timeout(&app, 10, 8).await;
    let order = app.unpaid_orders(&sale, 1..=1).await[0];
    // Due now, about eight seconds early: held or put back into a delay queue.
    app.publish_timeouts(&[order], 2).await;
    wait::until(
        "the consumer done with both early messages",
        PATIENCE,
        || async {
            app.metric("seckill_pay_timeout_messages_total{outcome=\"acked\"}")
                .await
                >= 2.0
        },
    )
    .await;
    assert_eq!(app.order_status(order).await, "UNPAID");
    app.all_reach(&[order], "CANCELLED").await;
    let left_at: f64 = sqlx::query_scalar(
        "SELECT EXTRACT(EPOCH FROM restored_at - o.pay_deadline)::FLOAT8
         FROM stock_restore_journal j JOIN orders o ON o.id = j.order_id WHERE o.id = $1",
    )
    .bind(order)
    .fetch_one(&app.db)
    .await
    .expect("journal");
    assert!(left_at >= 0.0, "cancelled {left_at} s after the deadline");
    assert_eq!(app.redis_stock(&sale).await, 10);
}
