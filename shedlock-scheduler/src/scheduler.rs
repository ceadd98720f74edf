//! The scheduler: one tokio task per job, each run under its lock, panics contained.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures_util::FutureExt;
use shedlock_core::raw::Rfc3339;
use shedlock_core::{
    CancellationToken, Clock, ErrorChain, ErrorKind, LockConfiguration, LockError, LockHolder,
    LockProvider, LockingTaskExecutor, SystemClock, TaskOutcome,
};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument, error, info, info_span, warn};

use crate::error::SchedulerError;
use crate::job::{Job, JobFn, LockName, RunContext};
use crate::schedule::{Cursor, MissedTicks, Tick};

/// The lock bounds of every job that does not set its own (ShedLock's
/// `defaultLockAtMostFor` and `defaultLockAtLeastFor`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockDefaults {
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
}

impl LockDefaults {
    /// Defaults holding a lock at most `lock_at_most_for` (if the node dies mid-run) and at
    /// least `lock_at_least_for`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock_scheduler::LockDefaults;
    /// let defaults = LockDefaults::new(Duration::from_secs(600), Duration::from_secs(5))?;
    /// assert!(LockDefaults::new(Duration::ZERO, Duration::ZERO).is_err());
    /// # Ok::<(), shedlock_scheduler::SchedulerError>(())
    /// ```
    pub fn new(
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<Self, SchedulerError> {
        if lock_at_most_for.is_zero() || lock_at_least_for > lock_at_most_for {
            return Err(SchedulerError::InvalidDefaults {
                lock_at_most_for,
                lock_at_least_for,
            });
        }
        Ok(Self {
            lock_at_most_for,
            lock_at_least_for,
        })
    }

    /// The default maximum hold.
    pub fn lock_at_most_for(&self) -> Duration {
        self.lock_at_most_for
    }

    /// The default minimum hold.
    pub fn lock_at_least_for(&self) -> Duration {
        self.lock_at_least_for
    }
}

/// What became of one tick of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunOutcome {
    /// The lock was taken and the job ran to completion.
    Executed,
    /// The lock was taken and the job returned an error (the lock was released).
    Failed {
        /// The job's error, displayed.
        error: String,
    },
    /// Another node holds the lock; the job did not run here.
    Skipped {
        /// The holder, when the backend said who it is.
        holder: Option<LockHolder>,
    },
    /// Taking the lock failed, so whether another node holds it is unknown: the job did not
    /// run (fail closed).
    LockFailed {
        /// What kind of failure it was: [`ErrorKind::retryable`] says whether the next tick
        /// may fare better.
        kind: ErrorKind,
        /// The provider's error.
        error: String,
    },
    /// The run's lock name or configuration breaks a rule (a computed name that is empty or
    /// too long): the job did not run.
    InvalidLock {
        /// The rule broken.
        error: String,
    },
    /// The job (or its lock-name function) panicked. The lock was released and the scheduler
    /// goes on.
    Panicked {
        /// The panic's message.
        message: String,
    },
    /// The run was still going when [`Scheduler::shutdown`]'s limit passed: it was stopped at
    /// its next `.await`, and its lock was kept, to free itself at `lock_at_most_for` (work the
    /// job handed elsewhere may still be running).
    Stopped,
    /// The previous run outlasted this many ticks, which were not run; this report's tick is
    /// the next one planned (with [`MissedTicks::RunLatest`], the late run of the latest missed
    /// tick, not counted here).
    Missed {
        /// How many ticks were passed over.
        ticks: u64,
    },
}

impl RunOutcome {
    /// The outcome in one word, as metrics label it and the HTTP view shows it: `executed`,
    /// `failed`, `skipped`, `lock_failed`, `invalid_lock`, `panicked`, `stopped` or `missed`.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunOutcome::Executed => "executed",
            RunOutcome::Failed { .. } => "failed",
            RunOutcome::Skipped { .. } => "skipped",
            RunOutcome::LockFailed { .. } => "lock_failed",
            RunOutcome::InvalidLock { .. } => "invalid_lock",
            RunOutcome::Panicked { .. } => "panicked",
            RunOutcome::Stopped => "stopped",
            RunOutcome::Missed { .. } => "missed",
        }
    }
}

