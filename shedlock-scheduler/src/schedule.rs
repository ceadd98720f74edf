//! When a job's ticks fall: a cron expression in a time zone, a fixed rate or a fixed delay.

use std::fmt;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use tokio::time::Instant;

use crate::cron::CronExpression;
use crate::error::SchedulerError;

/// When a job runs.
///
/// - [`cron`](Self::cron): at the instants a six-field cron expression (seconds first) names in
///   a time zone. Daylight-saving changes follow the Open Cron Pattern Specification: a
///   fixed time that falls in the gap of a spring-forward change runs at the first instant
///   after the gap, a fixed time repeated by a fall-back change runs once, and an interval
///   (`0 */30 * * * *`) keeps its pace through both.
/// - [`fixed_rate`](Self::fixed_rate): on the fleet's grid, the instants `k × period` since
///   1970-01-01T00:00:00Z (UTC). Every node derives the same grid from its wall clock, so
///   replicas started at different moments try each tick together and one of them runs it:
///   once per period across the fleet. A run that outlasts its period never overlaps the next
///   one on this node: the ticks that passed while it ran are missed (reported as
///   [`RunOutcome::Missed`](crate::RunOutcome::Missed)) and the next run is the first tick of
///   the grid that is not in the past, so the grid never drifts.
/// - [`fixed_rate_per_node`](Self::fixed_rate_per_node): on a grid `added + k × period` of this
///   node's own, counted from when the job was added. Replicas started at different moments
///   have different grids, so across the fleet the job runs up to once per period *per node*
///   (each node's tick finds the lock free once the previous holder's `lock_at_least_for`
///   passed). For work that is per node in spirit, or a single-node service.
/// - [`fixed_delay`](Self::fixed_delay): the next run starts `delay` after the previous one
///   ended, so nothing is ever missed.
///
/// Cron ticks that pass while a run is still going are missed the same way as fixed-rate ticks.
#[derive(Clone)]
pub struct Schedule {
    kind: Kind,
}

/// Where a fixed rate's grid starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Grid {
    /// `k × period` since the UNIX epoch, in UTC: the same on every node.
    Fleet,
    /// `added + k × period`: this node's own.
    Node,
}

#[derive(Clone)]
enum Kind {
    Cron {
        cron: CronExpression,
        zone: Tz,
    },
    FixedRate {
        period: Duration,
        first_after: Duration,
        grid: Grid,
    },
    FixedDelay {
        delay: Duration,
        first_after: Duration,
    },
}

impl fmt::Debug for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            Kind::Cron { cron, zone } => f
                .debug_struct("Cron")
                .field("expression", &cron.as_str())
                .field("zone", &zone.name())
                .finish(),
            Kind::FixedRate {
                period,
                first_after,
                grid,
            } => f
                .debug_struct("FixedRate")
                .field("period", period)
                .field("first_after", first_after)
                .field("grid", grid)
                .finish(),
            Kind::FixedDelay { delay, first_after } => f
                .debug_struct("FixedDelay")
                .field("delay", delay)
                .field("first_after", first_after)
                .finish(),
        }
    }
}

impl Schedule {
    /// The instants `expression` names in `zone`, read as Spring's `CronExpression` reads it.
    ///
    /// Six fields, seconds first, and an optional seventh for the year (1970 to 2099, as in
    /// Quartz):
    ///
    /// | field | takes | and |
    /// |---|---|---|
    /// | second, minute | 0 to 59 | `*` `,` `-` `/` |
    /// | hour | 0 to 23 | `*` `,` `-` `/` |
    /// | day-of-month | 1 to 31 | `*` `?` `,` `-` `/`, `L` (last day), `L-3` (third-to-last), `15W` (weekday nearest the 15th), `LW` (last weekday) |
    /// | month | 1 to 12 or `JAN` to `DEC` | `*` `,` `-` `/` |
    /// | day-of-week | 0 to 7 (0 and 7 are Sunday) or `SUN` to `SAT` | `*` `?` `,` `-` `/`, `5L` or `FRIL` (last Friday), `MON#1` (first Monday) |
    ///
    /// A step may start from a value (`0/15` is every 15 from 0, as `*/15`). Names are
    /// case-insensitive. The macros `@yearly` (or `@annually`), `@monthly`, `@weekly`,
    /// `@daily` (or `@midnight`) and `@hourly` stand for their six fields. When both day fields
    /// are given, a day must match both, as in Spring (POSIX cron runs when either matches).
    /// `L`, `W` and `#` stand alone in their field, as Spring wants. A five-field expression is
    /// refused rather than read with a guessed seconds field, and every refusal names the
    /// field, the value and what the field takes.
    ///
    /// ```
    /// use shedlock_scheduler::{Schedule, Tz};
    /// // 03:00:00 every day, Berlin time, whatever the season.
    /// let nightly = Schedule::cron("0 0 3 * * *", Tz::Europe__Berlin)?;
    /// // Every 15 seconds, written either way.
    /// let often = Schedule::cron("*/15 * * * * *", Tz::UTC)?;
    /// let also = Schedule::cron("0/15 * * * * *", Tz::UTC)?;
    /// // Midnight on the second Friday of each month.
    /// let monthly = Schedule::cron("0 0 0 ? * FRI#2", Tz::UTC)?;
    /// assert!(Schedule::cron("0 3 * * *", Tz::UTC).is_err());
    /// let refused = Schedule::cron("0 0 25 * * *", Tz::UTC).unwrap_err();
    /// assert!(refused.to_string().contains("hour 25 is out of range: the hour field takes 0 to 23"));
    /// # Ok::<(), shedlock_scheduler::SchedulerError>(())
    /// ```
    pub fn cron(expression: &str, zone: Tz) -> Result<Self, SchedulerError> {
        Ok(Self {
            kind: Kind::Cron {
                cron: CronExpression::parse(expression)?,
                zone,
            },
        })
    }

