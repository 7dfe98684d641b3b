//! The HTTP listener's cap on open connections: past `max_connections` the instance stops
//! accepting until one closes, and the next clients wait in the kernel's accept queue.
//!
//! Every open connection costs memory (hyper's buffers, the task) whether or not a request
//! is on it, and a flood of connections (a sale's crowd, or someone opening sockets and
//! sending nothing) would otherwise grow the process until the machine kills it, in the
//! middle of the sale. The buy path's own admission control counts requests, not
//! connections, so it cannot stop that.

use axum::serve::Listener;
use prometheus::{IntCounter, IntGauge};
use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
    sync::{OwnedSemaphorePermit, Semaphore},
};

/// What the cap reports: connections open now, and connections the listener accepted only
/// after waiting at the cap for one to close.
#[derive(Clone)]
pub(crate) struct ConnectionGauges {
    pub(crate) open: IntGauge,
    pub(crate) waited: IntCounter,
}

/// A TCP listener that keeps at most `max` connections open.
pub(crate) struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    gauges: ConnectionGauges,
}

impl CappedListener {
    pub(crate) fn new(inner: TcpListener, max: usize, gauges: ConnectionGauges) -> Self {
        Self {
            inner,
            slots: Arc::new(Semaphore::new(max.max(1))),
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
    open: IntGauge,
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
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Capped {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
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
