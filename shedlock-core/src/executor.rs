//! Runs a task only when its lock is taken, and always gives the lock back.

use std::any::Any;
use std::convert::Infallible;
use std::fmt;
use std::panic::{AssertUnwindSafe, resume_unwind};
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::field::Empty;
use tracing::{Instrument, Span, debug, info_span, warn};

use crate::error::LockError;
use crate::log_fields::{ErrorChain, Rfc3339};
use crate::metrics::{self, Attempt, Held};
use crate::provider::{Acquisition, LockHandle, LockHolder, LockProvider};
use shedlock_configuration::LockConfiguration;

/// What happened to a task handed to the [`LockingTaskExecutor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TaskOutcome<T> {
    /// The lock was taken (or already held by this task) and the task ran to this value.
    Executed(T),
    /// Another node holds the lock; the task did not run. The holder is described when the
    /// backend said who it is in the same answer that refused the lock: PostgreSQL, Redis,
    /// etcd, MongoDB, ZooKeeper and the in-memory provider do (etcd without `held_until`: the
    /// key's lease is another request). MySQL, MariaDB and SQLite
    /// cannot (their refused statement returns no row) and give `None`, as does a lock being
    /// taken over by another node at that moment: finding out would cost every skipped run
    /// another round trip.
    Skipped(Option<LockHolder>),
}

impl<T> TaskOutcome<T> {
    /// The task's value, if it ran.
    pub fn executed(self) -> Option<T> {
        match self {
            TaskOutcome::Executed(value) => Some(value),
            TaskOutcome::Skipped(_) => None,
        }
    }

    /// Whether the task ran.
    pub fn was_executed(&self) -> bool {
        matches!(self, TaskOutcome::Executed(_))
    }
}

/// A lock the current task holds, innermost last.
#[derive(Clone)]
struct ActiveLock {
    /// The executor's provider: the same name on another provider is another lock.
    provider: Arc<dyn LockProvider>,
    name: String,
    handle: Arc<dyn LockHandle>,
}

tokio::task_local! {
    /// The locks held by the task being polled. Task-local, not thread-local: a task may move
    /// between worker threads, and two tasks on one thread must not see each other's locks.
    static ACTIVE_LOCKS: Arc<Vec<ActiveLock>>;
}

fn active_locks() -> Arc<Vec<ActiveLock>> {
    ACTIVE_LOCKS
        .try_with(Arc::clone)
        .unwrap_or_else(|_| Arc::new(Vec::new()))
}

fn innermost_handle() -> Result<Arc<dyn LockHandle>, LockError> {
    active_locks()
        .last()
        .map(|active| active.handle.clone())
        .ok_or(LockError::NoActiveLock)
}

/// Fails with [`LockError::NoActiveLock`] unless the current task runs under a lock taken by
/// a [`LockingTaskExecutor`]: a guard for code that must never run unlocked.
///
/// Locks are task-local: code in a task spawned from the locked task sees no lock.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use shedlock_core::{LockConfiguration, LockError, LockingTaskExecutor, assert_locked};
/// # use shedlock_memory::MemoryLockProvider;
///
/// /// Sends the monthly invoices; two nodes doing it at once would bill twice.
/// async fn send_invoices() -> Result<(), LockError> {
///     assert_locked()?;
///     // ... send them
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let executor = LockingTaskExecutor::new(MemoryLockProvider::new());
/// let config = LockConfiguration::parse("invoices", "10m", "0")?;
/// assert!(matches!(send_invoices().await, Err(LockError::NoActiveLock)));
/// executor.execute(&config, send_invoices()).await?.executed().expect("nobody else holds it")?;
/// # Ok(())
/// # }
/// ```
pub fn assert_locked() -> Result<(), LockError> {
    innermost_handle().map(|_| ())
}

/// The fencing token of the innermost lock the current task holds, if the provider has fencing.
pub fn active_fencing_token() -> Option<u64> {
    active_locks()
        .last()
        .and_then(|active| active.handle.fencing_token())
}

