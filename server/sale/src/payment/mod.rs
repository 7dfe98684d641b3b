//! Payment (docs/pipeline.md): the [`PaymentGateway`] the order system pays through, the
//! built-in simulated payment center behind it, the signature of the center's callbacks,
//! and the handling of a callback (`POST /api/pay/notify`).
//!
//! The pay-timeout consumer asks the gateway before it cancels: an order
//! whose money reached the center is paid, never cancelled, even if the callback is late.

pub mod notice;
pub mod routes;
pub mod signature;
pub mod simulated;
pub mod status;
pub mod store;

use serde::{Deserialize, Serialize};
use sqlx::PgPool;
use std::net::SocketAddr;
use uuid::Uuid;

use crate::{
    events::BuyerEvents,
    orders::status::PaymentEffect,
    payment::{
        status::TradeStatus,
        store::{self as payments, Recorded},
    },
};
use base::metrics::Metrics;

/// An order about to be paid.
#[derive(Clone, Copy, Debug)]
pub struct Payable {
    pub order_id: Uuid,
    pub amount_cents: i64,
}

/// What the payment center knows of an order's money.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PaymentState {
    Paid { trade_no: String, amount_cents: i64 },
    Unpaid,
}

#[derive(Debug, thiserror::Error)]
#[error("the payment center failed: {0}")]
pub struct GatewayError(#[source] pub anyhow::Error);

/// Why an order takes no new trade, decided under its row on the database's clock.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Unpayable {
    /// Not `UNPAID`: the status it is in.
    #[error("an order in state {0} cannot be paid")]
    Status(String),
    #[error("the order's pay deadline has passed")]
    DeadlinePassed,
}

impl Unpayable {
    /// The code the pay route answers it with (409).
    pub fn code(&self) -> &'static str {
        match self {
            Self::Status(_) => "ORDER_NOT_PAYABLE",
            Self::DeadlinePassed => "PAY_DEADLINE_PASSED",
        }
    }
}

/// Why no trade was started.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Unpayable(#[from] Unpayable),
    #[error(transparent)]
    Gateway(#[from] GatewayError),
}

/// A payment center as the order system sees it.
#[async_trait::async_trait]
pub trait PaymentGateway: Send + Sync {
    /// Starts paying `order`; returns its trade number. An order with an open trade gets
    /// that trade again, so a repeated pay never charges twice. A trade is opened only for
    /// an order `UNPAID` with its deadline ahead, decided under the order row on the
    /// database's clock, never checked first and written after: the pay timeout cancels
    /// under the same row, so a new trade and the cancel never both win.
    async fn start_trade(&self, order: Payable) -> Result<String, StartError>;

    /// The order's payment state, final: unless it is paid, its open trades are closed
    /// first so no money can arrive for it afterwards (the "close trade" call real centers
    /// offer for exactly this, before an unpaid order is cancelled).
    async fn close_unless_paid(&self, order_id: Uuid) -> Result<PaymentState, GatewayError>;

    /// Told once the HTTP listener is bound: a center that calls this instance back learns
    /// its real address here (tests bind port 0).
    fn listening_on(&self, _address: SocketAddr) {}
}

/// The body of a payment-center callback (`POST /api/pay/notify`). Fields a
/// center adds later are ignored: the signature covers the raw body anyway.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayNotice {
    pub trade_no: String,
    pub order_id: Uuid,
    pub amount_cents: i64,
    /// `paid` or `failed`; a callback never reports a pending trade.
    pub status: TradeStatus,
    /// When the money arrived; absent for a failed trade.
    pub paid_at_ms: Option<i64>,
}

/// What money that reached the center did to its order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Settled {
    /// `UNPAID → PAID`.
    Paid,
    /// `CANCELLED → REFUND_PENDING`: it came after the order was cancelled.
    RefundPending,
    /// Recorded before (a repeated callback, or the pay-timeout check came first).
    AlreadyApplied,
}

impl Settled {
    /// `None` for an order that cannot take a payment.
    pub fn of(effect: PaymentEffect) -> Option<Self> {
        match effect {
            PaymentEffect::MarkPaid => Some(Self::Paid),
            PaymentEffect::FlagRefund => Some(Self::RefundPending),
            PaymentEffect::AlreadyApplied => Some(Self::AlreadyApplied),
            PaymentEffect::Refuse => None,
        }
    }
}

/// Records money the center received for the order (from a callback, or found by the
/// pay-timeout check when the callback is late), counted by `via` and outcome, and tells
/// its buyer the order's new state.
pub async fn record_payment(
    db: &PgPool,
    metrics: &Metrics,
    events: &BuyerEvents,
    order_id: Uuid,
    amount_cents: i64,
    via: &'static str,
) -> Result<Recorded, sqlx::Error> {
    let recorded = payments::record_payment(db, order_id, amount_cents).await?;
    if let Recorded::Applied {
        effect,
        activity_id,
        user_id,
        ..
    } = recorded
    {
        if let Some(status) = effect.moves_to() {
            events.order(activity_id, user_id, order_id, status);
        }
    }
    let outcome = match recorded {
        Recorded::Applied { effect, .. } => match effect {
            PaymentEffect::MarkPaid => "paid",
            PaymentEffect::FlagRefund => "refund_pending",
            PaymentEffect::AlreadyApplied => "repeated",
            PaymentEffect::Refuse => "refused",
        },
        Recorded::AmountMismatch { .. } => "amount_mismatch",
        Recorded::NoOrder => "no_order",
    };
    metrics.payments.with_label_values(&[via, outcome]).inc();
    Ok(recorded)
}
