//! A job: a name, a schedule, an async function and how its runs are locked.

use std::fmt;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use shedlock_core::CancellationToken;

use crate::schedule::{MissedTicks, Schedule, Tick};

/// What a job's function may return: `()`, or a `Result` whose error is reported as
/// [`RunOutcome::Failed`](crate::RunOutcome::Failed) and logged with the job's name.
pub trait JobOutput: Send + 'static {
    /// The run's result, its error rendered for the log and the report.
    fn into_result(self) -> Result<(), String>;
}

impl JobOutput for () {
    fn into_result(self) -> Result<(), String> {
        Ok(())
    }
}

impl<E: fmt::Display + Send + 'static> JobOutput for Result<(), E> {
    fn into_result(self) -> Result<(), String> {
        self.map_err(|error| error.to_string())
    }
}

pub(crate) type RunFuture = Pin<Box<dyn Future<Output = Result<(), String>> + Send>>;
pub(crate) type JobFn = Arc<dyn Fn(RunContext) -> RunFuture + Send + Sync>;
pub(crate) type LockNameFn = Arc<dyn Fn(&Tick) -> String + Send + Sync>;

/// What a run knows about itself, handed to the job's function.
#[derive(Debug, Clone)]
pub struct RunContext {
    pub(crate) job: Arc<str>,
    pub(crate) lock_name: String,
    pub(crate) tick: Tick,
    pub(crate) lock_lost: CancellationToken,
    pub(crate) shutdown: CancellationToken,
}

impl RunContext {
    /// The job's name.
    pub fn job(&self) -> &str {
        &self.job
    }

    /// The name of the lock this run holds.
    pub fn lock_name(&self) -> &str {
        &self.lock_name
    }

    /// The tick this run is for.
    pub fn tick(&self) -> &Tick {
        &self.tick
    }

    /// Cancelled when keep-alive finds the lock lost (see [`Job::keep_alive`]): another node
    /// may now run the job, so stop at the next safe point. Never cancelled for a job without
    /// keep-alive.
    pub fn lock_lost(&self) -> &CancellationToken {
        &self.lock_lost
    }

    /// Cancelled when the scheduler starts shutting down, so a long run can stop early instead
    /// of being cut off at the shutdown limit.
    pub fn shutdown(&self) -> &CancellationToken {
        &self.shutdown
    }
}

/// Which lock a run takes.
#[derive(Clone)]
pub(crate) enum LockName {
    /// The job's own name.
    JobName,
    Fixed(String),
    /// Computed per run, from the tick.
    Computed(LockNameFn),
}

/// A job to [`add`](crate::Scheduler::add) to a [`Scheduler`](crate::Scheduler).
///
/// Each run takes the job's lock first and is skipped when another node holds it. The lock is
/// named after the job unless [`lock_name`](Self::lock_name) or
/// [`lock_name_with`](Self::lock_name_with) says otherwise; `lock_at_most_for` and
/// `lock_at_least_for` come from the scheduler's [`LockDefaults`](crate::LockDefaults) unless
/// set here.
///
/// ```
/// use std::time::Duration;
/// use shedlock_scheduler::{Job, RunContext, Schedule, Tz};
///
/// let report = Job::new(
///     "nightly-report",
///     Schedule::cron("0 0 3 * * *", Tz::Europe__Paris)?,
///     |run: RunContext| async move {
///         println!("report for {}", run.tick().time);
///         Ok::<(), std::io::Error>(())
///     },
/// )
/// .lock_at_most_for(Duration::from_secs(30 * 60))
/// .lock_at_least_for(Duration::from_secs(60));
/// # Ok::<(), shedlock_scheduler::SchedulerError>(())
/// ```
#[derive(Clone)]
pub struct Job {
    pub(crate) name: String,
    pub(crate) schedule: Schedule,
    pub(crate) lock_name: LockName,
    pub(crate) lock_at_most_for: Option<Duration>,
    pub(crate) lock_at_least_for: Option<Duration>,
    pub(crate) keep_alive: bool,
    pub(crate) missed_ticks: MissedTicks,
    pub(crate) run: JobFn,
}

