//! The built-in simulated payment center: trades live in PostgreSQL
//! (`payment_trades`); `settings.payment.delay_ms` after a trade starts the buyer's money
//! arrives (or, at `failure_rate`, the trade fails), and `notify_delay_ms` later the center
//! starts calling back with a signed notice, retrying with backoff until it gets a 2xx.
//!
//! It calls `settings.payment.notify_url`, or when unset this instance's own
//! `/api/pay/notify` at the address the listener really bound.

use secrecy::SecretString;
use sqlx::PgPool;
use std::{
    net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr},
    sync::{Arc, OnceLock},
    time::Duration,
};
use uuid::Uuid;

use crate::payment::store::{self as payments, Trade};
use crate::payment::{
    signature, status::TradeStatus, GatewayError, PayNotice, Payable, PaymentGateway, PaymentState,
    StartError,
};
use base::{config::PaymentSettings, metrics::Metrics};

/// First wait between callback attempts; it doubles up to [`MAX_RETRY_WAIT`].
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(250);
const MAX_RETRY_WAIT: Duration = Duration::from_secs(30);
/// How long one callback may take before it counts as failed.
const CALLBACK_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone)]
pub struct SimulatedCenter(Arc<Inner>);

struct Inner {
    db: PgPool,
    secret: SecretString,
    settings: PaymentSettings,
    notify_url: OnceLock<String>,
    http: reqwest::Client,
    metrics: Metrics,
}

impl SimulatedCenter {
    pub fn new(
        db: PgPool,
        secret: SecretString,
        settings: PaymentSettings,
        metrics: Metrics,
    ) -> Self {
        let notify_url = OnceLock::new();
        if let Some(url) = &settings.notify_url {
            let _ = notify_url.set(url.clone());
        }
        Self(Arc::new(Inner {
            db,
            secret,
            settings,
            notify_url,
            http: reqwest::Client::builder()
                .timeout(CALLBACK_TIMEOUT)
                .build()
                .expect("a default HTTP client builds"),
            metrics,
        }))
    }
}

/// Where a center started inside the instance at `address` calls back.
fn own_notify_url(address: SocketAddr) -> String {
    let ip = match address.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!(
        "http://{}/api/pay/notify",
        SocketAddr::new(ip, address.port())
    )
}

/// Wait before callback attempt `attempt + 1` (`attempt` counts from 0).
fn retry_wait(attempt: u32) -> Duration {
    FIRST_RETRY_WAIT
        .saturating_mul(2u32.saturating_pow(attempt))
        .min(MAX_RETRY_WAIT)
}

#[async_trait::async_trait]
impl PaymentGateway for SimulatedCenter {
    async fn start_trade(&self, order: Payable) -> Result<String, StartError> {
        let candidate = format!("SIM{}", Uuid::new_v4().simple());
        let (trade, created) =
            payments::open_trade(&self.0.db, order.order_id, order.amount_cents, &candidate)
                .await
                .map_err(|e| GatewayError(e.into()))??;
        if created {
            tokio::spawn(self.0.clone().settle(trade.trade_no.clone()));
        }
        Ok(trade.trade_no)
    }

    async fn close_unless_paid(&self, order_id: Uuid) -> Result<PaymentState, GatewayError> {
        let closed =
            async { payments::close_unless_paid(&mut *self.0.db.acquire().await?, order_id).await };
        let paid = closed.await.map_err(|e| GatewayError(e.into()))?;
        Ok(match paid {
            Some(trade) => PaymentState::Paid {
                trade_no: trade.trade_no,
                amount_cents: trade.amount_cents,
            },
            None => PaymentState::Unpaid,
        })
    }

    fn listening_on(&self, address: SocketAddr) {
        // A configured notify URL was set at construction and wins.
        let _ = self.0.notify_url.set(own_notify_url(address));
    }
}

