//! One page of an admin listing (orders, dead letters, the audit log): the rows, with what
//! the listing adds beside them, and the paging fields every listing shares.

use serde::{Deserialize, Serialize};

/// A numbered page, newest first. `rows` is flattened, so each listing names its own rows
/// (`orders`, `entries`, `dead_letters`) next to `page`, `per_page` and `has_more`.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Page<T> {
    #[serde(flatten)]
    pub rows: T,
    /// 1-based.
    pub page: i64,
    pub per_page: i64,
    /// Whether a next (older) page has rows.
    pub has_more: bool,
}