impl fmt::Debug for Job {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let lock_name = match &self.lock_name {
            LockName::JobName => self.name.as_str(),
            LockName::Fixed(name) => name.as_str(),
            LockName::Computed(_) => "<computed per run>",
        };
        f.debug_struct("Job")
            .field("name", &self.name)
            .field("schedule", &self.schedule)
            .field("lock_name", &lock_name)
            .field("lock_at_most_for", &self.lock_at_most_for)
            .field("lock_at_least_for", &self.lock_at_least_for)
            .field("keep_alive", &self.keep_alive)
            .field("missed_ticks", &self.missed_ticks)
            .finish_non_exhaustive()
    }
}

impl Job {
    /// A job named `name` that runs `run` on `schedule`.
    ///
    /// `run` is called once per run with a [`RunContext`] and returns a future of `()` or of
    /// `Result<(), E>` with a displayable `E`.
    pub fn new<F, Fut>(name: impl Into<String>, schedule: Schedule, run: F) -> Self
    where
        F: Fn(RunContext) -> Fut + Send + Sync + 'static,
        Fut: Future + Send + 'static,
        Fut::Output: JobOutput,
    {
        let run: JobFn = Arc::new(move |context| {
            let future = run(context);
            Box::pin(async move { future.await.into_result() })
        });
        Self {
            name: name.into(),
            schedule,
            lock_name: LockName::JobName,
            lock_at_most_for: None,
            lock_at_least_for: None,
            keep_alive: false,
            missed_ticks: MissedTicks::Skip,
            run,
        }
    }

    /// Takes the lock `name` instead of the job's name, for example to share one lock between
    /// jobs, or with a Java ShedLock service whose `@SchedulerLock(name = ...)` it is.
    pub fn lock_name(mut self, name: impl Into<String>) -> Self {
        self.lock_name = LockName::Fixed(name.into());
        self
    }

    /// Computes the lock name for each run from its tick, for locks per tenant, per shard or
    /// per period. A name that breaks a rule is logged with the job's name and that run is
    /// skipped ([`RunOutcome::InvalidLock`](crate::RunOutcome::InvalidLock)).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock_scheduler::{Job, Schedule};
    /// # let shard = 3;
    /// let job = Job::new("reindex", Schedule::fixed_rate(Duration::from_secs(60)), |_| async {})
    ///     .lock_name_with(move |tick| format!("reindex-shard-{shard}-{}", tick.time.format("%H")));
    /// ```
    pub fn lock_name_with(
        mut self,
        name: impl Fn(&Tick) -> String + Send + Sync + 'static,
    ) -> Self {
        self.lock_name = LockName::Computed(Arc::new(name));
        self
    }

    /// How long the lock is held at most if this node dies mid-run; overrides the scheduler's
    /// default.
    pub fn lock_at_most_for(mut self, duration: Duration) -> Self {
        self.lock_at_most_for = Some(duration);
        self
    }

    /// How long the lock is held at least, so a node whose clock or schedule is a little late
    /// skips this tick too; overrides the scheduler's default.
    pub fn lock_at_least_for(mut self, duration: Duration) -> Self {
        self.lock_at_least_for = Some(duration);
        self
    }

    /// Extends the lock every third of `lock_at_most_for` while a run goes on, so a run may
    /// outlast `lock_at_most_for` without another node starting the job meanwhile. If the lock
    /// is lost anyway (the backend is unreachable until it expires),
    /// [`RunContext::lock_lost`] is cancelled. Needs a provider that can extend.
    pub fn keep_alive(mut self) -> Self {
        self.keep_alive = true;
        self
    }

    /// What to do with the ticks that pass while a run is still going:
    /// [`MissedTicks::Skip`] them (the default), or run the latest of them at once
    /// ([`MissedTicks::RunLatest`]).
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock_scheduler::{Job, MissedTicks, Schedule};
    /// // A sync that must not wait a whole hour when one run took longer than the hour.
    /// let job = Job::new("sync", Schedule::fixed_rate(Duration::from_secs(3600)), |_| async {})
    ///     .missed_ticks(MissedTicks::RunLatest);
    /// ```
    pub fn missed_ticks(mut self, missed_ticks: MissedTicks) -> Self {
        self.missed_ticks = missed_ticks;
        self
    }
}
