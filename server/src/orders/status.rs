//! The order state machine (docs/pipeline.md), apart from I/O:
//! `PRE_CREATED → UNPAID → PAID`, `UNPAID → CANCELLED`, `PRE_CREATED → FAILED`,
//! `CANCELLED → REFUND_PENDING`. Storage moves an order only along these edges, always
//! with a `WHERE status = <from>` guard, so two racing writers cannot both move it.

use serde::{Deserialize, Serialize};

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

/// What a payment notification does to an order in `current` state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PaymentEffect {
    /// `UNPAID → PAID`.
    MarkPaid,
    /// Already paid or already flagged for refund: a repeated callback changes nothing.
    AlreadyApplied,
    /// `CANCELLED → REFUND_PENDING`: money arrived for an order whose stock went back.
    FlagRefund,
    /// Not payable yet (`PRE_CREATED`) or never (`FAILED`): refuse, the center retries.
    Refuse,
}

pub fn payment_effect(current: OrderStatus) -> PaymentEffect {
    match current {
        OrderStatus::Unpaid => PaymentEffect::MarkPaid,
        OrderStatus::Paid | OrderStatus::RefundPending => PaymentEffect::AlreadyApplied,
        OrderStatus::Cancelled => PaymentEffect::FlagRefund,
        OrderStatus::PreCreated | OrderStatus::Failed => PaymentEffect::Refuse,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for status in OrderStatus::ALL {
            assert_eq!(OrderStatus::parse(status.as_str()), Some(status));
        }
        assert_eq!(OrderStatus::parse("unpaid"), None);
    }

    #[test]
    fn only_the_spec_edges_are_allowed() {
        use OrderStatus::*;
        let allowed = [
            (PreCreated, Unpaid),
            (Unpaid, Paid),
            (Unpaid, Cancelled),
            (PreCreated, Failed),
            (Cancelled, RefundPending),
        ];
        for from in OrderStatus::ALL {
            for to in OrderStatus::ALL {
                assert_eq!(
                    from.may_become(to),
                    allowed.contains(&(from, to)),
                    "{from} → {to}"
                );
            }
        }
    }

    #[test]
    fn late_payments_are_never_lost() {
        assert_eq!(payment_effect(OrderStatus::Unpaid), PaymentEffect::MarkPaid);
        assert_eq!(
            payment_effect(OrderStatus::Cancelled),
            PaymentEffect::FlagRefund
        );
        assert_eq!(
            payment_effect(OrderStatus::Paid),
            PaymentEffect::AlreadyApplied
        );
        assert_eq!(
            payment_effect(OrderStatus::PreCreated),
            PaymentEffect::Refuse
        );
    }

    #[test]
    fn cancelled_failed_and_refunded_orders_hold_no_stock() {
        assert!(OrderStatus::Unpaid.holds_stock());
        assert!(OrderStatus::Paid.holds_stock());
        assert!(!OrderStatus::Cancelled.holds_stock());
        assert!(!OrderStatus::RefundPending.holds_stock());
    }
}
