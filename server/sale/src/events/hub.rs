//! The streams this instance holds and the one subscription that feeds them: every event
//! any instance publishes is announced on one Redis channel; this instance's subscriber
//! hears each once and hands it, in memory, to the stream of its buyer if he has one here.
//! So an instance costs Redis one subscriber connection however many streams it holds.
//!
//! One stream per buyer per instance: a second ask replaces the first (the first is told
//! `replaced` and ends, so two tabs do not take the stream from each other for ever), and at
//! most `[events] max_streams` in all. A stream that cannot keep up with its events is ended
//! rather than let them pile up in memory; its page comes back with `Last-Event-ID` and
//! reads what it missed from the buyer's log.

use base::{metrics::Metrics, quiet_log::quiet};
use contract::{ActivityId, UserId};
use futures::StreamExt;
use std::{
    collections::{HashMap, HashSet},
    sync::{
        atomic::{AtomicBool, AtomicU64, Ordering},
        Arc, Mutex,
    },
    time::Duration,
};
use tokio::sync::mpsc;

use crate::{
    events::{
        log::EventLog,
        rules::{admit, Admission, Announcement, LoggedEvent},
    },
    SaleState,
};

/// Events waiting for one stream to write them; past it the stream is behind and ends.
const STREAM_BACKLOG: usize = 64;

/// The streams of this instance, by buyer.
pub struct Hub {
    slots: Mutex<HashMap<UserId, Slot>>,
    max_streams: usize,
    next_ticket: AtomicU64,
    metrics: Metrics,
}

/// A buyer's stream as the hub reaches it.
struct Slot {
    ticket: u64,
    activity: ActivityId,
    deliveries: mpsc::Sender<Delivery>,
    replaced: Arc<AtomicBool>,
    /// The units left this stream was last told (the `units` event's data), if any.
    units: Option<Arc<str>>,
}

/// What the hub hands a stream.
#[derive(Debug)]
pub enum Delivery {
    /// An event of its buyer and activity, as announced.
    Event(LoggedEvent),
    /// The subscription was away for a while: events announced meanwhile are only in the
    /// log; read them from there.
    CatchUp,
    /// The activity's units left moved (or the stream has not been told them yet): the
    /// `units` event's data.
    Units(Arc<str>),
}

/// Why a stream could not be opened.
#[derive(Debug)]
pub struct Overloaded;

/// A stream's place in the hub: its deliveries, and its slot given back when it is dropped
/// (the response ended, or the client went away).
pub struct Opened {
    pub deliveries: mpsc::Receiver<Delivery>,
    /// Set when a newer stream of the same buyer took the slot.
    pub replaced: Arc<AtomicBool>,
    hub: Arc<Hub>,
    user: UserId,
    ticket: u64,
}

impl Drop for Opened {
    fn drop(&mut self) {
        self.hub.close(self.user, self.ticket);
    }
}

