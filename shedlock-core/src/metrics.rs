//! Counters and histograms of every locked run, through the [`metrics`](https://docs.rs/metrics)
//! facade: the application installs the recorder (Prometheus, StatsD, OpenTelemetry, ...), as it
//! does for its own metrics.
//!
//! Recorded only with this crate's `metrics` feature (`shedlock`'s `metrics` feature turns it
//! on), and then only when a recorder is installed: without one, each call is a check of a
//! global and nothing more.
//!
//! | Name | Kind | Labels | What |
//! |---|---|---|---|
//! | `shedlock_locks_acquired_total` | counter | `lock` | locks taken (a run started) |
//! | `shedlock_locks_skipped_total` | counter | `lock` | attempts that found the lock held elsewhere |
//! | `shedlock_lock_failures_total` | counter | `lock`, `kind` | attempts that failed, so the task did not run; `kind` is the [`ErrorKind`] (`unreachable`, `outcome_unknown`, ...) |
//! | `shedlock_locks_lost_total` | counter | `lock` | runs whose lock was gone before they released it (expired, freed by an operator, or lost by keep-alive) |
//! | `shedlock_release_failures_total` | counter | `lock`, `kind` | releases that failed, so the lock stays until `lock_at_most_for` |
//! | `shedlock_acquire_seconds` | histogram | `lock`, `outcome` | how long an attempt took to be answered: `acquired`, `skipped` or `failed` |
//! | `shedlock_run_seconds` | histogram | `lock` | how long the task ran (a panic included) |
//! | `shedlock_held_seconds` | histogram | `lock` | how long this node held the lock: from the acquire's answer to the release's (a `lock_at_least_for` keeps the record longer) |
//! | `shedlock_job_runs_total` | counter | `job`, `outcome` | ticks of a scheduler's job by outcome: `executed`, `failed`, `skipped`, `lock_failed`, `invalid_lock`, `panicked`, `stopped` |
//! | `shedlock_job_missed_ticks_total` | counter | `job` | ticks a scheduler's job missed while its previous run went on |
//!
//! A run on a lock this task already holds (a nested use of the same name) takes no lock, so it
//! is not counted.
//!
//! The `lock` label is the lock's name. A job that computes a name per run (per hour, per
//! tenant) makes a series per name: with a Prometheus recorder, give such names few values, or
//! filter the label out in the exporter.

use std::time::Duration;

use crate::error::ErrorKind;

/// Locks taken: a counter labelled `lock`.
pub const LOCKS_ACQUIRED: &str = "shedlock_locks_acquired_total";
/// Attempts that found the lock held elsewhere: a counter labelled `lock`.
pub const LOCKS_SKIPPED: &str = "shedlock_locks_skipped_total";
/// Attempts that failed (the task did not run): a counter labelled `lock` and `kind`.
pub const LOCK_FAILURES: &str = "shedlock_lock_failures_total";
/// Runs whose lock was gone before they released it: a counter labelled `lock`.
pub const LOCKS_LOST: &str = "shedlock_locks_lost_total";
/// Releases that failed: a counter labelled `lock` and `kind`.
pub const RELEASE_FAILURES: &str = "shedlock_release_failures_total";
/// How long an attempt took to be answered, in seconds: a histogram labelled `lock` and
/// `outcome`.
pub const ACQUIRE_SECONDS: &str = "shedlock_acquire_seconds";
/// How long the task ran, in seconds: a histogram labelled `lock`.
pub const RUN_SECONDS: &str = "shedlock_run_seconds";
/// How long this node held the lock, in seconds: a histogram labelled `lock`.
pub const HELD_SECONDS: &str = "shedlock_held_seconds";
/// Ticks of a scheduler's job by outcome: a counter labelled `job` and `outcome`.
pub const JOB_RUNS: &str = "shedlock_job_runs_total";
/// Ticks a scheduler's job missed: a counter labelled `job`.
pub const JOB_MISSED_TICKS: &str = "shedlock_job_missed_ticks_total";

