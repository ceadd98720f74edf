//! The ZooKeeper server's clock as seen from this process, learnt from the `mtime` of our own
//! writes and carried forward on the monotonic clock.
//!
//! ZooKeeper has no "what time is it" request, but every write is stamped with the leader's
//! wall clock (`mtime`, in milliseconds) and the stamp comes back in the write's `Stat`. A write
//! sent at `sent` and answered at `answered` (on this process's monotonic clock) was stamped
//! somewhere in between, so at any later instant `t` the server's clock reads between
//! `mtime + (t - answered)` and `mtime + 1 ms + (t - sent)`. That interval, carried forward and
//! narrowed by every later write, is all this provider knows about server time: it takes the
//! earliest end to decide that a lock has expired (so it never takes one early) and the latest
//! end to write a new `lock_until` (so a lock is never shorter than asked). The node's wall
//! clock is never read.
//!
//! Two clocks tick at slightly different rates: the interval widens by [`DRIFT_PER_MILLION`]
//! parts per million of the time since it was learnt, in both directions. A new write whose
//! interval does not overlap the carried one means the server's clock was stepped (NTP, a new
//! leader with a different clock): the new interval replaces the old.

use std::time::{Duration, Instant};

/// How far, in parts per million, the server's wall clock and this process's monotonic clock
/// may disagree on the length of a second: 100 ppm is 8.6 s a day, ten times the tolerance of a
/// plain quartz oscillator, and far beyond what NTP leaves.
pub(crate) const DRIFT_PER_MILLION: i64 = 100;

/// Server time in microseconds since the Unix epoch.
pub(crate) type ServerMicros = i64;

/// The server's clock at `reference` lay in `[earliest, latest]` (both inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ServerClock {
    reference: Instant,
    earliest: ServerMicros,
    latest: ServerMicros,
}

impl ServerClock {
    /// What one write tells: it was sent at `sent`, answered at `answered`, and stamped
    /// `mtime_ms` by the server.
    pub(crate) fn from_write(sent: Instant, answered: Instant, mtime_ms: i64) -> Self {
        let in_flight = micros(answered.saturating_duration_since(sent));
        let stamped = mtime_ms.saturating_mul(1000);
        Self {
            reference: answered,
            // The stamp was taken before the answer left the server.
            earliest: stamped,
            // The stamp is a floor of the true time (up to 1 ms more), taken no earlier than
            // the request was sent; drift over that flight counts too.
            latest: stamped + 1000 + in_flight + drift(in_flight),
        }
    }

    /// The interval at instant `at`: moved by the time elapsed since the reference, and widened
    /// by the drift the two clocks may have accumulated over it.
    pub(crate) fn at(&self, at: Instant) -> (ServerMicros, ServerMicros) {
        let (elapsed, widening) = if at >= self.reference {
            let elapsed = micros(at - self.reference);
            (elapsed, drift(elapsed))
        } else {
            let before = micros(self.reference - at);
            (-before, drift(before))
        };
        (
            self.earliest + elapsed - widening,
            self.latest + elapsed + widening,
        )
    }

    /// The server's clock at `at` is surely not before this.
    pub(crate) fn earliest(&self, at: Instant) -> ServerMicros {
        self.at(at).0
    }

    /// The server's clock at `at` is surely not after this.
    pub(crate) fn latest(&self, at: Instant) -> ServerMicros {
        self.at(at).1
    }

    /// How wide the interval is at `at`: the worst error of either end.
    pub(crate) fn uncertainty(&self, at: Instant) -> Duration {
        let (earliest, latest) = self.at(at);
        Duration::from_micros(u64::try_from(latest - earliest).unwrap_or(0))
    }

    /// Both intervals hold, so the server's clock is in their intersection, carried to the
    /// later reference. If they do not overlap, the server's clock was stepped between them and
    /// only `newer` describes it now.
    pub(crate) fn narrowed_by(&self, newer: &ServerClock) -> ServerClock {
        let reference = self.reference.max(newer.reference);
        let (mine_earliest, mine_latest) = self.at(reference);
        let (new_earliest, new_latest) = newer.at(reference);
        let earliest = mine_earliest.max(new_earliest);
        let latest = mine_latest.min(new_latest);
        if earliest > latest {
            return *newer;
        }
        ServerClock {
            reference,
            earliest,
            latest,
        }
    }
}

fn micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

/// The most two clocks can disagree over `elapsed` microseconds, rounded up.
fn drift(elapsed: i64) -> i64 {
    (elapsed.saturating_mul(DRIFT_PER_MILLION) + 999_999) / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_write_bounds_the_server_clock_by_its_flight() {
        let sent = Instant::now();
        let answered = sent + 4 * MS;
        let clock = ServerClock::from_write(sent, answered, 1_000);
        assert_eq!(
            clock.at(answered),
            (1_000_000, 1_000_000 + 1_000 + 4_000 + 1)
        );
        // 10 s later: both ends move by 10 s, and widen by 100 ppm of it (1 ms) each.
        let later = answered + Duration::from_secs(10);
        assert_eq!(clock.earliest(later), 1_000_000 + 10_000_000 - 1_000);
        assert_eq!(clock.latest(later), 1_000_000 + 5_001 + 10_000_000 + 1_000);
        assert_eq!(clock.uncertainty(later), Duration::from_micros(7_001));
    }

    #[test]
    fn the_earliest_end_never_passes_the_true_server_time() {
        // The server stamps at some moment of the flight; whichever, the interval holds it.
        let sent = Instant::now();
        for stamped_after in [0, 1, 2, 3] {
            let answered = sent + 3 * MS;
            let true_stamp_us: i64 = 50_000_700 + stamped_after * 1_000;
            let clock = ServerClock::from_write(sent, answered, true_stamp_us / 1000);
            let probe = answered + 20 * MS;
            let true_now = true_stamp_us + (3 - stamped_after) * 1_000 + 20_000;
            let (earliest, latest) = clock.at(probe);
            assert!(
                earliest <= true_now && true_now <= latest,
                "{stamped_after}"
            );
        }
    }

    #[test]
    fn overlapping_writes_narrow_the_interval_and_a_disjoint_one_replaces_it() {
        let start = Instant::now();
        let wide = ServerClock::from_write(start, start + 10 * MS, 1_000);
        let narrow = ServerClock::from_write(start + 20 * MS, start + 21 * MS, 1_015);
        let merged = wide.narrowed_by(&narrow);
        let at = start + 21 * MS;
        assert!(merged.uncertainty(at) <= narrow.uncertainty(at));
        assert!(merged.uncertainty(at) <= wide.uncertainty(at));
        // Merging in either order gives the same interval.
        assert_eq!(narrow.narrowed_by(&wide).at(at), merged.at(at));

        // A server clock stepped back by a second does not overlap: the new write wins.
        let stepped = ServerClock::from_write(start + 30 * MS, start + 31 * MS, 25);
        assert_eq!(merged.narrowed_by(&stepped), stepped);
    }
}
