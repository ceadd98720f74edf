//! How long the kit's locks last and how much slack it allows, from the provider's precision.

use std::time::Duration;

use tokio::time::Instant;

use crate::trace::Timed;

/// The shortest time unit the kit uses, for providers with fine-grained time.
const BASE_UNIT: Duration = Duration::from_millis(100);

/// Slack on top of the declared precision: scheduling jitter and clock rates on one machine.
const SLACK: Duration = Duration::from_millis(25);

/// How long before a deadline, at the least, a probe that must be answered by it is sent: a
/// scheduler's wake-up lag on a busy machine. A provider that frees a lock this early is inside
/// the tolerance anyway.
const PROBE_LEAD: Duration = Duration::from_millis(20);

/// The kit's durations for one provider.
///
/// Every lock duration is a multiple of `unit`: 100 ms for millisecond providers, a whole
/// number of precision steps for coarse ones (1 s for etcd's whole-second leases), so a
/// provider that rounds durations up to its precision is not pushed across a step.
///
/// The kit never asserts exact times. A request sent at `t0` and answered at `t1` puts the
/// backend's moment of decision in `[t0, t1]`; an expiry is then known within
/// `[t0 + d - early, t1 + d + tolerance]`, and only outcomes impossible under every moment in
/// those windows count as failures. The two sides differ on purpose: a declared precision
/// excuses a lock that frees itself late (a timer's lag, a duration rounded up), never one
/// that frees itself early, which would let a second node in while the first still runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// The time unit of every lock duration in the kit.
    pub unit: Duration,
    /// How much later than the kit's bound the backend may free a lock: the declared precision
    /// plus 25 ms.
    pub tolerance: Duration,
    /// How much earlier than the kit's bound the backend may free a lock: 25 ms of scheduling
    /// jitter and clock rates on one machine, whatever the precision.
    pub early: Duration,
}

impl Timing {
    /// Durations for a provider whose stored times have granularity `precision`
    /// ([`shedlock_core::Capabilities::time_precision`]).
    pub fn for_precision(precision: Duration) -> Self {
        let unit = if precision.is_zero() || precision >= BASE_UNIT {
            precision.max(BASE_UNIT)
        } else {
            let steps = BASE_UNIT.as_nanos().div_ceil(precision.as_nanos());
            precision * u32::try_from(steps).unwrap_or(u32::MAX)
        };
        // A coarse precision is already a whole step; round it up to a whole multiple too.
        let unit = if precision > Duration::ZERO && unit.as_nanos() % precision.as_nanos() != 0 {
            let steps = unit.as_nanos().div_ceil(precision.as_nanos());
            precision * u32::try_from(steps).unwrap_or(u32::MAX)
        } else {
            unit
        };
        Self {
            unit,
            tolerance: precision + SLACK,
            early: SLACK,
        }
    }

    /// `n` units.
    pub fn units(&self, n: u32) -> Duration {
        self.unit * n
    }

    /// Until when a lock that `request` took or extended for `duration` is held under every
    /// moment the backend may have decided at: the earliest end of its window, minus the early
    /// slack (never the precision: see [`Timing`]).
    pub(crate) fn surely_held_until<T>(&self, request: &Timed<T>, duration: Duration) -> Instant {
        request.sent + duration - self.early
    }

    /// `n` units and a fraction of one more: a duration off the unit's grid, so a provider that
    /// rounds durations or times down to its precision frees the lock early and shows.
    pub fn off_grid(&self, n: u32) -> Duration {
        self.unit * n + self.unit * 3 / 8
    }

    /// When to send a probe that must be answered by `deadline`, as late as that allows: a few
    /// round trips like `like`'s before it, at least [`PROBE_LEAD`], at most half a unit. Probes
    /// at fixed fractions of a hold miss a provider that frees the lock a little early.
    pub(crate) fn late_probe_at<T>(&self, deadline: Instant, like: &Timed<T>) -> Instant {
        let round_trip = like.answered.saturating_duration_since(like.sent);
        let lead = (round_trip * 3 + PROBE_LEAD).min(self.unit / 2);
        deadline - lead
    }

    /// By when a hold of `duration` that `request` started has ended under every moment the
    /// backend may have decided at: the latest end of its window, plus tolerance.
    pub(crate) fn surely_over_by<T>(&self, request: &Timed<T>, duration: Duration) -> Instant {
        request.answered + duration + self.tolerance
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fine_precision_uses_the_base_unit() {
        let timing = Timing::for_precision(Duration::from_nanos(1));
        assert_eq!(timing.unit, Duration::from_millis(100));
        assert_eq!(
            timing.tolerance,
            Duration::from_millis(25) + Duration::from_nanos(1)
        );
        assert_eq!(
            Timing::for_precision(Duration::from_millis(1)).unit,
            BASE_UNIT
        );
    }

    #[test]
    fn coarse_precision_gives_whole_steps() {
        let timing = Timing::for_precision(Duration::from_secs(1));
        assert_eq!(timing.unit, Duration::from_secs(1));
        assert_eq!(timing.tolerance, Duration::from_millis(1025));
        assert_eq!(timing.early, Duration::from_millis(25));
        assert_eq!(timing.off_grid(2), Duration::from_millis(2375));
        assert_eq!(
            Timing::for_precision(Duration::from_millis(60)).unit,
            Duration::from_millis(120)
        );
        assert_eq!(
            Timing::for_precision(Duration::ZERO).unit,
            Duration::from_millis(100)
        );
    }
}