/// One tick of a job and what became of it, handed to the
/// [`on_run`](SchedulerBuilder::on_run) observer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// The job's name.
    pub job: String,
    /// The lock the run asked for (`None` for [`RunOutcome::Missed`], and when computing the
    /// name panicked).
    pub lock_name: Option<String>,
    /// The tick.
    pub tick: Tick,
    /// What happened.
    pub outcome: RunOutcome,
    /// Whether keep-alive found the lock lost while the job ran.
    pub lock_lost: bool,
}

type Observer = Arc<dyn Fn(&RunReport) + Send + Sync>;

/// Configures a [`Scheduler`] beyond its provider and defaults.
pub struct SchedulerBuilder {
    provider: Arc<dyn LockProvider>,
    defaults: LockDefaults,
    clock: Arc<dyn Clock>,
    observer: Option<Observer>,
}

impl fmt::Debug for SchedulerBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerBuilder")
            .field("provider", &self.provider)
            .field("defaults", &self.defaults)
            .field("clock", &self.clock)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl SchedulerBuilder {
    /// The wall clock cron expressions are evaluated against (the system clock by default).
    /// Tests give one that follows tokio's paused time.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Calls `observer` with every [`RunReport`], after it is logged: for metrics, or for tests.
    /// It runs on the job's task, so it should be quick.
    pub fn on_run(mut self, observer: impl Fn(&RunReport) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The scheduler, with no jobs yet.
    pub fn build(self) -> Scheduler {
        let provider = self.provider;
        Scheduler {
            shared: Arc::new(Shared {
                executor: LockingTaskExecutor::from_arc(provider),
                defaults: self.defaults,
                clock: self.clock,
                observer: self.observer,
                stop: CancellationToken::new(),
                abort: CancellationToken::new(),
                jobs: Mutex::new(BTreeMap::new()),
            }),
            tasks: JoinSet::new(),
        }
    }
}

/// What [`Scheduler::shutdown`] found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// The jobs whose runs were still going at the limit, in name order. They were stopped at
    /// their next `.await` and their locks released.
    pub stopped: Vec<String>,
}

/// Runs [`Job`]s on their schedules, each run under its lock.
///
/// Each job has its own tokio task, and a job's runs never overlap on one node: a tick that
/// comes while the previous run is still going is missed (see [`Schedule`](crate::Schedule)).
/// Different jobs run concurrently. Each run:
///
/// - takes the job's lock through a [`LockingTaskExecutor`], and is skipped when another node
///   holds it;
/// - does not run when taking the lock fails (fail closed);
/// - releases the lock when it ends, returns an error, or panics; a panic is logged with the
///   job's name and neither the scheduler nor other jobs notice.
///
/// Every tick is logged with `tracing` (fields `job`, `lock`, `tick`) and handed to the
/// [`on_run`](SchedulerBuilder::on_run) observer.
///
/// [`shutdown`](Self::shutdown) stops gracefully. Dropping the scheduler aborts its tasks at
/// once: a run cut off that way keeps its lock until `lock_at_most_for`, as if the node had
/// died.
///
/// ```
/// use std::time::Duration;
/// use shedlock_memory::MemoryLockProvider;
/// use shedlock_scheduler::{Job, LockDefaults, Schedule, Scheduler, Tz};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let defaults = LockDefaults::new(Duration::from_secs(10 * 60), Duration::from_secs(5))?;
/// let mut scheduler = Scheduler::new(MemoryLockProvider::new(), defaults);
/// scheduler.add(Job::new(
///     "send-newsletter",
///     Schedule::cron("0 0 8 * * MON-FRI", Tz::Europe__London)?,
///     |_run| async { /* send it */ },
/// ))?;
/// scheduler.add(
///     Job::new("sync", Schedule::fixed_delay(Duration::from_secs(30)), |run| async move {
///         // Stop early when asked to; the shutdown limit cuts the run off otherwise.
///         if run.shutdown().is_cancelled() { return; }
///         /* sync */
///     })
///     .lock_at_most_for(Duration::from_secs(60)),
/// )?;
/// // ... until the service is told to stop:
/// let report = scheduler.shutdown(Duration::from_secs(30)).await;
/// assert!(report.stopped.is_empty());
/// # Ok(()) }
/// ```
pub struct Scheduler {
    shared: Arc<Shared>,
    tasks: JoinSet<()>,
}

