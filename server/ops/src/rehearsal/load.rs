//! The built-in load generator: the plan's buy requests sent over HTTP to this deployment's
//! own buyer API on the loopback address, at the asked rate, each answer timed to its last
//! byte and classified by status and code.
//!
//! Open loop: request `k` is due `k / rate` seconds after the start, whether earlier ones
//! have been answered or not, as buyers do not wait for each other; at most
//! [`MAX_IN_FLIGHT`] are outstanding, so a stalled server slows the load down instead of
//! piling up connections. The tokens are minted before the first request, so the timed part
//! does no signing.

use contract::{LatencyMs, OutcomeCount};
use secrecy::SecretString;
use std::{
    collections::{BTreeMap, HashMap},
    net::SocketAddr,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::{Duration, Instant},
};
use tokio::sync::Semaphore;
use uuid::Uuid;

use crate::rehearsal::{
    plan::{synthetic_buyer, Attempt, PlannedBuy},
    service::Stop,
};
use base::{fault, percentiles::nearest_rank};
use sale::identity::buyer_token;

/// Requests outstanding at once, at most: a server slower than the asked rate is then
/// sent to as fast as it answers, and the latencies say how long it takes, not how long a
/// request queued behind the others.
const MAX_IN_FLIGHT: usize = 128;
/// A request unanswered after this long counts as unanswered.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How long the synthetic buyers' tokens are good for.
const TOKEN_TTL: chrono::Duration = chrono::Duration::hours(2);

/// What one rehearsal sends: its plan, against its shadow.
pub(crate) struct Planned {
    pub(crate) rehearsal_id: i64,
    pub(crate) shadow: i64,
    /// Item ids, hot first.
    pub(crate) items: Vec<i64>,
    pub(crate) sends: Vec<PlannedBuy>,
    pub(crate) buyers: u32,
    pub(crate) rate_per_s: u32,
}

/// One rehearsal's load, ready to send.
pub(crate) struct Load {
    url: String,
    planned: Arc<Planned>,
    /// `Bearer <token>` per buyer index.
    authorizations: Vec<String>,
}

/// What came back for one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    /// `OK` for a 200 naming its order, else the body's `code` (`-` without one).
    pub(crate) code: String,
    pub(crate) order_id: Option<Uuid>,
    pub(crate) latency_us: u64,
}

