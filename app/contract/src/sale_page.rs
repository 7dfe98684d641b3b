//! What publishing an activity's static sale page answers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The answer of `POST /admin/api/activities/{id}/publish`: where the page is served and
/// which publication of it this is (1 for the first, one more for every publish after).
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPage {
    pub activity_id: i64,
    /// The page's path on this server, e.g. `/sale/7/`.
    pub url: String,
    pub version: i64,
}

/// The current publication of an activity's sale page, as the activity's page shows it.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Publication {
    pub version: i64,
    pub published_at: DateTime<Utc>,
    /// The activity or one of its items was edited after this publication: the buyers'
    /// page still shows what was published, until the next publish.
    pub stale: bool,
}