impl fmt::Debug for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Scheduler")
            .field("provider", self.shared.executor.provider())
            .field("defaults", &self.shared.defaults)
            .field("jobs", &self.shared.job_names())
            .finish_non_exhaustive()
    }
}

struct Shared {
    executor: LockingTaskExecutor,
    defaults: LockDefaults,
    clock: Arc<dyn Clock>,
    observer: Option<Observer>,
    /// Cancelled at shutdown: no new run starts.
    stop: CancellationToken,
    /// Cancelled at the shutdown limit: running runs are stopped.
    abort: CancellationToken,
    /// Every job with a task, by name. A removed job stays until its task ends, after the run
    /// it had in progress.
    jobs: Mutex<BTreeMap<Arc<str>, Arc<Control>>>,
}

/// What a [`SchedulerHandle`] changes in a job while it is scheduled, and what it reads back.
struct Control {
    /// `true` while paused: planned ticks are passed over.
    paused: watch::Sender<bool>,
    /// Cancelled by [`SchedulerHandle::remove`]: the job's task ends after its run in progress.
    removed: CancellationToken,
    /// Woken by [`SchedulerHandle::run_now`]; `JobState::run_requested` says whether the wake
    /// is still wanted.
    requested: Notify,
    state: Mutex<JobState>,
}

#[derive(Default)]
struct JobState {
    running: bool,
    run_requested: bool,
    next_run: Option<DateTime<Utc>>,
    last: Option<RunReport>,
}

impl Control {
    fn state(&self) -> std::sync::MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether a run asked for is still wanted; it is taken, so it runs once.
    fn take_request(&self) -> bool {
        std::mem::take(&mut self.state().run_requested)
    }
}

/// A job as the scheduler runs it, its lock bounds resolved against the defaults.
struct ScheduledJob {
    name: Arc<str>,
    lock_name: LockName,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
    keep_alive: bool,
    missed_ticks: MissedTicks,
    run: JobFn,
}

impl Scheduler {
    /// A scheduler taking its locks from `provider`, with `defaults` for every job that does
    /// not set its own lock bounds.
    pub fn new(provider: impl LockProvider + 'static, defaults: LockDefaults) -> Self {
        Self::builder(provider, defaults).build()
    }

    /// A scheduler with a wall clock or a run observer of its own.
    pub fn builder(
        provider: impl LockProvider + 'static,
        defaults: LockDefaults,
    ) -> SchedulerBuilder {
        SchedulerBuilder {
            provider: Arc::new(provider),
            defaults,
            clock: Arc::new(SystemClock),
            observer: None,
        }
    }

    /// The executor the scheduler's runs take their locks through. A job that runs a lock of
    /// its own inside a run uses this one (or a clone), so a nested use of the run's own lock
    /// name is recognised as re-entrant.
    pub fn executor(&self) -> &LockingTaskExecutor {
        &self.shared.executor
    }

    /// A handle to the jobs while they are scheduled: list them with their next run and last
    /// outcome, pause, resume, remove or run one now. It may be cloned and handed to other
    /// tasks (an admin endpoint, a signal handler).
    pub fn handle(&self) -> SchedulerHandle {
        SchedulerHandle {
            shared: self.shared.clone(),
        }
    }

