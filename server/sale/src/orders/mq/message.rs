//! The messages of the order pipeline, as JSON bodies on RabbitMQ.
//!
//! A create-order outbox row's payload is exactly a [`CreateOrders`] message: a pre-order
//! batch writes one row per activity of the batch, `{"orders": [...]}` (releases before the
//! batch rows wrote one per order, a lone [`OrderCreated`]). So the fast path, the relay and
//! a recorded-order replay all send the same bytes' meaning.
//!
//! Both messages carry several orders: the buy path's publisher sends one create-order
//! message per batch of committed outbox rows, and the consumer one pay-timeout message
//! per delay of each batch it completed, because RabbitMQ's cost is per message (its
//! queue write, its confirm, its delivery and ack), not per byte. The relay and the replay
//! send one outbox row per message; a lone [`PayTimeout`] is how an earlier release
//! scheduled timeouts. Consumers read every shape ([`CreateOrders`], [`PayTimeouts`]), so
//! messages queued by either release are understood by the other.

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

/// The body of a create-order message: a batch of pre-orders, or one outbox row's payload.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum CreateOrders {
    Batch { orders: Vec<OrderCreated> },
    One(OrderCreated),
}

impl CreateOrders {
    /// The orders of the message, in its order.
    pub fn orders(&self) -> &[OrderCreated] {
        match self {
            Self::Batch { orders } => orders,
            Self::One(order) => std::slice::from_ref(order),
        }
    }

    /// The ids of [`Self::orders`].
    pub fn order_ids(&self) -> Vec<Uuid> {
        self.orders().iter().map(|order| order.order_id).collect()
    }
}

/// Orders whose pay deadline has come (through the TTL delay queue of their activity's
/// `pay_timeout_s`); the pay-timeout consumer decides, order by order, whether each is
/// cancelled.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum PayTimeouts {
    Batch { order_ids: Vec<Uuid> },
    One(PayTimeout),
}

impl PayTimeouts {
    pub fn order_ids(&self) -> Vec<Uuid> {
        match self {
            Self::Batch { order_ids } => order_ids.clone(),
            Self::One(PayTimeout { order_id }) => vec![*order_id],
        }
    }
}

/// One order's pay timeout, as a message of its own.
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
        let message: CreateOrders = serde_json::from_str(payload).expect("a message");
        assert_eq!(message, CreateOrders::One(event));
    }

    fn order(n: u8) -> OrderCreated {
        OrderCreated {
            order_id: Uuid::from_bytes([n; 16]),
            activity_id: 1,
            item_id: 2,
            user_id: i64::from(n),
            quantity: 1,
            amount_cents: 100,
        }
    }

    #[test]
    fn a_batch_outbox_payload_parses_as_a_create_orders_message() {
        // The shape `buy::preorders` builds with jsonb_agg for a batch's outbox row.
        let payload = r#"{"orders": [
            {"user_id": 7, "item_id": 3, "order_id": "6f1c2a8e-6a43-4f0e-9d7c-2b1d1f0e9a11",
             "quantity": 1, "activity_id": 5, "amount_cents": 4990},
            {"user_id": 8, "item_id": 3, "order_id": "7f1c2a8e-6a43-4f0e-9d7c-2b1d1f0e9a11",
             "quantity": 2, "activity_id": 5, "amount_cents": 9980}]}"#;
        let message: CreateOrders = serde_json::from_str(payload).expect("a message");
        let CreateOrders::Batch { orders } = &message else {
            panic!("a batch: {message:?}");
        };
        assert_eq!(orders[1].user_id, 8);
        assert_eq!(message.order_ids().len(), 2);
    }

    #[test]
    fn a_batch_message_names_its_orders_in_order() {
        let batch = CreateOrders::Batch {
            orders: vec![order(1), order(2), order(3)],
        };
        let read: CreateOrders =
            serde_json::from_slice(&serde_json::to_vec(&batch).expect("json")).expect("parses");
        assert_eq!(read, batch);
        assert_eq!(
            read.order_ids(),
            vec![order(1).order_id, order(2).order_id, order(3).order_id]
        );
    }

    #[test]
    fn pay_timeouts_read_in_both_shapes() {
        let ids = vec![Uuid::from_bytes([1; 16]), Uuid::from_bytes([2; 16])];
        let batch: PayTimeouts =
            serde_json::from_value(serde_json::json!({ "order_ids": ids })).expect("a batch");
        assert_eq!(batch.order_ids(), ids);
        let one: PayTimeouts =
            serde_json::from_value(serde_json::json!({ "order_id": ids[0] })).expect("one");
        assert_eq!(one.order_ids(), vec![ids[0]]);
    }

    #[test]
    fn garbage_is_not_an_order_created() {
        assert!(serde_json::from_slice::<OrderCreated>(b"not json").is_err());
        assert!(serde_json::from_str::<OrderCreated>(r#"{"order_id": "nope"}"#).is_err());
        assert!(serde_json::from_str::<CreateOrders>(r#"{"orders": [{"order_id": 1}]}"#).is_err());
        assert!(serde_json::from_str::<PayTimeouts>(r#"{"order_ids": "x"}"#).is_err());
    }
}
