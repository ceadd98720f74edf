//! A TCP proxy that counts wire round trips, so a provider's tests can assert what a lock
//! operation costs on the network (a stable count) rather than how long it takes (a noisy one).

use std::future::{Future, ready};
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::task::JoinHandle;

use crate::relay::{self, Direction, Relay};

/// Forwards every connection made to [`local_addr`](Self::local_addr) to an upstream server,
/// counting round trips: a round trip is the server speaking after the client has spoken
/// since the server last did. A request sent in several writes, a reply in several packets,
/// and several statements pipelined in one write each count once; a health-check ping before
/// a statement counts as one more.
///
/// Point the provider's URL at the proxy, warm it up, then read [`round_trips`](Self::round_trips)
/// before and after one operation. Counting is done before a reply is passed on, so once the
/// operation has returned, its round trips are counted.
#[derive(Debug)]
pub struct CountingProxy {
    local_addr: SocketAddr,
    counts: Arc<Counts>,
    accept: JoinHandle<()>,
}

#[derive(Debug, Default)]
struct Counts {
    round_trips: AtomicU64,
    connections: AtomicU64,
    /// Connections numbered below this are cut at their next chunk.
    cut_below: AtomicU64,
}

/// One relayed connection: its number, in the order they opened, and whether the client spoke
/// since the server last did.
#[derive(Debug)]
struct Relayed {
    number: u64,
    client_spoke: AtomicBool,
}

impl Relay for Counts {
    type Connection = Relayed;

    fn connected(&self) -> Relayed {
        Relayed {
            number: self.connections.fetch_add(1, Ordering::SeqCst),
            client_spoke: AtomicBool::new(false),
        }
    }

    fn passing(
        &self,
        connection: &Relayed,
        direction: Direction,
        _bytes: usize,
    ) -> impl Future<Output = bool> + Send {
        if connection.number < self.cut_below.load(Ordering::SeqCst) {
            return ready(false);
        }
        match direction {
            Direction::ToServer => connection.client_spoke.store(true, Ordering::SeqCst),
            Direction::ToClient => {
                if connection.client_spoke.swap(false, Ordering::SeqCst) {
                    self.round_trips.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        ready(true)
    }
}

impl CountingProxy {
    /// A proxy on a free port of 127.0.0.1 to `upstream` (`"127.0.0.1:5432"`).
    pub async fn start(upstream: &str) -> io::Result<Self> {
        let counts = Arc::new(Counts::default());
        let (local_addr, accept) = relay::listen(upstream, counts.clone()).await?;
        Ok(Self {
            local_addr,
            counts,
            accept,
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Round trips on every connection so far.
    pub fn round_trips(&self) -> u64 {
        self.counts.round_trips.load(Ordering::SeqCst)
    }

    /// Connections opened through the proxy so far.
    pub fn connections(&self) -> u64 {
        self.counts.connections.load(Ordering::SeqCst)
    }

    /// Cuts every connection open now, as a firewall dropping idle flows or a server restart
    /// would: each is closed when it next carries anything, without an answer. Connections
    /// opened later pass.
    pub fn cut_open_connections(&self) {
        self.counts
            .cut_below
            .store(self.connections(), Ordering::SeqCst);
    }
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::relay::echo_server;

    async fn ask(stream: &mut TcpStream, request: &[u8]) {
        stream.write_all(request).await.unwrap();
        let mut reply = Vec::new();
        while !reply.ends_with(b"\n") {
            let mut byte = [0u8; 16];
            let read = stream.read(&mut byte).await.unwrap();
            reply.extend_from_slice(&byte[..read]);
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_one_round_trip_per_request_answered_whatever_the_packets() {
        let server = echo_server().await;
        let proxy = CountingProxy::start(&server.to_string()).await.unwrap();
        let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
        assert_eq!(proxy.round_trips(), 0);
        ask(&mut stream, b"one\n").await;
        assert_eq!(proxy.round_trips(), 1, "a reply in two packets is one");
        ask(&mut stream, b"two\n").await;
        ask(&mut stream, b"three\n").await;
        assert_eq!(proxy.round_trips(), 3);
        let mut second = TcpStream::connect(proxy.local_addr()).await.unwrap();
        ask(&mut second, b"four\n").await;
        assert_eq!(proxy.round_trips(), 4, "every connection counts");
        assert_eq!(proxy.connections(), 2);
    }
}
