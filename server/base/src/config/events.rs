//! `[events]`: the buyer event streams of `GET /api/events` (docs/buyer-events.md), in a file of their
//! own beside `config.rs`.

use serde::Deserialize;

/// How many buyer event streams an instance holds and how long a buyer's events are kept
/// for a stream that comes back (`[events]` in the config file).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EventsSettings {
    /// Event streams this instance holds at once, each buyer's one; the next asks for one
    /// are answered 503 `OVERLOADED`. An open stream holds an HTTP connection too, so keep
    /// it under `max_connections`, with room for the buys.
    pub max_streams: usize,
    /// How long a buyer's log of an activity's events outlives its last event, in seconds:
    /// a stream coming back with `Last-Event-ID` within it misses nothing (5 minutes by default).
    pub resume_window_s: u64,
    /// Most events one log keeps (the oldest go first); a buyer sees a few per activity.
    pub log_max_entries: u32,
    /// The heartbeat comment a stream sends while nothing happens, in seconds, so that
    /// proxies and the browser keep an idle stream open.
    pub heartbeat_s: u64,
    /// Events waiting to be written to Redis at most; past it the newest are dropped and
    /// counted (their buyers' pages still read their orders).
    pub queue_capacity: usize,
}

impl Default for EventsSettings {
    fn default() -> Self {
        Self {
            max_streams: 2_048,
            resume_window_s: 300,
            log_max_entries: 100,
            heartbeat_s: 15,
            queue_capacity: 16_384,
        }
    }
}