/// Extends the innermost lock the current task holds to `now + lock_at_most_for`, for a task
/// that finds it needs longer than planned.
///
/// `Ok(false)` means the lock had already expired: another node may be running the task.
/// Outside a locked task it fails with [`LockError::NoActiveLock`]. For a task that cannot
/// say in advance how long it needs, [`LockingTaskExecutor::execute_with_keep_alive`]
/// extends on a schedule instead.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use shedlock_core::{LockConfiguration, LockError, LockingTaskExecutor, extend_active_lock};
/// # use shedlock_memory::MemoryLockProvider;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let executor = LockingTaskExecutor::new(MemoryLockProvider::new());
/// let config = LockConfiguration::parse("import", "1m", "0")?;
/// let outcome = executor
///     .execute(&config, async {
///         let files = 5_000; // more than a minute's work, found out only now
///         if files > 1_000 && !extend_active_lock(Duration::from_secs(600)).await? {
///             // Expired already: another node may have started; stop rather than overlap.
///             return Ok(0);
///         }
///         Ok::<_, LockError>(files)
///     })
///     .await?;
/// assert_eq!(outcome.executed().transpose()?, Some(5_000));
/// # Ok(())
/// # }
/// ```
pub async fn extend_active_lock(lock_at_most_for: Duration) -> Result<bool, LockError> {
    innermost_handle()?.extend(lock_at_most_for).await
}

/// Runs tasks under locks from one [`LockProvider`].
///
/// Fails closed: when the provider errors (backend down, timeout, bad schema), the task does not
/// run and the error is returned. When the task panics, the lock is released and the panic
/// continues. A task that runs the same lock name again inside itself, on this executor or a
/// clone of it, runs it directly.
///
/// Each run is a `tracing` span named `shedlock` (fields `lock`, `provider`, `outcome` and,
/// once taken, `fencing_token`), so the task's own events carry the lock name. Inside it,
/// debug events say the lock was acquired, skipped (with `holder` and `held_until` when the
/// backend said), extended and released; warnings say it was lost or could not be taken or
/// released, with the error and its causes.
///
/// # Example
///
/// Two nodes on one store: while the first runs the task, the second skips it and hears who
/// holds the lock.
///
/// ```
/// use std::time::Duration;
/// use shedlock_core::{LockConfiguration, LockError, LockingTaskExecutor, TaskOutcome};
/// use shedlock_memory::MemoryLockStore;
/// # use shedlock_core::SystemClock;
/// # use std::sync::Arc;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let store = MemoryLockStore::new();
/// let node_a = LockingTaskExecutor::new(store.node_with("node-a", Arc::new(SystemClock)));
/// let node_b = LockingTaskExecutor::new(store.node_with("node-b", Arc::new(SystemClock)));
/// let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
///
/// let on_b = node_a
///     .execute(&config, async { node_b.execute(&config, async { "b ran" }).await })
///     .await?
///     .executed()
///     .expect("node a took the free lock")?;
/// match on_b {
///     TaskOutcome::Executed(_) => unreachable!("node a holds the lock"),
///     TaskOutcome::Skipped(holder) => {
///         let holder = holder.expect("the memory store says who holds a lock");
///         assert_eq!(holder.locked_by.as_deref(), Some("node-a"));
///     }
/// }
/// // Released once node a's task finished:
/// assert_eq!(node_b.execute(&config, async { "b ran" }).await?.executed(), Some("b ran"));
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct LockingTaskExecutor {
    provider: Arc<dyn LockProvider>,
}

impl fmt::Debug for LockingTaskExecutor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockingTaskExecutor")
            .field("provider", &self.provider)
            .finish()
    }
}

impl LockingTaskExecutor {
    /// An executor on `provider` (an `Arc<P>` works too, to share one provider).
    pub fn new(provider: impl LockProvider + 'static) -> Self {
        Self {
            provider: Arc::new(provider),
        }
    }

    /// An executor on a provider already shared as a trait object.
    pub fn from_arc(provider: Arc<dyn LockProvider>) -> Self {
        Self { provider }
    }

    /// The provider locks come from.
    pub fn provider(&self) -> &Arc<dyn LockProvider> {
        &self.provider
    }

    /// Runs `task` if the lock named in `config` can be taken now, then releases it.
    pub async fn execute<F>(
        &self,
        config: &LockConfiguration,
        task: F,
    ) -> Result<TaskOutcome<F::Output>, LockError>
    where
        F: Future,
    {
        let span = self.run_span(config);
        let run = async {
            let held = active_locks();
            if self.holds(&held, config) {
                return Ok(TaskOutcome::Executed(task.await));
            }
            let started = Instant::now();
            let handle = match self.acquire(config, started).await? {
                Ok(handle) => handle,
                Err(holder) => return Ok(TaskOutcome::Skipped(holder)),
            };
            let acquired = Instant::now();
            let result = run_caught(held, &self.provider, config, &handle, task).await;
            let expected = Expected::AcquireSent(started);
            finish(
                &*self.provider,
                &*handle,
                result,
                expected,
                config,
                acquired,
            )
            .await
        };
        record_outcome(&span, run.instrument(span.clone()).await)
    }