    /// Schedules `job`, whose first tick is planned at once.
    ///
    /// Refused, with nothing scheduled, when the job's name is empty or already used here (a
    /// removed job's name is free once the run it had in progress has ended), a period is zero, its lock bounds (its own or the defaults) break a rule of
    /// [`LockConfiguration`], its fixed lock name is longer than the provider stores, it asks
    /// for keep-alive on a provider that cannot extend, or no tokio runtime is running. A name
    /// computed per run is checked at each run.
    pub fn add(&mut self, job: Job) -> Result<(), SchedulerError> {
        if job.name.is_empty() {
            return Err(SchedulerError::EmptyJobName);
        }
        if let Some(known) = self.shared.jobs().get(job.name.as_str()) {
            return Err(if known.removed.is_cancelled() {
                SchedulerError::RemovedJobRunning { job: job.name }
            } else {
                SchedulerError::DuplicateJob { job: job.name }
            });
        }
        job.schedule.check(&job.name)?;
        let lock_at_most_for = job
            .lock_at_most_for
            .unwrap_or(self.shared.defaults.lock_at_most_for);
        let lock_at_least_for = job
            .lock_at_least_for
            .unwrap_or(self.shared.defaults.lock_at_least_for);
        let fixed_name = match &job.lock_name {
            LockName::JobName => Some(job.name.as_str()),
            LockName::Fixed(name) => Some(name.as_str()),
            LockName::Computed(_) => None,
        };
        // A computed name is checked per run; its bounds are checked here under the job's name.
        LockConfiguration::new(
            fixed_name.unwrap_or(&job.name),
            lock_at_most_for,
            lock_at_least_for,
        )
        .map_err(|source| SchedulerError::InvalidLock {
            job: job.name.clone(),
            source,
        })?;
        let capabilities = self.shared.executor.provider().capabilities();
        if let (Some(name), Some(max)) = (fixed_name, capabilities.max_name_chars) {
            let chars = name.chars().count();
            if chars > max {
                return Err(SchedulerError::LockNameTooLong {
                    job: job.name.clone(),
                    name: name.to_owned(),
                    chars,
                    max,
                });
            }
        }
        if let Some(period) = job.schedule.period()
            && lock_at_least_for >= period
        {
            warn!(
                job = %job.name,
                ?period,
                ?lock_at_least_for,
                "lock_at_least_for is not shorter than the period: each tick finds the lock \
                 still held by the previous run, so the job runs at most every other period; \
                 make lock_at_least_for shorter than the period"
            );
        }
        if job.keep_alive && !capabilities.extend {
            return Err(SchedulerError::KeepAliveUnsupported { job: job.name });
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Err(SchedulerError::NoRuntime { job: job.name });
        };
        let scheduled = ScheduledJob {
            name: Arc::from(job.name.as_str()),
            lock_name: job.lock_name,
            lock_at_most_for,
            lock_at_least_for,
            keep_alive: job.keep_alive,
            missed_ticks: job.missed_ticks,
            run: job.run,
        };
        let control = Arc::new(Control {
            paused: watch::Sender::new(false),
            removed: CancellationToken::new(),
            requested: Notify::new(),
            state: Mutex::new(JobState::default()),
        });
        self.shared
            .jobs()
            .insert(scheduled.name.clone(), control.clone());
        let cursor = Cursor::new(job.schedule, scheduled.missed_ticks);
        self.tasks.spawn_on(
            drive(self.shared.clone(), scheduled, cursor, control),
            &runtime,
        );
        Ok(())
    }

    /// Stops gracefully: no run starts any more, [`RunContext::shutdown`] is cancelled, and
    /// runs in progress get up to `limit` to finish (and release their locks as usual). Runs
    /// still going then are stopped at their next `.await` and their jobs listed in the report.
    ///
    /// A stopped run keeps its lock: it frees itself when `lock_at_most_for` passes, exactly as
    /// if the node had died. Stopping a future does not stop work it handed elsewhere (a
    /// `spawn_blocking` closure, a `tokio::spawn`ed task, a thread), and releasing the lock
    /// while that work went on would let another node start the job beside it. So a job that
    /// offloads work should watch [`RunContext::shutdown`] and wait for that work itself, and
    /// `lock_at_most_for` should exceed how long such work can run.
    pub async fn shutdown(mut self, limit: Duration) -> ShutdownReport {
        self.shared.stop.cancel();
        let finished = tokio::time::timeout(limit, join_all(&mut self.tasks))
            .await
            .is_ok();
        if finished {
            return ShutdownReport::default();
        }
        let stopped: Vec<String> = self
            .shared
            .jobs()
            .iter()
            .filter(|(_, control)| control.state().running)
            .map(|(name, _)| name.to_string())
            .collect();
        warn!(jobs = ?stopped, ?limit, "shutdown limit reached: stopping the runs still going");
        self.shared.abort.cancel();
        // Each stopped run drops its attempt (keeping its lock) at once.
        join_all(&mut self.tasks).await;
        ShutdownReport { stopped }
    }
}

