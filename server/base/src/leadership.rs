//! Who runs the singleton jobs (the outbox relay, and the pay-timeout scanner with its
//! Redis give-back retries). The etcd election drives a [`Leadership`] through the
//! [`LeadershipSignal`] only the control plane holds; the shared state and the jobs hold
//! the [`Leadership`] and can only read it.

use tokio::sync::watch;

/// A job's view of whether this instance is the leader now.
#[derive(Clone)]
pub struct Leadership(watch::Receiver<bool>);

/// The election's side: says when this instance gains or loses leadership.
pub struct LeadershipSignal(watch::Sender<bool>);

impl Leadership {
    /// A pair starting as not leader.
    pub fn channel() -> (LeadershipSignal, Leadership) {
        let (sender, receiver) = watch::channel(false);
        (LeadershipSignal(sender), Leadership(receiver))
    }

    pub fn is_leader(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until this instance leads (at once if it does). Without an election (its
    /// signal dropped, as in the CLI) that is never.
    pub async fn until_leader(&mut self) {
        if self.0.wait_for(|leading| *leading).await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

impl LeadershipSignal {
    pub fn set(&self, leading: bool) {
        self.0.send_replace(leading);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn only_the_signal_makes_an_instance_lead() {
        let (signal, mut leadership) = Leadership::channel();
        assert!(!leadership.is_leader());
        signal.set(true);
        leadership.until_leader().await;
        assert!(leadership.is_leader());
        signal.set(false);
        assert!(!leadership.is_leader());
    }

    #[test]
    fn without_an_election_the_wait_for_leadership_never_ends() {
        let (signal, mut leadership) = Leadership::channel();
        drop(signal);
        // One poll is decisive: the closed channel answers at once, and what follows
        // the answer is a future that never completes.
        assert!(leadership.until_leader().now_or_never().is_none());
        assert!(!leadership.is_leader());
    }
}