    /// Like [`execute`](Self::execute), and keeps the lock alive while the task runs: every
    /// third of `lock_at_most_for` it extends the lock to `now + lock_at_most_for`.
    ///
    /// The task gets a [`CancellationToken`] that is cancelled when the lock is lost: an extend
    /// found it expired, extends kept failing until the lock's last known expiry, or an extend
    /// did not answer by half an interval before that expiry. The task
    /// decides what to do, typically stop at the next safe point. Needs a provider with
    /// [`Capabilities::extend`](crate::Capabilities::extend); otherwise nothing runs and
    /// [`LockError::Unsupported`] is returned.
    ///
    /// The task is an async closure (`async |lost| { ... }`), so it can borrow from its
    /// surroundings; a closure returning a future works too.
    ///
    /// # Example
    ///
    /// A long import that stops at the next batch once the lock is lost, instead of running on
    /// beside another node that has taken it over:
    ///
    /// ```
    /// use std::time::Duration;
    /// use shedlock_core::{LockConfiguration, LockError, LockingTaskExecutor, TaskOutcome};
    /// # use shedlock_memory::MemoryLockProvider;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), LockError> {
    /// let executor = LockingTaskExecutor::new(MemoryLockProvider::new());
    /// // Extended every 100 ms while the import runs, so it may take longer than 300 ms.
    /// let config = LockConfiguration::parse("import", "300ms", "0")?;
    /// let outcome = executor
    ///     .execute_with_keep_alive(&config, async |lost| {
    ///         let mut imported = 0;
    ///         for _batch in 0..5 {
    ///             if lost.is_cancelled() {
    ///                 break; // another node may be importing now
    ///             }
    ///             tokio::time::sleep(Duration::from_millis(100)).await;
    ///             imported += 1;
    ///         }
    ///         imported
    ///     })
    ///     .await?;
    /// assert_eq!(outcome, TaskOutcome::Executed(5), "the lock outlived its 300 ms");
    /// # Ok(())
    /// # }
    /// ```
    pub async fn execute_with_keep_alive<F, T>(
        &self,
        config: &LockConfiguration,
        task: F,
    ) -> Result<TaskOutcome<T>, LockError>
    where
        F: AsyncFnOnce(CancellationToken) -> T,
    {
        let span = self.run_span(config);
        let run = async {
            let held = active_locks();
            if self.holds(&held, config) {
                return Ok(TaskOutcome::Executed(task(CancellationToken::new()).await));
            }
            if !self.provider.capabilities().extend {
                let error = LockError::Unsupported {
                    provider: self.provider.provider_name(),
                    operation: crate::Operation::Extend,
                    name: config.name().to_owned(),
                };
                warn!(error = %ErrorChain(&error), "not run: keep-alive needs extend");
                metrics::refused(config.name(), error.kind());
                return Err(error);
            }
            let started = Instant::now();
            let handle = match self.acquire(config, started).await? {
                Ok(handle) => handle,
                Err(holder) => return Ok(TaskOutcome::Skipped(holder)),
            };
            let acquired = Instant::now();
            let lost = CancellationToken::new();
            let keeper = keep_alive(config, handle.clone(), started, lost.clone());
            let result = tokio::select! {
                biased;
                result = run_caught(held, &self.provider, config, &handle, task(lost.clone())) => result,
                never = keeper => match never {},
            };
            // The keeper gives up (and cancels `lost`) before the lock's last known expiry, so
            // while it has not, the lock has not expired by this node's clock.
            let expected = if lost.is_cancelled() {
                Expected::LostToKeepAlive
            } else {
                Expected::Unexpired
            };
            finish(
                &*self.provider,
                &*handle,
                result,
                expected,
                config,
                acquired,
            )
            .await
        };
        record_outcome(&span, run.instrument(span.clone()).await)
    }

    /// The span of one run; `outcome` and `fencing_token` are recorded once known.
    fn run_span(&self, config: &LockConfiguration) -> Span {
        info_span!(
            "shedlock",
            lock = config.name(),
            provider = self.provider.provider_name(),
            outcome = Empty,
            fencing_token = Empty,
        )
    }

