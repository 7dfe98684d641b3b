//! Orders as the admin API and the console list and show them, and the order state machine.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::Page;

/// Filters of `GET /admin/api/orders` and of the console's order list; absent means "any".
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderQuery {
    pub activity_id: Option<i64>,
    /// One of [`OrderRows::statuses`], as its name; the server answers 400 for another.
    pub status: Option<String>,
    /// 1-based; newest orders are on page 1.
    pub page: Option<i64>,
}

/// An order as the admin console lists it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderSummary {
    pub id: String,
    pub activity_id: i64,
    pub activity_title: String,
    pub item_id: i64,
    pub item_name: String,
    pub user_id: i64,
    pub quantity: i64,
    pub amount_cents: i64,
    pub status: OrderStatus,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Set once the create-order consumer completed the order.
    pub pay_deadline: Option<DateTime<Utc>>,
}

/// `GET /admin/api/orders`: one page of orders, newest first.
pub type OrderPage = Page<OrderRows>;

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderRows {
    pub orders: Vec<OrderSummary>,
    /// Every status the `status` filter accepts, in lifecycle order.
    pub statuses: Vec<OrderStatus>,
}

/// One step of an order's life: its creation (`from` absent), then every status change.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderTransition {
    pub from: Option<OrderStatus>,
    pub to: OrderStatus,
    pub at: DateTime<Utc>,
}

/// A trade the payment center opened for an order.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentTradeView {
    pub trade_no: String,
    pub amount_cents: i64,
    pub status: TradeStatus,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
    pub notified_at: Option<DateTime<Utc>>,
    pub notify_attempts: i64,
}

/// The restore-journal row of an order whose stock went back.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockRestoreView {
    pub quantity: i64,
    pub restored_at: DateTime<Utc>,
    /// Absent while Redis has not been given the units back yet.
    pub redis_restored_at: Option<DateTime<Utc>>,
}

/// `GET /admin/api/orders/{id}`: the order with everything that happened to it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderDetail {
    pub order: OrderSummary,
    pub request_id: String,
    /// Seats the order holds (seated activities only).
    pub seats: Vec<String>,
    /// Oldest first, starting with the creation.
    pub history: Vec<OrderTransition>,
    pub trades: Vec<PaymentTradeView>,
    pub restore: Option<StockRestoreView>,
}

/// Where an order is in its life (docs/pipeline.md): `PRE_CREATED → UNPAID → PAID`,
/// `UNPAID → CANCELLED`, `PRE_CREATED → FAILED`, `CANCELLED → REFUND_PENDING`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OrderStatus {
    /// Written by the buy path with its outbox row; the create-order consumer completes it.
    PreCreated,
    /// Completed by the consumer: price snapshot, pay deadline, DB stock moved.
    Unpaid,
    Paid,
    /// Not paid in time; its stock went back through the restore journal.
    Cancelled,
    /// Could not be completed; its stock went back.
    Failed,
    /// Paid after it was cancelled: the money must go back to the buyer.
    RefundPending,
}

impl OrderStatus {
    pub const ALL: [OrderStatus; 6] = [
        Self::PreCreated,
        Self::Unpaid,
        Self::Paid,
        Self::Cancelled,
        Self::Failed,
        Self::RefundPending,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::PreCreated => "PRE_CREATED",
            Self::Unpaid => "UNPAID",
            Self::Paid => "PAID",
            Self::Cancelled => "CANCELLED",
            Self::Failed => "FAILED",
            Self::RefundPending => "REFUND_PENDING",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|status| status.as_str() == text)
    }

    /// Whether the order keeps its units out of stock (`PRE_CREATED`, `UNPAID`, `PAID`).
    pub fn holds_stock(self) -> bool {
        !matches!(self, Self::Cancelled | Self::Failed | Self::RefundPending)
    }

    /// Whether the state machine allows moving an order from `self` to `to`.
    pub fn may_become(self, to: OrderStatus) -> bool {
        matches!(
            (self, to),
            (Self::PreCreated, Self::Unpaid)
                | (Self::Unpaid, Self::Paid)
                | (Self::Unpaid, Self::Cancelled)
                | (Self::PreCreated, Self::Failed)
                | (Self::Cancelled, Self::RefundPending)
        )
    }
}

impl std::fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// State of a trade at the payment center.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TradeStatus {
    /// Started; the buyer's money has not arrived.
    Pending,
    Paid,
    /// Refused by the center, or closed unpaid before the order was cancelled.
    Failed,
}

impl TradeStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Paid => "paid",
            Self::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        [Self::Pending, Self::Paid, Self::Failed]
            .into_iter()
            .find(|status| status.as_str() == text)
    }
}
