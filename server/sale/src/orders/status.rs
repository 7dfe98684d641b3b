//! The order state machine (docs/pipeline.md), apart from I/O:
//! `PRE_CREATED → UNPAID → PAID`, `UNPAID → CANCELLED`, `PRE_CREATED → FAILED`,
//! `CANCELLED → REFUND_PENDING`. Storage moves an order only along these edges, always
//! with a `WHERE status = <from>` guard, so two racing writers cannot both move it.

pub use contract::OrderStatus;

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

impl PaymentEffect {
    /// The state the payment moves the order to, if it moves it.
    pub fn moves_to(self) -> Option<OrderStatus> {
        match self {
            Self::MarkPaid => Some(OrderStatus::Paid),
            Self::FlagRefund => Some(OrderStatus::RefundPending),
            Self::AlreadyApplied | Self::Refuse => None,
        }
    }
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
    fn a_payment_moves_an_order_only_along_the_spec_edges() {
        for from in OrderStatus::ALL {
            if let Some(to) = payment_effect(from).moves_to() {
                assert!(from.may_become(to), "{from} → {to}");
            }
        }
        assert_eq!(
            payment_effect(OrderStatus::Unpaid).moves_to(),
            Some(OrderStatus::Paid)
        );
        assert_eq!(payment_effect(OrderStatus::Paid).moves_to(), None);
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