    /// A run every `period` across the fleet, at the instants `k × period` since the UNIX epoch
    /// in UTC: a 60 s rate runs at the top of each minute, a 10 s rate at :00, :10, :20 and so
    /// on, on whichever node takes the lock. The first run is at the first such instant not in
    /// the past (see [`first_run_after`](Self::first_run_after)).
    ///
    /// Every node derives the grid from its own wall clock, so nodes whose clocks differ try a
    /// tick that far apart: keep `lock_at_least_for` above the nodes' clock differences plus
    /// their start-up jitter (a few ms on one network), and below the period, or a node whose
    /// tick comes later than the lock's release runs the same tick again.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock_scheduler::Schedule;
    /// // At :00, :10, :20, ... of every minute, once across all replicas.
    /// let cleanup = Schedule::fixed_rate(Duration::from_secs(10));
    /// ```
    pub fn fixed_rate(period: Duration) -> Self {
        Self {
            kind: Kind::FixedRate {
                period,
                first_after: Duration::ZERO,
                grid: Grid::Fleet,
            },
        }
    }

    /// A run every `period` on this node's own grid, `added + k × period`, the first one at once
    /// (see [`first_run_after`](Self::first_run_after)): the grid starts when the job is added,
    /// so nodes started at different moments do not share it. Across a fleet the job then runs
    /// up to once per period per node; use [`fixed_rate`](Self::fixed_rate) for once per period
    /// across the fleet.
    pub fn fixed_rate_per_node(period: Duration) -> Self {
        Self {
            kind: Kind::FixedRate {
                period,
                first_after: Duration::ZERO,
                grid: Grid::Node,
            },
        }
    }

    /// A run `delay` after the previous run ended, the first one at once (see
    /// [`first_run_after`](Self::first_run_after)).
    pub fn fixed_delay(delay: Duration) -> Self {
        Self {
            kind: Kind::FixedDelay {
                delay,
                first_after: Duration::ZERO,
            },
        }
    }

    /// Delays the first run of a fixed rate or fixed delay by `initial_delay` after the job is
    /// added (ShedLock's `initialDelay`). On the fleet's grid ([`fixed_rate`](Self::fixed_rate))
    /// the first run is the first grid instant at least `initial_delay` after the job is added.
    /// A cron schedule has its own instants and ignores it.
    pub fn first_run_after(mut self, initial_delay: Duration) -> Self {
        match &mut self.kind {
            Kind::FixedRate { first_after, .. } | Kind::FixedDelay { first_after, .. } => {
                *first_after = initial_delay;
            }
            Kind::Cron { .. } => {}
        }
        self
    }

    /// A period or delay of zero would run the job in a busy loop.
    pub(crate) fn check(&self, job: &str) -> Result<(), SchedulerError> {
        match &self.kind {
            Kind::FixedRate { period, .. } if period.is_zero() => Err(SchedulerError::ZeroPeriod {
                job: job.to_owned(),
                what: "fixed rate period",
            }),
            Kind::FixedDelay { delay, .. } if delay.is_zero() => Err(SchedulerError::ZeroPeriod {
                job: job.to_owned(),
                what: "fixed delay",
            }),
            _ => Ok(()),
        }
    }

    /// The shortest time between two ticks, when the schedule has a fixed one: a lock held at
    /// least that long makes every other tick find it still held.
    pub(crate) fn period(&self) -> Option<Duration> {
        match &self.kind {
            Kind::FixedRate { period, .. } => Some(*period),
            Kind::FixedDelay { .. } | Kind::Cron { .. } => None,
        }
    }
}

