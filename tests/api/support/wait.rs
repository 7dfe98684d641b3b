//! The one way a test waits: poll a condition until it holds, or fail at a deadline with
//! a message that says what never happened. Tests never sleep to let something happen, and
//! never sleep to prove that nothing happens: they wait for a positive marker (a row, a
//! metric of a worker's pass) and then assert.

use std::{fmt::Debug, future::Future, time::Duration};
use tokio::time::Instant;

/// How long a test waits at most for the pipeline, the payment center or a timeout.
pub(crate) const PATIENCE: Duration = Duration::from_secs(40);

/// What a condition says at each poll: `true`/`Ok` ends the wait; an `Err` carries what was
/// seen instead, shown if the deadline passes.
pub(crate) trait Check {
    fn verdict(self) -> Result<(), String>;
}

impl Check for bool {
    fn verdict(self) -> Result<(), String> {
        if self {
            Ok(())
        } else {
            Err("still false".to_owned())
        }
    }
}

impl<E: Debug> Check for Result<(), E> {
    fn verdict(self) -> Result<(), String> {
        self.map_err(|seen| format!("{seen:?}"))
    }
}

/// Polls `check` until it holds; panics naming `what` (and the last thing seen) once
/// `within` has passed. It polls every hundredth of `within` (10 to 100 ms), so a timing
/// taken right after it returns is that precise.
pub(crate) async fn until<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output: Check>,
{
    let poll = (within / 100).clamp(Duration::from_millis(10), Duration::from_millis(100));
    let deadline = Instant::now() + within;
    loop {
        let seen = match check().await.verdict() {
            Ok(()) => return,
            Err(seen) => seen,
        };
        assert!(
            Instant::now() < deadline,
            "not within {within:?}: {what} (last seen: {seen})"
        );
        tokio::time::sleep(poll).await;
    }
}