/// Gives the installed recorder each metric's unit and description (Prometheus's `# HELP`
/// lines). Call it once, after installing the recorder; recording works without it.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_counter!(LOCKS_ACQUIRED, "Locks taken: runs started");
    describe_counter!(
        LOCKS_SKIPPED,
        "Attempts that found the lock held by another node"
    );
    describe_counter!(
        LOCK_FAILURES,
        "Attempts that failed, so the task did not run, by error kind"
    );
    describe_counter!(
        LOCKS_LOST,
        "Runs whose lock was gone before they released it"
    );
    describe_counter!(
        RELEASE_FAILURES,
        "Releases that failed; the lock stays until lock_at_most_for"
    );
    describe_histogram!(
        ACQUIRE_SECONDS,
        Unit::Seconds,
        "How long a lock attempt took to be answered"
    );
    describe_histogram!(RUN_SECONDS, Unit::Seconds, "How long the locked task ran");
    describe_histogram!(
        HELD_SECONDS,
        Unit::Seconds,
        "How long this node held the lock, acquired to released"
    );
    describe_counter!(JOB_RUNS, "Ticks of a scheduled job, by outcome");
    describe_counter!(
        JOB_MISSED_TICKS,
        "Ticks a scheduled job missed while its previous run went on"
    );
}

/// What an attempt to take a lock came to, as the `outcome` label says it.
#[derive(Clone, Copy)]
#[cfg_attr(
    not(feature = "metrics"),
    expect(dead_code, reason = "read only when the feature records")
)]
pub(crate) enum Attempt {
    Acquired,
    Skipped,
    Failed(ErrorKind),
}

/// Records one attempt on `lock` and how long it took to be answered.
pub(crate) fn attempted(lock: &str, attempt: Attempt, took: Duration) {
    #[cfg(feature = "metrics")]
    {
        let lock = lock.to_owned();
        let outcome = match attempt {
            Attempt::Acquired => {
                metrics::counter!(LOCKS_ACQUIRED, "lock" => lock.clone()).increment(1);
                "acquired"
            }
            Attempt::Skipped => {
                metrics::counter!(LOCKS_SKIPPED, "lock" => lock.clone()).increment(1);
                "skipped"
            }
            Attempt::Failed(kind) => {
                metrics::counter!(LOCK_FAILURES, "lock" => lock.clone(), "kind" => label(kind))
                    .increment(1);
                "failed"
            }
        };
        metrics::histogram!(ACQUIRE_SECONDS, "lock" => lock, "outcome" => outcome)
            .record(took.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, attempt, took);
}

/// Records a run that was refused before an attempt was sent (keep-alive on a provider that
/// cannot extend): a failure without a latency.
pub(crate) fn refused(lock: &str, kind: ErrorKind) {
    #[cfg(feature = "metrics")]
    metrics::counter!(LOCK_FAILURES, "lock" => lock.to_owned(), "kind" => label(kind)).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, kind);
}

/// How a run that held its lock ended.
#[cfg_attr(
    not(feature = "metrics"),
    expect(dead_code, reason = "read only when the feature records")
)]
pub(crate) struct Held {
    /// How long the task ran.
    pub(crate) ran: Duration,
    /// From the acquire's answer to the release's.
    pub(crate) held: Duration,
    /// The lock was gone before the release (or keep-alive had lost it).
    pub(crate) lost: bool,
    /// The release failed with this kind of error.
    pub(crate) release_failed: Option<ErrorKind>,
}

/// Records how a run that held `lock` ended.
pub(crate) fn released(lock: &str, run: &Held) {
    #[cfg(feature = "metrics")]
    {
        let lock = lock.to_owned();
        metrics::histogram!(RUN_SECONDS, "lock" => lock.clone()).record(run.ran.as_secs_f64());
        metrics::histogram!(HELD_SECONDS, "lock" => lock.clone()).record(run.held.as_secs_f64());
        if run.lost {
            metrics::counter!(LOCKS_LOST, "lock" => lock.clone()).increment(1);
        }
        if let Some(kind) = run.release_failed {
            metrics::counter!(RELEASE_FAILURES, "lock" => lock, "kind" => label(kind)).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (lock, run);
}

/// An error kind as a label value: its words joined by `_` (`outcome_unknown`).
#[cfg(feature = "metrics")]
fn label(kind: ErrorKind) -> String {
    kind.as_str().replace(' ', "_")
}
