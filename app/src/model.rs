//! Data exchanged between the console, its server functions and the admin API.
//!
//! These types are the JSON contract of `/admin/api` (docs/admin-api.md) as well as the
//! arguments and results of the console's server functions, so they compile for
//! both the server and the browser and carry no I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::fmt;

/// What an admin user may do; enforced on the server for every route and server function.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Registers its own items and activities.
    Merchant,
    /// Pre-warms, flips switches, drains dead letters.
    Ops,
    /// Reads what ops sees; changes nothing.
    Sre,
    /// Everything ops may do, and every merchant's catalogue.
    Admin,
}

impl Role {
    pub const ALL: [Role; 4] = [Role::Merchant, Role::Ops, Role::Sre, Role::Admin];

    pub fn as_str(self) -> &'static str {
        match self {
            Role::Merchant => "merchant",
            Role::Ops => "ops",
            Role::Sre => "sre",
            Role::Admin => "admin",
        }
    }

    /// Items and activities are written by their merchant, or by an admin on a merchant's behalf.
    pub fn may_write_catalog(self) -> bool {
        matches!(self, Role::Merchant | Role::Admin)
    }

    /// Operator actions during a sale: flipping switches, requeueing dead letters. The
    /// console shows their controls to these roles; the server refuses everyone else.
    pub fn may_operate(self) -> bool {
        matches!(self, Role::Ops | Role::Admin)
    }

    /// Watching the operations side (dead letters, the outbox, the audit log): everyone
    /// but merchants, whose view stops at their own catalogue and orders.
    pub fn may_watch_operations(self) -> bool {
        matches!(self, Role::Ops | Role::Sre | Role::Admin)
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for Role {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Role::ALL
            .into_iter()
            .find(|role| role.as_str() == s)
            .ok_or_else(|| format!("unknown role `{s}` (expected merchant, ops, sre or admin)"))
    }
}

/// The signed-in console user.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CurrentUser {
    pub username: String,
    pub role: Role,
    pub merchant_id: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub id: i64,
    pub merchant_id: i64,
    pub name: String,
    pub description: String,
    pub price_cents: i64,
}

/// Body of `POST /admin/api/items` and `PUT /admin/api/items/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItemInput {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub price_cents: i64,
    /// Only an admin names the merchant; a merchant always writes its own items.
    #[serde(default)]
    pub merchant_id: Option<i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActivityKind {
    Standard,
    Seated,
}

impl ActivityKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActivityKind::Standard => "standard",
            ActivityKind::Seated => "seated",
        }
    }
}

impl std::str::FromStr for ActivityKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "standard" => Ok(ActivityKind::Standard),
            "seated" => Ok(ActivityKind::Seated),
            other => Err(format!("unknown activity kind `{other}`")),
        }
    }
}

/// One item offered in an activity, as the merchant registers it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityItemInput {
    pub item_id: i64,
    pub stock: i64,
    pub per_user_limit: i64,
    pub price_cents: i64,
}

/// Body of `POST /admin/api/activities` and `PUT /admin/api/activities/{id}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityInput {
    pub title: String,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub kind: ActivityKind,
    pub pay_timeout_s: i64,
    pub items: Vec<ActivityItemInput>,
    #[serde(default)]
    pub seats: Vec<String>,
    /// Only an admin names the merchant; a merchant always writes its own activities.
    #[serde(default)]
    pub merchant_id: Option<i64>,
}

/// A line of the activity list.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivitySummary {
    pub id: i64,
    pub merchant_id: i64,
    pub title: String,
    pub kind: ActivityKind,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub total_stock: i64,
    pub item_count: i64,
}

/// One item of an activity with its live figures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityItem {
    pub item_id: i64,
    pub name: String,
    pub total_stock: i64,
    pub sold: i64,
    pub per_user_limit: i64,
    pub price_cents: i64,
    /// Stock left in Redis, `None` until the activity is pre-warmed.
    pub redis_stock: Option<i64>,
}

