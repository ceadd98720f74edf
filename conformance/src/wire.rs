//! A TCP proxy that counts wire round trips, so a provider's tests can assert what a lock
//! operation costs on the network (a stable count) rather than how long it takes (a noisy one).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

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
}

impl CountingProxy {
    /// A proxy on a free port of 127.0.0.1 to `upstream` (`"127.0.0.1:5432"`).
    pub async fn start(upstream: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local_addr = listener.local_addr()?;
        let counts = Arc::new(Counts::default());
        let upstream = upstream.to_owned();
        let accepted = counts.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    // The client sees its connection closed, as if the server were down.
                    continue;
                };
                accepted.connections.fetch_add(1, Ordering::SeqCst);
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let client_spoke = Arc::new(AtomicBool::new(false));
                tokio::spawn(forward(
                    client_read,
                    server_write,
                    client_spoke.clone(),
                    None,
                ));
                tokio::spawn(forward(
                    server_read,
                    client_write,
                    client_spoke,
                    Some(accepted.clone()),
                ));
            }
        });
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
}

impl Drop for CountingProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies one direction of a connection. The client's direction (`counts` is `None`) marks that
/// the client spoke; the server's direction counts a round trip when it answers a client that
/// spoke, before passing the answer on.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    client_spoke: Arc<AtomicBool>,
    counts: Option<Arc<Counts>>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        match &counts {
            None => client_spoke.store(true, Ordering::SeqCst),
            Some(counts) => {
                if client_spoke.swap(false, Ordering::SeqCst) {
                    counts.round_trips.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        if to.write_all(&buffer[..read]).await.is_err() {
            break;
        }
    }
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server that answers each request line with one reply, in two packets.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 1024];
                    while let Ok(read) = socket.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        let _ = socket.write_all(b"o").await;
                        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                        let _ = socket.write_all(b"k\n").await;
                    }
                });
            }
        });
        addr
    }

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
