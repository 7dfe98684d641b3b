//! Orders: the list filtered by activity and status (newest first, paged), and one order
//! with its history, payment trades, seats and stock restore. The filter is a GET form, so
//! the page works the same before and after hydration and every view has its own URL.

use super::{activity_options, error_box, listing, maybe_time_cell, pager, time_cell};
use crate::api::{get_order, list_activities, list_orders};
use contract::{format_cents, ActivitySummary, OrderDetail, OrderPage, OrderQuery, OrderStatus};
use leptos::prelude::*;
use leptos_router::{
    components::{Form, A},
    hooks::{use_params_map, use_query_map},
};

/// A status as a badge; the class lets the stylesheet colour the states that need a person.
fn status_badge(status: OrderStatus) -> impl IntoView {
    let name = status.as_str();
    let class = format!("status status-{}", name.to_lowercase().replace('_', "-"));
    view! { <span class=class>{name}</span> }
}

/// The list URL of `query` with another page.
fn page_href(query: &OrderQuery, page: i64) -> String {
    let mut params = vec![format!("page={page}")];
    if let Some(activity) = query.activity_id {
        params.push(format!("activity_id={activity}"));
    }
    if let Some(status) = &query.status {
        params.push(format!("status={status}"));
    }
    format!("/orders?{}", params.join("&"))
}

#[component]
pub fn OrderList() -> impl IntoView {
    let params = use_query_map();
    let query = Memo::new(move |_| {
        let params = params.read();
        let number = |name: &str| params.get(name).and_then(|text| text.parse::<i64>().ok());
        OrderQuery {
            activity_id: number("activity_id"),
            status: params.get("status").filter(|status| !status.is_empty()),
            page: number("page"),
        }
    });
    let orders = Resource::new(
        move || query.get(),
        |query| list_orders(query.activity_id, query.status, query.page),
    );
    let activities = Resource::new(|| (), |_| list_activities());
    view! {
        <h1>"Orders"</h1>
        // A transition: the filter and the current rows stay up while the next page loads.
        <Transition fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let activities = activities.await.unwrap_or_default();
                let page = orders.await;
                let query = query.get_untracked();
                let statuses = page.as_ref().map(|page| page.rows.statuses.clone()).unwrap_or_default();
                view! {
                    <OrderFilter query=query.clone() activities statuses/>
                    {match page {
                        Ok(page) => view! { <OrderRows page query/> }.into_any(),
                        Err(error) => error_box(error),
                    }}
                }
            })}
        </Transition>
    }
}

#[component]
fn OrderFilter(
    query: OrderQuery,
    activities: Vec<ActivitySummary>,
    statuses: Vec<OrderStatus>,
) -> AnyView {
    let chosen_status = query.status.clone().unwrap_or_default();
    view! {
        <Form method="GET" action="/orders" attr:class="row filters" attr:id="order-filter">
            <label>"Activity"
                <select name="activity_id">
                    <option value="">"Any activity"</option>
                    {activity_options(activities, query.activity_id)}
                </select>
            </label>
            <label>"Status"
                <select name="status">
                    <option value="">"Any status"</option>
                    {statuses.into_iter().map(|status| {
                        let name = status.as_str();
                        let selected = name == chosen_status;
                        view! { <option value=name selected=selected>{name}</option> }
                    }).collect_view()}
                </select>
            </label>
            <button type="submit">"Filter"</button>
        </Form>
    }
    .into_any()
}

/// How the list names an order: the last 12 hex digits of its id. Ids are UUIDv7, whose
/// first digits are the creation time, the same for every order of a sale's busy second;
/// the tail is random. The link's title holds the whole id.
fn short_id(id: &str) -> String {
    let tail = id.len().saturating_sub(12);
    format!("…{}", id.get(tail..).unwrap_or(id))
}