/// `GET /admin/api/activities/{id}`: the activity with live figures.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityDetail {
    pub id: i64,
    pub merchant_id: i64,
    pub title: String,
    pub kind: ActivityKind,
    pub starts_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
    pub pay_timeout_s: i64,
    pub items: Vec<ActivityItem>,
    pub seats: Vec<String>,
    /// True once every item's stock is loaded into Redis.
    pub prewarmed: bool,
}

impl ActivityDetail {
    /// The same activity as an edit form's starting point.
    pub fn to_input(&self) -> ActivityInput {
        ActivityInput {
            title: self.title.clone(),
            starts_at: self.starts_at,
            ends_at: self.ends_at,
            kind: self.kind,
            pay_timeout_s: self.pay_timeout_s,
            items: self
                .items
                .iter()
                .map(|item| ActivityItemInput {
                    item_id: item.item_id,
                    stock: item.total_stock,
                    per_user_limit: item.per_user_limit,
                    price_cents: item.price_cents,
                })
                .collect(),
            seats: self.seats.clone(),
            merchant_id: Some(self.merchant_id),
        }
    }
}

/// What pre-warm loaded into Redis for one item, next to the database figures it came from.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrewarmedItem {
    pub item_id: i64,
    pub total_stock: i64,
    /// Units held by orders in PostgreSQL (every state but cancelled and failed).
    pub held_in_db: i64,
    /// Stock loaded into Redis: total minus held.
    pub redis_stock: i64,
    /// Buyers whose holdings were loaded for the per-user limit.
    pub buyers: u64,
}

/// What one pre-warm run loaded; the same JSON as `POST /admin/api/activities/{id}/prewarm`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrewarmReport {
    pub activity_id: i64,
    pub items: Vec<PrewarmedItem>,
    /// Bloom filter bits this run newly set (0 on a repeat run).
    pub bloom_bits_set: i64,
}

/// Filters of `GET /admin/api/orders` and of the console's order list; absent means "any".
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderQuery {
    pub activity_id: Option<i64>,
    /// One of [`OrderPage::statuses`].
    pub status: Option<String>,
    /// 1-based; newest orders are on page 1.
    pub page: Option<i64>,
}

/// An order as the admin console lists it.
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
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// Set once the create-order consumer completed the order.
    pub pay_deadline: Option<DateTime<Utc>>,
}

/// `GET /admin/api/orders`: one page of orders, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderPage {
    pub orders: Vec<OrderSummary>,
    pub page: i64,
    pub per_page: i64,
    /// Whether a next (older) page has orders.
    pub has_more: bool,
    /// Every status the `status` filter accepts, in lifecycle order.
    pub statuses: Vec<String>,
}

/// One step of an order's life: its creation (`from` absent), then every status change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OrderTransition {
    pub from: Option<String>,
    pub to: String,
    pub at: DateTime<Utc>,
}

/// A trade the payment center opened for an order.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentTradeView {
    pub trade_no: String,
    pub amount_cents: i64,
    /// `pending`, `paid` or `failed`.
    pub status: String,
    pub created_at: DateTime<Utc>,
    pub paid_at: Option<DateTime<Utc>>,
    pub notified_at: Option<DateTime<Utc>>,
    pub notify_attempts: i64,
}

/// The restore-journal row of an order whose stock went back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StockRestoreView {
    pub quantity: i64,
    pub restored_at: DateTime<Utc>,
    /// Absent while Redis has not been given the units back yet.
    pub redis_restored_at: Option<DateTime<Utc>>,
}

/// `GET /admin/api/orders/{id}`: the order with everything that happened to it.
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

/// `GET /admin/api/switches`: every switch and limit, where etcd stands, and
/// which live instance has applied what.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchBoard {
    /// The etcd prefix of this deployment, e.g. `/seckill`.
    pub prefix: String,
    pub etcd: EtcdReach,
    /// The answering instance's own control plane; absent where none runs (the CLI).
    pub instance: Option<InstanceSync>,
    pub switches: Vec<SwitchRow>,
    /// Live instances (their node key's lease is alive), by node id.
    pub nodes: Vec<NodeState>,
}

