//! A lottery's draw as ops read it (`GET /admin/api/activities/{id}/draw` and the console's
//! draw page), and the revocation of a buyer's part in it (docs/lottery.md).

use serde::{Deserialize, Serialize};

/// One item's draw: who took part, what the codes came to, how far the waitlist got.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawItem {
    pub item_id: i64,
    pub drawn: bool,
    /// Registrants drawn, once the draw is made.
    pub registrants: Option<i64>,
    pub winners: Option<i64>,
    /// Codes handed out, by the draw and by the waitlist.
    pub codes_issued: i64,
    pub codes_used: i64,
    /// Codes whose lifetime ended unused.
    pub codes_expired: i64,
    /// Registrants revoked by ops.
    pub codes_revoked: i64,
    /// Ranks that have had their turn: the waitlist reached rank `waitlist_reached`.
    pub waitlist_reached: Option<i64>,
}

/// `GET /admin/api/activities/{id}/draw`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrawReport {
    pub activity_id: i64,
    /// Hex SHA-256 of the draw's seed, fixed before registration.
    pub commitment: String,
    /// The seed in hex, once every item is drawn.
    pub seed: Option<String>,
    pub items: Vec<DrawItem>,
}

/// Body of `POST /admin/api/activities/{id}/registrations/{user_id}/revoke`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeRegistration {
    pub reason: String,
}

/// What a revocation ended: the items the buyer was registered for.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Revoked {
    pub user_id: i64,
    pub items: Vec<i64>,
}
