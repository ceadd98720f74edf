//! Which storage calls a lock costs. This is part of the cost contract (a name a node has seen
//! costs one conditional update, a new name one insert) and of recovery (a record deleted by
//! hand is created again, a failed update is not trusted). The calls are recorded by a wrapper
//! around the in-memory store, which also plays the storage shapes the trait allows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, Capabilities, ErrorKind, LockConfiguration, LockError, LockProvider, Operation,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome, StorageBasedLockProvider},
};
use shedlock_memory::MemoryLockStore;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    Insert,
    Update,
    Extend,
    Unlock,
}

/// What `update_record` answers for a name without a record: the trait allows either.
#[derive(Debug, Clone, Copy)]
enum MissingAnswer {
    Missing,
    NotAcquired,
}

#[derive(Debug)]
struct RecordingStorage {
    store: MemoryLockStore,
    calls: Mutex<Vec<Call>>,
    missing: MissingAnswer,
    /// Declares `update_creates_missing_record`, as an upsert-only storage would.
    upsert: bool,
    max_name_chars: Option<usize>,
    fail_next_update: AtomicBool,
}

impl RecordingStorage {
    fn new(missing: MissingAnswer) -> Arc<Self> {
        Self::with(missing, false, None)
    }

    fn with(missing: MissingAnswer, upsert: bool, max_name_chars: Option<usize>) -> Arc<Self> {
        Arc::new(Self {
            store: MemoryLockStore::new(),
            calls: Mutex::new(Vec::new()),
            missing,
            upsert,
            max_name_chars,
            fail_next_update: AtomicBool::new(false),
        })
    }

    /// The calls made since the last look.
    fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut self.calls.lock().unwrap())
    }

    fn record(&self, call: Call) {
        self.calls.lock().unwrap().push(call);
    }

    fn node(self: &Arc<Self>) -> StorageBasedLockProvider {
        StorageBasedLockProvider::from_arc(self.clone())
    }
}

#[async_trait]
impl LockStorage for RecordingStorage {
    fn provider_name(&self) -> &'static str {
        "recording"
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = self.store.capabilities();
        match self.max_name_chars {
            Some(max) => capabilities.with_max_name_chars(max),
            None => capabilities,
        }
    }

    fn update_creates_missing_record(&self) -> bool {
        self.upsert
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.record(Call::Insert);
        self.store.insert_record(record).await
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.record(Call::Update);
        if self.fail_next_update.swap(false, Ordering::SeqCst) {
            return Err(LockError::backend_message(
                ErrorKind::OutcomeUnknown,
                "recording",
                Operation::Acquire,
                record.name,
                "connection reset",
            ));
        }
        if !self.upsert && self.store.holder(record.name).is_none() {
            return Ok(match self.missing {
                MissingAnswer::Missing => RecordOutcome::Missing,
                MissingAnswer::NotAcquired => RecordOutcome::NotAcquired(None),
            });
        }
        self.store.update_record(record).await
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        self.record(Call::Extend);
        self.store.extend(held, lock_at_most_for, now).await
    }

    async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
        self.record(Call::Unlock);
        self.store.unlock(held, now).await
    }
}

fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

/// Takes the lock and gives it back; panics unless it was free.
async fn cycle(node: &StorageBasedLockProvider, name: &str) {
    let Acquisition::Acquired(handle) = node.try_lock(&config(name)).await.unwrap() else {
        panic!("{name} is free");
    };
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test]
async fn a_new_name_costs_one_insert_and_a_seen_name_one_update() {
    let storage = RecordingStorage::new(MissingAnswer::Missing);
    let node = storage.node();
    cycle(&node, "job").await;
    assert_eq!(storage.take_calls(), [Call::Insert, Call::Unlock]);
    cycle(&node, "job").await;
    assert_eq!(storage.take_calls(), [Call::Update, Call::Unlock]);

    let handle = node.try_lock(&config("job")).await.unwrap().into_handle();
    assert_eq!(handle.as_ref().unwrap().name(), "job");
    assert!(
        handle
            .as_ref()
            .unwrap()
            .extend(Duration::from_secs(60))
            .await
            .unwrap()
    );
    assert_eq!(storage.take_calls(), [Call::Update, Call::Extend]);

    // Another node has not seen the name: its insert finds the record, then the update is
    // refused because the lock is held. From then on it knows the name.
    let other = storage.node();
    assert!(!other.try_lock(&config("job")).await.unwrap().is_acquired());
    assert_eq!(storage.take_calls(), [Call::Insert, Call::Update]);
    assert!(!other.try_lock(&config("job")).await.unwrap().is_acquired());
    assert_eq!(storage.take_calls(), [Call::Update]);
    assert!(handle.unwrap().unlock().await.unwrap());
}

#[tokio::test]
async fn a_record_deleted_by_hand_is_created_again_and_then_known() {
    let storage = RecordingStorage::new(MissingAnswer::Missing);
    let node = storage.node();
    cycle(&node, "job").await;
    storage.take_calls();
    assert!(storage.store.remove_record("job"));
    cycle(&node, "job").await;
    assert_eq!(
        storage.take_calls(),
        [Call::Update, Call::Insert, Call::Unlock]
    );
    cycle(&node, "job").await;
    assert_eq!(storage.take_calls(), [Call::Update, Call::Unlock]);
}

