//! Why a job or the scheduler's defaults were refused.

use std::time::Duration;

use shedlock_core::ConfigurationError;
use thiserror::Error;

/// A job, a schedule or the scheduler's defaults broke a rule; nothing was scheduled.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum SchedulerError {
    /// The cron expression does not parse.
    #[error("cron expression {expression:?} is invalid: {message}")]
    InvalidCron {
        /// The expression as given.
        expression: String,
        /// What is wrong with it.
        message: String,
    },
    /// A job needs a name: logs, reports and (by default) its lock are named after it.
    #[error("a job name must not be empty")]
    EmptyJobName,
    /// Two jobs of one scheduler share a name, so their logs and reports could not be told apart.
    #[error("job {job:?} is already scheduled; job names must be unique in a scheduler")]
    DuplicateJob {
        /// The name used twice.
        job: String,
    },
    /// A fixed rate or delay of zero would run the job in a busy loop.
    #[error("job {job:?}: the {what} must be greater than zero")]
    ZeroPeriod {
        /// The job.
        job: String,
        /// Which duration was zero.
        what: &'static str,
    },
    /// The scheduler's default `lock_at_most_for` is zero, or its `lock_at_least_for` exceeds it.
    #[error(
        "scheduler defaults: lock_at_most_for ({lock_at_most_for:?}) must be greater than zero and at least lock_at_least_for ({lock_at_least_for:?})"
    )]
    InvalidDefaults {
        /// The default maximum hold.
        lock_at_most_for: Duration,
        /// The default minimum hold.
        lock_at_least_for: Duration,
    },
    /// The job's lock configuration (its own values, or the defaults it inherits) breaks a rule
    /// of [`LockConfiguration`](shedlock_core::LockConfiguration).
    #[error("job {job:?}: {source}")]
    InvalidLock {
        /// The job.
        job: String,
        /// The rule broken.
        #[source]
        source: ConfigurationError,
    },
    /// The job's lock name is longer than the provider stores.
    #[error(
        "job {job:?}: lock name {name:?} is {chars} characters long and the provider stores at most {max}"
    )]
    LockNameTooLong {
        /// The job.
        job: String,
        /// The lock name.
        name: String,
        /// Its length in characters.
        chars: usize,
        /// The provider's limit.
        max: usize,
    },
    /// Keep-alive extends the lock while the job runs, and the provider cannot extend.
    #[error("job {job:?}: keep-alive needs a provider that can extend locks, and this one cannot")]
    KeepAliveUnsupported {
        /// The job.
        job: String,
    },
    /// A job of that name was removed and its last run is still going: adding it now could
    /// overlap that run.
    #[error(
        "job {job:?} was removed and its last run is still going; add it again once that run has ended"
    )]
    RemovedJobRunning {
        /// The job.
        job: String,
    },
    /// No job of that name is scheduled: never added, or removed.
    #[error("no job named {job:?} is scheduled")]
    UnknownJob {
        /// The name asked for.
        job: String,
    },
    /// A run of the job is in progress on this node, and runs of one job never overlap there.
    #[error("job {job:?} is running now; ask again when its run has ended")]
    JobRunning {
        /// The job.
        job: String,
    },
    /// Jobs run as tokio tasks, so a job must be added from inside a tokio runtime.
    #[error("job {job:?}: add jobs from inside a tokio runtime (no runtime is running here)")]
    NoRuntime {
        /// The job.
        job: String,
    },
}
