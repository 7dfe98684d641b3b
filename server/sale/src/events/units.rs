//! The units left of the sales this instance's streams follow, pushed to them as they move
//! (the event `units`): one reading per followed activity per [`UNITS_EVERY`] for the whole
//! instance, however many buyers watch, where each page asking `/status` that often would
//! cost a request and a Redis read per buyer.

use contract::{ActivityId, UnitsEvent};
use std::{sync::Arc, time::Duration};

use crate::{buy::routes::units_left, SaleState};

/// How often the figures are read: a buyer sees a unit go within about this long.
pub const UNITS_EVERY: Duration = Duration::from_secs(1);

/// Starts the reader (only where HTTP is served: the streams live there).
pub fn spawn(state: &SaleState) {
    tokio::spawn(tell_forever(state.clone()));
}

async fn tell_forever(state: SaleState) {
    let mut every = tokio::time::interval(UNITS_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        for activity in state.event_hub.activities() {
            // Unreadable this round (Redis or the database away): the pages keep their
            // last figures, and read `/status` on their own beat as without a stream.
            if let Some(units) = read(&state, activity).await {
                state.event_hub.tell_units(activity, &units);
            }
        }
    }
}

/// The `units` event's data for `activity`, as `/status` would say it now.
async fn read(state: &SaleState, activity: ActivityId) -> Option<Arc<str>> {
    let cached = state.catalogue.activity(activity.0).await.ok()?;
    let items = match units_left(state, &cached).await {
        Ok(items) => items,
        Err(error) => {
            tracing::debug!(%activity, error = %error, "the units left could not be read");
            return None;
        }
    };
    serde_json::to_string(&UnitsEvent { items })
        .ok()
        .map(Arc::from)
}
