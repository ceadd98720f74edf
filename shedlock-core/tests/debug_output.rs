//! What the `Debug` output of an executor, a provider and a lock handle tells an operator reading
//! a log line: which storage, which node, which lock, which acquisition, and whether it is still
//! held.

use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{
    Acquisition, LockConfiguration, LockHandle, LockProvider, LockingTaskExecutor, SystemClock,
    raw::StorageBasedLockProvider,
};
use shedlock_memory::MemoryLockStore;

fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

async fn acquire(provider: &StorageBasedLockProvider, name: &str) -> Box<dyn LockHandle> {
    match provider.try_lock(&config(name)).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("{name} should be free, got {other:?}"),
    }
}

#[test]
fn executor_shows_its_provider_and_node() {
    let store = MemoryLockStore::new();
    let executor = LockingTaskExecutor::new(store.node_with("node-a", Arc::new(SystemClock)));
    let shown = format!("{executor:?}");
    assert!(shown.starts_with("LockingTaskExecutor"), "{shown}");
    assert!(shown.contains("MemoryLockProvider"), "{shown}");
    assert!(shown.contains(r#""node-a""#), "{shown}");
}

#[test]
fn provider_shows_storage_holder_and_operation_timeout() {
    let provider = StorageBasedLockProvider::new(MemoryLockStore::new())
        .with_holder("node-a")
        .with_operation_timeout(Duration::from_millis(1500));
    let shown = format!("{provider:?}");
    assert!(shown.starts_with("StorageBasedLockProvider"), "{shown}");
    assert!(shown.contains("MemoryLockStore"), "{shown}");
    assert!(shown.contains(r#""node-a""#), "{shown}");
    assert!(shown.contains("1.5s"), "{shown}");
}

#[tokio::test]
async fn handle_shows_provider_lock_holder_and_fencing_token() {
    let provider = StorageBasedLockProvider::new(MemoryLockStore::new()).with_holder("node-a");
    let handle = acquire(&provider, "nightly-report").await;
    let shown = format!("{handle:?}");
    assert!(shown.contains(r#""memory""#), "{shown}");
    assert!(shown.contains(r#""nightly-report""#), "{shown}");
    assert!(
        shown.contains(r#""node-a#"#),
        "the holder with this acquisition's id: {shown}"
    );
    let token = handle.fencing_token().expect("the memory store fences");
    assert!(shown.contains(&format!("Some({token})")), "{shown}");
}

#[tokio::test]
async fn handle_shows_whether_its_acquisition_is_over() {
    let provider = StorageBasedLockProvider::new(MemoryLockStore::new()).with_holder("node-a");
    let handle = acquire(&provider, "nightly-report").await;
    assert!(format!("{handle:?}").contains("over: false"), "{handle:?}");
    assert!(handle.unlock().await.unwrap());
    assert!(format!("{handle:?}").contains("over: true"), "{handle:?}");
}

/// The answer a log line shows for an attempt: taken (and which acquisition), or refused and
/// by whom.
#[tokio::test]
async fn an_acquisition_shows_whether_it_was_taken_and_by_whom() {
    let store = MemoryLockStore::new();
    let (a, b) = (
        StorageBasedLockProvider::new(store.clone()).with_holder("node-a"),
        StorageBasedLockProvider::new(store.clone()).with_holder("node-b"),
    );
    let taken = a.try_lock(&config("nightly-report")).await.unwrap();
    let shown = format!("{taken:?}");
    assert!(shown.starts_with("Acquired("), "{shown}");
    assert!(shown.contains("nightly-report"), "{shown}");
    let refused = b.try_lock(&config("nightly-report")).await.unwrap();
    let shown = format!("{refused:?}");
    assert!(shown.starts_with("NotAcquired("), "{shown}");
    assert!(shown.contains("\"node-a\""), "the holder is named: {shown}");
    assert!(taken.into_handle().unwrap().unlock().await.unwrap());
}

/// Errors name the operation that failed, in the words an operator searches logs for.
#[test]
fn an_error_names_its_operation() {
    use shedlock_core::{ErrorKind, LockError, Operation};
    for (operation, word) in [
        (Operation::Connect, "connect"),
        (Operation::Acquire, "acquire"),
        (Operation::Extend, "extend"),
        (Operation::Release, "release"),
    ] {
        assert_eq!(operation.to_string(), word);
        let error = LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            "memory",
            operation,
            "job",
            "connection reset",
        );
        assert!(error.to_string().contains(word), "{error}");
    }
}
