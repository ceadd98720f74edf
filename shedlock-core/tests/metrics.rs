//! What the executor records through the `metrics` facade (the `metrics` feature), read back
//! from a recording recorder: each counter and histogram of a run, with its labels.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::metrics::{
    ACQUIRE_SECONDS, HELD_SECONDS, LOCK_FAILURES, LOCKS_ACQUIRED, LOCKS_LOST, LOCKS_SKIPPED,
    RUN_SECONDS,
};
use shedlock_core::{
    Acquisition, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError, LockProvider,
    LockingTaskExecutor, SystemClock, TaskOutcome,
};
use shedlock_memory::MemoryLockStore;
use shedlock_test_support::metrics_capture::{
    counter, counters_with, description, histogram, install,
};

fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

#[tokio::test]
async fn a_run_counts_its_acquisition_and_times_its_attempt_its_task_and_its_hold() {
    install();
    let executor = LockingTaskExecutor::new(MemoryLockStore::new().node());
    let lock = "metrics-ran";
    let outcome = executor
        .execute(&config(lock), tokio::time::sleep(Duration::from_millis(30)))
        .await
        .unwrap();
    assert!(outcome.was_executed());

    assert_eq!(counter(LOCKS_ACQUIRED, &[("lock", lock)]), 1);
    assert_eq!(counter(LOCKS_SKIPPED, &[("lock", lock)]), 0);
    assert_eq!(counter(LOCKS_LOST, &[("lock", lock)]), 0);
    let attempts = histogram(ACQUIRE_SECONDS, &[("lock", lock), ("outcome", "acquired")]);
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert!(
        attempts[0] < 0.03,
        "an in-process acquire took {attempts:?} s"
    );
    let ran = histogram(RUN_SECONDS, &[("lock", lock)]);
    assert_eq!(ran.len(), 1, "{ran:?}");
    assert!(ran[0] >= 0.03, "the task slept 30 ms, and ran {} s", ran[0]);
    let held = histogram(HELD_SECONDS, &[("lock", lock)]);
    assert_eq!(held.len(), 1, "{held:?}");
    assert!(
        held[0] >= ran[0],
        "held {held:?} s, shorter than the run {ran:?} s"
    );
}

#[tokio::test]
async fn a_lock_held_elsewhere_counts_a_skip_and_nothing_else() {
    install();
    let store = MemoryLockStore::new();
    let a = LockingTaskExecutor::new(store.node_with("node-a", Arc::new(SystemClock)));
    let b = LockingTaskExecutor::new(store.node_with("node-b", Arc::new(SystemClock)));
    let lock = "metrics-skipped";
    let on_b = a
        .execute(&config(lock), async {
            b.execute(&config(lock), async {}).await.unwrap()
        })
        .await
        .unwrap();
    assert!(matches!(
        on_b,
        TaskOutcome::Executed(TaskOutcome::Skipped(_))
    ));

    assert_eq!(counter(LOCKS_SKIPPED, &[("lock", lock)]), 1);
    assert_eq!(counter(LOCKS_ACQUIRED, &[("lock", lock)]), 1, "node a's");
    let skipped = histogram(ACQUIRE_SECONDS, &[("lock", lock), ("outcome", "skipped")]);
    assert_eq!(skipped.len(), 1, "{skipped:?}");
    // Node b's run never started: one run and one hold, node a's.
    assert_eq!(histogram(RUN_SECONDS, &[("lock", lock)]).len(), 1);
    assert_eq!(histogram(HELD_SECONDS, &[("lock", lock)]).len(), 1);
}

#[tokio::test]
async fn a_lock_freed_by_an_operator_mid_run_counts_as_lost() {
    install();
    let store = MemoryLockStore::new();
    let executor = LockingTaskExecutor::new(store.node());
    let operator = store.node();
    let lock = "metrics-lost";
    let outcome = executor
        .execute(&config(lock), async {
            let held = operator.inspect_lock(lock).await.unwrap().unwrap();
            assert!(
                operator
                    .force_unlock(lock, &held.acquisition)
                    .await
                    .unwrap()
            );
        })
        .await
        .unwrap();
    assert!(outcome.was_executed());

    assert_eq!(counter(LOCKS_LOST, &[("lock", lock)]), 1);
    assert_eq!(counter(LOCKS_ACQUIRED, &[("lock", lock)]), 1);
    assert_eq!(histogram(HELD_SECONDS, &[("lock", lock)]).len(), 1);
}

/// The in-memory provider, saying it cannot extend: as a provider written for a backend
/// without a conditional update would.
#[derive(Debug)]
struct WithoutExtend(shedlock_memory::MemoryLockProvider);

#[async_trait]
impl LockProvider for WithoutExtend {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.0.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities().with_extend(false)
    }

    fn provider_name(&self) -> &'static str {
        "without-extend"
    }
}

#[tokio::test]
async fn keep_alive_on_a_provider_that_cannot_extend_is_a_failure_without_an_attempt() {
    install();
    let executor = LockingTaskExecutor::new(WithoutExtend(MemoryLockStore::new().node()));
    let lock = "metrics-no-extend";
    let error = executor
        .execute_with_keep_alive(&config(lock), async |_lost| {
            panic!("ran without keep-alive")
        })
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Unsupported, "{error}");

    assert_eq!(
        counters_with(LOCK_FAILURES, ("lock", lock)),
        [(
            vec![
                ("kind".to_owned(), "unsupported".to_owned()),
                ("lock".to_owned(), lock.to_owned())
            ],
            1
        )]
    );
    // Nothing was sent, so no attempt was timed.
    assert!(histogram(ACQUIRE_SECONDS, &[("lock", lock), ("outcome", "failed")]).is_empty());
}

#[tokio::test]
async fn describe_gives_each_metric_its_help_text() {
    install();
    shedlock_core::metrics::describe();
    let executor = LockingTaskExecutor::new(MemoryLockStore::new().node());
    let outcome = executor
        .execute(&config("metrics-described"), async {})
        .await;
    assert!(outcome.unwrap().was_executed());
    assert_eq!(
        description(LOCKS_ACQUIRED).as_deref(),
        Some("Locks taken: runs started")
    );
    assert_eq!(
        description(HELD_SECONDS).as_deref(),
        Some("How long this node held the lock, acquired to released")
    );
}
