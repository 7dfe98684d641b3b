//! The wait for a request's body. The listener closes a connection that waits too long for
//! a request's head, but a request whose head has arrived is being served, and a request
//! being served is never idle: a sender that trickles its body (a byte now and then, never
//! the whole) would hold its connection's slot of `max_connections` for as long as it
//! likes, and on the buy route a place in flight too. A few thousand such senders, signed in
//! or not (a login's body is read before anyone is known), would shut the sale out.
//!
//! So every request body is given `body_patience_ms` (the state this middleware is built
//! with) from the moment it is found not to
//! have come whole with the head; past that it ends in an error, which the route answers
//! 400 `BAD_REQUEST`, and the connection is closed with it. A body that came with its head
//! (nearly all of them) arms no timer: the storm pays a wrapper, not a clock.

use axum::{
    body::{Body, Bytes},
    extract::{Request, State},
    middleware::Next,
    response::Response,
};
use http_body::{Body as _, Frame, SizeHint};
use std::{
    future::Future,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};
use tokio::time::Sleep;

/// What a refusal of such a body says.
pub const TOO_SLOW: &str = "the request body did not arrive in time";

/// Why a body ended before its sender finished it.
#[derive(Debug, thiserror::Error)]
#[error("{}", TOO_SLOW)]
pub struct TooSlow;

/// Whether `error`, or one of its causes, is a body that did not arrive in time.
pub fn too_slow(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(error) = cause {
        if error.is::<TooSlow>() {
            return true;
        }
        cause = error.source();
    }
    false
}

/// Gives the request's body `body_patience_ms` once it is found waiting for its sender. A
/// request without a body (a health check, a page) is passed on as it is.
pub async fn patience(State(patience): State<Duration>, request: Request, next: Next) -> Response {
    if request.body().is_end_stream() {
        return next.run(request).await;
    }
    next.run(request.map(|body| Body::new(Patient::new(body, patience))))
        .await
}

/// A body that ends in [`TooSlow`] once it has waited `patience` for its sender.
struct Patient {
    inner: Body,
    patience: Duration,
    /// Set at the first wait, never moved: the patience is for the whole rest of the body,
    /// so a sender cannot buy more time a byte at a time.
    deadline: Option<Pin<Box<Sleep>>>,
}

impl Patient {
    fn new(inner: Body, patience: Duration) -> Self {
        Self {
            inner,
            patience,
            deadline: None,
        }
    }
}

impl http_body::Body for Patient {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {
                let patience = this.patience;
                let deadline = this
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(patience)));
                match deadline.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(axum::Error::new(TooSlow)))),
                    Poll::Pending => Poll::Pending,
                }
            }
            frame => frame,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_body_that_came_whole_is_read_whole() {
        let body = Body::new(Patient::new(Body::from("whole"), Duration::ZERO));
        let read = axum::body::to_bytes(body, 64).await.expect("read");
        assert_eq!(read, "whole");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_trickling_in_ends_at_its_patience_however_often_it_moves() {
        let (sender, chunks) = futures::channel::mpsc::unbounded::<Result<Bytes, axum::Error>>();
        let body = Body::new(Patient::new(
            Body::from_stream(chunks),
            Duration::from_secs(2),
        ));
        let started = tokio::time::Instant::now();
        // A byte every half second, for ever: each would reset a timer of the time between
        // frames.
        let trickling = tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(500)).await;
                if sender.unbounded_send(Ok(Bytes::from_static(b"x"))).is_err() {
                    break;
                }
            }
        });
        let error = axum::body::to_bytes(body, 1024)
            .await
            .expect_err("too slow");
        let waited = started.elapsed();
        trickling.abort();
        assert!(too_slow(&error), "{error}");
        assert!(
            waited >= Duration::from_secs(2) && waited < Duration::from_millis(2_500),
            "{waited:?}"
        );
    }
}
