//! A TCP proxy on a spare loopback port that a test can stop and resume, to make a shared
//! service (RabbitMQ, say) unreachable for one app without touching the service itself.
//! Stopping closes the listening socket (new connections are refused) and cuts every
//! connection in flight; resuming listens on the same port again. A proxy can also lose
//! replies: once a client sends a given byte pattern (a script's SHA, say), the service's
//! answers on that connection are dropped until the test unmutes it, as when a reply is
//! lost on the network after the service did the work. Given several targets, it is a load
//! balancer of TCP connections: each new connection goes to the next target in turn.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::watch,
};

/// When the service's replies are dropped.
#[derive(Default)]
struct ReplyGate {
    /// Replies are dropped from the moment a client sends this.
    trigger: Mutex<Option<Vec<u8>>>,
    muted: AtomicBool,
}

impl ReplyGate {
    fn saw(&self, sent: &[u8]) {
        let trigger = self.trigger.lock().expect("gate");
        if let Some(pattern) = trigger.as_deref() {
            if sent.windows(pattern.len()).any(|window| window == pattern) {
                self.muted.store(true, Ordering::SeqCst);
            }
        }
    }
}

pub(crate) struct Proxy {
    port: u16,
    replies: Arc<ReplyGate>,
    /// `true` while the proxy should accept and forward.
    open: watch::Sender<bool>,
    /// `true` while the listening socket is bound.
    listening: watch::Receiver<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts forwarding a fresh loopback port to `target` (`host:port`).
    pub(crate) async fn start(target: &str) -> Proxy {
        Self::balancing(&[target]).await
    }

    /// Starts forwarding a fresh loopback port to `targets` (`host:port` each), one
    /// connection to each in turn.
    pub(crate) async fn balancing(targets: &[&str]) -> Proxy {
        let mut addresses = Vec::new();
        for target in targets {
            addresses.push(
                tokio::net::lookup_host(target)
                    .await
                    .expect("resolve the proxy target")
                    .next()
                    .expect("the proxy target has an address"),
            );
        }
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind a port");
        let port = listener.local_addr().expect("address").port();
        let (open, opened) = watch::channel(true);
        let (listened, listening) = watch::channel(false);
        let replies = Arc::new(ReplyGate::default());
        let task = tokio::spawn(serve(
            listener,
            port,
            addresses.into(),
            opened,
            listened,
            replies.clone(),
        ));
        let mut proxy = Proxy {
            port,
            replies,
            open,
            listening,
            task,
        };
        proxy.wait_listening(true).await;
        proxy
    }

    /// `http://127.0.0.1:<port>`: the proxy as an HTTP client reaches it.
    pub(crate) fn http_address(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Refuses new connections and cuts the open ones; returns once the port is closed.
    pub(crate) async fn stop(&mut self) {
        self.open.send_replace(false);
        self.wait_listening(false).await;
    }

    /// Drops the service's replies from the moment a client sends `pattern`.
    pub(crate) fn lose_replies_after(&self, pattern: &[u8]) {
        *self.replies.trigger.lock().expect("gate") = Some(pattern.to_vec());
    }

    /// Whether a reply has been dropped since [`Proxy::lose_replies_after`].
    pub(crate) fn losing_replies(&self) -> bool {
        self.replies.muted.load(Ordering::SeqCst)
    }

    /// Forwards replies again.
    pub(crate) fn keep_replies(&self) {
        *self.replies.trigger.lock().expect("gate") = None;
        self.replies.muted.store(false, Ordering::SeqCst);
    }

    /// Listens and forwards again on the same port.
    pub(crate) async fn resume(&mut self) {
        self.open.send_replace(true);
        self.wait_listening(true).await;
    }

    async fn wait_listening(&mut self, wanted: bool) {
        self.listening
            .wait_for(|listening| *listening == wanted)
            .await
            .expect("the proxy task is running");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `url` (`scheme://user:pass@host:port/rest`) with its host and port replaced by the proxy's.
pub(crate) fn through(url: &str, proxy: &Proxy) -> String {
    with_port(url, proxy.port)
}

fn with_port(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let (credentials, location) = match rest.rsplit_once('@') {
        Some((credentials, location)) => (format!("{credentials}@"), location),
        None => (String::new(), rest),
    };
    let path = location.find('/').map_or("", |at| &location[at..]);
    format!("{scheme}://{credentials}127.0.0.1:{port}{path}")
}

/// `host:port` of a URL like the one [`through`] rewrites.
pub(crate) fn target_of(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let location = rest.rsplit_once('@').map_or(rest, |(_, location)| location);
    location.split('/').next().unwrap_or(location).to_owned()
}

async fn serve(
    first: TcpListener,
    port: u16,
    targets: Arc<[SocketAddr]>,
    mut open: watch::Receiver<bool>,
    listening: watch::Sender<bool>,
    replies: Arc<ReplyGate>,
) {
    let mut listener = Some(first);
    let mut turn = 0;
    loop {
        let Some(bound) = listener.take() else {
            // Closed: wait to be resumed, then listen on the same port again.
            if open.wait_for(|open| *open).await.is_err() {
                return;
            }
            listener = Some(
                TcpListener::bind(("127.0.0.1", port))
                    .await
                    .expect("re-bind the proxy's port"),
            );
            continue;
        };
        listening.send_replace(true);
        loop {
            tokio::select! {
                accepted = bound.accept() => {
                    if let Ok((inbound, _)) = accepted {
                        let target = targets[turn % targets.len()];
                        turn += 1;
                        tokio::spawn(forward(inbound, target, open.clone(), replies.clone()));
                    }
                }
                changed = open.changed() => {
                    if changed.is_err() || !*open.borrow() {
                        break;
                    }
                }
            }
        }
        drop(bound);
        listening.send_replace(false);
    }
}

/// Copies both ways until either side closes or the proxy stops; replies go through the
/// gate.
async fn forward(
    inbound: TcpStream,
    target: SocketAddr,
    mut open: watch::Receiver<bool>,
    replies: Arc<ReplyGate>,
) {
    let Ok(outbound) = TcpStream::connect(target).await else {
        return;
    };
    let (mut client_in, mut client_out) = inbound.into_split();
    let (mut service_in, mut service_out) = outbound.into_split();
    let gate = replies.clone();
    let requests = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(read) = client_in.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            gate.saw(&buffer[..read]);
            if service_out.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
    };
    let answers = async move {
        let mut buffer = vec![0u8; 16 * 1024];
        while let Ok(read) = service_in.read(&mut buffer).await {
            if read == 0 {
                break;
            }
            if replies.muted.load(Ordering::SeqCst) {
                continue;
            }
            if client_out.write_all(&buffer[..read]).await.is_err() {
                break;
            }
        }
    };
    tokio::select! {
        () = requests => {}
        () = answers => {}
        _ = open.wait_for(|open| !*open) => {}
    }
}

#[test]
fn urls_are_rewritten_to_the_proxy_port() {
    assert_eq!(
        target_of("amqp://guest:guest@127.0.0.1:5672/%2f"),
        "127.0.0.1:5672"
    );
    assert_eq!(target_of("redis://localhost:6379"), "localhost:6379");
    assert_eq!(
        with_port("amqp://guest:guest@127.0.0.1:5672/%2f", 40001),
        "amqp://guest:guest@127.0.0.1:40001/%2f"
    );
}
