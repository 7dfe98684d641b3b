//! The one rule that keeps a rehearsal out of the real figures and listings: an activity
//! whose row names the activity it copies (`rehearsal_of`) is a rehearsal's copy, and a
//! request whose buyer's token names a copy (the only activity a synthetic buyer may buy)
//! is a rehearsal's traffic. Hot-key sampling, the drift gauge, the dashboard's items, the
//! catalogue, the order listings and the check for sales in the way all ask this module,
//! never a test of their own, so no figure can forget a rehearsal differently.

/// SQL condition on an `activities` row aliased `a`: a real activity, no rehearsal's copy.
pub(crate) const REAL_ACTIVITY: &str = "a.rehearsal_of IS NULL";

/// Whether an activity's `rehearsal_of`, or the copy a buyer's token names, makes it a
/// rehearsal's: its figures are the rehearsal's own and never counted with a real sale's.
pub(crate) fn is_rehearsal(marker: Option<i64>) -> bool {
    marker.is_some()
}

/// Whether a list of activities takes rehearsals' copies in: the jobs that keep a copy's
/// stock right while its rehearsal runs do, the figures and listings of real sales do not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Copies {
    Included,
    Excluded,
}