/// A storage that answers "not acquired" for a missing record gives the provider no way to
/// tell; a restarted node (here: a cleared name cache) inserts the record again.
#[tokio::test]
async fn a_cleared_name_cache_inserts_again_what_the_storage_cannot_report_missing() {
    let storage = RecordingStorage::new(MissingAnswer::NotAcquired);
    let node = storage.node();
    cycle(&node, "job").await;
    assert!(storage.store.remove_record("job"));
    storage.take_calls();
    assert!(!node.try_lock(&config("job")).await.unwrap().is_acquired());
    assert_eq!(storage.take_calls(), [Call::Update]);
    node.clear_name_cache();
    cycle(&node, "job").await;
    assert_eq!(storage.take_calls(), [Call::Insert, Call::Unlock]);
}

/// An update that failed may have failed because the record is gone: the next attempt does
/// not trust the name cache and tries the insert first.
#[tokio::test]
async fn a_failed_update_forgets_the_name() {
    let storage = RecordingStorage::new(MissingAnswer::Missing);
    let node = storage.node();
    cycle(&node, "job").await;
    storage.take_calls();
    storage.fail_next_update.store(true, Ordering::SeqCst);
    let error = node.try_lock(&config("job")).await.unwrap_err();
    assert!(error.to_string().contains("connection reset"), "{error}");
    assert_eq!(storage.take_calls(), [Call::Update]);
    cycle(&node, "job").await;
    assert_eq!(
        storage.take_calls(),
        [Call::Insert, Call::Update, Call::Unlock]
    );
}

#[tokio::test]
async fn the_name_cache_keeps_at_most_its_capacity() {
    let storage = RecordingStorage::new(MissingAnswer::Missing);
    let node = storage.node().with_name_cache_capacity(1);
    cycle(&node, "a").await;
    cycle(&node, "b").await;
    storage.take_calls();
    cycle(&node, "b").await;
    assert_eq!(
        storage.take_calls(),
        [Call::Update, Call::Unlock],
        "b is known"
    );
    cycle(&node, "a").await;
    assert_eq!(
        storage.take_calls(),
        [Call::Insert, Call::Update, Call::Unlock],
        "a was forgotten to make room for b"
    );

    let uncached = storage.node().with_name_cache_capacity(0);
    for _ in 0..2 {
        cycle(&uncached, "a").await;
        assert_eq!(
            storage.take_calls(),
            [Call::Insert, Call::Update, Call::Unlock]
        );
    }
}

/// A job that runs between the new names stays known, however many new names there are: each
/// of its runs costs the update alone, never the insert attempt a forgotten name costs.
#[tokio::test]
async fn a_name_acquired_between_new_names_stays_known() {
    let storage = RecordingStorage::new(MissingAnswer::Missing);
    let node = storage.node().with_name_cache_capacity(2);
    cycle(&node, "hot").await;
    for n in 0..20 {
        cycle(&node, &format!("tenant-{n}")).await;
        storage.take_calls();
        cycle(&node, "hot").await;
        assert_eq!(
            storage.take_calls(),
            [Call::Update, Call::Unlock],
            "hot stayed known past {n} new names"
        );
    }
}

/// A forgotten name leaves room in the cache: the oldest name still cached is the next to go.
#[tokio::test]
async fn a_forgotten_name_leaves_the_eviction_order_of_the_others_intact() {
    let storage = RecordingStorage::new(MissingAnswer::Missing);
    let node = storage.node().with_name_cache_capacity(2);
    cycle(&node, "a").await;
    cycle(&node, "b").await;
    storage.fail_next_update.store(true, Ordering::SeqCst);
    node.try_lock(&config("a")).await.unwrap_err();
    cycle(&node, "c").await;
    cycle(&node, "d").await;
    storage.take_calls();
    cycle(&node, "c").await;
    assert_eq!(
        storage.take_calls(),
        [Call::Update, Call::Unlock],
        "c is known"
    );
    cycle(&node, "b").await;
    assert_eq!(
        storage.take_calls(),
        [Call::Insert, Call::Update, Call::Unlock],
        "b, the oldest, made room for d"
    );
}

#[tokio::test]
async fn a_storage_whose_update_creates_the_record_is_sent_only_updates() {
    let storage = RecordingStorage::with(MissingAnswer::Missing, true, None);
    let node = storage.node();
    cycle(&node, "job").await;
    assert_eq!(storage.take_calls(), [Call::Update, Call::Unlock]);
    assert!(storage.store.remove_record("job"));
    cycle(&node, "job").await;
    assert_eq!(storage.take_calls(), [Call::Update, Call::Unlock]);
}

#[tokio::test]
async fn a_name_over_the_declared_limit_is_refused_before_any_call() {
    let storage = RecordingStorage::with(MissingAnswer::Missing, false, Some(8));
    let node = storage.node();
    let error = node.try_lock(&config("123456789")).await.unwrap_err();
    assert!(matches!(error, LockError::InvalidName { .. }), "{error:?}");
    assert!(error.to_string().contains("123456789"), "{error}");
    assert_eq!(storage.take_calls(), []);
    cycle(&node, "12345678").await;
    assert_eq!(storage.take_calls(), [Call::Insert, Call::Unlock]);
}

/// ShedLock writes the host name as `locked_by`; operators read it to find the node.
#[tokio::test]
async fn locked_by_names_the_host_by_default() {
    let store = MemoryLockStore::new();
    let node = StorageBasedLockProvider::new(store.clone());
    let handle = node.try_lock(&config("job")).await.unwrap().into_handle();
    let locked_by = store.holder("job").unwrap().locked_by.unwrap();
    let host = gethostname::gethostname().to_string_lossy().into_owned();
    assert!(!host.is_empty());
    // Shown as the holder's name: the acquisition's id stored after it is left out.
    assert_eq!(locked_by, host);
    assert!(handle.unwrap().unlock().await.unwrap());
}
