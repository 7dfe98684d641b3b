//! `GET /api/events?activity_id=` (buyer token): the buyer's own events of one activity as
//! Server-Sent Events (docs/buyer-events.md). The stream opens with a comment `open` and, as its `id:`,
//! where it starts in the buyer's log (so a client that drops before any event resumes from
//! there: `0-0` for an empty log, before everything it will hold); each event has its
//! log id as `id:`, its kind as `event:` (`order`, `registration`) and its fields as JSON
//! `data:`; a `heartbeat` comment comes after every `[events] heartbeat_s` without one.
//! With `Last-Event-ID` it first writes what the buyer's log holds after that id. A stream
//! replaced by the buyer's newer one here ends with an event `replaced` (data `{}`): the
//! page stops asking for it again, so two tabs do not take it from each other for ever.
//! Between them come the sale's `units` events (no `id:`, `events::units`).

use axum::extract::{FromRef, FromRequestParts};
use axum::{
    extract::{rejection::QueryRejection, Query, State},
    http::{header, HeaderMap, HeaderName},
    response::{
        sse::{Event, KeepAlive},
        Sse,
    },
};
use base::client_address::ClientAddress;
use contract::Actor;
use contract::{ActivityId, UnitsEvent, UserId};
use futures::{stream, Stream, StreamExt};
use serde::Deserialize;
use std::{collections::VecDeque, convert::Infallible, sync::atomic::Ordering, time::Duration};

use crate::{
    events::{
        hub::{Delivery, Opened},
        log::EventLog,
        rules::{is_new, EventId, LoggedEvent},
    },
    SaleState,
};
use base::{
    error::{ApiError, ApiResult},
    metrics::Metrics,
    route_table::RouteTable,
};

pub fn routes<S>(routes: RouteTable<S>) -> RouteTable<S>
where
    S: Clone + Send + Sync + 'static,
    SaleState: FromRef<S>,
    Actor: FromRequestParts<S>,
    ClientAddress: FromRequestParts<S>,
{
    routes.get("/events", events)
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// The activity whose events the stream carries.
    activity_id: i64,
}

/// How soon a browser's `EventSource` asks again after the stream dropped, in milliseconds.
const RETRY_MS: u64 = 2_000;

async fn events(
    State(state): State<SaleState>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> ApiResult<(
    StreamHeaders,
    Sse<impl Stream<Item = Result<Event, Infallible>>>,
)> {
    let buyer = state.buyer_tokens.bearer(&headers)?;
    let Query(query) = query?;
    let resume = last_event_id(&headers)?;
    crate::buy::routes::cached_activity(&state, query.activity_id, buyer.rehearsal).await?;
    let (activity, user) = (ActivityId(query.activity_id), UserId(buyer.id));
    // Where the stream starts in the buyer's log: after the client's last event, or after
    // the latest one now (a new stream tells what comes next). Read before the slot is
    // taken, and the log read again after: an event logged in between, which the
    // subscription may have announced before this stream was there to hear it, comes from
    // the log; `is_new` drops what both bring.
    let start = match resume {
        Some(after) => after,
        None => log(&state).last(activity, user).await?,
    };
    let opened = state
        .event_hub
        .open(user, activity)
        .map_err(|_| ApiError::Overloaded("this instance holds as many event streams as it may"))?;
    let backlog = log(&state).after(activity, user, start).await?;
    let reader = Reader {
        state: state.clone(),
        activity,
        user,
        written: start,
        pending: backlog
            .into_iter()
            .map(|event| (event, "resumed"))
            .collect(),
        opened,
        ended: false,
    };
    // The start as the first id: a client that drops before any event comes back after it.
    let opening = Event::default()
        .comment("open")
        .id(start.to_string())
        .retry(Duration::from_millis(RETRY_MS));
    let frames = stream::once(async move { Ok::<_, Infallible>(opening) })
        .chain(stream::unfold(reader, Reader::next));
    let heartbeat = Duration::from_secs(state.settings.events.heartbeat_s.max(1));
    let events =
        Sse::new(frames).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat"));
    Ok((
        [
            (header::CACHE_CONTROL, "no-store"),
            // Proxies that buffer answers (nginx) would hold the events back.
            (HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        events,
    ))
}

/// The stream's headers: never cached, never buffered.
type StreamHeaders = [(HeaderName, &'static str); 2];

fn log(state: &SaleState) -> EventLog<'_> {
    EventLog {
        redis: &state.redis,
        settings: &state.settings.events,
    }
}

/// The id to resume after, if the client sent one; 400 `INVALID_LAST_EVENT_ID` for one this
/// server never gave.
fn last_event_id(headers: &HeaderMap) -> ApiResult<Option<EventId>> {
    let Some(value) = headers.get("last-event-id") else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .map(Some)
        .ok_or_else(|| ApiError::Invalid {
            code: "INVALID_LAST_EVENT_ID",
            message: "Last-Event-ID is not an event id this stream gave (`<ms>-<seq>`)".into(),
        })
}

/// One stream's state between two frames.
struct Reader {
    state: SaleState,
    activity: ActivityId,
    user: UserId,
    /// The last event written (or where the stream started): nothing at or before it is
    /// written again.
    written: EventId,
    /// Events read from the log, not written yet, with how they came.
    pending: VecDeque<(LoggedEvent, &'static str)>,
    opened: Opened,
    ended: bool,
}

impl Reader {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            if let Some((event, via)) = self.pending.pop_front() {
                if let Some(frame) = self.frame(event, via) {
                    return Some((Ok(frame), self));
                }
                continue;
            }
            if self.ended {
                return None;
            }
            match self.opened.deliveries.recv().await {
                Some(Delivery::Event(event)) => self.pending.push_back((event, "live")),
                Some(Delivery::CatchUp) => self.catch_up().await,
                // The sale's figures, in no buyer's log: no id, the last one stays.
                Some(Delivery::Units(units)) => {
                    delivered(&self.state.metrics, UnitsEvent::NAME, "live");
                    let frame = Event::default().event(UnitsEvent::NAME).data(&*units);
                    return Some((Ok(frame), self));
                }
                None if self.opened.replaced.load(Ordering::SeqCst) => {
                    self.ended = true;
                    let replaced = Event::default().event("replaced").data("{}");
                    return Some((Ok(replaced), self));
                }
                // Ended by the hub (behind by a whole backlog): the page resumes.
                None => return None,
            }
        }
    }

    /// The frame of `event`, unless it was written already.
    fn frame(&mut self, event: LoggedEvent, via: &str) -> Option<Event> {
        if !is_new(self.written, event.id) {
            return None;
        }
        self.written = event.id;
        delivered(&self.state.metrics, &event.name, via);
        Some(
            Event::default()
                .id(event.id.to_string())
                .event(event.name)
                .data(event.data),
        )
    }

    /// Reads what the log holds after the last event written.
    async fn catch_up(&mut self) {
        match log(&self.state)
            .after(self.activity, self.user, self.written)
            .await
        {
            Ok(missed) => self
                .pending
                .extend(missed.into_iter().map(|event| (event, "resumed"))),
            // The page reads its order itself while the stream has nothing to say.
            Err(error) => {
                tracing::debug!(user = %self.user, error = %error, "could not catch a stream up")
            }
        }
    }
}

fn delivered(metrics: &Metrics, kind: &str, via: &str) {
    metrics
        .events
        .delivered
        .with_label_values(&[kind, via])
        .inc();
}