/// The jobs of a [`Scheduler`] while they are scheduled, from any task: from
/// [`Scheduler::handle`], cloned as needed.
///
/// Each operation names a job; a name that is not scheduled (never added, or removed) is
/// [`SchedulerError::UnknownJob`].
///
/// ```
/// use std::time::Duration;
/// use shedlock_memory::MemoryLockProvider;
/// use shedlock_scheduler::{Job, LockDefaults, Schedule, Scheduler, Tz};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let defaults = LockDefaults::new(Duration::from_secs(600), Duration::ZERO)?;
/// let mut scheduler = Scheduler::new(MemoryLockProvider::new(), defaults);
/// scheduler.add(Job::new("nightly-report", Schedule::cron("@daily", Tz::UTC)?, |_| async {}))?;
/// let jobs = scheduler.handle();
///
/// // An operator wants the report now rather than tonight: it still takes the lock.
/// jobs.run_now("nightly-report")?;
/// // And none tonight, until further notice.
/// jobs.pause("nightly-report")?;
/// assert_eq!(jobs.next_run("nightly-report")?, None);
/// jobs.resume("nightly-report")?;
/// # tokio::time::sleep(Duration::from_millis(10)).await;
/// assert!(jobs.next_run("nightly-report")?.is_some());
/// jobs.remove("nightly-report")?;
/// assert!(jobs.pause("nightly-report").is_err());
/// # scheduler.shutdown(Duration::from_secs(5)).await;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SchedulerHandle {
    shared: Arc<Shared>,
}

impl fmt::Debug for SchedulerHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchedulerHandle")
            .field("jobs", &self.shared.job_names())
            .finish_non_exhaustive()
    }
}

/// A scheduled job as [`SchedulerHandle::jobs`] shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobStatus {
    /// The job's name.
    pub name: String,
    /// Paused by [`SchedulerHandle::pause`]: its planned ticks are passed over.
    pub paused: bool,
    /// A run is in progress on this node.
    pub running: bool,
    /// When the next planned tick is due (`None` while paused, or when a cron expression has no
    /// further instant).
    pub next_run: Option<DateTime<Utc>>,
    /// The last run's report on this node (`None` before the first).
    pub last: Option<RunReport>,
}

impl SchedulerHandle {
    /// Every scheduled job, in name order.
    pub fn jobs(&self) -> Vec<JobStatus> {
        let jobs: Vec<(Arc<str>, Arc<Control>)> = self
            .shared
            .jobs()
            .iter()
            .filter(|(_, control)| !control.removed.is_cancelled())
            .map(|(name, control)| (name.clone(), control.clone()))
            .collect();
        jobs.into_iter()
            .map(|(name, control)| status(&name, &control))
            .collect()
    }

    /// One job's status.
    pub fn job(&self, job: &str) -> Result<JobStatus, SchedulerError> {
        let control = self.shared.control(job)?;
        Ok(status(job, &control))
    }

    /// When the job's next planned tick is due: `None` while it is paused, or when its cron
    /// expression has no further instant.
    pub fn next_run(&self, job: &str) -> Result<Option<DateTime<Utc>>, SchedulerError> {
        Ok(self.shared.control(job)?.state().next_run)
    }

    /// Passes the job's planned ticks over until [`resume`](Self::resume); a run in progress
    /// goes on. [`run_now`](Self::run_now) still runs it. Pausing a paused job changes nothing.
    pub fn pause(&self, job: &str) -> Result<(), SchedulerError> {
        self.shared.control(job)?.paused.send_replace(true);
        Ok(())
    }

    /// Ends a pause: the job runs from its next planned tick that is not in the past (the ticks
    /// that passed meanwhile are neither missed nor caught up). Resuming a job that is not
    /// paused changes nothing.
    pub fn resume(&self, job: &str) -> Result<(), SchedulerError> {
        self.shared.control(job)?.paused.send_replace(false);
        Ok(())
    }

