//! Data exchanged between the console, its server functions and the admin API.
//!
//! These types are the JSON contract of `/admin/api` (SPEC §8.1) as well as the
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
    /// Pre-warms, flips switches, drains dead letters, reconciles.
    Ops,
    /// Watches dashboards; read-only.
    Sre,
    /// Everything, including every merchant's catalogue and user management.
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
    }
}
