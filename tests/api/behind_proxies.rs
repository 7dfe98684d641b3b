//! The buyer side deployed as a sale is: behind a load balancer. Forwarded clients behind a
//! trusted proxy each have their own rate window, while a client that is not a trusted
//! proxy cannot choose its address with a header; three instances behind Debian's nginx,
//! configured by `deploy/nginx/seckill.conf`, sell exactly the stock to 2,000 buyers from
//! 2,000 addresses under a per-address window of 3; and the balancer stops one address's
//! flood at the edge, in the product's own 429, while other buyers are served.

use crate::support::{
    app::{json, json_and_retry_after, spawn_app_with, TestApp},
    balancer::{Balancer, EdgeLimits},
    fixtures::{buy_body, open_sale, token, Sale},
};
use base::config::Settings;
use futures::{stream, StreamExt};
use reqwest::Client;
use serde_json::Value;
use std::{collections::HashMap, net::IpAddr, time::Duration};

/// A deployment whose instances trust the proxy on 127.0.0.1 (the test's own client, or
/// nginx), with a window of three buys per client address.
fn trusting_loopback(settings: &mut Settings) {
    settings.trusted_proxies = ["127.0.0.1".parse().expect("network")]
        .into_iter()
        .collect();
    settings.buy.per_ip_per_window = 3;
    settings.buy.per_user_per_window = 1_000;
    settings.buy.per_item_per_window = 1_000_000;
}

/// A client that connects from `from`, a loopback address of its own.
fn client_from(from: IpAddr) -> Client {
    Client::builder()
        .local_address(from)
        .timeout(Duration::from_secs(60))
        .build()
        .expect("client")
}

