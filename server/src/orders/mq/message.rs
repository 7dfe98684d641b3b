//! The messages of the order pipeline, as JSON bodies on RabbitMQ.
//!
//! [`OrderCreated`] is exactly the outbox payload the pre-order transaction writes
//! (`buy::preorders`), so the fast path, the relay and a recorded-order replay all send
//! the same bytes' meaning. The event id of both messages is the order id.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// A pre-order waiting for the create-order consumer (outbox topic `order.create`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderCreated {
    pub order_id: Uuid,
    pub activity_id: i64,
    pub item_id: i64,
    pub user_id: i64,
    pub quantity: i64,
    pub amount_cents: i64,
}

/// An order whose pay deadline has come (through the TTL delay queue of its activity's
/// `pay_timeout_s`); the pay-timeout consumer decides whether it is cancelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayTimeout {
    pub order_id: Uuid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_outbox_payload_parses_as_an_order_created() {
        // The shape `buy::preorders` builds with jsonb_build_object.
        let payload = r#"{"user_id": 7, "item_id": 3, "order_id": "6f1c2a8e-6a43-4f0e-9d7c-2b1d1f0e9a11",
                          "quantity": 2, "activity_id": 5, "amount_cents": 9980}"#;
        let event: OrderCreated = serde_json::from_str(payload).expect("parses");
        assert_eq!(event.quantity, 2);
        assert_eq!(event.activity_id, 5);
        let back: OrderCreated =
            serde_json::from_slice(&serde_json::to_vec(&event).expect("json")).expect("parses");
        assert_eq!(back, event);
    }

    #[test]
    fn garbage_is_not_an_order_created() {
        assert!(serde_json::from_slice::<OrderCreated>(b"not json").is_err());
        assert!(serde_json::from_str::<OrderCreated>(r#"{"order_id": "nope"}"#).is_err());
    }
}
