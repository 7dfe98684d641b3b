//! The HTTP listener's cap on open connections: past `max_connections` the instance stops
//! accepting until one closes, and the next clients wait in the kernel's accept queue. And
//! the close of a connection that waits too long for its next request.
//!
//! Every open connection costs memory (hyper's buffers, the task) whether or not a request
//! is on it, and a flood of connections (a sale's crowd, or someone opening sockets and
//! sending nothing) would otherwise grow the process until the machine kills it, in the
//! middle of the sale. The buy path's own admission control counts requests, not
//! connections, so it cannot stop that. A connection that sends nothing after its last
//! answer would hold its slot for good; it is closed after `connection_idle_s`. So is one
//! that sends its next request's head a byte at a time (slowloris): the wait ends only when
//! a head has arrived whole, not at its first byte.

use axum::serve::Listener;
use memchr::memmem;
use prometheus::{IntCounter, IntGauge};
use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{Arc, LazyLock},
    task::{Context, Poll},
    time::Duration,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
    time::{Instant, Sleep},
};

/// What the listener reports: connections open now, those it accepted only after waiting
/// at the cap for one to close, and those it closed as idle.
#[derive(Clone)]
pub(crate) struct ConnectionGauges {
    pub(crate) open: IntGauge,
    pub(crate) waited: IntCounter,
    pub(crate) idle_closed: IntCounter,
}

/// A TCP listener that keeps at most `max` connections open, each closed once it has waited
/// `idle` for a request (`None`: never).
pub(crate) struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    idle: Option<Duration>,
    gauges: ConnectionGauges,
}

impl CappedListener {
    pub(crate) fn new(
        inner: TcpListener,
        max: usize,
        idle: Option<Duration>,
        gauges: ConnectionGauges,
    ) -> Self {
        Self {
            inner,
            slots: Arc::new(Semaphore::new(max.max(1))),
            idle,
            gauges,
        }
    }
}

impl Listener for CappedListener {
    type Io = Capped;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // The slot is taken before the accept: at the cap, the next connection stays in the
        // kernel's queue, unread, instead of costing this process anything.
        let (slot, waited) = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => (slot, false),
            Err(_) => (
                self.slots
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the semaphore is never closed"),
                true,
            ),
        };
        let (stream, address) = Listener::accept(&mut self.inner).await;
        if waited {
            self.gauges.waited.inc();
        }
        self.gauges.open.inc();
        let io = Capped {
            stream,
            _slot: slot,
            idle: self.idle.map(|after| Idle {
                after,
                // A new connection waits for its first request.
                waiting_since: Some(Instant::now()),
                timer: None,
                over: false,
                carried: Carried::default(),
                closed: self.gauges.idle_closed.clone(),
            }),
            open: self.gauges.open.clone(),
        };
        (io, address)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.inner.local_addr()
    }
}

/// An accepted connection holding its slot until it is dropped.
pub(crate) struct Capped {
    stream: TcpStream,
    _slot: OwnedSemaphorePermit,
    idle: Option<Idle>,
    open: IntGauge,
}

/// How long a connection has waited for a request. It waits from its last write (an
/// answer, or its accept) until it has read a request's head whole (up to the blank line
/// that ends it), so a head sent slowly is no less idle than none. A request being served
/// has been read and not yet answered, however long that takes, so it is never idle; a
/// stream of answers (the dashboard's frames) writes, and stays fresh while it does.
struct Idle {
    after: Duration,
    waiting_since: Option<Instant>,
    /// Wakes the connection's task no later than the end of the current wait. It is moved
    /// only when it fires: resetting a timer on every answer would cost the storm a lock
    /// of the timer wheel per request.
    timer: Option<Pin<Box<Sleep>>>,
    /// Once over, the connection reads as ended however often it is read.
    over: bool,
    closed: IntCounter,
    carried: Carried,
}

impl Idle {
    fn read(&mut self, bytes: &[u8]) {
        if self.waiting_since.is_some() && self.carried.ends_a_head(bytes) {
            self.waiting_since = None;
        }
        self.carried.keep(bytes);
    }

    /// A write that sent something starts a wait for a request. The timer is armed here,
    /// with the writer's context: hyper asked to read before it answered, and is not woken
    /// to read again until something arrives, so the read side alone would never look.
    fn wrote(&mut self, cx: &mut Context<'_>) {
        let now = Instant::now();
        self.waiting_since = Some(now);
        self.arm(now + self.after, cx);
    }

    /// Whether the wait for a request has lasted `after`; else the timer wakes `cx` by the
    /// time it will have.
    fn over(&mut self, cx: &mut Context<'_>) -> bool {
        let Some(since) = self.waiting_since else {
            return false;
        };
        let deadline = since + self.after;
        if !self.over && Instant::now() >= deadline {
            self.over = true;
            self.closed.inc();
        }
        if self.over {
            return true;
        }
        self.arm(deadline, cx);
        false
    }

