//! The buyer's log of one activity's events in Redis and the channel announcing them: the
//! typed client of `lua/buyer_event.lua` (append and announce in one step) and the read a
//! resuming stream makes. The log is a Redis stream per (activity, buyer) whose entry ids
//! are the events' ids; it expires `[events] resume_window_s` after its last event, which is
//! how long a stream may come back with `Last-Event-ID` and miss nothing.

use base::{config::EventsSettings, lua::BUYER_EVENT, redis::RedisStore};
use contract::{ActivityId, UserId};
use redis::RedisResult;

use crate::events::rules::{EventId, LoggedEvent};

/// Events one resuming read returns at most; a log holds fewer (`log_max_entries`).
const RESUME_BATCH: usize = 1_000;

/// The log and channel, over the shared Redis connection: they are reached only through it.
#[derive(Clone, Copy)]
pub struct EventLog<'a> {
    pub redis: &'a RedisStore,
    pub settings: &'a EventsSettings,
}

impl EventLog<'_> {
    /// The channel every instance's subscriber listens on: one for the deployment, so one
    /// subscription per instance hears every buyer's events and hands them out in memory.
    pub fn channel(redis: &RedisStore) -> String {
        redis.key("buyer_events")
    }

    fn key(&self, activity: ActivityId, user: UserId) -> String {
        Self::key_of(self.redis, activity, user)
    }

    /// The buyer's log of the activity. Every log of one activity shares its hash tag, so
    /// on a cluster they live on one node, as the activity's item keys do, and whoever
    /// removes an activity's logs (a rehearsal's clean-up) deletes them a batch at a time.
    pub fn key_of(redis: &RedisStore, activity: ActivityId, user: UserId) -> String {
        redis.key(format_args!("{{e{activity}}}:u{user}:events"))
    }

    /// Appends the event to the buyer's log and announces it; its id.
    pub async fn append(
        &self,
        activity: ActivityId,
        user: UserId,
        name: &str,
        data: &str,
    ) -> RedisResult<String> {
        let window_ms = self.settings.resume_window_s.saturating_mul(1_000);
        BUYER_EVENT
            .key(self.key(activity, user))
            .arg(name)
            .arg(data)
            .arg(window_ms)
            .arg(self.settings.log_max_entries.max(1))
            .arg(Self::channel(self.redis))
            .arg(format!("{activity} {user}"))
            .invoke_async(&mut self.redis.connection())
            .await
    }

    /// The buyer's events after `after`, oldest first (nothing once the log expired).
    pub async fn after(
        &self,
        activity: ActivityId,
        user: UserId,
        after: EventId,
    ) -> RedisResult<Vec<LoggedEvent>> {
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
            .arg(self.key(activity, user))
            .arg(format!("({after}"))
            .arg("+")
            .arg("COUNT")
            .arg(RESUME_BATCH)
            .query_async(&mut self.redis.connection())
            .await?;
        Ok(entries.into_iter().filter_map(logged).collect())
    }

    /// The id of the buyer's latest event; [`EventId::ZERO`] when his log holds none.
    pub async fn last(&self, activity: ActivityId, user: UserId) -> RedisResult<EventId> {
        let entries: Vec<(String, Vec<String>)> = redis::cmd("XREVRANGE")
            .arg(self.key(activity, user))
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1)
            .query_async(&mut self.redis.connection())
            .await?;
        Ok(entries
            .into_iter()
            .next()
            .and_then(|(id, _)| id.parse().ok())
            .unwrap_or(EventId::ZERO))
    }
}

/// An entry of the log as a stream writes it; `None` for one not written by the script.
fn logged((id, fields): (String, Vec<String>)) -> Option<LoggedEvent> {
    let field = |wanted: &str| {
        fields
            .chunks_exact(2)
            .find(|pair| pair[0] == wanted)
            .map(|pair| pair[1].clone())
    };
    Some(LoggedEvent {
        id: id.parse().ok()?,
        name: field("k")?,
        data: field("d")?,
    })
}