    /// Runs the job once, now, out of schedule and under its lock as any run: skipped when
    /// another node holds the lock, reported to the observer and logged as any tick (its
    /// [`Tick::requested`] set). Its planned ticks are kept; one that falls while this run goes
    /// on is missed as usual. Refused with [`SchedulerError::JobRunning`] while a run of the
    /// job is in progress here, since runs of one job never overlap on one node.
    pub fn run_now(&self, job: &str) -> Result<(), SchedulerError> {
        let control = self.shared.control(job)?;
        {
            let mut state = control.state();
            if state.running {
                return Err(SchedulerError::JobRunning {
                    job: job.to_owned(),
                });
            }
            state.run_requested = true;
        }
        control.requested.notify_one();
        Ok(())
    }

    /// Unschedules the job: no tick of it runs any more. A run in progress finishes (its lock
    /// released as usual); until it has, adding a job of that name is refused
    /// ([`SchedulerError::RemovedJobRunning`]).
    pub fn remove(&self, job: &str) -> Result<(), SchedulerError> {
        self.shared.control(job)?.removed.cancel();
        Ok(())
    }
}

fn status(name: &str, control: &Control) -> JobStatus {
    let paused = *control.paused.borrow();
    let state = control.state();
    JobStatus {
        name: name.to_owned(),
        paused,
        running: state.running,
        next_run: state.next_run,
        last: state.last.clone(),
    }
}

async fn join_all(tasks: &mut JoinSet<()>) {
    while tasks.join_next().await.is_some() {}
}

/// A job's task: plan a tick, wait for it, run it, until shutdown or the job's removal. A run
/// asked for comes before the planned tick; a pause passes planned ticks over.
async fn drive(shared: Arc<Shared>, job: ScheduledJob, mut cursor: Cursor, control: Arc<Control>) {
    let mut paused = control.paused.subscribe();
    'plan: loop {
        let Some(planned) = cursor.plan(Instant::now(), shared.clock.now()) else {
            error!(job = %job.name, "the cron expression has no further instant: the job stops");
            break;
        };
        if planned.missed > 0 {
            shared.report(
                &control,
                RunReport {
                    job: job.name.to_string(),
                    lock_name: None,
                    tick: planned.tick.clone(),
                    outcome: RunOutcome::Missed {
                        ticks: planned.missed,
                    },
                    lock_lost: false,
                },
            );
        }
        loop {
            let is_paused = *paused.borrow_and_update();
            control.state().next_run = (!is_paused).then_some(planned.tick.time);
            tokio::select! {
                biased;
                () = shared.stop.cancelled() => break 'plan,
                () = control.removed.cancelled() => break 'plan,
                changed = paused.changed() => {
                    if changed.is_err() {
                        break 'plan;
                    }
                    // Resumed after the planned tick's time: plan from now, the ticks passed
                    // while paused passed over.
                    if !*paused.borrow() && planned.tick.due <= Instant::now() {
                        cursor.pass_over();
                        continue 'plan;
                    }
                }
                () = control.requested.notified() => {
                    if !control.take_request() {
                        continue;
                    }
                    let time = DateTime::<Utc>::from(shared.clock.now());
                    let tick = Tick::on_request(planned.tick.number, Instant::now(), time);
                    run_reported(&shared, &job, &control, tick).await;
                    // The planned tick's time passed during that run: it did not run, so it
                    // is missed as any tick passed during a run is.
                    if planned.tick.due <= Instant::now() {
                        cursor.unrun();
                        continue 'plan;
                    }
                }
                () = tokio::time::sleep_until(planned.tick.due), if !is_paused => {
                    run_reported(&shared, &job, &control, planned.tick).await;
                    continue 'plan;
                }
            }
        }
    }
    control.state().next_run = None;
    shared.forget(&job.name, &control);
}

/// Runs one tick, with the job marked running meanwhile, and reports it.
async fn run_reported(shared: &Shared, job: &ScheduledJob, control: &Control, tick: Tick) {
    control.state().running = true;
    let report = run_once(shared, job, tick).await;
    {
        let mut state = control.state();
        state.running = false;
        // Asked for during this run: the run it asked for has just happened.
        state.run_requested = false;
    }
    shared.report(control, report);
}