/// One tick of a job's schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Tick {
    /// The tick's position in the job's schedule since the job was added on this node,
    /// counting missed ticks: `0` is the first. Nodes that added the job at different moments
    /// number the same tick differently; [`time`](Self::time) names it alike on every node.
    pub number: u64,
    /// When the tick was due, on tokio's clock.
    pub due: Instant,
    /// When the tick was due, in wall-clock time: the cron instant or the fleet grid's instant,
    /// the same on every node (so a lock name computed from it names the same lock fleet-wide);
    /// for a per-node rate or a fixed delay, the scheduler's wall clock read when the tick was
    /// planned, plus the wait. For a run asked for with
    /// [`SchedulerHandle::run_now`](crate::SchedulerHandle::run_now), when it was asked for.
    pub time: DateTime<Utc>,
    /// Whether the run was asked for with
    /// [`SchedulerHandle::run_now`](crate::SchedulerHandle::run_now) rather than planned by the
    /// schedule (its [`number`](Self::number) is then that of the planned tick it came before).
    pub requested: bool,
}

impl Tick {
    /// A run asked for now, out of schedule, numbered as the planned tick it comes before.
    pub(crate) fn on_request(number: u64, due: Instant, time: DateTime<Utc>) -> Self {
        Self {
            number,
            due,
            time,
            requested: true,
        }
    }
}

/// What a job does with the ticks that passed while its previous run was still going (or a run
/// asked for with [`SchedulerHandle::run_now`](crate::SchedulerHandle::run_now)), set with
/// [`Job::missed_ticks`](crate::Job::missed_ticks).
///
/// Ticks that passed while this node was down, or while the job was
/// [paused](crate::SchedulerHandle::pause), are not missed ticks: a scheduler knows nothing of
/// the time before it started, and a paused job resumes at its next tick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum MissedTicks {
    /// Pass them over (reported as [`RunOutcome::Missed`](crate::RunOutcome::Missed)) and wait
    /// for the next tick that is not in the past: the default, and what a fixed rate in Quartz
    /// does with `MISFIRE_INSTRUCTION_RESCHEDULE_NEXT_WITH_REMAINING_COUNT`.
    #[default]
    Skip,
    /// Run the latest of them at once, as a late run of that tick (its [`Tick::time`] is that
    /// tick's), and pass over the others; then go on with the next tick. What Spring's fixed
    /// rate does, once rather than once per missed tick.
    ///
    /// The lock keeps the catch-up run from overlapping another node's, not from running a
    /// tick that another node already ran and released: use it for a job on one node, or a job
    /// whose run is safe to repeat, or give its lock a `lock_at_least_for` that covers the
    /// delay.
    RunLatest,
}

/// Where a job is in its schedule.
pub(crate) struct Cursor {
    schedule: Schedule,
    missed_ticks: MissedTicks,
    next_number: u64,
    /// The last planned tick's due instant and wall time, for the next fixed-rate tick and the
    /// next cron search.
    last: Option<(Instant, DateTime<Utc>)>,
    /// What `last` and `next_number` were before the last plan, for [`Cursor::unrun`].
    before_last: (Option<(Instant, DateTime<Utc>)>, u64),
    /// The ticks passed before the next plan are passed over, not missed ([`Cursor::pass_over`]).
    passing_over: bool,
}

/// The next tick to wait for, and how many ticks were missed since the previous run.
pub(crate) struct Planned {
    pub(crate) tick: Tick,
    pub(crate) missed: u64,
}

/// Cron ticks missed while a run went on are counted up to this many; the count is for the
/// log, and a job whose run took a year must not spend a year's ticks counting.
const MAX_COUNTED_MISSED: u64 = 10_000;

impl Cursor {
    pub(crate) fn new(schedule: Schedule, missed_ticks: MissedTicks) -> Self {
        Self {
            schedule,
            missed_ticks,
            next_number: 0,
            last: None,
            before_last: (None, 0),
            passing_over: false,
        }
    }

