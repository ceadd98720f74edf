//! What the in-process store does with input no backend could keep: a duration its clock
//! cannot count to is refused with an error, before anything is stored, and never panics (a
//! panic under the store's mutex would poison it for every node); names are data of any length
//! and any characters.

use std::time::Duration;

use shedlock_core::{
    Acquisition, LockAdmin, LockConfiguration, LockError, LockProvider, Operation, PageRequest,
};
use shedlock_memory::MemoryLockStore;

const MINUTE: Duration = Duration::from_secs(60);

fn config(name: &str, at_most: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, Duration::ZERO).unwrap()
}

#[track_caller]
fn assert_refused(error: &LockError, operation: Operation) {
    assert!(
        matches!(error, LockError::Backend { operation: refused, source: None, .. } if *refused == operation),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("past the latest time this store's clock can count")
            && text.ends_with("nothing was written"),
        "{text}"
    );
}

#[tokio::test]
async fn a_duration_past_the_clocks_range_is_refused_and_the_store_keeps_working() {
    let store = MemoryLockStore::new();
    let node = store.node();
    let error = node
        .try_lock(&config("forever", Duration::MAX))
        .await
        .unwrap_err();
    assert_refused(&error, Operation::Acquire);
    assert!(store.inspect_lock("forever").await.unwrap().is_none());
    // A second try, now that the name is known to the node's cache: the update path.
    let error = node
        .try_lock(&config("forever", Duration::MAX))
        .await
        .unwrap_err();
    assert_refused(&error, Operation::Acquire);
    assert!(store.inspect_lock("forever").await.unwrap().is_none());

    // The store is not poisoned: every node goes on, the first one included.
    for node in [&node, &store.node()] {
        let handle = node
            .try_lock(&config("daily", MINUTE))
            .await
            .unwrap()
            .into_handle()
            .expect("free");
        let held_until = store
            .inspect_lock("daily")
            .await
            .unwrap()
            .unwrap()
            .held_until;
        let error = handle.extend(Duration::MAX).await.unwrap_err();
        assert_refused(&error, Operation::Extend);
        let after = store.inspect_lock("daily").await.unwrap().unwrap();
        assert_eq!(
            after.held_until, held_until,
            "the refused extend changed nothing"
        );
        assert!(handle.unlock().await.unwrap());
    }
    let page = store.list_locks(&PageRequest::first("")).await.unwrap();
    assert_eq!(page.locks.len(), 1, "{page:?}");

    // A thousand years is counted as any other duration.
    let millennium = Duration::from_secs(1000 * 365 * 24 * 60 * 60);
    let handle = node
        .try_lock(&config("millennium", millennium))
        .await
        .unwrap()
        .into_handle()
        .expect("free");
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test]
async fn names_with_any_characters_and_of_any_length_are_locks_of_their_own() {
    let store = MemoryLockStore::new();
    let node = store.node();
    let mib = "x".repeat(1 << 20);
    let names = [
        "ab",
        "a\0b",
        "a\nb",
        "a\u{1b}[2Jb",
        "a:b",
        "a/b",
        "..",
        &mib,
    ];
    let mut held = Vec::new();
    for name in names {
        match node.try_lock(&config(name, MINUTE)).await.unwrap() {
            Acquisition::Acquired(handle) => held.push(handle),
            other => panic!("{:?} merged with another name: {other:?}", &name[..2]),
        }
    }
    let page = store.list_locks(&PageRequest::first("")).await.unwrap();
    assert_eq!(page.locks.len(), names.len());
    for handle in held {
        assert!(handle.unlock().await.unwrap());
    }
}

/// An acquisition id of another shape than the ids this store gives is the caller's mistake,
/// refused as such (not answered `false`, as if the lock had changed hands); the lock stays.
#[tokio::test]
async fn a_malformed_acquisition_id_is_refused_and_frees_nothing() {
    let store = MemoryLockStore::new();
    let node = store.node();
    let held = node
        .try_lock(&config("held", MINUTE))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let seen = store.inspect_lock("held").await.unwrap().unwrap();
    for malformed in ["no-such-shape", "1", "x@1/h", "1@x/h", "+1@2/h", "1@2"] {
        let error = store
            .force_unlock("held", &shedlock_core::AcquisitionId::new(malformed))
            .await
            .unwrap_err();
        assert!(
            matches!(
                &error,
                LockError::InvalidRequest {
                    provider: "memory",
                    operation: Operation::ForceUnlock,
                    name,
                    ..
                } if name == "held"
            ),
            "{malformed:?}: {error:?}"
        );
        assert!(
            error.to_string().contains(&format!(
                "acquisition id {malformed:?} is not one the memory provider produced"
            )),
            "{error}"
        );
    }
    let after = store.inspect_lock("held").await.unwrap().unwrap();
    assert_eq!(
        (after.state, &after.acquisition, after.held_until),
        (seen.state, &seen.acquisition, seen.held_until)
    );
    assert!(store.force_unlock("held", &seen.acquisition).await.unwrap());
    assert!(!held.unlock().await.unwrap());
}
