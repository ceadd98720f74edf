//! The executor's promises, checked against the in-memory provider on a hand-driven clock, so
//! expiry is tested exactly and without sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, Capabilities, Clock, ErrorKind, LockConfiguration, LockError, LockProvider,
    LockingTaskExecutor, Operation, TaskOutcome, TimeSource, active_fencing_token, assert_locked,
    extend_active_lock, raw::ManualClock,
};
use shedlock_memory::{MemoryLockProvider, MemoryLockStore};

const SECOND: Duration = Duration::from_secs(1);

/// One store on a manual clock, and a way to make independent nodes on it.
struct Fleet {
    clock: ManualClock,
    store: MemoryLockStore,
}

impl Fleet {
    fn new() -> Self {
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000));
        let store = MemoryLockStore::with_clock(Arc::new(clock.clone()));
        Self { clock, store }
    }

    fn node(&self, holder: &str) -> MemoryLockProvider {
        self.store.node_with(holder, Arc::new(self.clock.clone()))
    }

    fn executor(&self, holder: &str) -> LockingTaskExecutor {
        LockingTaskExecutor::new(self.node(holder))
    }
}

fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

/// Fails the test instead of hanging it when the code under test never answers.
async fn bounded<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(10), test)
        .await
        .expect("the test did not finish within 10 s")
}

async fn runs(executor: &LockingTaskExecutor, config: &LockConfiguration) -> bool {
    executor
        .execute(config, async {})
        .await
        .unwrap()
        .was_executed()
}

#[tokio::test]
async fn runs_the_task_and_releases_the_lock() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.executor("a"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        assert_eq!(
            a.execute(&config, async { 7 }).await.unwrap(),
            TaskOutcome::Executed(7)
        );
        assert!(
            runs(&b, &config).await,
            "a released, so b gets the lock at once"
        );
    })
    .await;
}

#[tokio::test]
async fn skips_while_another_node_holds_the_lock() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.executor("a"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let inner = a.execute(&config, async {
            b.execute(&config, async { "ran" }).await.unwrap()
        });
        let TaskOutcome::Executed(TaskOutcome::Skipped(Some(holder))) = inner.await.unwrap() else {
            panic!("b must skip and hear who holds the lock");
        };
        assert_eq!(holder.locked_by.as_deref(), Some("a"), "{holder:?}");
        assert_eq!(
            holder.held_until,
            Some(SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_010))
        );
    })
    .await;
}

#[tokio::test]
async fn at_least_keeps_the_lock_after_an_early_release() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.executor("a"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, 3 * SECOND);
        assert!(runs(&a, &config).await);
        fleet.clock.advance(SECOND);
        assert!(
            !runs(&b, &config).await,
            "1 s after acquisition, at-least (3 s) still holds"
        );
        fleet.clock.advance(2 * SECOND - Duration::from_millis(1));
        assert!(
            !runs(&b, &config).await,
            "1 ms before at-least ends it still holds"
        );
        fleet.clock.advance(Duration::from_millis(1));
        assert!(
            runs(&b, &config).await,
            "at exactly at-least the lock is free"
        );
    })
    .await;
}

#[tokio::test]
async fn at_most_frees_the_lock_of_a_vanished_holder() {
    bounded(async {
        let fleet = Fleet::new();
        let (crashed, b) = (fleet.node("crashed"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let handle = crashed
            .try_lock(&config)
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        drop(handle); // the holder dies without releasing
        fleet.clock.advance(10 * SECOND - Duration::from_millis(1));
        assert!(!runs(&b, &config).await, "held until at-most");
        fleet.clock.advance(Duration::from_millis(1));
        assert!(runs(&b, &config).await, "free at at-most");
    })
    .await;
}

#[tokio::test]
async fn only_the_holder_extends() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.node("a"), fleet.node("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let held = a.try_lock(&config).await.unwrap().into_handle().unwrap();
        fleet.clock.advance(8 * SECOND);
        assert!(
            held.extend(10 * SECOND).await.unwrap(),
            "the holder extends to now + 10 s"
        );
        fleet.clock.advance(5 * SECOND);
        assert!(
            !b.try_lock(&config).await.unwrap().is_acquired(),
            "13 s after acquisition the extended lock still holds"
        );
        fleet.clock.advance(5 * SECOND);
        assert!(
            !held.extend(10 * SECOND).await.unwrap(),
            "an expired lock cannot be extended"
        );
        let taken = b.try_lock(&config).await.unwrap().into_handle().unwrap();
        assert!(taken.extend(SECOND).await.unwrap());
    })
    .await;
}

