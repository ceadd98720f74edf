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
use tracing::{debug, warn};

use crate::configuration::LockConfiguration;
use crate::error::LockError;
use crate::provider::{Acquisition, LockHandle, LockProvider};

/// What happened to a task handed to the [`LockingTaskExecutor`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use]
pub enum TaskOutcome<T> {
    /// The lock was taken (or already held by this task) and the task ran to this value.
    Executed(T),
    /// Another node holds the lock; the task did not run.
    Skipped,
}

impl<T> TaskOutcome<T> {
    /// The task's value, if it ran.
    pub fn executed(self) -> Option<T> {
        match self {
            TaskOutcome::Executed(value) => Some(value),
            TaskOutcome::Skipped => None,
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
pub async fn extend_active_lock(lock_at_most_for: Duration) -> Result<bool, LockError> {
    innermost_handle()?.extend(lock_at_most_for).await
}

/// Runs tasks under locks from one [`LockProvider`].
///
/// Fails closed: when the provider errors (backend down, timeout, bad schema), the task does not
/// run and the error is returned. When the task panics, the lock is released and the panic
/// continues. A task that runs the same lock name again inside itself, on this executor or a
/// clone of it, runs it directly.
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
        let held = active_locks();
        if self.holds(&held, config) {
            return Ok(TaskOutcome::Executed(task.await));
        }
        let Some(handle) = self.acquire(config).await? else {
            return Ok(TaskOutcome::Skipped);
        };
        let result = run_caught(held, &self.provider, config, &handle, task).await;
        finish(config, &*handle, result).await
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
    pub async fn execute_with_keep_alive<F, T>(
        &self,
        config: &LockConfiguration,
        task: F,
    ) -> Result<TaskOutcome<T>, LockError>
    where
        F: AsyncFnOnce(CancellationToken) -> T,
    {
        let held = active_locks();
        if self.holds(&held, config) {
            return Ok(TaskOutcome::Executed(task(CancellationToken::new()).await));
        }
        if !self.provider.capabilities().extend {
            return Err(LockError::Unsupported {
                provider: "this provider",
                operation: crate::Operation::Extend,
                name: config.name().to_owned(),
            });
        }
        let started = Instant::now();
        let Some(handle) = self.acquire(config).await? else {
            return Ok(TaskOutcome::Skipped);
        };
        let lost = CancellationToken::new();
        let keeper = keep_alive(config, handle.clone(), started, lost.clone());
        let result = tokio::select! {
            biased;
            result = run_caught(held, &self.provider, config, &handle, task(lost)) => result,
            never = keeper => match never {},
        };
        finish(config, &*handle, result).await
    }

    fn holds(&self, held: &[ActiveLock], config: &LockConfiguration) -> bool {
        held.iter().any(|active| {
            active.name == config.name() && Arc::ptr_eq(&active.provider, &self.provider)
        })
    }

    async fn acquire(
        &self,
        config: &LockConfiguration,
    ) -> Result<Option<Arc<dyn LockHandle>>, LockError> {
        match self.provider.try_lock(config).await {
            Ok(Acquisition::Acquired(handle)) => Ok(Some(Arc::from(handle))),
            Ok(Acquisition::NotAcquired(holder)) => {
                let holder = holder.unwrap_or_default();
                debug!(
                    lock = config.name(),
                    holder = holder.locked_by.as_deref().unwrap_or("unknown"),
                    held_until = ?holder.held_until,
                    "skipped: the lock is held elsewhere"
                );
                Ok(None)
            }
            Err(error) => {
                warn!(lock = config.name(), %error, "not run: the lock outcome is unknown");
                Err(error)
            }
        }
    }
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

/// Releases the lock, then hands back the task's value or continues its panic. A failed release
/// is logged, not returned: the task has run, and its value must not be lost.
async fn finish<T>(
    config: &LockConfiguration,
    handle: &dyn LockHandle,
    result: Result<T, Box<dyn Any + Send>>,
) -> Result<TaskOutcome<T>, LockError> {
    match handle.unlock().await {
        Ok(true) => {}
        Ok(false) => warn!(
            lock = config.name(),
            "lock was lost before release: it expired (is lock_at_most_for shorter than the task?) and another node may have run the task"
        ),
        Err(error) => warn!(
            lock = config.name(),
            %error,
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
                lock = config.name(),
                "lock lost: keep-alive's extend did not answer before the lock's last known expiry"
            );
            break;
        };
        match extended {
            Ok(true) => held_until = sent + at_most,
            Ok(false) => {
                warn!(
                    lock = config.name(),
                    "lock lost: keep-alive found it expired or taken"
                );
                break;
            }
            Err(error) if Instant::now() + interval < held_until => {
                warn!(lock = config.name(), %error, "keep-alive extend failed; retrying while the lock is still held");
            }
            Err(error) => {
                warn!(lock = config.name(), %error, "lock lost: keep-alive could not extend it before it expired");
                break;
            }
        }
    }
    lost.cancel();
    std::future::pending().await
}
