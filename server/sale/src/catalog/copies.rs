//! The one rule that keeps a rehearsal out of the real figures and listings: an activity
//! whose row names the activity it copies (`rehearsal_of`) is a rehearsal's copy, and a
//! request whose buyer's token names a copy (the only activity a synthetic buyer may buy)
//! is a rehearsal's traffic. Hot-key sampling, the drift gauge, the dashboard's items, the
//! catalogue, the order listings, the check for sales in the way and every operator's tool
//! that names one activity (its ledger, readiness, pre-warm, repair and sale page) all ask
//! this module, never a test of their own, so no figure can forget a rehearsal differently.

use base::error::{ApiError, ApiResult};
use sqlx::PgPool;

use crate::catalog::store::{self as catalog, StoredActivity};

/// SQL condition on an `activities` row aliased `a`: a real activity, no rehearsal's copy.
pub const REAL_ACTIVITY: &str = "a.rehearsal_of IS NULL";

/// Whether an activity's `rehearsal_of`, or the copy a buyer's token names, makes it a
/// rehearsal's: its figures are the rehearsal's own and never counted with a real sale's.
pub fn is_rehearsal(marker: Option<i64>) -> bool {
    marker.is_some()
}

/// The activity `id` as a person's request names it (`merchant`: only among that merchant's):
/// a rehearsal's copy is none, so its ledger, its readiness, a pre-warm or repair that would
/// raise a fence on its items mid-rehearsal, or a page that would sell it, are refused as an
/// unknown activity's are (404). The rehearsal reaches its copy through its own calls.
pub async fn real_activity(
    db: &PgPool,
    id: i64,
    merchant: Option<i64>,
) -> ApiResult<StoredActivity> {
    catalog::get_activity(db, id, merchant)
        .await?
        .filter(|stored| !is_rehearsal(stored.rehearsal_of))
        .ok_or(ApiError::NotFound("activity"))
}

/// Whether a list of activities takes rehearsals' copies in: the jobs that keep a copy's
/// stock right while its rehearsal runs do, the figures and listings of real sales do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Copies {
    Included,
    Excluded,
}