#[component]
fn OrderRows(page: OrderPage, query: OrderQuery) -> AnyView {
    let pages = pager(page.page, page.has_more, move |number| {
        page_href(&query, number)
    });
    view! {
        {listing(Ok(page.rows.orders), "No orders match.", |orders| view! {
            <table class="grid" tabindex="0" id="order-list">
                <thead><tr>
                    <th>"Order"</th><th>"Created"</th><th>"Activity"</th><th>"Item"</th>
                    <th>"Buyer"</th><th>"Qty"</th><th>"Amount"</th><th>"Status"</th>
                </tr></thead>
                <tbody>
                    {orders.into_iter().map(|order| {
                        let (href, label) = (format!("/orders/{}", order.id), short_id(&order.id));
                        view! {
                        <tr>
                            <td class="mono"><A href=href attr:title=order.id>{label}</A></td>
                            <td>{time_cell(order.created_at)}</td>
                            <td>{order.activity_title} " (#" {order.activity_id} ")"</td>
                            <td>{order.item_name} " (#" {order.item_id} ")"</td>
                            <td class="num">{order.user_id}</td>
                            <td class="num">{order.quantity}</td>
                            <td class="num">{format_cents(order.amount_cents)}</td>
                            <td>{status_badge(order.status)}</td>
                        </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        }.into_any())}
        {pages}
    }
    .into_any()
}

#[component]
pub fn OrderDetailPage() -> impl IntoView {
    let params = use_params_map();
    let order = Resource::new(
        move || params.read().get("id").unwrap_or_default(),
        get_order,
    );
    view! {
        <p><A href="/orders">"← Orders"</A></p>
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                match order.await {
                    Ok(detail) => view! { <OrderView detail/> }.into_any(),
                    Err(error) => error_box(error),
                }
            })}
        </Suspense>
    }
}

#[component]
fn OrderView(detail: OrderDetail) -> AnyView {
    let order = detail.order;
    let seats = (!detail.seats.is_empty()).then(|| detail.seats.join(" "));
    view! {
        <h1>"Order " <span class="mono">{order.id.clone()}</span></h1>
        <dl class="facts" id="order-facts">
            <dt>"Status"</dt><dd>{status_badge(order.status)}</dd>
            <dt>"Activity"</dt><dd><A href=format!("/activities/{}", order.activity_id)>{order.activity_title}</A></dd>
            <dt>"Item"</dt><dd>{order.item_name} " (#" {order.item_id} ")"</dd>
            <dt>"Buyer"</dt><dd>{order.user_id}</dd>
            <dt>"Quantity"</dt><dd>{order.quantity}</dd>
            <dt>"Amount"</dt><dd>{format_cents(order.amount_cents)}</dd>
            <dt>"Pay by"</dt><dd>{maybe_time_cell(order.pay_deadline)}</dd>
            <dt>"Request ID"</dt><dd class="mono">{detail.request_id}</dd>
            {seats.map(|seats| view! { <dt>"Seats"</dt><dd>{seats}</dd> })}
        </dl>

        <h2>"History"</h2>
        <table class="grid" tabindex="0" id="order-history">
            <thead><tr><th>"At"</th><th>"From"</th><th>"To"</th></tr></thead>
            <tbody>
                {detail.history.into_iter().map(|step| view! {
                    <tr>
                        <td>{time_cell(step.at)}</td>
                        <td>{step.from.map(status_badge).map(IntoAny::into_any)
                            .unwrap_or_else(|| view! { <span class="meta">"created"</span> }.into_any())}</td>
                        <td>{status_badge(step.to)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>

        <h2>"Payment trades"</h2>
        {listing(Ok(detail.trades), "No payment trade was opened.", |trades| view! {
            <table class="grid" tabindex="0" id="order-trades">
                <thead><tr>
                    <th>"Trade"</th><th>"Amount"</th><th>"Status"</th><th>"Opened"</th>
                    <th>"Paid"</th><th>"Notified"</th><th>"Notify attempts"</th>
                </tr></thead>
                <tbody>
                    {trades.into_iter().map(|trade| view! {
                        <tr>
                            <td class="mono">{trade.trade_no}</td>
                            <td class="num">{format_cents(trade.amount_cents)}</td>
                            <td>{trade.status.as_str()}</td>
                            <td>{time_cell(trade.created_at)}</td>
                            <td>{maybe_time_cell(trade.paid_at)}</td>
                            <td>{maybe_time_cell(trade.notified_at)}</td>
                            <td class="num">{trade.notify_attempts}</td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        }.into_any())}

        <h2>"Stock restore"</h2>
        {match detail.restore {
            Some(restore) => view! {
                <p class="meta" id="order-restore">
                    {restore.quantity} " unit(s) back in PostgreSQL at " {time_cell(restore.restored_at)}
                    "; Redis: "
                    {match restore.redis_restored_at {
                        Some(at) => view! { "given back at " {time_cell(at)} }.into_any(),
                        None => "not given back yet".into_any(),
                    }}
                </p>
            }.into_any(),
            None => view! { <p class="empty">"No stock was restored for this order."</p> }.into_any(),
        }}
    }
    .into_any()
}