/// Whether etcd answered this request, and at which revision.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EtcdReach {
    pub reachable: bool,
    pub revision: Option<i64>,
    pub error: Option<String>,
}

/// How current one instance's switches are. `synced_ago_ms` is the time since etcd last
/// confirmed this instance had every change (a watch event or progress report); it grows
/// while etcd is unreachable, and the last values stay in force meanwhile.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceSync {
    pub node_id: String,
    pub connected: bool,
    pub applied_revision: i64,
    pub synced_ago_ms: Option<u64>,
    /// `etcd`, `disk` (the local snapshot, etcd unreachable at start-up) or `settings`.
    pub values_from: String,
    pub leader: bool,
}

/// One switch or limit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchRow {
    /// Relative to the prefix: `switches/entry`, `switches/entry/42`, `limits/max_in_flight`.
    pub path: String,
    /// What the key accepts, e.g. `open | closed` or `1..=1000000`.
    pub accepts: String,
    /// The value when the key is absent from etcd: the process settings.
    pub default_value: String,
    /// The raw value in etcd (absent: the default applies).
    pub etcd_value: Option<String>,
    /// False when the etcd value is malformed: instances ignore it and keep the last valid one.
    pub valid: bool,
    /// What the answering instance applies now (absent where no control plane runs).
    pub in_force: Option<String>,
    pub mod_revision: Option<i64>,
    /// The last write through the control plane (API, console, CLI) at `mod_revision`;
    /// absent for a key written straight into etcd.
    pub written: Option<SwitchWrite>,
    /// Per live instance: has it applied `mod_revision`, and how long after the write.
    pub applied: Vec<NodeApplied>,
}

/// Who wrote a switch through the control plane, and when.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchWrite {
    pub actor: String,
    pub source: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// One instance's view of one write.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeApplied {
    pub node_id: String,
    pub applied: bool,
    /// The revision the instance has applied everything up to.
    pub applied_revision: i64,
    /// Milliseconds from the write to the instance applying it, when both are known (the
    /// write's time is recorded only for writes through the control plane, and the
    /// instance keeps its recent applies only).
    pub took_ms: Option<f64>,
}

/// A live instance as its heartbeat describes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeState {
    pub node_id: String,
    pub address: String,
    pub applied_revision: i64,
    pub connected: bool,
    pub leader: bool,
    pub heartbeat_at: DateTime<Utc>,
    pub synced_ago_ms: Option<u64>,
}

/// `PUT /admin/api/switches/{path}`: a new value with the reason for it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SwitchInput {
    pub value: String,
    pub reason: String,
}

/// The answer to a flip: in etcd at `revision`, audited; with a wait, who applied it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SwitchChange {
    pub path: String,
    pub old_value: Option<String>,
    pub new_value: String,
    pub revision: i64,
    pub audit_id: i64,
    pub propagation: Option<Propagation>,
}

/// How a flip reached the live instances within the wait.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Propagation {
    /// Every live instance applied the revision before the wait ran out.
    pub complete: bool,
    pub waited_ms: f64,
    pub nodes: Vec<NodeApplied>,
}

/// One row of the audit log: a switch flip or another operator action.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    /// `switch` (switch_audit) or `ops` (ops_audit); with `id`, unique.
    pub kind: String,
    pub id: i64,
    pub at: DateTime<Utc>,
    pub actor: String,
    /// `console`, `api`, `cli`, `external` (written straight into etcd) or `system`.
    pub source: String,
    /// `set` for a flip; the operator action otherwise.
    pub action: String,
    /// The switch path, or the action's target.
    pub target: String,
    pub old_value: Option<String>,
    pub new_value: Option<String>,
    pub reason: Option<String>,
    pub etcd_revision: Option<i64>,
    /// The ops action's detail, as JSON text.
    pub detail: Option<String>,
}

/// `GET /admin/api/audit`: switch flips and operator actions merged, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    pub page: i64,
    pub per_page: i64,
    pub has_more: bool,
}

