//! The buyer events' rules apart from I/O: what an event id is and how ids compare, how an
//! instance reads an announcement off the events channel, and who gets a stream when a
//! buyer asks for one.

use contract::{ActivityId, UserId};
use std::{fmt, str::FromStr};

/// An event's id: the id Redis gave its entry in the buyer's log (`<ms>-<seq>`), so ids rise
/// within one buyer's log of one activity, which is all one stream ever reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EventId {
    ms: u64,
    seq: u64,
}

impl EventId {
    /// Before every event: a stream opened on an empty log starts here, so whatever the log
    /// holds later is after its start.
    pub const ZERO: EventId = EventId { ms: 0, seq: 0 };
}

impl FromStr for EventId {
    type Err = ();

    /// `<ms>-<seq>`, both plain decimal numbers: anything else is not an id of ours.
    fn from_str(text: &str) -> Result<Self, ()> {
        let (ms, seq) = text.split_once('-').ok_or(())?;
        let number = |part: &str| {
            if part.is_empty() || part.len() > 20 || !part.bytes().all(|b| b.is_ascii_digit()) {
                return Err(());
            }
            part.parse::<u64>().map_err(|_| ())
        };
        Ok(Self {
            ms: number(ms)?,
            seq: number(seq)?,
        })
    }
}

impl fmt::Display for EventId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// One event as the events channel announces it: `<activity> <user> <id> <name> <data>`
/// (`lua/buyer_event.lua`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Announcement {
    pub activity: ActivityId,
    pub user: UserId,
    pub event: LoggedEvent,
}

/// An event as the buyer's log holds it and a stream writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoggedEvent {
    pub id: EventId,
    /// The SSE event's name (`order`, `registration`).
    pub name: String,
    /// The SSE event's data: the event's fields as JSON.
    pub data: String,
}

impl Announcement {
    /// Reads an announcement; `None` for anything not of that shape.
    pub fn parse(text: &str) -> Option<Self> {
        let mut parts = text.splitn(5, ' ');
        let activity = parts.next()?.parse().ok()?;
        let user = parts.next()?.parse().ok()?;
        let id = parts.next()?.parse().ok()?;
        let name = parts.next()?;
        let data = parts.next()?;
        if name.is_empty() || data.is_empty() {
            return None;
        }
        Some(Self {
            activity: ActivityId(activity),
            user: UserId(user),
            event: LoggedEvent {
                id,
                name: name.to_owned(),
                data: data.to_owned(),
            },
        })
    }
}

/// What a buyer's ask for a stream gets on this instance.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// A stream of his own; `replacing` when his earlier one here is ended for it.
    Open { replacing: bool },
    /// The instance holds `max_streams` streams already: 503 `OVERLOADED`.
    Overloaded,
}

/// One stream per buyer per instance, and at most `max_streams` in all: a buyer's second
/// stream replaces his first (so it is admitted even at the cap, the count unchanged); a new
/// buyer is admitted below the cap only.
pub fn admit(open: usize, max_streams: usize, buyer_has_one: bool) -> Admission {
    if buyer_has_one {
        Admission::Open { replacing: true }
    } else if open < max_streams {
        Admission::Open { replacing: false }
    } else {
        Admission::Overloaded
    }
}

/// Whether a stream that has written up to `written` (or started there) writes the event
/// `id`: an event comes once, in rising order, whether it arrived live or from the log.
pub fn is_new(written: EventId, id: EventId) -> bool {
    id > written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(text: &str) -> EventId {
        text.parse().expect(text)
    }

    #[test]
    fn an_event_id_is_two_decimal_numbers_and_they_order_it() {
        assert_eq!(id("1733500000000-0").to_string(), "1733500000000-0");
        assert!(id("1733500000000-2") > id("1733500000000-1"));
        assert!(id("1733500000001-0") > id("1733500000000-9"));
        // As numbers, not as text.
        assert!(id("10-0") > id("9-0"));
        for bad in [
            "",
            "-",
            "1-",
            "-1",
            "1",
            "1-2-3",
            "a-1",
            "1- 2",
            "+1-2",
            "99999999999999999999999-0",
        ] {
            assert!(bad.parse::<EventId>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn an_announcement_names_its_buyer_and_carries_the_event_whole() {
        let read =
            Announcement::parse(r#"7 42 1733500000000-3 order {"order_id":"a b","status":"PAID"}"#)
                .expect("announcement");
        assert_eq!(read.activity, ActivityId(7));
        assert_eq!(read.user, UserId(42));
        assert_eq!(read.event.id, id("1733500000000-3"));
        assert_eq!(read.event.name, "order");
        assert_eq!(read.event.data, r#"{"order_id":"a b","status":"PAID"}"#);
        for bad in [
            "",
            "7 42 1-0 order",
            "7 x 1-0 order {}",
            "7 42 nope order {}",
            "7 42 1-0  {}",
        ] {
            assert_eq!(Announcement::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_buyers_second_stream_replaces_his_first_even_at_the_cap() {
        assert_eq!(admit(0, 2, false), Admission::Open { replacing: false });
        assert_eq!(admit(1, 2, false), Admission::Open { replacing: false });
        assert_eq!(admit(2, 2, false), Admission::Overloaded);
        assert_eq!(admit(2, 2, true), Admission::Open { replacing: true });
        assert_eq!(admit(0, 0, false), Admission::Overloaded);
    }

    #[test]
    fn an_event_is_written_once_in_rising_order() {
        assert!(is_new(EventId::ZERO, id("5-0")));
        assert!(is_new(id("5-0"), id("5-1")));
        assert!(!is_new(id("5-1"), id("5-1")));
        assert!(!is_new(id("5-1"), id("5-0")));
        assert_eq!(EventId::ZERO.to_string(), "0-0");
    }
}