/// Where the buyer API of the instance at `address` is reached from itself: a wildcard
/// bind is reached on the loopback address of its family.
pub(crate) fn own_address(address: SocketAddr) -> SocketAddr {
    let mut address = address;
    if address.ip().is_unspecified() {
        address.set_ip(match address {
            SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    address
}

impl Load {
    /// Mints a token per synthetic buyer, good for the shadow only; the requests go to the
    /// instance at `address`.
    pub(crate) fn new(
        address: SocketAddr,
        secret: &SecretString,
        planned: Arc<Planned>,
    ) -> anyhow::Result<Self> {
        let authorizations = (0..planned.buyers)
            .map(|buyer| {
                let user = synthetic_buyer(planned.rehearsal_id, buyer);
                let token = buyer_token::mint_rehearsal(secret, user, planned.shadow, TOKEN_TTL)?;
                Ok(format!("Bearer {token}"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Self {
            url: format!("http://{}/api/seckill/buy", own_address(address)),
            planned,
            authorizations,
        })
    }

    /// Sends every request of the plan on schedule, or until `stop` gives a reason to stop;
    /// `sent` counts them as they go out. Waits for the answers of every request sent, even
    /// when stopped, so none reaches the server after the rehearsal's clean-up. Returns each
    /// request's reply (`None`: no answer, or not sent) in plan order.
    pub(crate) async fn run(
        self,
        sent: Arc<AtomicU64>,
        stop: Stop,
    ) -> anyhow::Result<Vec<Option<Reply>>> {
        let client = reqwest::Client::builder()
            .no_proxy()
            .http1_only()
            .pool_max_idle_per_host(MAX_IN_FLIGHT)
            .tcp_nodelay(true)
            .timeout(TIMEOUT)
            .build()?;
        let load = Arc::new(self);
        let slots = Arc::new(Semaphore::new(MAX_IN_FLIGHT));
        let total = load.planned.sends.len();
        let rate = f64::from(load.planned.rate_per_s);
        let mut tasks = tokio::task::JoinSet::new();
        let started = Instant::now();
        let mut next = 0;
        while next < total && stop.borrow().is_none() {
            let due = (started.elapsed().as_secs_f64() * rate) as usize + 1;
            while next < due.min(total) {
                let permit = slots.clone().acquire_owned().await?;
                let (load, client, k) = (load.clone(), client.clone(), next);
                tasks.spawn(async move {
                    let reply = load.send(&client, k).await;
                    drop(permit);
                    (k, reply)
                });
                next += 1;
                sent.store(next as u64, Ordering::Relaxed);
                if next == total.div_ceil(2) {
                    fault::point("rehearsal.loading");
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let mut replies = vec![None; total];
        while let Some(done) = tasks.join_next().await {
            let (k, reply) = done?;
            replies[k] = reply;
        }
        Ok(replies)
    }

    async fn send(&self, client: &reqwest::Client, k: usize) -> Option<Reply> {
        let planned = &self.planned;
        let send = planned.sends[k];
        let body = serde_json::json!({
            "activity_id": planned.shadow,
            "item_id": planned.items[send.item],
            "quantity": 1,
        });
        let started = Instant::now();
        let response = client
            .post(&self.url)
            .header("authorization", &self.authorizations[send.buyer as usize])
            .header("x-request-id", send.request_id(planned.rehearsal_id))
            .json(&body)
            .send()
            .await
            .ok()?;
        let status = response.status().as_u16();
        let bytes = response.bytes().await.ok()?;
        let latency_us = u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX);
        let (code, order_id) = classify(status, &bytes);
        Some(Reply {
            status,
            code,
            order_id,
            latency_us,
        })
    }
}

/// `OK` and the order for a 200 that names one, else the error body's code.
fn classify(status: u16, body: &[u8]) -> (String, Option<Uuid>) {
    let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    if status == 200 {
        match value["order_id"].as_str().and_then(|id| id.parse().ok()) {
            Some(order) => ("OK".to_owned(), Some(order)),
            None => ("UNEXPECTED_BODY".to_owned(), None),
        }
    } else {
        let code = value["code"].as_str().unwrap_or("-");
        (code.to_owned(), None)
    }
}

/// Whether an answer decides the request, rather than asking to try again later (the
/// instance overloaded or degraded, a rate window full, the first request with this id
/// still running): a replay told to try again has not been told he lost.
fn is_verdict(reply: &Reply) -> bool {
    !(reply.status == 503 || reply.status == 429 || reply.code == "REQUEST_IN_PROGRESS")
}

/// The load's replies in figures: outcomes, latencies, the orders granted, and how the
/// replays of granted requests were answered.
pub(crate) struct Tally {
    pub(crate) requests: i64,
    pub(crate) unanswered: i64,
    pub(crate) outcomes: Vec<OutcomeCount>,
    pub(crate) latency_ms: Option<LatencyMs>,
    /// Distinct orders answered with a 200.
    pub(crate) ok_orders: Vec<Uuid>,
    /// Replays of a request first answered with a 200 that got a verdict (not "try again"),
    /// and those whose verdict was another.
    pub(crate) replays: usize,
    pub(crate) replays_differing: usize,
}

/// Sums up `replies` (in the order of `sends`).
pub(crate) fn tally(sends: &[PlannedBuy], replies: &[Option<Reply>]) -> Tally {
    let mut outcomes: BTreeMap<(u16, String), i64> = BTreeMap::new();
    let mut latencies: Vec<u64> = Vec::with_capacity(replies.len());
    let mut ok_orders: Vec<Uuid> = Vec::new();
    let mut first_orders: HashMap<u32, Uuid> = HashMap::new();
    for (send, reply) in sends.iter().zip(replies) {
        let Some(reply) = reply else { continue };
        *outcomes
            .entry((reply.status, reply.code.clone()))
            .or_default() += 1;
        latencies.push(reply.latency_us);
        ok_orders.extend(reply.order_id);
        if let (Attempt::First, Some(order)) = (send.attempt, reply.order_id) {
            first_orders.insert(send.buyer, order);
        }
    }
    let (mut replays, mut replays_differing) = (0, 0);
    for (send, reply) in sends.iter().zip(replies) {
        if send.attempt != Attempt::Replay {
            continue;
        }
        let (Some(first), Some(reply)) = (first_orders.get(&send.buyer), reply) else {
            continue;
        };
        if !is_verdict(reply) {
            continue;
        }
        replays += 1;
        if reply.order_id != Some(*first) {
            replays_differing += 1;
        }
    }
    ok_orders.sort_unstable();
    ok_orders.dedup();
    latencies.sort_unstable();
    let answered = latencies.len() as i64;
    let millis = |p: f64| nearest_rank(&latencies, p).unwrap_or(0) as f64 / 1000.0;
    Tally {
        requests: replies.len() as i64,
        unanswered: replies.len() as i64 - answered,
        outcomes: outcomes
            .into_iter()
            .map(|((status, code), count)| OutcomeCount {
                status,
                code,
                count,
            })
            .collect(),
        latency_ms: (!latencies.is_empty()).then(|| LatencyMs {
            p50: millis(0.50),
            p90: millis(0.90),
            p99: millis(0.99),
            p999: millis(0.999),
            max: millis(1.0),
        }),
        ok_orders,
        replays,
        replays_differing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(buyer: u32, attempt: Attempt) -> PlannedBuy {
        PlannedBuy {
            buyer,
            item: 0,
            attempt,
        }
    }

    fn reply(ms: u64, status: u16, code: &str, order_id: Option<Uuid>) -> Option<Reply> {
        Some(Reply {
            status,
            code: code.to_owned(),
            order_id,
            latency_us: ms * 1000,
        })
    }

    #[test]
    fn replies_are_counted_by_code_and_replays_compared_with_their_first_answer() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let sends = [
            send(0, Attempt::First),
            send(1, Attempt::First),
            send(2, Attempt::First),
            send(0, Attempt::Replay),
            send(0, Attempt::Again),
            send(1, Attempt::Replay),
            send(2, Attempt::Replay),
            send(0, Attempt::Replay),
        ];
        let replies = [
            reply(4, 200, "OK", Some(a)),
            reply(6, 200, "OK", Some(b)),
            reply(2, 409, "SOLD_OUT", None),
            reply(1, 200, "OK", Some(a)),
            reply(3, 409, "ALREADY_PURCHASED", None),
            // Buyer 1's replay lost its first answer: a finding.
            reply(5, 409, "ALREADY_PURCHASED", None),
            // A refusal is not kept for replays: buyer 2's replay is a new try.
            None,
            // "Try again": not a verdict.
            reply(8, 409, "REQUEST_IN_PROGRESS", None),
        ];
        let tally = tally(&sends, &replies);
        assert_eq!((tally.requests, tally.unanswered), (8, 1));
        assert_eq!(
            tally.ok_orders.len(),
            2,
            "buyer 0's replay names the same order"
        );
        assert_eq!((tally.replays, tally.replays_differing), (2, 1));
        let count = |code: &str| {
            tally
                .outcomes
                .iter()
                .find(|outcome| outcome.code == code)
                .map_or(0, |outcome| outcome.count)
        };
        assert_eq!(
            (count("OK"), count("ALREADY_PURCHASED"), count("SOLD_OUT")),
            (3, 2, 1)
        );
        let latency = tally.latency_ms.expect("answers");
        assert_eq!((latency.p50, latency.max), (4.0, 8.0));
    }

    #[test]
    fn answers_are_read_as_orders_or_codes() {
        let id = Uuid::new_v4();
        let ok = format!(r#"{{"order_id":"{id}","status":"PRE_CREATED"}}"#);
        assert_eq!(classify(200, ok.as_bytes()), ("OK".to_owned(), Some(id)));
        assert_eq!(
            classify(409, br#"{"code":"SOLD_OUT","message":"x"}"#),
            ("SOLD_OUT".to_owned(), None)
        );
        assert_eq!(classify(200, b"{}").0, "UNEXPECTED_BODY");
        assert_eq!(classify(502, b"").0, "-");
    }

    #[test]
    fn a_wildcard_bind_is_reached_on_loopback() {
        let wildcard: SocketAddr = "0.0.0.0:3000".parse().expect("address");
        assert_eq!(own_address(wildcard).to_string(), "127.0.0.1:3000");
        let v6: SocketAddr = "[::]:3000".parse().expect("address");
        assert_eq!(own_address(v6).to_string(), "[::1]:3000");
        let bound: SocketAddr = "127.0.0.1:41234".parse().expect("address");
        assert_eq!(own_address(bound), bound);
    }
}
