//! Items and activities as merchants register them and the console lists them.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Item {
    pub id: i64,
    pub merchant_id: i64,
    pub name: String,
    pub description: String,
    pub price_cents: i64,
}

/// Answer of a catalogue write (`POST` 201, `PUT` 200): the written row's id.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Written {
    pub id: i64,
}

/// Body of `POST /admin/api/items` and `PUT /admin/api/items/{id}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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

/// How an activity sells (docs/lottery.md): to whoever comes first, or to the winners of a draw
/// among those who registered in a window before the sale, each with a code of his own.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleMode {
    #[default]
    FirstCome,
    Lottery,
}

impl SaleMode {
    pub fn as_str(self) -> &'static str {
        match self {
            SaleMode::FirstCome => "first_come",
            SaleMode::Lottery => "lottery",
        }
    }
}

impl std::str::FromStr for SaleMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "first_come" => Ok(SaleMode::FirstCome),
            "lottery" => Ok(SaleMode::Lottery),
            other => Err(format!("unknown sale mode `{other}`")),
        }
    }
}

/// A code's lifetime when the merchant names none: fifteen minutes to pay attention and buy.
pub const DEFAULT_CODE_TTL_S: i64 = 900;

/// One item offered in an activity, as the merchant registers it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActivityItemInput {
    pub item_id: i64,
    pub stock: i64,
    pub per_user_limit: i64,
    pub price_cents: i64,
}

/// Body of `POST /admin/api/activities` and `PUT /admin/api/activities/{id}`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    #[serde(default)]
    pub mode: SaleMode,
    /// A lottery's registration window; required for a lottery, refused for first come.
    #[serde(default)]
    pub registration_opens_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub registration_closes_at: Option<DateTime<Utc>>,
    /// A lottery code's lifetime in seconds (60..=86,400); absent: [`DEFAULT_CODE_TTL_S`].
    #[serde(default)]
    pub code_ttl_s: Option<i64>,
}

/// A line of the activity list.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// A pre-warm has loaded the activity into Redis.
    #[serde(default)]
    pub prewarmed: bool,
    /// The version of its published sale page, absent until the first publish.
    #[serde(default)]
    pub published_version: Option<i64>,
}

/// Where a sale stands against the clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SaleWindow {
    Upcoming,
    Live,
    Ended,
}

impl SaleWindow {
    /// The window `now_ms` (milliseconds since the epoch) falls in.
    pub fn at(starts_at: DateTime<Utc>, ends_at: DateTime<Utc>, now_ms: i64) -> Self {
        if now_ms < starts_at.timestamp_millis() {
            SaleWindow::Upcoming
        } else if now_ms < ends_at.timestamp_millis() {
            SaleWindow::Live
        } else {
            SaleWindow::Ended
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            SaleWindow::Upcoming => "upcoming",
            SaleWindow::Live => "live",
            SaleWindow::Ended => "ended",
        }
    }
}

/// One item of an activity with its live figures.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
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
    /// The buyers' sale page as published, absent until the first publish.
    #[serde(default)]
    pub publication: Option<crate::Publication>,
    #[serde(default)]
    pub mode: SaleMode,
    #[serde(default)]
    pub registration_opens_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub registration_closes_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub code_ttl_s: Option<i64>,
    /// A lottery's commitment: the hex SHA-256 of the draw's seed.
    #[serde(default)]
    pub draw_commitment: Option<String>,
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
            mode: self.mode,
            registration_opens_at: self.registration_opens_at,
            registration_closes_at: self.registration_closes_at,
            code_ttl_s: self.code_ttl_s,
        }
    }
}
