//! The buy requests running on this instance, by request key. A replay that arrives while
//! the first request with its id still runs here waits for that request's answer, without
//! asking Redis again and without holding a place in flight; only a replay of a request
//! running on another instance is told to come back (409 `REQUEST_IN_PROGRESS`).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};
use tokio::sync::watch;

/// Requests running here, each with the channel its answer will be sent on.
pub struct Running<T> {
    requests: Mutex<HashMap<String, watch::Receiver<Option<T>>>>,
}

/// What a request with a given key is on this instance.
pub enum Entry<T: Clone> {
    /// The first: it runs, and answers the replays waiting for it.
    First(First<T>),
    /// A replay of a request running here: its answer, once there is one.
    Replay(watch::Receiver<Option<T>>),
}

/// The first request with its key; leaving (answered or not) takes the key off the list.
pub struct First<T: Clone> {
    running: Arc<Running<T>>,
    key: String,
    answer: watch::Sender<Option<T>>,
}

impl<T: Clone> Running<T> {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            requests: Mutex::new(HashMap::new()),
        })
    }

    /// Enters a request under `key`: the first one, or a replay of one running here.
    pub fn enter(self: &Arc<Self>, key: String) -> Entry<T> {
        let mut requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(answer) = requests.get(&key) {
            return Entry::Replay(answer.clone());
        }
        let (answer, waiting) = watch::channel(None);
        requests.insert(key.clone(), waiting);
        Entry::First(First {
            running: Arc::clone(self),
            key,
            answer,
        })
    }

    /// The answer of the request running here under `key`, if it has one already (it is
    /// answered, and its answer is on its way to Redis).
    pub fn answered(&self, key: &str) -> Option<T> {
        let requests = self.requests.lock().unwrap_or_else(PoisonError::into_inner);
        requests.get(key).and_then(|answer| answer.borrow().clone())
    }
}

impl<T: Clone> First<T> {
    /// Hands `answer` to the replays waiting for it.
    pub fn answered(&self, answer: &T) {
        self.answer.send_replace(Some(answer.clone()));
    }
}

impl<T: Clone> Drop for First<T> {
    fn drop(&mut self) {
        self.running
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}

/// The answer of the request a replay waits for, if it comes within `patience`.
pub async fn wait_for<T: Clone>(
    mut answer: watch::Receiver<Option<T>>,
    patience: Duration,
) -> Option<T> {
    let answered = tokio::time::timeout(patience, answer.wait_for(Option::is_some)).await;
    match answered {
        Ok(Ok(answer)) => answer.clone(),
        Ok(Err(_)) | Err(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_replay_gets_the_first_requests_answer_and_the_key_is_free_after_it() {
        let running = Running::<u32>::new();
        let Entry::First(first) = running.enter("k".into()) else {
            panic!("the first request is first");
        };
        let Entry::Replay(waiting) = running.enter("k".into()) else {
            panic!("the second is a replay");
        };
        assert_eq!(running.answered("k"), None, "not answered yet");
        first.answered(&7);
        assert_eq!(running.answered("k"), Some(7));
        assert_eq!(wait_for(waiting, Duration::from_secs(1)).await, Some(7));
        drop(first);
        assert_eq!(running.answered("k"), None, "gone with its first request");
        assert!(matches!(running.enter("k".into()), Entry::First(_)));
    }

    #[tokio::test]
    async fn a_first_request_that_dies_unanswered_lets_its_replays_go() {
        let running = Running::<u32>::new();
        let Entry::First(first) = running.enter("k".into()) else {
            panic!("first");
        };
        let Entry::Replay(waiting) = running.enter("k".into()) else {
            panic!("replay");
        };
        drop(first);
        assert_eq!(wait_for(waiting, Duration::from_secs(5)).await, None);
    }
}
