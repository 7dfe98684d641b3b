//! What publishing an activity's static sale page answers.

use serde::{Deserialize, Serialize};

/// The answer of `POST /admin/api/activities/{id}/publish`: where the page is served and
/// which publication of it this is (1 for the first, one more for every publish after).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PublishedPage {
    pub activity_id: i64,
    /// The page's path on this server, e.g. `/sale/7/`.
    pub url: String,
    pub version: i64,
}