    fn holds(&self, held: &[ActiveLock], config: &LockConfiguration) -> bool {
        held.iter().any(|active| {
            active.name == config.name() && Arc::ptr_eq(&active.provider, &self.provider)
        })
    }

    /// The handle, or who holds the lock instead. Events name the lock through the run's span.
    /// `sent` is when the run read the clock before asking, which also times the attempt.
    async fn acquire(
        &self,
        config: &LockConfiguration,
        sent: Instant,
    ) -> Result<Result<Arc<dyn LockHandle>, Option<LockHolder>>, LockError> {
        let answer = self.provider.try_lock(config).await;
        let attempt = match &answer {
            Ok(Acquisition::Acquired(_)) => Attempt::Acquired,
            Ok(Acquisition::NotAcquired(_)) => Attempt::Skipped,
            Err(error) => Attempt::Failed(error.kind()),
        };
        metrics::attempted(config.name(), attempt, sent.elapsed());
        match answer {
            Ok(Acquisition::Acquired(handle)) => {
                let fencing_token = handle.fencing_token();
                if let Some(token) = fencing_token {
                    Span::current().record("fencing_token", token);
                }
                debug!(fencing_token, "acquired");
                Ok(Ok(Arc::from(handle)))
            }
            Ok(Acquisition::NotAcquired(holder)) => {
                let described = holder.clone().unwrap_or_default();
                debug!(
                    holder = described.locked_by.as_deref(),
                    held_until = described
                        .held_until
                        .map(Rfc3339::millis)
                        .map(tracing::field::display),
                    "skipped: the lock is held elsewhere"
                );
                Ok(Err(holder))
            }
            Err(error) => {
                warn!(error = %ErrorChain(&error), "not run: {}", refusal(&error));
                Err(error)
            }
        }
    }
}

/// Why a lock error stopped a run, in the words of the span's `outcome`: its kind, so "outcome
/// unknown" is said only when the request reached the backend and no answer came back; a
/// request refused before sending, an unreachable backend or refused credentials are known to
/// have written nothing.
fn refusal(error: &LockError) -> &'static str {
    match error {
        LockError::InvalidName { .. } => "invalid name",
        other => other.kind().as_str(),
    }
}

/// Records how the run ended on its span and passes the result on.
fn record_outcome<T>(
    span: &Span,
    result: Result<TaskOutcome<T>, LockError>,
) -> Result<TaskOutcome<T>, LockError> {
    let outcome = match &result {
        Ok(TaskOutcome::Executed(_)) => "executed",
        Ok(TaskOutcome::Skipped(_)) => "skipped",
        Err(error) => refusal(error),
    };
    span.record("outcome", outcome);
    result
}

/// Runs the task with its lock pushed on the task-local stack, catching a panic so the lock can
/// be released before the panic continues.
async fn run_caught<F: Future>(
    held: Arc<Vec<ActiveLock>>,
    provider: &Arc<dyn LockProvider>,
    config: &LockConfiguration,
    handle: &Arc<dyn LockHandle>,
    task: F,
) -> Result<F::Output, Box<dyn Any + Send>> {
    let mut inner = Vec::clone(&held);
    inner.push(ActiveLock {
        provider: provider.clone(),
        name: config.name().to_owned(),
        handle: handle.clone(),
    });
    ACTIVE_LOCKS
        .scope(Arc::new(inner), AssertUnwindSafe(task).catch_unwind())
        .await
}

/// What this node knows, when it releases, of whether its lock should still be there: what a
/// release that finds the lock gone says happened.
#[derive(Clone, Copy)]
enum Expected {
    /// By this node's clock the lock cannot have expired yet.
    Unexpired,
    /// The acquire was sent at this instant, so whether the lock can have expired is judged
    /// from it, only when a release finds it gone (no work on a release that succeeds).
    AcquireSent(Instant),
    /// Keep-alive already found the lock expired or taken while the task ran.
    LostToKeepAlive,
}

impl Expected {
    /// `AcquireSent` judged now: unexpired while `lock_at_most_for` has not passed since, with
    /// the backend's time precision to spare (a backend that stores whole seconds may end the
    /// lock up to one early). Judged when the release's answer came, later than it was sent,
    /// so a lock called unexpired surely was.
    fn judged(self, provider: &dyn LockProvider, config: &LockConfiguration) -> Expected {
        match self {
            Expected::AcquireSent(started) => {
                let precision = provider.capabilities().time_precision;
                if started.elapsed() + precision < config.lock_at_most_for() {
                    Expected::Unexpired
                } else {
                    Expected::AcquireSent(started)
                }
            }
            known => known,
        }
    }
}