impl Hub {
    pub fn new(max_streams: usize, metrics: Metrics) -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(HashMap::new()),
            max_streams,
            next_ticket: AtomicU64::new(1),
            metrics,
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<UserId, Slot>> {
        // A panic while holding the lock leaves the map whole (no step of ours can stop
        // halfway), so a poisoned lock is still a good map.
        self.slots
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Takes the buyer's stream slot for `activity`, ending his earlier stream here if any.
    pub fn open(
        self: &Arc<Self>,
        user: UserId,
        activity: ActivityId,
    ) -> Result<Opened, Overloaded> {
        let (sender, deliveries) = mpsc::channel(STREAM_BACKLOG);
        let replaced = Arc::new(AtomicBool::new(false));
        let ticket = self.next_ticket.fetch_add(1, Ordering::Relaxed);
        let mut slots = self.slots();
        let outcome = match admit(slots.len(), self.max_streams, slots.contains_key(&user)) {
            Admission::Overloaded => {
                drop(slots);
                self.count("overloaded");
                return Err(Overloaded);
            }
            Admission::Open { replacing: true } => "replaced",
            Admission::Open { replacing: false } => "opened",
        };
        let earlier = slots.insert(
            user,
            Slot {
                ticket,
                activity,
                deliveries: sender,
                replaced: replaced.clone(),
                units: None,
            },
        );
        self.metrics.events.streams_open.set(slots.len() as i64);
        drop(slots);
        if let Some(earlier) = earlier {
            // Its sender dropped here: that stream reads the flag and says why it ends.
            earlier.replaced.store(true, Ordering::SeqCst);
        }
        self.count(outcome);
        Ok(Opened {
            deliveries,
            replaced,
            hub: self.clone(),
            user,
            ticket,
        })
    }

    fn count(&self, outcome: &str) {
        self.metrics
            .events
            .streams
            .with_label_values(&[outcome])
            .inc();
    }

    /// Gives the slot back, unless a newer stream of the buyer holds it now.
    fn close(&self, user: UserId, ticket: u64) {
        let mut slots = self.slots();
        if slots.get(&user).is_some_and(|slot| slot.ticket == ticket) {
            slots.remove(&user);
        }
        self.metrics.events.streams_open.set(slots.len() as i64);
    }

    /// Hands an announced event to its buyer's stream here, if he has one for its activity.
    fn deliver(&self, announcement: Announcement) {
        let mut slots = self.slots();
        let Some(slot) = slots.get(&announcement.user) else {
            return;
        };
        if slot.activity != announcement.activity {
            return;
        }
        if let Err(mpsc::error::TrySendError::Full(_)) = slot
            .deliveries
            .try_send(Delivery::Event(announcement.event))
        {
            // Behind by a whole backlog: ended, its page resumes from the log.
            slots.remove(&announcement.user);
            self.metrics.events.streams_open.set(slots.len() as i64);
        }
    }

    /// The activities whose sales the streams here follow.
    pub fn activities(&self) -> Vec<ActivityId> {
        let followed: HashSet<ActivityId> =
            self.slots().values().map(|slot| slot.activity).collect();
        followed.into_iter().collect()
    }

    /// Tells each stream of `activity` its units left, `units` (the event's data), unless
    /// that is what it was last told. A stream with a full backlog is skipped, not ended:
    /// the next round tells it again, and only its own events are worth a resume.
    pub fn tell_units(&self, activity: ActivityId, units: &Arc<str>) {
        for slot in self.slots().values_mut() {
            if slot.activity != activity || slot.units.as_ref() == Some(units) {
                continue;
            }
            if slot
                .deliveries
                .try_send(Delivery::Units(units.clone()))
                .is_ok()
            {
                slot.units = Some(units.clone());
            }
        }
    }

    /// Tells every stream to read its log: the subscription was (re)made, and what was
    /// announced while it was away reached nobody here.
    fn catch_up(&self) {
        for slot in self.slots().values() {
            let _ = slot.deliveries.try_send(Delivery::CatchUp);
        }
    }
}

/// Starts this instance's subscriber (only where HTTP is served: the streams live there).
pub fn spawn(state: &SaleState) {
    tokio::spawn(subscribe_forever(state.clone()));
}

/// Pauses between two attempts to subscribe again, doubling from the first to the last.
const RESUBSCRIBE_FIRST: Duration = Duration::from_millis(100);
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(2);

async fn subscribe_forever(state: SaleState) {
    let mut pause = RESUBSCRIBE_FIRST;
    loop {
        match listen(&state).await {
            Ok(()) => pause = RESUBSCRIBE_FIRST,
            Err(error) => {
                quiet!(warn, "events.subscription", error = %error, "buyer events unavailable; subscribing again");
            }
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(RESUBSCRIBE_MAX);
    }
}

/// One subscription's life: every announcement handed out until the connection ends.
async fn listen(state: &SaleState) -> redis::RedisResult<()> {
    let mut subscription = state.redis.subscription().await?;
    subscription
        .subscribe(EventLog::channel(&state.redis))
        .await?;
    state.event_hub.catch_up();
    let mut messages = subscription.on_message();
    while let Some(message) = messages.next().await {
        let Ok(text) = std::str::from_utf8(message.get_payload_bytes()) else {
            continue;
        };
        if let Some(announcement) = Announcement::parse(text) {
            state.event_hub.deliver(announcement);
        }
    }
    Ok(())
}