#[tokio::test]
async fn a_stale_holder_cannot_release_or_extend_the_new_holders_lock() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b, c) = (
            fleet.node("same-host"),
            fleet.node("same-host"),
            fleet.node("c"),
        );
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let stale = a.try_lock(&config).await.unwrap().into_handle().unwrap();
        fleet.clock.advance(10 * SECOND);
        let fresh = b.try_lock(&config).await.unwrap().into_handle().unwrap();
        assert!(
            !stale.unlock().await.unwrap(),
            "the stale release reports it held nothing"
        );
        assert!(
            !stale.extend(60 * SECOND).await.unwrap(),
            "the stale extend changes nothing"
        );
        assert!(
            !c.try_lock(&config).await.unwrap().is_acquired(),
            "the new holder (same host name) still holds the lock"
        );
        fleet.clock.advance(10 * SECOND);
        assert!(
            c.try_lock(&config).await.unwrap().is_acquired(),
            "and its expiry was not moved by the stale extend"
        );
        assert!(!fresh.unlock().await.unwrap(), "fresh had expired by now");
    })
    .await;
}

#[tokio::test]
async fn a_handle_releases_only_once() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.node("a"), fleet.node("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let first = a.try_lock(&config).await.unwrap().into_handle().unwrap();
        assert!(first.unlock().await.unwrap());
        let second = b.try_lock(&config).await.unwrap().into_handle().unwrap();
        assert!(
            !first.unlock().await.unwrap(),
            "a second release is a no-op"
        );
        assert!(!first.extend(SECOND).await.unwrap());
        assert!(second.extend(SECOND).await.unwrap(), "b's lock is intact");
    })
    .await;
}

#[tokio::test]
async fn a_task_error_still_releases_the_lock() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.executor("a"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let outcome = a
            .execute(&config, async { Err::<(), _>("task failed") })
            .await
            .unwrap();
        assert_eq!(outcome, TaskOutcome::Executed(Err("task failed")));
        assert!(runs(&b, &config).await);
    })
    .await;
}

#[tokio::test]
async fn a_panicking_task_releases_the_lock_and_the_panic_continues() {
    bounded(async {
        let fleet = Fleet::new();
        let a = fleet.executor("a");
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let panicked = tokio::spawn({
            let (a, config) = (a.clone(), config.clone());
            async move { a.execute(&config, async { panic!("task blew up") }).await }
        })
        .await
        .unwrap_err();
        assert!(panicked.is_panic());
        let message = panicked.into_panic().downcast::<&str>().unwrap();
        assert_eq!(*message, "task blew up");
        assert!(
            runs(&fleet.executor("b"), &config).await,
            "the lock was released"
        );
    })
    .await;
}

#[tokio::test]
async fn nested_runs_of_the_same_name_run_once_without_deadlock() {
    bounded(async {
        let fleet = Fleet::new();
        let a = fleet.executor("a");
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let count = AtomicUsize::new(0);
        let outcome = a
            .execute(&config, async {
                count.fetch_add(1, Ordering::SeqCst);
                a.execute(&config, async {
                    count.fetch_add(10, Ordering::SeqCst);
                    a.execute(&config, async { 3 }).await.unwrap()
                })
                .await
                .unwrap()
            })
            .await
            .unwrap();
        assert_eq!(
            outcome,
            TaskOutcome::Executed(TaskOutcome::Executed(TaskOutcome::Executed(3)))
        );
        assert_eq!(
            count.load(Ordering::SeqCst),
            11,
            "each body ran exactly once"
        );
        assert!(
            runs(&fleet.executor("b"), &config).await,
            "the outer lock was released"
        );
    })
    .await;
}

