//! Pieces every simulated backend shares: a server clock of its own, a simulated network
//! (latency, an unreachable address), and small time helpers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A backend's own wall clock: anchored to the system clock once, shifted by a fixed offset
/// (servers are rarely in perfect sync with their clients), then advanced by the monotonic
/// clock so it never jumps.
#[derive(Debug, Clone, Copy)]
pub struct ServerClock {
    origin_wall: SystemTime,
    origin: Instant,
}

impl ServerClock {
    /// A clock `offset_ms` ahead of the system clock (behind when negative).
    pub fn with_offset_ms(offset_ms: i64) -> Self {
        let now = SystemTime::now();
        let origin_wall = if offset_ms >= 0 {
            now + Duration::from_millis(offset_ms as u64)
        } else {
            now - Duration::from_millis(offset_ms.unsigned_abs())
        };
        Self {
            origin_wall,
            origin: Instant::now(),
        }
    }

    /// The server's wall-clock time.
    pub fn now(&self) -> SystemTime {
        self.origin_wall + self.origin.elapsed()
    }

    /// The server's monotonic time (what TTL countdowns run on).
    pub fn instant(&self) -> Instant {
        Instant::now()
    }
}

/// Why a request never got an answer.
#[derive(Debug, Clone)]
pub enum NetError {
    /// The connection could not be opened within the client's connect timeout.
    ConnectTimeout(Duration),
}

impl std::fmt::Display for NetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NetError::ConnectTimeout(after) => {
                write!(f, "could not connect to 127.0.0.1:1 within {after:?}")
            }
        }
    }
}

impl std::error::Error for NetError {}

/// One client's path to the server: a little latency each way, or a closed port.
#[derive(Debug)]
pub struct Net {
    reachable: AtomicBool,
    connect_timeout: Duration,
    jitter: AtomicU64,
}

impl Net {
    /// A working connection with a 2 s connect timeout.
    pub fn up() -> Self {
        Self {
            reachable: AtomicBool::new(true),
            connect_timeout: Duration::from_secs(2),
            jitter: AtomicU64::new(0x9e37_79b9),
        }
    }

    /// A connection to a closed port: every request fails after the connect timeout.
    pub fn down(connect_timeout: Duration) -> Self {
        Self {
            reachable: AtomicBool::new(false),
            connect_timeout,
            jitter: AtomicU64::new(1),
        }
    }

    /// The path breaks from now on, as in a network partition: every request fails as if
    /// the port were closed (the harness's `cut_off` hook).
    pub fn cut(&self) {
        self.reachable.store(false, Ordering::SeqCst);
    }

    /// The request travels to the server (or never arrives).
    pub async fn send(&self) -> Result<(), NetError> {
        if !self.reachable.load(Ordering::SeqCst) {
            tokio::time::sleep(self.connect_timeout).await;
            return Err(NetError::ConnectTimeout(self.connect_timeout));
        }
        // A cheap xorshift so that some requests overtake others.
        let mut x = self.jitter.load(Ordering::Relaxed);
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter.store(x, Ordering::Relaxed);
        if x.is_multiple_of(4) {
            tokio::time::sleep(Duration::from_millis(1)).await;
        } else {
            tokio::task::yield_now().await;
        }
        Ok(())
    }

    /// The answer travels back.
    pub async fn receive(&self) {
        tokio::task::yield_now().await;
    }
}

/// Milliseconds since the Unix epoch (negative before it).
pub fn unix_ms(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The instant `ms` milliseconds after the Unix epoch.
pub fn from_unix_ms(ms: i64) -> SystemTime {
    if ms >= 0 {
        UNIX_EPOCH + Duration::from_millis(ms as u64)
    } else {
        UNIX_EPOCH - Duration::from_millis(ms.unsigned_abs())
    }
}

/// A duration in whole milliseconds, rounded up (never shortens a lock).
pub fn ceil_ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos().div_ceil(1_000_000)).unwrap_or(u64::MAX)
}

/// `t + ms` milliseconds (`ms` may be negative), saturating at the ends of time.
pub fn add_ms(t: SystemTime, ms: i64) -> SystemTime {
    if ms >= 0 {
        t.checked_add(Duration::from_millis(ms as u64))
            .unwrap_or_else(|| UNIX_EPOCH + Duration::from_secs(253_402_300_799))
    } else {
        t.checked_sub(Duration::from_millis(ms.unsigned_abs()))
            .unwrap_or(UNIX_EPOCH)
    }
}
