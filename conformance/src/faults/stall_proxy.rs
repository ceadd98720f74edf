//! A TCP proxy that can stall: traffic stops in both directions, as when a network link or the
//! server freezes (SIGSTOP), and what was sent meanwhile is delivered late when it resumes.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Forwards every connection made to [`local_addr`](Self::local_addr) to an upstream server
/// until [`pause`](Self::pause); then holds every byte either side sends, without closing
/// anything, until [`resume`](Self::resume) delivers them. A request that a node gave up on
/// during the pause therefore still reaches the server, late: the case where a timed-out
/// release or extend lands after another node took the lock.
#[derive(Debug)]
pub struct StallProxy {
    local_addr: SocketAddr,
    paused: watch::Sender<bool>,
    delayed_bytes: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl StallProxy {
    /// A proxy on a free port of 127.0.0.1 to `upstream` (`"127.0.0.1:5432"`).
    pub async fn start(upstream: &str) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local_addr = listener.local_addr()?;
        let (paused, watching) = watch::channel(false);
        let delayed_bytes = Arc::new(AtomicU64::new(0));
        let upstream = upstream.to_owned();
        let delayed = delayed_bytes.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    // The client sees its connection closed, as if the server were down.
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(forward(
                    client_read,
                    server_write,
                    watching.clone(),
                    delayed.clone(),
                ));
                tokio::spawn(forward(
                    server_read,
                    client_write,
                    watching.clone(),
                    delayed.clone(),
                ));
            }
        });
        Ok(Self {
            local_addr,
            paused,
            delayed_bytes,
            accept,
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops all traffic: nothing is forwarded, nothing is closed.
    pub fn pause(&self) {
        self.paused.send_replace(true);
    }

    /// Delivers what was held, and forwards as before.
    pub fn resume(&self) {
        self.paused.send_replace(false);
    }

    /// Bytes that waited in the proxy during a pause, in either direction, so far.
    pub fn delayed_bytes(&self) -> u64 {
        self.delayed_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Forwarders waiting on a pause end with the channel.
        self.paused.send_replace(false);
    }
}

/// Copies one direction of a connection; a chunk read during a pause waits for the resume.
async fn forward(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
    delayed: Arc<AtomicU64>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = match from.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(read) => read,
        };
        if *paused.borrow_and_update() {
            delayed.fetch_add(read as u64, Ordering::SeqCst);
            if paused.wait_for(|paused| !paused).await.is_err() {
                break;
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
    use std::time::Duration;

    use super::*;

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
                        let _ = socket.write_all(&buffer[..read]).await;
                    }
                });
            }
        });
        addr
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn holds_traffic_while_paused_and_delivers_it_on_resume() {
        let proxy = StallProxy::start(&echo_server().await.to_string())
            .await
            .unwrap();
        let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
        let mut reply = [0u8; 4];
        stream.write_all(b"ping").await.unwrap();
        stream.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"ping");

        proxy.pause();
        stream.write_all(b"late").await.unwrap();
        let waited =
            tokio::time::timeout(Duration::from_millis(300), stream.read_exact(&mut reply)).await;
        assert!(waited.is_err(), "nothing may pass while paused");
        assert_eq!(proxy.delayed_bytes(), 4);

        proxy.resume();
        tokio::time::timeout(Duration::from_secs(5), stream.read_exact(&mut reply))
            .await
            .expect("the held request is delivered on resume")
            .unwrap();
        assert_eq!(&reply, b"late");
    }
}
