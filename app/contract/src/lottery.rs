//! A lottery's draw as ops read it (`GET /admin/api/activities/{id}/draw` and the console's
//! draw page), and the revocation of a buyer's part in it (docs/lottery.md).

use chrono::{DateTime, Utc};
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
    /// Where the registrations came from: live while registration is open, as the draw
    /// found them once it is made. None for a draw made before addresses were counted, or
    /// an item whose registrations are gone from Redis before its draw.
    pub sources: Option<RegistrationSources>,
}

/// Where an item's registrations came from, by the client address the registration window
/// counts (behind a balancer, the buyer's, not the balancer's). A scalper's farm registering
/// thousands of buyers shows as a few addresses with a large share.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationSources {
    /// Registrations made (revoked ones included: they were made).
    pub registrations: i64,
    /// Distinct addresses they came from.
    pub addresses: i64,
    /// Registrations made from the 100 addresses that made the most.
    pub from_top_100: i64,
    /// The addresses that made the most, most first: at most [`RegistrationSources::TOP_SHOWN`].
    pub top: Vec<AddressRegistrations>,
}

impl RegistrationSources {
    /// How many of the busiest addresses are listed by name.
    pub const TOP_SHOWN: usize = 10;

    /// The share of registrations made from the top 100 addresses, in percent (0 when none
    /// was made).
    pub fn top_100_percent(&self) -> f64 {
        if self.registrations <= 0 {
            return 0.0;
        }
        self.from_top_100 as f64 * 100.0 / self.registrations as f64
    }
}

/// One address and the registrations it made.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressRegistrations {
    pub address: String,
    pub registrations: i64,
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
    pub registration: RegistrationReach,
}

/// Whether buyers can register for a lottery, as read at `at_ms`. The buyer API finds an
/// activity only once the Bloom filter holds its keys; the leader adds a lottery's from
/// [`RegistrationReach::PREPARED_AHEAD_MS`] before its registration opens until it closes.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegistrationReach {
    pub opens_at: DateTime<Utc>,
    pub closes_at: DateTime<Utc>,
    /// When it was read, by the lottery's clock, in ms since the epoch.
    pub at_ms: i64,
    /// The buyer API finds the activity and every item of it: a registration is taken, not
    /// answered 404.
    pub reachable: bool,
}

/// Where a lottery's registration window stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegistrationPhase {
    /// Opens later than [`RegistrationReach::WARN_AHEAD_MS`] from now.
    Later,
    /// Opens within [`RegistrationReach::WARN_AHEAD_MS`].
    Soon,
    Open,
    Closed,
}

impl RegistrationReach {
    /// How long before registration opens the leader makes the lottery findable.
    pub const PREPARED_AHEAD_MS: i64 = 15 * 60 * 1000;
    /// How long before registration opens an unfindable lottery is worth a warning: later
    /// than the leader's preparation, so a warning means the leader did not do it.
    pub const WARN_AHEAD_MS: i64 = 10 * 60 * 1000;

    pub fn phase(&self) -> RegistrationPhase {
        let (opens, closes) = (
            self.opens_at.timestamp_millis(),
            self.closes_at.timestamp_millis(),
        );
        if self.at_ms >= closes {
            RegistrationPhase::Closed
        } else if self.at_ms >= opens {
            RegistrationPhase::Open
        } else if self.at_ms >= opens - Self::WARN_AHEAD_MS {
            RegistrationPhase::Soon
        } else {
            RegistrationPhase::Later
        }
    }

    /// Registration is open or about to open, and buyers could not register.
    pub fn blocked(&self) -> bool {
        !self.reachable
            && matches!(
                self.phase(),
                RegistrationPhase::Soon | RegistrationPhase::Open
            )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_is_blocked_only_when_open_or_soon_and_unreachable() {
        let opens = DateTime::from_timestamp_millis(100 * 60 * 1000).expect("a time");
        let reach = |minutes: i64, reachable| RegistrationReach {
            opens_at: opens,
            closes_at: opens + chrono::Duration::hours(1),
            at_ms: opens.timestamp_millis() + minutes * 60 * 1000,
            reachable,
        };
        assert_eq!(reach(-11, false).phase(), RegistrationPhase::Later);
        assert!(
            !reach(-11, false).blocked(),
            "the leader has not had its turn"
        );
        assert_eq!(reach(-10, false).phase(), RegistrationPhase::Soon);
        assert!(reach(-10, false).blocked());
        assert_eq!(reach(0, true).phase(), RegistrationPhase::Open);
        assert!(!reach(0, true).blocked());
        assert!(reach(59, false).blocked());
        assert_eq!(reach(60, false).phase(), RegistrationPhase::Closed);
        assert!(!reach(60, false).blocked(), "closed: nothing to take");
    }

    #[test]
    fn the_top_100_share_is_a_percentage_of_the_registrations_and_zero_without_any() {
        let sources = |registrations, from_top_100| RegistrationSources {
            registrations,
            addresses: 1,
            from_top_100,
            top: Vec::new(),
        };
        assert_eq!(sources(200, 50).top_100_percent(), 25.0);
        assert_eq!(sources(0, 0).top_100_percent(), 0.0);
    }
}
