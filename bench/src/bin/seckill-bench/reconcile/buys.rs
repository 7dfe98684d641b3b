//! The buy load beside the report runs: buys sent at a fixed rate whatever the answers do
//! (open loop), each by a buyer of its own with a pre-minted token, each timed from the
//! moment it was due, so a stall shows in the latencies instead of slowing the load down.

use secrecy::SecretString;
use std::{collections::BTreeMap, time::Duration};

/// Longest a buy may take before it counts as a timeout.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The buyers of the run, each with the whole `Authorization` header, used once each.
pub struct Buyers {
    headers: Vec<String>,
    next: usize,
}

impl Buyers {
    /// Mints `count` tokens for user ids `first..`, so the timed windows do no signing.
    pub fn mint(secret: &SecretString, first: i64, count: usize) -> anyhow::Result<Self> {
        let ttl = chrono::Duration::hours(2);
        let headers = (0..count)
            .map(|offset| {
                let user = first + i64::try_from(offset)?;
                let token = sale::identity::buyer_token::mint(secret, user, ttl)?;
                Ok(format!("Bearer {token}"))
            })
            .collect::<anyhow::Result<_>>()?;
        Ok(Self { headers, next: 0 })
    }

    fn take(&mut self, count: usize) -> anyhow::Result<Vec<String>> {
        anyhow::ensure!(
            self.next + count <= self.headers.len(),
            "more buys than buyers minted"
        );
        let taken = self.headers[self.next..self.next + count].to_vec();
        self.next += count;
        Ok(taken)
    }
}

/// Where the buys go.
pub struct Target {
    pub http: reqwest::Client,
    pub url: String,
    pub activity_id: i64,
    pub item_id: i64,
}

/// One window of buys.
#[derive(Default)]
pub struct Window {
    /// Milliseconds from each buy's due time to the end of its answer, sorted.
    pub latencies: Vec<f64>,
    /// 200 `PRE_CREATED` answers.
    pub ok: u64,
    /// Everything else, by status and `code` (or transport error).
    pub failed: BTreeMap<String, u64>,
    /// How late the loop sent, at worst: above a millisecond or two the load tool itself
    /// fell behind.
    pub worst_send_lag_ms: f64,
}

/// A client for the buys: no proxy, HTTP/1.1, a pool large enough for the buys in flight.
pub fn client() -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .http1_only()
        .pool_max_idle_per_host(512)
        .tcp_nodelay(true)
        .timeout(TIMEOUT)
        .build()
}

/// Sends `rate` buys a second for `length`, one buyer each, and waits for every answer.
pub async fn window(
    target: &Target,
    buyers: &mut Buyers,
    rate: u64,
    length: Duration,
) -> anyhow::Result<Window> {
    anyhow::ensure!(rate > 0, "the buy rate must be positive");
    let count = usize::try_from((rate as f64 * length.as_secs_f64()).round() as u64)?;
    let headers = buyers.take(count)?;
    let spacing = Duration::from_secs(1).div_f64(rate as f64);
    let started = tokio::time::Instant::now();
    let mut sent = Vec::with_capacity(count);
    let mut worst_lag = Duration::ZERO;
    for (k, authorization) in headers.into_iter().enumerate() {
        let due = started + spacing.mul_f64(k as f64);
        tokio::time::sleep_until(due).await;
        worst_lag = worst_lag.max(due.elapsed());
        let request = target
            .http
            .post(&target.url)
            .header("Authorization", authorization)
            .header("X-Request-ID", uuid::Uuid::new_v4().to_string())
            .json(&serde_json::json!({
                "activity_id": target.activity_id,
                "item_id": target.item_id,
                "quantity": 1,
            }));
        let due = due.into_std();
        sent.push(tokio::spawn(async move {
            let outcome = answer(request).await;
            (due.elapsed(), outcome)
        }));
    }
    let mut window = Window {
        worst_send_lag_ms: worst_lag.as_secs_f64() * 1000.0,
        ..Window::default()
    };
    for buy in sent {
        let (latency, outcome) = buy.await?;
        window.latencies.push(latency.as_secs_f64() * 1000.0);
        match outcome {
            Ok(()) => window.ok += 1,
            Err(label) => *window.failed.entry(label).or_default() += 1,
        }
    }
    window.latencies.sort_by(f64::total_cmp);
    Ok(window)
}

/// `Ok` for a 200 `PRE_CREATED`, else what came back.
async fn answer(request: reqwest::RequestBuilder) -> Result<(), String> {
    let response = request.send().await.map_err(transport)?;
    let status = response.status();
    let body: serde_json::Value = response.json().await.map_err(transport)?;
    if status.is_success() && body["status"] == "PRE_CREATED" {
        return Ok(());
    }
    Err(format!(
        "{} {}",
        status.as_u16(),
        body["code"].as_str().unwrap_or("-")
    ))
}

fn transport(error: reqwest::Error) -> String {
    if error.is_timeout() {
        "timeout".into()
    } else if error.is_connect() {
        "connect".into()
    } else {
        "transport".into()
    }
}

/// Nearest-rank percentile of sorted samples (0 for none).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let samples: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&samples, 0.5), 50.0);
        assert_eq!(percentile(&samples, 0.99), 99.0);
        assert_eq!(percentile(&[], 0.99), 0.0);
    }
}