async fn run_once(shared: &Shared, job: &ScheduledJob, tick: Tick) -> RunReport {
    let mut report = RunReport {
        job: job.name.to_string(),
        lock_name: None,
        tick: tick.clone(),
        outcome: RunOutcome::Executed,
        lock_lost: false,
    };
    let lock_name = match &job.lock_name {
        LockName::JobName => job.name.to_string(),
        LockName::Fixed(name) => name.clone(),
        LockName::Computed(compute) => {
            match std::panic::catch_unwind(AssertUnwindSafe(|| compute(&tick))) {
                Ok(name) => name,
                Err(panic) => {
                    report.outcome = RunOutcome::Panicked {
                        message: format!("computing the lock name: {}", panic_message(&*panic)),
                    };
                    return report;
                }
            }
        }
    };
    report.lock_name = Some(lock_name.clone());
    let config = match shared.configuration(job, &lock_name) {
        Ok(config) => config,
        Err(error) => {
            error!(
                job = %job.name,
                lock = lock_name,
                tick = %tick_field(&tick),
                %error,
                "job not run: its lock is invalid"
            );
            report.outcome = RunOutcome::InvalidLock { error };
            return report;
        }
    };
    // The executor's events (acquired, skipped, refused, released) name the job and the tick
    // through this span, so a run is logged once, by whoever knows what happened.
    let span = info_span!("job", job = %job.name, tick = %tick_field(&tick));
    let context = RunContext {
        job: job.name.clone(),
        lock_name,
        tick,
        lock_lost: CancellationToken::new(),
        shutdown: shared.stop.clone(),
    };
    let run = job.run.clone();
    // Hands back the job's result and whether keep-alive lost the lock.
    let body = move |lost: CancellationToken| async move {
        let context = RunContext {
            lock_lost: lost.clone(),
            ..context
        };
        let result = run(context).await;
        (result, lost.is_cancelled())
    };
    let executor = &shared.executor;
    let attempt = async {
        if job.keep_alive {
            executor.execute_with_keep_alive(&config, body).await
        } else {
            executor
                .execute(&config, body(CancellationToken::new()))
                .await
        }
    };
    let attempt = attempt.instrument(span);
    // At the shutdown limit the whole attempt is dropped, its lock handle with it: the lock is
    // not released, because work the job handed elsewhere (`spawn_blocking`, a spawned task)
    // may still be running, and another node must not start the job beside it. It frees itself
    // at `lock_at_most_for`, as when a node dies.
    let caught = tokio::select! {
        biased;
        () = shared.abort.cancelled() => {
            report.outcome = RunOutcome::Stopped;
            return report;
        }
        caught = AssertUnwindSafe(attempt).catch_unwind() => caught,
    };
    report.outcome = match caught {
        Err(panic) => RunOutcome::Panicked {
            message: panic_message(&*panic),
        },
        // Refused before anything was written: nobody else holds the lock because of it.
        Ok(Err(
            error @ (LockError::InvalidName { .. }
            | LockError::InvalidRequest { .. }
            | LockError::Configuration(_)),
        )) => RunOutcome::InvalidLock {
            error: error.to_string(),
        },
        Ok(Err(error)) => RunOutcome::LockFailed {
            kind: error.kind(),
            error: ErrorChain(&error).to_string(),
        },
        Ok(Ok(TaskOutcome::Skipped(holder))) => RunOutcome::Skipped { holder },
        Ok(Ok(TaskOutcome::Executed((result, lost)))) => {
            report.lock_lost = lost;
            match result {
                Ok(()) => RunOutcome::Executed,
                Err(error) => RunOutcome::Failed { error },
            }
        }
    };
    report
}

impl Shared {
    fn configuration(
        &self,
        job: &ScheduledJob,
        lock_name: &str,
    ) -> Result<LockConfiguration, String> {
        let config = LockConfiguration::new(lock_name, job.lock_at_most_for, job.lock_at_least_for)
            .map_err(|error| error.to_string())?;
        let capabilities = self.executor.provider().capabilities();
        match capabilities.max_name_chars {
            Some(max) if lock_name.chars().count() > max => Err(format!(
                "lock name {lock_name:?} is {} characters long and the provider stores at most {max}",
                lock_name.chars().count()
            )),
            _ => Ok(config),
        }
    }

