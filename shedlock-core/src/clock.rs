//! Wall clocks a provider can be given, so tests can skew one node or step time by hand.
//!
//! Only client-time providers read a node's clock for lock decisions; server-time providers use
//! it for nothing that affects exclusion. Durations inside one process are measured with the
//! monotonic clock ([`std::time::Instant`] or tokio's), never by subtracting wall-clock readings.

use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

/// A source of wall-clock time.
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current time.
    fn now(&self) -> SystemTime;
}

/// The operating system's wall clock. It can jump when NTP corrects it.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
}

/// Wall-clock time that never jumps: read once at creation, then advanced by the monotonic clock.
///
/// A single process that is the sole authority on lock expiry (the in-memory provider) uses this,
/// so an NTP step cannot expire or prolong its locks.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin_wall: SystemTime,
    origin: Instant,
}

impl MonotonicClock {
    /// Anchors to the system clock now.
    pub fn new() -> Self {
        Self {
            origin_wall: SystemTime::now(),
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> SystemTime {
        self.origin_wall + self.origin.elapsed()
    }
}

/// Another clock shifted by a fixed offset, ahead or behind: a node whose clock is wrong.
#[derive(Debug, Clone)]
pub struct SkewedClock {
    inner: Arc<dyn Clock>,
    ahead: bool,
    offset: Duration,
}

impl SkewedClock {
    /// `inner` plus `offset`: this node's clock runs ahead.
    pub fn ahead(inner: Arc<dyn Clock>, offset: Duration) -> Self {
        Self {
            inner,
            ahead: true,
            offset,
        }
    }

    /// `inner` minus `offset`: this node's clock runs behind.
    pub fn behind(inner: Arc<dyn Clock>, offset: Duration) -> Self {
        Self {
            inner,
            ahead: false,
            offset,
        }
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> SystemTime {
        let now = self.inner.now();
        if self.ahead {
            now + self.offset
        } else {
            now - self.offset
        }
    }
}

/// A clock that moves only when told to: deterministic tests of expiry without sleeping.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<Mutex<SystemTime>>,
}

impl ManualClock {
    /// The time, locked. A panic under it (an `advance` past the latest time a `SystemTime`
    /// holds) leaves the time as it was, so the poison flag is ignored and later calls work.
    fn time(&self) -> std::sync::MutexGuard<'_, SystemTime> {
        self.now
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts at `start`.
    pub fn new(start: SystemTime) -> Self {
        Self {
            now: Arc::new(Mutex::new(start)),
        }
    }

    /// Moves every clone of this clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        *self.time() += by;
    }

    /// Sets every clone of this clock to `to`, which may be in the past.
    pub fn set(&self, to: SystemTime) {
        *self.time() = to;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        *self.time()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skewed_clock_offsets_both_ways() {
        let base = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
        let shared: Arc<dyn Clock> = Arc::new(base.clone());
        let ahead = SkewedClock::ahead(shared.clone(), Duration::from_secs(5));
        let behind = SkewedClock::behind(shared, Duration::from_secs(5));
        assert_eq!(
            ahead.now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1005)
        );
        assert_eq!(
            behind.now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(995)
        );
        base.advance(Duration::from_secs(10));
        assert_eq!(
            ahead.now(),
            SystemTime::UNIX_EPOCH + Duration::from_secs(1015)
        );
    }

    #[test]
    fn manual_clock_moves_every_clone_forward_and_back() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let clock = ManualClock::new(start);
        let clone = clock.clone();
        clock.advance(Duration::from_secs(5));
        assert_eq!(clone.now(), start + Duration::from_secs(5));
        clone.set(start - Duration::from_secs(1));
        assert_eq!(clock.now(), start - Duration::from_secs(1));
    }

    #[test]
    fn manual_clock_works_after_an_advance_that_panicked() {
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let clock = ManualClock::new(start);
        let overflowing = clock.clone();
        let panicked = std::thread::spawn(move || overflowing.advance(Duration::MAX)).join();
        assert!(
            panicked.is_err(),
            "an advance past SystemTime's range panics"
        );
        assert_eq!(clock.now(), start, "the panicked advance changed nothing");
        clock.advance(Duration::from_secs(1));
        assert_eq!(clock.now(), start + Duration::from_secs(1));
    }

    #[test]
    fn monotonic_clock_never_goes_back() {
        let clock = MonotonicClock::new();
        let mut last = clock.now();
        for _ in 0..1000 {
            let now = clock.now();
            assert!(now >= last);
            last = now;
        }
    }
}
