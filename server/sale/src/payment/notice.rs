//! Receiving a payment-center callback (`POST /api/pay/notify`, docs/buyer-api.md): the
//! signature over the raw body first, then the trade, the amount and the order's state.
//! Anything refused changes nothing; a repeated callback changes nothing and succeeds.

use secrecy::SecretString;
use sqlx::PgPool;

use crate::payment::{record_payment, signature, status::TradeStatus, PayNotice, Settled};
use crate::{events::BuyerEvents, orders::status::OrderStatus, payment::store as payments};
use base::metrics::Metrics;

/// What an accepted callback did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accepted {
    Settled(Settled),
    /// The center reports a failed trade: the order stays as it is (its buyer may pay again).
    TradeFailed,
}

#[derive(Debug, thiserror::Error)]
pub enum Refused {
    #[error("the signature does not match the body")]
    BadSignature,
    #[error("malformed notice: {0}")]
    Malformed(String),
    #[error("no such trade for this order")]
    UnknownTrade,
    #[error("the notice says {notice} cents, the {what} costs {expected}")]
    AmountMismatch {
        notice: i64,
        expected: i64,
        what: &'static str,
    },
    #[error("an order in state {0} cannot be paid")]
    NotPayable(OrderStatus),
    #[error(transparent)]
    Database(#[from] sqlx::Error),
}

impl Refused {
    /// The label of `seckill_pay_notify_rejected_total`, if the notice itself was at fault.
    fn reason(&self) -> Option<&'static str> {
        match self {
            Self::BadSignature => Some("bad_signature"),
            Self::Malformed(_) => Some("malformed"),
            Self::UnknownTrade => Some("unknown_trade"),
            Self::AmountMismatch { .. } => Some("amount_mismatch"),
            Self::NotPayable(_) => Some("not_payable"),
            Self::Database(_) => None,
        }
    }
}

/// Verifies and applies one callback.
pub async fn receive(
    db: &PgPool,
    secret: &SecretString,
    metrics: &Metrics,
    events: &BuyerEvents,
    body: &[u8],
    signature_header: Option<&str>,
) -> Result<Accepted, Refused> {
    let result = check_and_apply(db, secret, metrics, events, body, signature_header).await;
    if let Err(refusal) = &result {
        if let Some(reason) = refusal.reason() {
            metrics
                .pay_notify_rejected
                .with_label_values(&[reason])
                .inc();
        }
    }
    result
}

async fn check_and_apply(
    db: &PgPool,
    secret: &SecretString,
    metrics: &Metrics,
    events: &BuyerEvents,
    body: &[u8],
    signature_header: Option<&str>,
) -> Result<Accepted, Refused> {
    if !signature::verify(secret, body, signature_header) {
        return Err(Refused::BadSignature);
    }
    let notice: PayNotice =
        serde_json::from_slice(body).map_err(|e| Refused::Malformed(e.to_string()))?;
    let trade = payments::trade_by_number(db, &notice.trade_no)
        .await?
        .filter(|trade| trade.order_id == notice.order_id)
        .ok_or(Refused::UnknownTrade)?;
    if notice.amount_cents != trade.amount_cents {
        return Err(Refused::AmountMismatch {
            notice: notice.amount_cents,
            expected: trade.amount_cents,
            what: "trade",
        });
    }
    match notice.status {
        TradeStatus::Failed => Ok(Accepted::TradeFailed),
        TradeStatus::Pending => Err(Refused::Malformed(
            "a callback reports a paid or failed trade".into(),
        )),
        TradeStatus::Paid if notice.paid_at_ms.is_none() => Err(Refused::Malformed(
            "a paid notice carries paid_at_ms".into(),
        )),
        TradeStatus::Paid => {
            match record_payment(
                db,
                metrics,
                events,
                notice.order_id,
                notice.amount_cents,
                "notify",
            )
            .await?
            {
                payments::Recorded::Applied { from, effect, .. } => match Settled::of(effect) {
                    Some(settled) => Ok(Accepted::Settled(settled)),
                    None => Err(Refused::NotPayable(from)),
                },
                payments::Recorded::AmountMismatch { order_amount_cents } => {
                    Err(Refused::AmountMismatch {
                        notice: notice.amount_cents,
                        expected: order_amount_cents,
                        what: "order",
                    })
                }
                // The trade's foreign key makes this unreachable short of a deleted order.
                payments::Recorded::NoOrder => Err(Refused::UnknownTrade),
            }
        }
    }
}