    fn jobs(&self) -> std::sync::MutexGuard<'_, BTreeMap<Arc<str>, Arc<Control>>> {
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn job_names(&self) -> Vec<Arc<str>> {
        self.jobs().keys().cloned().collect()
    }

    /// The job's control, unless it is unknown or removed.
    fn control(&self, job: &str) -> Result<Arc<Control>, SchedulerError> {
        self.jobs()
            .get(job)
            .filter(|control| !control.removed.is_cancelled())
            .cloned()
            .ok_or_else(|| SchedulerError::UnknownJob {
                job: job.to_owned(),
            })
    }

    /// Forgets a job whose task ended, unless its name is another job's by now.
    fn forget(&self, job: &str, control: &Arc<Control>) {
        let mut jobs = self.jobs();
        if jobs
            .get(job)
            .is_some_and(|known| Arc::ptr_eq(known, control))
        {
            jobs.remove(job);
        }
    }

    fn report(&self, control: &Control, report: RunReport) {
        log(&report);
        record(&report);
        if let Some(observer) = &self.observer {
            observer(&report);
        }
        // The last run, not the ticks passed over before the next.
        if !matches!(report.outcome, RunOutcome::Missed { .. }) {
            control.state().last = Some(report);
        }
    }
}

/// Logs what the executor did not: a refused or failed acquisition and a skip are the
/// executor's own events, logged once, inside the run's `job` span (which names the job and the
/// tick), so they are not repeated here.
fn log(report: &RunReport) {
    let job = report.job.as_str();
    let lock = report.lock_name.as_deref().unwrap_or("");
    let tick = tick_field(&report.tick);
    if report.lock_lost {
        warn!(
            job,
            lock,
            %tick,
            "keep-alive lost the lock while the job ran: another node may have run it too"
        );
    }
    match &report.outcome {
        RunOutcome::Executed => info!(job, lock, %tick, "job ran"),
        RunOutcome::Failed { error } => warn!(job, lock, %tick, %error, "job returned an error"),
        // Logged where they arose: by the executor, or by `run_once` for a lock the scheduler
        // refused before calling it.
        RunOutcome::Skipped { .. }
        | RunOutcome::LockFailed { .. }
        | RunOutcome::InvalidLock { .. } => {}
        RunOutcome::Panicked { message } => error!(
            job,
            lock,
            %tick,
            panic = %message,
            "job panicked; its lock was released and the scheduler goes on"
        ),
        RunOutcome::Stopped => warn!(
            job,
            lock,
            %tick,
            "job stopped at the shutdown limit; its lock stays held until lock_at_most_for \
             passes, in case work it handed elsewhere still runs"
        ),
        RunOutcome::Missed { ticks } => warn!(
            job,
            %tick,
            missed = ticks,
            "the previous run outlasted its schedule: ticks were missed"
        ),
    }
}

/// Counts the tick by its outcome, or the ticks it missed (names in `shedlock_core::metrics`).
fn record(report: &RunReport) {
    #[cfg(feature = "metrics")]
    {
        use shedlock_core::metrics::{JOB_MISSED_TICKS, JOB_RUNS};
        let job = report.job.clone();
        match &report.outcome {
            RunOutcome::Missed { ticks } => {
                metrics::counter!(JOB_MISSED_TICKS, "job" => job).increment(*ticks);
            }
            outcome => {
                metrics::counter!(JOB_RUNS, "job" => job, "outcome" => outcome.as_str())
                    .increment(1);
            }
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = report;
}

/// A tick as logs name it: its wall-clock time, which names the same tick on every node (a
/// cron instant or the fleet grid's), where its number counts from when this node added the job.
fn tick_field(tick: &Tick) -> Rfc3339 {
    Rfc3339::millis(tick.time.into())
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    if let Some(message) = panic.downcast_ref::<&str>() {
        (*message).to_owned()
    } else if let Some(message) = panic.downcast_ref::<String>() {
        message.clone()
    } else {
        "a panic with a payload that is not a string".to_owned()
    }
}