impl Inner {
    /// The buyer's side of a trade: the money arrives (or the trade fails) after the delay;
    /// then the merchant is told.
    async fn settle(self: Arc<Self>, trade_no: String) {
        tokio::time::sleep(Duration::from_millis(self.settings.delay_ms)).await;
        let outcome = if rand::random::<f64>() < self.settings.failure_rate {
            TradeStatus::Failed
        } else {
            TradeStatus::Paid
        };
        match payments::settle_trade(&self.db, &trade_no, outcome).await {
            Ok(Some(trade)) => {
                self.settled(outcome.as_str());
                tokio::time::sleep(Duration::from_millis(self.settings.notify_delay_ms)).await;
                self.notify(&trade).await;
            }
            // Closed before the money came: the order was cancelled unpaid.
            Ok(None) => self.settled("closed"),
            Err(error) => {
                tracing::warn!(%trade_no, error = %error, "simulated payment center could not settle a trade");
            }
        }
    }

    /// Counts a trade settled after the buyer's delay; a closed one shows nowhere else.
    fn settled(&self, outcome: &str) {
        self.metrics
            .pay_center_settlements
            .with_label_values(&[outcome])
            .inc();
    }

    /// Calls the merchant back until it answers 2xx, counting every attempt on the trade.
    async fn notify(&self, trade: &Trade) {
        let notice = PayNotice {
            trade_no: trade.trade_no.clone(),
            order_id: trade.order_id,
            amount_cents: trade.amount_cents,
            status: trade.status,
            paid_at_ms: trade.paid_at.map(|at| at.timestamp_millis()),
        };
        let body = serde_json::to_vec(&notice).expect("a notice serialises");
        let signature = signature::sign(&self.secret, &body);
        let mut attempt = 0u32;
        loop {
            let delivered = self.post(&body, &signature).await;
            let outcome = if delivered { "delivered" } else { "failed" };
            self.metrics
                .pay_callbacks
                .with_label_values(&[outcome])
                .inc();
            if let Err(error) =
                payments::count_notify_attempt(&self.db, &trade.trade_no, delivered).await
            {
                tracing::warn!(trade_no = %trade.trade_no, error = %error, "could not count a callback attempt");
            }
            if delivered {
                return;
            }
            tokio::time::sleep(retry_wait(attempt)).await;
            attempt = attempt.saturating_add(1);
        }
    }

    /// One callback; true when the merchant answered 2xx.
    async fn post(&self, body: &[u8], signature: &str) -> bool {
        let Some(url) = self.notify_url.get() else {
            tracing::warn!("simulated payment center has no notify URL yet");
            return false;
        };
        let sent = self
            .http
            .post(url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header(signature::HEADER, signature)
            .body(body.to_vec())
            .send()
            .await;
        match sent {
            Ok(response) if response.status().is_success() => true,
            Ok(response) => {
                tracing::warn!(status = %response.status(), "payment callback refused; retrying");
                false
            }
            Err(error) => {
                tracing::warn!(error = %error, "payment callback failed; retrying");
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn callbacks_back_off_up_to_a_cap() {
        assert_eq!(retry_wait(0), Duration::from_millis(250));
        assert_eq!(retry_wait(1), Duration::from_millis(500));
        assert_eq!(retry_wait(3), Duration::from_secs(2));
        assert_eq!(retry_wait(20), MAX_RETRY_WAIT);
        assert_eq!(retry_wait(u32::MAX), MAX_RETRY_WAIT);
    }

    #[test]
    fn the_own_notify_url_uses_the_bound_address() {
        assert_eq!(
            own_notify_url("127.0.0.1:41234".parse().expect("addr")),
            "http://127.0.0.1:41234/api/pay/notify"
        );
        assert_eq!(
            own_notify_url("0.0.0.0:3000".parse().expect("addr")),
            "http://127.0.0.1:3000/api/pay/notify"
        );
        assert_eq!(
            own_notify_url("[::1]:3000".parse().expect("addr")),
            "http://[::1]:3000/api/pay/notify"
        );
    }
}