#[tokio::test(flavor = "current_thread")]
async fn re_entrancy_is_per_task_not_per_thread() {
    bounded(async {
        let fleet = Fleet::new();
        let a = fleet.executor("a");
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let (started, proceed) = (tokio::sync::Notify::new(), tokio::sync::Notify::new());
        let holder = async {
            a.execute(&config, async {
                started.notify_one();
                proceed.notified().await;
            })
            .await
            .unwrap()
        };
        let other_task = async {
            started.notified().await;
            // Another task on the same thread, with the same executor: it must not count as nested.
            let outcome = tokio::spawn({
                let (a, config) = (a.clone(), config.clone());
                async move { a.execute(&config, async {}).await.unwrap() }
            })
            .await
            .unwrap();
            proceed.notify_one();
            outcome
        };
        let (held, other) = tokio::join!(holder, other_task);
        assert_eq!(held, TaskOutcome::Executed(()));
        assert!(matches!(other, TaskOutcome::Skipped(Some(_))), "{other:?}");
    })
    .await;
}

#[tokio::test]
async fn assert_locked_passes_only_inside_a_locked_task() {
    bounded(async {
        let fleet = Fleet::new();
        let a = fleet.executor("a");
        let config = config("job", 10 * SECOND, Duration::ZERO);
        assert!(matches!(assert_locked(), Err(LockError::NoActiveLock)));
        let inside = a
            .execute(&config, async { assert_locked().is_ok() })
            .await
            .unwrap();
        assert_eq!(inside, TaskOutcome::Executed(true));
        assert!(assert_locked().is_err(), "nothing is held after the task");
    })
    .await;
}

#[tokio::test]
async fn a_task_extends_its_own_lock() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.executor("a"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        assert!(matches!(
            extend_active_lock(SECOND).await,
            Err(LockError::NoActiveLock)
        ));
        let outcome = a
            .execute(&config, async {
                fleet.clock.advance(9 * SECOND);
                let extended = extend_active_lock(30 * SECOND).await.unwrap();
                fleet.clock.advance(20 * SECOND);
                let b_ran = runs(&b, &config).await;
                (extended, b_ran)
            })
            .await
            .unwrap();
        assert_eq!(outcome, TaskOutcome::Executed((true, false)));
    })
    .await;
}

#[tokio::test]
async fn fencing_tokens_increase_with_each_acquisition() {
    bounded(async {
        let fleet = Fleet::new();
        let (a, b) = (fleet.executor("a"), fleet.executor("b"));
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let mut tokens = Vec::new();
        for executor in [&a, &b, &a, &b] {
            let token = executor
                .execute(&config, async { active_fencing_token() })
                .await
                .unwrap();
            tokens.push(token.executed().flatten().unwrap());
        }
        assert_eq!(tokens, [1, 2, 3, 4]);
        assert_eq!(active_fencing_token(), None);
    })
    .await;
}

#[tokio::test]
async fn a_record_deleted_behind_the_name_cache_is_created_again() {
    bounded(async {
        let fleet = Fleet::new();
        let a = fleet.executor("a");
        let config = config("job", 10 * SECOND, Duration::ZERO);
        assert!(runs(&a, &config).await);
        assert!(
            fleet.store.remove_record("job"),
            "an operator deletes the row by hand"
        );
        assert!(
            runs(&a, &config).await,
            "the node re-inserts it instead of skipping forever"
        );
        assert!(fleet.store.holder("job").is_some());
    })
    .await;
}

/// A provider whose backend always fails: the executor must fail closed.
#[derive(Debug)]
struct UnreachableBackend;

#[async_trait]
impl LockProvider for UnreachableBackend {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        Err(LockError::backend_message(
            ErrorKind::Unreachable,
            "unreachable",
            Operation::Acquire,
            config.name(),
            "connection refused",
        ))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server).with_extend(true)
    }

    fn provider_name(&self) -> &'static str {
        "unreachable"
    }
}

#[tokio::test]
async fn a_backend_error_means_the_task_does_not_run() {
    bounded(async {
        let executor = LockingTaskExecutor::new(UnreachableBackend);
        let config = config("job", 10 * SECOND, Duration::ZERO);
        let ran = AtomicUsize::new(0);
        let error = executor
            .execute(&config, async { ran.fetch_add(1, Ordering::SeqCst) })
            .await
            .unwrap_err();
        assert!(error.to_string().contains("connection refused"), "{error}");
        let error = executor
            .execute_with_keep_alive(&config, async |_| ran.fetch_add(1, Ordering::SeqCst))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
        assert!(error.retryable());
        assert_eq!(ran.load(Ordering::SeqCst), 0, "the task never ran");
    })
    .await;
}

#[test]
fn manual_clock_is_a_clock() {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(SystemTime::UNIX_EPOCH));
    assert_eq!(clock.now(), SystemTime::UNIX_EPOCH);
}