    /// Plans the next tick after the previous run ended (now). `None` when a cron expression
    /// has no further instant.
    pub(crate) fn plan(&mut self, now: Instant, wall_now: SystemTime) -> Option<Planned> {
        let wall_now = DateTime::<Utc>::from(wall_now);
        let wall_at = |due: Instant| later(wall_now, due.saturating_duration_since(now));
        // The next tick, how many were missed before it, and the latest of those (its wall
        // time; the next tick's own when none was).
        let (due, time, missed, latest_missed) = match (&self.schedule.kind, self.last) {
            (
                Kind::FixedRate {
                    period,
                    first_after,
                    grid: Grid::Fleet,
                },
                last,
            ) => {
                let earliest = later(wall_now, *first_after);
                let mut next = fleet_tick_at_or_after(earliest, *period);
                let mut missed = 0;
                if let Some((_, last_time)) = last {
                    // Never the tick that just ran again, even if the wall clock stepped back.
                    let following = later(last_time, *period);
                    if next < following {
                        next = following;
                    }
                    let gap = (next - last_time).to_std().unwrap_or(Duration::ZERO);
                    let periods = gap.as_nanos() / period.as_nanos();
                    missed = u64::try_from(periods.saturating_sub(1)).unwrap_or(u64::MAX);
                }
                let ahead = (next - wall_now).to_std().unwrap_or(Duration::ZERO);
                (now + ahead, next, missed, earlier(next, *period))
            }
            (Kind::FixedRate { first_after, .. } | Kind::FixedDelay { first_after, .. }, None) => {
                let due = now + *first_after;
                let time = wall_at(due);
                (due, time, 0, time)
            }
            (Kind::FixedRate { period, .. }, Some((last_due, _))) => {
                let mut due = last_due + *period;
                let mut missed = 0;
                if due < now {
                    let behind = now.duration_since(due);
                    // Whole periods behind, rounded up: the first grid tick not in the past.
                    let periods = behind.as_nanos().div_ceil(period.as_nanos());
                    missed = u64::try_from(periods).unwrap_or(u64::MAX);
                    due += period.saturating_mul(u32::try_from(periods).unwrap_or(u32::MAX));
                }
                let time = wall_at(due);
                (due, time, missed, earlier(time, *period))
            }
            (Kind::FixedDelay { delay, .. }, Some(_)) => {
                let due = now + *delay;
                let time = wall_at(due);
                (due, time, 0, time)
            }
            (Kind::Cron { cron, zone }, last) => {
                let after = last.map(|(_, time)| time).unwrap_or(wall_now);
                let mut next = cron.next_after(zone, after)?;
                let mut missed = 0;
                let mut latest_missed = next;
                while next < wall_now {
                    missed += 1;
                    latest_missed = next;
                    if missed >= MAX_COUNTED_MISSED {
                        next = cron.next_after(zone, wall_now)?;
                        break;
                    }
                    next = cron.next_after(zone, next)?;
                }
                let ahead = (next - wall_now).to_std().unwrap_or(Duration::ZERO);
                (now + ahead, next, missed, latest_missed)
            }
        };
        let passing_over = std::mem::take(&mut self.passing_over);
        self.before_last = (self.last, self.next_number);
        let (due, time, missed) = match self.missed_ticks {
            // Passed over (a pause): numbered, neither reported nor caught up.
            _ if passing_over => {
                self.next_number += missed;
                (due, time, 0)
            }
            MissedTicks::RunLatest if missed > 0 => {
                // The latest missed tick, due as long before the next as its wall time is.
                let before = (time - latest_missed).to_std().unwrap_or(Duration::ZERO);
                let late = due.checked_sub(before).unwrap_or(now);
                (late, latest_missed, missed - 1)
            }
            _ => (due, time, missed),
        };
        self.next_number += missed;
        let tick = Tick {
            number: self.next_number,
            due,
            time,
            requested: false,
        };
        self.next_number += 1;
        self.last = Some((due, time));
        Some(Planned { tick, missed })
    }

    /// The last planned tick did not run (its time passed during a run asked for out of
    /// schedule): the next plan counts it among the missed ticks, and may catch it up.
    pub(crate) fn unrun(&mut self) {
        (self.last, self.next_number) = self.before_last;
    }

    /// The ticks up to the next plan are passed over, not missed (the job was paused): the next
    /// plan neither reports them nor catches one up.
    pub(crate) fn pass_over(&mut self) {
        self.passing_over = true;
    }
}

/// The first instant `k × period` since the UNIX epoch that is not before `at`: the fleet's
/// grid, which every node computes alike from its wall clock.
fn fleet_tick_at_or_after(at: DateTime<Utc>, period: Duration) -> DateTime<Utc> {
    const NANOS_PER_SECOND: i128 = 1_000_000_000;
    let since_epoch =
        i128::from(at.timestamp()) * NANOS_PER_SECOND + i128::from(at.timestamp_subsec_nanos());
    let period = i128::try_from(period.as_nanos()).unwrap_or(i128::MAX);
    // Rounded up, before the epoch as after it.
    let periods = since_epoch.div_euclid(period) + i128::from(since_epoch.rem_euclid(period) != 0);
    periods
        .checked_mul(period)
        .and_then(|nanos| {
            let seconds = i64::try_from(nanos.div_euclid(NANOS_PER_SECOND)).ok()?;
            let nanos = u32::try_from(nanos.rem_euclid(NANOS_PER_SECOND)).ok()?;
            DateTime::from_timestamp(seconds, nanos)
        })
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// `at - by`, or the earliest representable instant.
fn earlier(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(by)
        .ok()
        .and_then(|by| at.checked_sub_signed(by))
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// `at + by`, or the latest representable instant.
fn later(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    chrono::Duration::from_std(by)
        .ok()
        .and_then(|by| at.checked_add_signed(by))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}