    /// A timer that has not fired wakes the task at its own, earlier deadline (it was
    /// polled by the same task); one that fired, or none, is set to `deadline`.
    fn arm(&mut self, deadline: Instant, cx: &mut Context<'_>) {
        let timer = match &mut self.timer {
            Some(timer) if !timer.is_elapsed() => return,
            Some(timer) => {
                timer.as_mut().reset(deadline);
                timer
            }
            None => self
                .timer
                .insert(Box::pin(tokio::time::sleep_until(deadline))),
        };
        // Pending: the deadline is ahead, and the timer now holds the task's waker.
        let _ = timer.as_mut().poll(cx);
    }
}

/// The blank line that ends a request's head: after a line's end, an empty line ended by
/// CRLF, or by a bare LF, which the parser accepts too.
const HEAD_ENDS: [&[u8]; 2] = [b"\n\r\n", b"\n\n"];

/// The last bytes read, up to two: a head's end may come split over two reads.
#[derive(Default)]
struct Carried {
    bytes: [u8; 2],
    len: usize,
}

impl Carried {
    /// Whether `read`, after the bytes carried, holds the end of a head.
    fn ends_a_head(&self, read: &[u8]) -> bool {
        static FINDERS: LazyLock<[memmem::Finder<'static>; 2]> =
            LazyLock::new(|| HEAD_ENDS.map(memmem::Finder::new));
        let holds_an_end = |bytes: &[u8]| FINDERS.iter().any(|end| end.find(bytes).is_some());
        holds_an_end(read) || holds_an_end(self.joint(&read[..read.len().min(2)]).as_slice())
    }

    fn keep(&mut self, read: &[u8]) {
        let joint = self.joint(&read[read.len().saturating_sub(2)..]);
        let kept = &joint.as_slice()[joint.len.saturating_sub(2)..];
        self.bytes[..kept.len()].copy_from_slice(kept);
        self.len = kept.len();
    }

    /// The bytes carried, then `after` (two bytes at most).
    fn joint(&self, after: &[u8]) -> Joint {
        let mut joint = Joint {
            bytes: [0; 4],
            len: self.len + after.len(),
        };
        joint.bytes[..self.len].copy_from_slice(&self.bytes[..self.len]);
        joint.bytes[self.len..joint.len].copy_from_slice(after);
        joint
    }
}

/// Up to four bytes on the stack.
struct Joint {
    bytes: [u8; 4],
    len: usize,
}

impl Joint {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

impl Drop for Capped {
    fn drop(&mut self) {
        self.open.dec();
    }
}

impl AsyncRead for Capped {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.stream).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if let (Some(idle), read @ [_, ..]) = (&mut this.idle, &buf.filled()[before..]) {
                    idle.read(read);
                }
                Poll::Ready(Ok(()))
            }
            // Nothing read past the idle time: the end of the stream, which hyper answers by
            // closing the connection.
            Poll::Pending if this.idle.as_mut().is_some_and(|idle| idle.over(cx)) => {
                Poll::Ready(Ok(()))
            }
            other => other,
        }
    }
}

impl Capped {
    /// A write's result, noted: a write that sent something starts a wait for a request.
    fn wrote(
        &mut self,
        cx: &mut Context<'_>,
        written: Poll<io::Result<usize>>,
    ) -> Poll<io::Result<usize>> {
        if let (Poll::Ready(Ok(1..)), Some(idle)) = (&written, &mut self.idle) {
            idle.wrote(cx);
        }
        written
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write(cx, buf);
        self.wrote(cx, written)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.stream).poll_write_vectored(cx, bufs);
        self.wrote(cx, written)
    }

    // hyper writes a response's head and body in one vectored write when the stream can.
    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether the head ends within `reads`, read one after the other, and at which read.
    fn ends_at(reads: &[&[u8]]) -> Option<usize> {
        let mut carried = Carried::default();
        reads.iter().position(|read| {
            let ends = carried.ends_a_head(read);
            carried.keep(read);
            ends
        })
    }

    #[test]
    fn a_head_ends_at_its_blank_line_even_split_over_reads() {
        let head = b"GET /healthz HTTP/1.1\r\nHost: seckill\r\n\r\n";
        assert_eq!(ends_at(&[head]), Some(0));
        // Split at every byte of the blank line, and a byte at a time.
        for at in head.len() - 5..head.len() {
            assert_eq!(
                ends_at(&[&head[..at], &head[at..]]),
                Some(1),
                "split at {at}"
            );
        }
        let bytes: Vec<&[u8]> = head.chunks(1).collect();
        assert_eq!(ends_at(&bytes), Some(head.len() - 1));
        // Bare line feeds end it too.
        assert_eq!(ends_at(&[b"GET / HTTP/1.1\nHost: a\n", b"\n"]), Some(1));
        // Two lines, no blank one: not yet.
        assert_eq!(ends_at(&[b"GET / HTTP/1.1\r\n", b"Host: a\r\n"]), None);
        assert_eq!(ends_at(&[b"\r\n\r", b"x", b"\n"]), None);
        assert_eq!(ends_at(&[b"a\r\nb", b"\r", b"\n"]), None);
    }
}
