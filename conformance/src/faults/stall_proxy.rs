//! A TCP proxy that can stall: traffic stops in both directions, as when a network link or the
//! server freezes (SIGSTOP), and what was sent meanwhile is delivered late when it resumes.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::relay::{self, Direction, Relay};

/// Forwards every connection made to [`local_addr`](Self::local_addr) to an upstream server
/// until [`pause`](Self::pause); then holds every byte either side sends, without closing
/// anything, until [`resume`](Self::resume) delivers them. A request that a node gave up on
/// during the pause therefore still reaches the server, late: the case where a timed-out
/// release or extend lands after another node took the lock.
#[derive(Debug)]
pub struct StallProxy {
    local_addr: SocketAddr,
    stall: Arc<Stall>,
    accept: JoinHandle<()>,
}

#[derive(Debug)]
struct Stall {
    paused: watch::Sender<bool>,
    delayed_bytes: AtomicU64,
}

impl Relay for Stall {
    type Connection = ();

    fn connected(&self) {}

    /// A chunk read during a pause waits for the resume.
    fn passing(&self, _: &(), _: Direction, bytes: usize) -> impl Future<Output = bool> + Send {
        let mut paused = self.paused.subscribe();
        async move {
            if !*paused.borrow_and_update() {
                return true;
            }
            self.delayed_bytes.fetch_add(bytes as u64, Ordering::SeqCst);
            paused.wait_for(|paused| !paused).await.is_ok()
        }
    }
}

impl StallProxy {
    /// A proxy on a free port of 127.0.0.1 to `upstream` (`"127.0.0.1:5432"`).
    pub async fn start(upstream: &str) -> io::Result<Self> {
        let stall = Arc::new(Stall {
            paused: watch::Sender::new(false),
            delayed_bytes: AtomicU64::new(0),
        });
        let (local_addr, accept) = relay::listen(upstream, stall.clone()).await?;
        Ok(Self {
            local_addr,
            stall,
            accept,
        })
    }

    /// Where clients connect.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Stops all traffic: nothing is forwarded, nothing is closed.
    pub fn pause(&self) {
        self.stall.paused.send_replace(true);
    }

    /// Delivers what was held, and forwards as before.
    pub fn resume(&self) {
        self.stall.paused.send_replace(false);
    }

    /// Bytes that waited in the proxy during a pause, in either direction, so far.
    pub fn delayed_bytes(&self) -> u64 {
        self.stall.delayed_bytes.load(Ordering::SeqCst)
    }
}

impl Drop for StallProxy {
    fn drop(&mut self) {
        self.accept.abort();
        // Chunks waiting on a pause go on, and their connections end as they would.
        self.stall.paused.send_replace(false);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;
    use crate::relay::echo_server;

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