/// Releases the lock, then hands back the task's value or continues its panic. A failed release
/// is logged, not returned: the task has run, and its value must not be lost.
///
/// A release that finds the lock gone says why, as far as `expected` tells: a lock that could
/// not have expired yet was ended early by someone, not outlasted by the task.
///
/// Called as soon as the task ended: the run lasted from `acquired` until now.
async fn finish<T>(
    provider: &dyn LockProvider,
    handle: &dyn LockHandle,
    result: Result<T, Box<dyn Any + Send>>,
    expected: Expected,
    config: &LockConfiguration,
    acquired: Instant,
) -> Result<TaskOutcome<T>, LockError> {
    let ran = acquired.elapsed();
    if result.is_err() {
        Span::current().record("outcome", "panicked");
    }
    let released = handle.unlock().await;
    metrics::released(
        config.name(),
        &Held {
            ran,
            held: acquired.elapsed(),
            lost: matches!(released, Ok(false)) || matches!(expected, Expected::LostToKeepAlive),
            release_failed: released.as_ref().err().map(LockError::kind),
        },
    );
    match released {
        Ok(true) => debug!("released"),
        Ok(false) => match expected.judged(provider, config) {
            Expected::Unexpired => warn!(
                lock_at_most_for = ?config.lock_at_most_for(),
                "lock lost before release, before lock_at_most_for had passed: it was freed or \
                 taken early (an operator's force-unlock, its record deleted or overwritten, or \
                 the backend's clock ahead of this node's), and another node may have run the task"
            ),
            Expected::AcquireSent(_) => warn!(
                lock_at_most_for = ?config.lock_at_most_for(),
                "lock lost before release: the task outlasted lock_at_most_for, so the lock \
                 expired and another node may have run the task (make lock_at_most_for longer \
                 than the task, or run it with keep-alive)"
            ),
            Expected::LostToKeepAlive => warn!(
                "lock lost before release: keep-alive had found it expired or taken while the \
                 task ran, and another node may have run the task"
            ),
        },
        Err(error) => warn!(
            error = %ErrorChain(&error),
            "release failed: the lock stays held until lock_at_most_for"
        ),
    }
    match result {
        Ok(value) => Ok(TaskOutcome::Executed(value)),
        Err(panic) => resume_unwind(panic),
    }
}

/// Extends the lock every third of `lock_at_most_for` until cancelled from outside. On a lost
/// lock it cancels `lost` and waits forever; it never completes by itself.
async fn keep_alive(
    config: &LockConfiguration,
    handle: Arc<dyn LockHandle>,
    acquire_started: Instant,
    lost: CancellationToken,
) -> Infallible {
    let at_most = config.lock_at_most_for();
    let interval = (at_most / 3).max(Duration::from_millis(1));
    // The latest moment the lock is surely held: measured from before the request was sent.
    let mut held_until = acquire_started + at_most;
    loop {
        tokio::time::sleep(interval).await;
        let sent = Instant::now();
        // An extend that does not answer is given until half an interval before the lock's
        // last known expiry, not the provider's operation timeout (which may be longer than
        // the lock): the task must hear of the loss while the lock is still surely its own.
        let answer_by = held_until.checked_sub(interval / 2).unwrap_or(held_until);
        let Ok(extended) = tokio::time::timeout_at(answer_by, handle.extend(at_most)).await else {
            warn!(
                "lock lost: keep-alive's extend did not answer before the lock's last known expiry"
            );
            break;
        };
        match extended {
            Ok(true) => {
                held_until = sent + at_most;
                debug!(lock_at_most_for = ?at_most, "extended");
            }
            Ok(false) => {
                warn!("lock lost: keep-alive found it expired or taken");
                break;
            }
            Err(error) if Instant::now() + interval < held_until => {
                warn!(error = %ErrorChain(&error), "keep-alive extend failed; retrying while the lock is still held");
            }
            Err(error) => {
                warn!(error = %ErrorChain(&error), "lock lost: keep-alive could not extend it before it expired");
                break;
            }
        }
    }
    lost.cancel();
    std::future::pending().await
}
