//! `locked_by` is `<holder>#<id>`, the id 32 lowercase hex digits unique per acquisition: across
//! acquisitions, across providers of one process, and across processes, even when every node
//! uses the same holder (two processes on one host).

use std::collections::HashSet;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{LockAdmin, LockConfiguration, LockProvider, MonotonicClock};
use shedlock_memory::{MemoryLockProvider, MemoryLockStore};

const HOLDER: &str = "host";
const CHILD_TEST: &str = "acquisitions_of_a_child_process";
const CHILD_LINE: &str = "locked_by: ";

fn node(store: &MemoryLockStore) -> MemoryLockProvider {
    store.node_with(HOLDER, Arc::new(MonotonicClock::new()))
}

/// Acquires and releases `job` `count` times on each node in turn, reading back the
/// `locked_by` each acquisition wrote.
async fn locked_by_values(
    store: &MemoryLockStore,
    nodes: &[MemoryLockProvider],
    count: usize,
) -> Vec<String> {
    let config = LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
    let mut values = Vec::new();
    for _ in 0..count {
        for node in nodes {
            let handle = node
                .try_lock(&config)
                .await
                .unwrap()
                .into_handle()
                .expect("released last time, so free");
            // The stored value, as the acquisition id carries it (`<token>@<nanos>/<locked_by>`):
            // what is shown as the holder leaves the id out.
            let held = store.node().inspect_lock("job").await.unwrap().unwrap();
            let (_, locked_by) = held.acquisition.as_str().split_once('/').unwrap();
            values.push(locked_by.to_owned());
            assert!(handle.unlock().await.unwrap());
        }
    }
    values
}

fn id(locked_by: &str) -> &str {
    let id = locked_by
        .strip_prefix(HOLDER)
        .and_then(|rest| rest.strip_prefix('#'))
        .unwrap_or_else(|| panic!("{locked_by:?} is not `{HOLDER}#<id>`"));
    assert!(
        id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
        "{locked_by:?}: the id is not 32 lowercase hex digits"
    );
    id
}

fn assert_unique<'a>(values: impl IntoIterator<Item = &'a String>) -> HashSet<&'a str> {
    let mut ids = HashSet::new();
    for locked_by in values {
        assert!(ids.insert(id(locked_by)), "{locked_by:?} was written twice");
    }
    ids
}

#[tokio::test]
async fn locked_by_is_unique_across_acquisitions_and_providers() {
    let store = MemoryLockStore::new();
    let values = locked_by_values(&store, &[node(&store), node(&store)], 5_000).await;
    assert_eq!(assert_unique(&values).len(), 10_000);
}

#[test]
fn locked_by_is_unique_across_processes() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--ignored", "--exact", CHILD_TEST, "--nocapture"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the child process failed: {output:?}"
    );
    let stdout = String::from_utf8(output.stdout).unwrap();
    let child: Vec<String> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix(CHILD_LINE))
        .map(str::to_owned)
        .collect();
    assert_eq!(child.len(), 1_000, "the child reported {stdout:?}");

    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let store = MemoryLockStore::new();
    let ours = runtime.block_on(locked_by_values(&store, &[node(&store)], 1_000));
    assert_eq!(assert_unique(ours.iter().chain(&child)).len(), 2_000);
    // What keeps two processes apart is the prefix each draws at random when it starts.
    assert_ne!(id(&ours[0])[..16], id(&child[0])[..16]);
}

#[tokio::test]
#[ignore = "the child process of locked_by_is_unique_across_processes, which runs it"]
async fn acquisitions_of_a_child_process() {
    let store = MemoryLockStore::new();
    for locked_by in locked_by_values(&store, &[node(&store)], 1_000).await {
        println!("{CHILD_LINE}{locked_by}");
    }
}
