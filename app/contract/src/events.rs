//! What `GET /api/events?activity_id=` tells a buyer (docs/buyer-events.md): each Server-Sent Event's
//! name is the variant's (`order`, `registration`) and its data the variant's fields as JSON,
//! so the sale page listens by name and reads plain objects. The server publishes these
//! through `events::BuyerEvents`; nothing here knows how they travel.

use serde::{Deserialize, Serialize};

use crate::OrderStatus;

/// One change a buyer is told about, on his stream of one activity.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", content = "data", rename_all = "snake_case")]
pub enum BuyerEvent {
    /// One of his orders moved to another state.
    Order(OrderEvent),
    /// His registration for one item of a lottery activity moved (docs/lottery.md).
    Registration(RegistrationEvent),
}

impl BuyerEvent {
    /// The event's name on the stream (`event:` of the SSE frame).
    pub fn name(&self) -> &'static str {
        match self {
            Self::Order(_) => "order",
            Self::Registration(_) => "registration",
        }
    }
}

/// An order's new state: sent when the pipeline completes it (`UNPAID`) or fails it, when it
/// is paid, cancelled (its time to pay ran out) or flagged for a refund.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderEvent {
    /// The order's id, as the buy answered it.
    pub order_id: String,
    pub status: OrderStatus,
}

/// Where a buyer's registration for one item stands, as `GET
/// /api/activities/{id}/registrations/me` lists it (docs/lottery.md).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationEvent {
    pub item_id: i64,
    pub status: RegistrationStatus,
    /// His qualification code, while he has one (`won`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// When the code starts to be valid, in milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_valid_from_ms: Option<i64>,
    /// When the code stops being valid, in milliseconds since the epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_expires_ms: Option<i64>,
    /// His place on the waitlist (`waitlisted`), 1 being next.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waitlist_position: Option<i64>,
}

/// One item's units left, as `GET /api/activities/{id}/status` says them, and as the event
/// stream's `units` event tells them when they move.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemUnits {
    pub item_id: i64,
    pub sold_out: bool,
    /// Units left to sell, by the same word as `sold_out`.
    pub units_left: i64,
}

/// The event `units` of `GET /api/events`: every item's units left, sent to every stream of
/// the activity an instance holds when they move, and to a stream that opens. It is the
/// sale's, not one buyer's: it is in no buyer's log, so its frame has no `id:`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnitsEvent {
    pub items: Vec<ItemUnits>,
}

impl UnitsEvent {
    /// The event's name on the stream (`event:` of the SSE frame).
    pub const NAME: &'static str = "units";
}

/// A registration's life in a lottery activity (docs/lottery.md).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegistrationStatus {
    /// Registered; the draw has not reached him yet.
    Registered,
    /// Drawn (or reached on the waitlist): he holds a live code.
    Won,
    /// Not drawn yet: waiting for a unit a winner leaves.
    Waitlisted,
    /// He bought with his code.
    Bought,
    /// His code's lifetime ended unused; his turn passed on.
    Expired,
    /// The sale ended before his turn came.
    Lost,
    /// Ops revoked him; his turn passed on.
    Revoked,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_is_named_by_its_kind_and_carries_plain_fields() {
        let order = BuyerEvent::Order(OrderEvent {
            order_id: "6f1c2a8e-6a43-4f0e-9d7c-2b1d1f0e9a11".into(),
            status: OrderStatus::Unpaid,
        });
        assert_eq!(order.name(), "order");
        assert_eq!(
            serde_json::to_value(&order).expect("json"),
            serde_json::json!({"event": "order", "data": {
                "order_id": "6f1c2a8e-6a43-4f0e-9d7c-2b1d1f0e9a11", "status": "UNPAID"}})
        );
        let won = BuyerEvent::Registration(RegistrationEvent {
            item_id: 3,
            status: RegistrationStatus::Won,
            code: Some("K7Q2".into()),
            code_valid_from_ms: None,
            code_expires_ms: Some(1_700_000_000_000),
            waitlist_position: None,
        });
        assert_eq!(won.name(), "registration");
        let json = serde_json::to_value(&won).expect("json");
        assert_eq!(
            json["data"],
            serde_json::json!({"item_id": 3, "status": "won", "code": "K7Q2",
                "code_expires_ms": 1_700_000_000_000_i64})
        );
        assert_eq!(
            serde_json::from_value::<BuyerEvent>(json).expect("back"),
            won
        );
    }
}
