//! `GET /admin/api/dashboard/stream`: Server-Sent Events, one `frame` event per second
//! with a [`DashboardFrame`](contract::DashboardFrame) as JSON, preceded on connecting by
//! the frames of the last minutes.

use axum::{
    extract::State,
    response::sse::{Event, KeepAlive, Sse},
};
use contract::Actor;
use futures::{stream, Stream, StreamExt};
use std::{convert::Infallible, sync::Arc};
use tokio::sync::broadcast::{error::RecvError, Receiver};

use crate::{admin::routes::AdminRoutes, state::AppState};
use base::error::ApiResult;

async fn stream_frames(
    State(state): State<AppState>,
    actor: Actor,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    sale::identity::authorize(&actor, contract::Permission::WatchOperations)?;
    let (backlog, live) = state.dashboard.subscribe();
    let live = stream::unfold(live, next_live);
    let frames = stream::iter(backlog)
        .chain(live)
        .map(|frame| Ok::<_, Infallible>(Event::default().event("frame").data(&*frame)));
    Ok(Sse::new(frames).keep_alive(KeepAlive::default()))
}

/// The next frame taken; a viewer too slow for the channel skips what it missed (its page
/// shows the gap). Ends when the process stops sampling.
async fn next_live(mut live: Receiver<Arc<str>>) -> Option<(Arc<str>, Receiver<Arc<str>>)> {
    loop {
        match live.recv().await {
            Ok(frame) => return Some((frame, live)),
            Err(RecvError::Lagged(_)) => continue,
            Err(RecvError::Closed) => return None,
        }
    }
}

pub(crate) fn admin(routes: AdminRoutes) -> AdminRoutes {
    routes.get("/dashboard/stream", stream_frames)
}