/// A buy of one unit by `user`, sent to `address` by `client`, with `forwarded` as the
/// `X-Forwarded-For` the client itself writes.
async fn buy(
    client: &Client,
    app: &TestApp,
    address: &str,
    sale: &Sale,
    user: i64,
    forwarded: Option<&str>,
) -> (u16, Value) {
    let mut request = client
        .post(format!("{address}/api/seckill/buy"))
        .bearer_auth(token(app, user))
        .header("X-Request-ID", format!("proxied-{user}"))
        .json(&buy_body(sale, 1));
    if let Some(forwarded) = forwarded {
        request = request.header("X-Forwarded-For", forwarded);
    }
    json(request.send().await.expect("sent")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_clients_of_a_trusted_proxy_have_windows_of_their_own_and_others_choose_nothing()
{
    let app = spawn_app_with(trusting_loopback).await;
    let sale = open_sale(&app, 100, 1).await;
    let proxy = client_from("127.0.0.1".parse().expect("address"));
    // Twelve buyers through the trusted proxy, each with his own address.
    let mut statuses = Vec::new();
    for n in 0..12 {
        let client = format!("203.0.113.{}", n + 1);
        let (status, answer) = buy(&proxy, &app, &app.address, &sale, 100 + n, Some(&client)).await;
        assert_eq!(status, 200, "buyer {n} behind the proxy: {answer}");
        statuses.push(status);
    }
    // A client that is no trusted proxy writes a fresh address into every request: he is
    // still one address, with one window of three.
    let stranger = client_from("127.2.0.1".parse().expect("address"));
    let mut codes = Vec::new();
    for n in 0..4 {
        let spoofed = format!("198.51.100.{}", n + 1);
        let (status, answer) = buy(
            &stranger,
            &app,
            &app.address,
            &sale,
            200 + n,
            Some(&spoofed),
        )
        .await;
        codes.push((status, answer["code"].as_str().unwrap_or("").to_owned()));
    }
    assert_eq!(
        codes.iter().map(|(status, _)| *status).collect::<Vec<_>>(),
        [200, 200, 200, 429],
        "{codes:?}"
    );
    assert_eq!(codes[3].1, "RATE_LIMITED");
}

/// Three instances of one deployment, trusting the balancer's address, and nginx over them.
async fn balanced_deployment(limits: &EdgeLimits) -> (TestApp, Vec<TestApp>, Balancer) {
    let first = spawn_app_with(trusting_loopback).await;
    let mut siblings = Vec::new();
    for _ in 0..2 {
        siblings.push(first.spawn_sibling(|_| {}).await);
    }
    let addresses: Vec<&str> = std::iter::once(first.address.as_str())
        .chain(siblings.iter().map(|app| app.address.as_str()))
        .collect();
    let balancer = Balancer::start(&addresses, limits).await;
    (first, siblings, balancer)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_nginx_three_instances_sell_exactly_the_stock_to_two_thousand_addresses() {
    let limits = EdgeLimits {
        buys_per_s: 5,
        burst: 10,
        connections_per_address: 50,
    };
    let (first, _siblings, balancer) = balanced_deployment(&limits).await;
    let stock = 500;
    let sale = open_sale(&first, stock, 1).await;
    let through = balancer.address();
    let buyers = 2_000u32;
    let answers: Vec<(u16, String)> = stream::iter(0..buyers)
        .map(|n| {
            let (first, sale, through) = (&first, &sale, &through);
            async move {
                let client = client_from(Balancer::client_address(n));
                // Each buyer also writes a forged address: it must change nothing.
                let (status, answer) = buy(
                    &client,
                    first,
                    through,
                    sale,
                    10_000 + i64::from(n),
                    Some("192.0.2.1"),
                )
                .await;
                (status, answer["code"].as_str().unwrap_or("").to_owned())
            }
        })
        .buffer_unordered(64)
        .collect()
        .await;
    let mut by_code: HashMap<String, usize> = HashMap::new();
    for (status, code) in &answers {
        *by_code.entry(format!("{status} {code}")).or_default() += 1;
    }
    let sold = by_code.get("200 ").copied().unwrap_or(0);
    assert_eq!(sold, 500, "exactly the stock sold: {by_code:?}");
    assert_eq!(
        by_code.get("409 SOLD_OUT").copied().unwrap_or(0),
        1_500,
        "everyone else told it is sold out, none limited by the balancer's address: {by_code:?}"
    );
    let orders: i64 = sqlx::query_scalar("SELECT count(*) FROM orders WHERE item_id = $1")
        .bind(sale.item_id)
        .fetch_one(&first.db)
        .await
        .expect("orders");
    assert_eq!(orders, stock);
    // One address sending as four buyers, with a forged header each time: one window of 3.
    let one = client_from(Balancer::client_address(buyers + 1));
    let second_sale = open_sale(&first, 100, 1).await;
    let mut statuses = Vec::new();
    for n in 0..4 {
        let forged = format!("203.0.113.{}", n + 1);
        let (status, _) = buy(
            &one,
            &first,
            &through,
            &second_sale,
            30_000 + n,
            Some(&forged),
        )
        .await;
        statuses.push(status);
    }
    assert_eq!(statuses, [200, 200, 200, 429]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_balancer_stops_one_addresss_flood_at_the_edge_while_others_are_served() {
    let limits = EdgeLimits {
        buys_per_s: 5,
        burst: 10,
        connections_per_address: 50,
    };
    let (first, _siblings, balancer) = balanced_deployment(&limits).await;
    let sale = open_sale(&first, 100_000, 1_000).await;
    let through = balancer.address();
    let flooder = client_from(Balancer::client_address(7));
    let started = std::time::Instant::now();
    let flood: Vec<(u16, Option<String>, Value)> = stream::iter(0..200i64)
        .map(|n| {
            let (flooder, first, through, sale) = (&flooder, &first, &through, &sale);
            async move {
                let response = flooder
                    .post(format!("{through}/api/seckill/buy"))
                    .bearer_auth(token(first, 1))
                    .header("X-Request-ID", format!("flood-{n}"))
                    .json(&buy_body(sale, 1))
                    .send()
                    .await
                    .expect("sent");
                json_and_retry_after(response).await
            }
        })
        .buffer_unordered(20)
        .collect()
        .await;
    let elapsed = started.elapsed();
    // Whatever got past the edge is at most the burst and the rate over the flood's length.
    let past_the_edge = flood.iter().filter(|(status, ..)| *status != 429).count();
    let allowed = limits.burst as f64 + limits.buys_per_s as f64 * (elapsed.as_secs_f64() + 1.0);
    assert!(
        (past_the_edge as f64) <= allowed,
        "{past_the_edge} of 200 got past the edge in {elapsed:?}"
    );
    let refused: Vec<_> = flood.iter().filter(|(status, ..)| *status == 429).collect();
    assert!(refused.len() >= 100, "{} refused", refused.len());
    for (_, retry_after, body) in refused {
        assert_eq!(body["code"], "RATE_LIMITED", "{body}");
        assert!(retry_after.is_some(), "a refusal says when to retry");
    }
    // Another buyer, from another address, is served at once.
    let other = client_from(Balancer::client_address(8));
    let (status, answer) = buy(&other, &first, &through, &sale, 2, None).await;
    assert_eq!(status, 200, "{answer}");
}
