//! Orders for the admin API and the console: every role may read them, merchants only
//! those of their own activities (another merchant's order or activity answers 404).
//! Filters are checked against the order state machine before any query runs.

pub mod store;

use chrono::{DateTime, Utc};
use contract::Actor;
use contract::{OrderDetail, OrderPage, OrderQuery, OrderRows, OrderStatus, OrderTransition};
use uuid::Uuid;

use crate::SaleState;
use base::{
    error::{ApiError, ApiResult},
    paging::PageWindow,
};
use store::OrderFilter;

/// Orders per page of the listing.
pub const PER_PAGE: i64 = 50;

/// One page of orders matching `query`, newest first.
pub async fn list(state: &SaleState, actor: &Actor, query: &OrderQuery) -> ApiResult<OrderPage> {
    crate::identity::authorize(actor, contract::Permission::ReadOrders)?;
    let status = query.status.as_deref().map(parse_status).transpose()?;
    let page = query.page.unwrap_or(1);
    let window = PageWindow::new(page, PER_PAGE).map_err(ApiError::BadRequest)?;
    let merchant = actor.visible_merchant();
    if let Some(activity_id) = query.activity_id {
        if !store::activity_visible(&state.db, activity_id, merchant).await? {
            return Err(ApiError::NotFound("activity"));
        }
    }
    let filter = OrderFilter {
        merchant,
        activity_id: query.activity_id,
        status: status.map(OrderStatus::as_str),
    };
    let (orders, has_more) =
        window.split(store::list(&state.db, &filter, window.fetch_limit(), window.offset).await?);
    Ok(OrderPage {
        rows: OrderRows {
            orders,
            statuses: OrderStatus::ALL.to_vec(),
        },
        page,
        per_page: PER_PAGE,
        has_more,
    })
}

/// The order with its history, payment trades, seats and restore-journal row.
pub async fn get(state: &SaleState, actor: &Actor, id: &str) -> ApiResult<OrderDetail> {
    crate::identity::authorize(actor, contract::Permission::ReadOrders)?;
    let id = Uuid::parse_str(id.trim())
        .map_err(|_| ApiError::BadRequest(format!("`{id}` is not an order id")))?;
    let record = store::get(&state.db, id, actor.visible_merchant())
        .await?
        .ok_or(ApiError::NotFound("order"))?;
    let history = history(record.order.created_at, record.order.status, record.changes);
    Ok(OrderDetail {
        order: record.order,
        request_id: record.request_id,
        seats: record.seats,
        history,
        trades: record.trades,
        restore: record.restore,
    })
}

fn parse_status(text: &str) -> ApiResult<OrderStatus> {
    OrderStatus::parse(text.trim()).ok_or_else(|| {
        let known: Vec<&str> = OrderStatus::ALL.iter().map(|s| s.as_str()).collect();
        ApiError::BadRequest(format!(
            "unknown order status `{text}`; expected one of {}",
            known.join(", ")
        ))
    })
}

/// The order's life, oldest first: its creation, then every recorded status change. The
/// creation's status is the one the first change left (orders are written `PRE_CREATED`,
/// but the history should say what the table says, not what the code intends).
fn history(
    created_at: DateTime<Utc>,
    current: OrderStatus,
    changes: Vec<OrderTransition>,
) -> Vec<OrderTransition> {
    let created_as = changes
        .first()
        .and_then(|change| change.from)
        .unwrap_or(current);
    let creation = OrderTransition {
        from: None,
        to: created_as,
        at: created_at,
    };
    std::iter::once(creation).chain(changes).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(from: &str, to: &str, at: DateTime<Utc>) -> OrderTransition {
        OrderTransition {
            from: OrderStatus::parse(from),
            to: OrderStatus::parse(to).expect("a status"),
            at,
        }
    }

    #[test]
    fn history_starts_with_the_creation_in_the_status_the_first_change_left() {
        let created = Utc::now();
        let later = created + chrono::Duration::seconds(2);
        let history = history(
            created,
            OrderStatus::Paid,
            vec![
                change("PRE_CREATED", "UNPAID", created),
                change("UNPAID", "PAID", later),
            ],
        );
        let steps: Vec<(Option<&str>, &str)> = history
            .iter()
            .map(|step| (step.from.map(OrderStatus::as_str), step.to.as_str()))
            .collect();
        assert_eq!(
            steps,
            [
                (None, "PRE_CREATED"),
                (Some("PRE_CREATED"), "UNPAID"),
                (Some("UNPAID"), "PAID")
            ]
        );
        assert_eq!(history[0].at, created);
    }

    #[test]
    fn an_order_that_never_moved_has_only_its_creation() {
        let history = history(Utc::now(), OrderStatus::PreCreated, Vec::new());
        assert_eq!(history.len(), 1);
        assert_eq!(history[0].to.as_str(), "PRE_CREATED");
    }

    #[test]
    fn statuses_are_the_state_machine_names_only() {
        assert_eq!(
            parse_status("REFUND_PENDING").ok(),
            Some(OrderStatus::RefundPending)
        );
        assert_eq!(parse_status(" PAID ").ok(), Some(OrderStatus::Paid));
        let refused = parse_status("SHIPPED").expect_err("unknown status");
        assert!(
            refused.to_string().contains("PRE_CREATED, UNPAID"),
            "{refused}"
        );
        assert_eq!(refused.code(), "BAD_REQUEST");
    }
}