/// A message the order pipeline's dead-letter queue received, kept for inspection and requeue.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterView {
    pub id: i64,
    /// The queue it died in, e.g. `seckill.order.create`.
    pub source_queue: String,
    /// The routing key a requeue publishes it with on the order exchange.
    pub routing_key: String,
    pub message_id: Option<String>,
    /// The body as text for reading (invalid UTF-8 replaced); a requeue sends the stored bytes.
    pub payload: String,
    /// Why the broker dead-lettered it: `delivery_limit`, `rejected`, `expired`, ...
    pub reason: String,
    /// How many times it died in that queue.
    pub death_count: i64,
    pub received_at: DateTime<Utc>,
    /// Set once it was sent back; a dead letter is requeued at most once.
    pub requeued_at: Option<DateTime<Utc>>,
    pub requeued_by: Option<String>,
}

/// `GET /admin/api/dead-letters`: one page, the ones still waiting first, newest first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterPage {
    pub dead_letters: Vec<DeadLetterView>,
    pub page: i64,
    pub per_page: i64,
    pub has_more: bool,
    /// Dead letters not requeued yet, on every page.
    pub waiting: i64,
}

/// Body of an ops action on the order pipeline (requeue, replay): the reason is audited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpsReason {
    pub reason: String,
}

/// `POST /admin/api/dead-letters/requeue-all`: how many were sent back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequeueReport {
    pub requeued: i64,
}

/// `POST /admin/api/recordings/replay`: recorded pre-orders handed to the pipeline, and how
/// many of them RabbitMQ confirmed at once (the relay resends the rest).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplayReport {
    pub replayed: i64,
    pub published: i64,
}

/// An outbox row the relay gave up on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailedOutboxRow {
    pub id: i64,
    pub event_id: String,
    pub topic: String,
    pub attempts: i64,
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
}

/// `GET /admin/api/outbox`: rows waiting for the relay, given up on, and recorded for replay.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutboxSummary {
    pub pending: i64,
    pub failed: i64,
    pub recorded: i64,
    /// The newest failed rows (at most 100).
    pub failed_rows: Vec<FailedOutboxRow>,
}

/// Formats cents as a decimal amount, `1250` → `"12.50"`.
pub fn format_cents(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let abs = cents.unsigned_abs();
    format!("{sign}{}.{:02}", abs / 100, abs % 100)
}

/// Parses a decimal amount typed by a person (`"12"`, `"12.5"`, `"12.50"`) into cents.
pub fn parse_cents(text: &str) -> Result<i64, String> {
    let text = text.trim();
    let invalid = || format!("`{text}` is not an amount like 12.50");
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    if fraction.len() > 2 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid());
    }
    let whole: i64 = whole.parse().map_err(|_| invalid())?;
    let fraction: i64 = format!("{fraction:0<2}").parse().map_err(|_| invalid())?;
    whole
        .checked_mul(100)
        .and_then(|cents| cents.checked_add(fraction))
        .ok_or_else(invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_round_trip_through_text() {
        assert_eq!(parse_cents("12.50"), Ok(1250));
        assert_eq!(parse_cents("12.5"), Ok(1250));
        assert_eq!(parse_cents(" 7 "), Ok(700));
        assert_eq!(parse_cents("0.05"), Ok(5));
        assert_eq!(format_cents(1250), "12.50");
        assert_eq!(format_cents(5), "0.05");
    }

    #[test]
    fn malformed_amounts_are_rejected() {
        for text in [
            "",
            "-1",
            "1.234",
            "abc",
            "1.x",
            ".5",
            "99999999999999999999",
        ] {
            assert!(parse_cents(text).is_err(), "{text} should be rejected");
        }
    }

    #[test]
    fn roles_parse_from_their_names_only() {
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
        assert!("root".parse::<Role>().is_err());
        assert!(Role::Merchant.may_write_catalog());
        assert!(!Role::Sre.may_write_catalog());
        assert!(!Role::Ops.may_write_catalog());
        assert!(Role::Ops.may_operate() && Role::Admin.may_operate());
        assert!(!Role::Sre.may_operate() && !Role::Merchant.may_operate());
        assert!(Role::Sre.may_watch_operations() && !Role::Merchant.may_watch_operations());
    }
}
