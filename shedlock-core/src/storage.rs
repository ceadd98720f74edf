//! The time-bounded lock algorithm, written once for every backend that stores lock records.
//!
//! A backend with rows or documents (SQL, MongoDB, the in-memory map) implements [`LockStorage`]:
//! a handful of conditional writes. [`StorageBasedLockProvider`] turns it into a
//! [`LockProvider`]: per-acquisition owner identities, the cache of names known to exist,
//! operation timeouts, and the lock handle.

use std::collections::{HashSet, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::clock::{Clock, SystemClock};
use crate::configuration::LockConfiguration;
use crate::error::{LockError, Operation};
use crate::provider::{
    Acquisition, Capabilities, LockHandle, LockHolder, LockProvider, TimeSource,
};

/// What one acquisition writes: ShedLock's `name`, `lock_until`, `locked_at`, `locked_by`.
#[derive(Debug, Clone, Copy)]
pub struct LockRecord<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// This acquisition's identity, unique per acquisition: `<holder>#<random>`. Release and
    /// extend match on it, so they only ever touch this acquisition.
    pub locked_by: &'a str,
    /// `lock_until = now + lock_at_most_for`.
    pub lock_at_most_for: Duration,
    /// Kept for release: `lock_until = max(now, locked_at + lock_at_least_for)`.
    pub lock_at_least_for: Duration,
    /// The node's clock at this moment. Server-time storages ignore it and use their own `now`.
    pub now: SystemTime,
}

/// A record this node holds, as release and extend need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRecord {
    /// The lock's name.
    pub name: String,
    /// The identity written at acquisition; release and extend match on it.
    pub locked_by: String,
    /// The node's clock at acquisition: `locked_at` for client-time storages.
    pub locked_at: SystemTime,
    /// The minimum hold, counted from `locked_at`.
    pub lock_at_least_for: Duration,
    /// The token the storage returned at acquisition, if it has fencing.
    pub fencing_token: Option<u64>,
}

/// The answer of a conditional insert or update.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordOutcome {
    /// The record now holds this acquisition.
    Acquired {
        /// The new fencing token, for storages with fencing.
        fencing_token: Option<u64>,
    },
    /// The record exists and is held by someone else; described if the storage read it anyway.
    NotAcquired(Option<LockHolder>),
    /// From [`LockStorage::update_record`] only: there is no record for the name at all (it was
    /// deleted by hand, behind the name cache's back). The provider then inserts it at once.
    /// Storages that cannot tell this apart from a held record at no extra cost return
    /// `NotAcquired` instead.
    Missing,
}

/// The statements a record-based backend runs. Each is one conditional write.
///
/// Server-time storages compute `now` themselves (SQL `now()`, Mongo `$$NOW`) and ignore the
/// `now` fields they are given; client-time storages use them.
#[async_trait]
pub trait LockStorage: Send + Sync + fmt::Debug {
    /// A short provider name for errors and logs (`"postgres"`).
    fn provider_name(&self) -> &'static str;

    /// What this storage promises. `extend` is true for every storage: [`extend`](Self::extend)
    /// is part of this trait.
    fn capabilities(&self) -> Capabilities;

    /// Refuses names the storage cannot hold, before anything is written. The default checks
    /// [`Capabilities::max_name_chars`].
    fn check_name(&self, name: &str) -> Result<(), LockError> {
        self.capabilities()
            .check_name_length(self.provider_name(), name)
    }

    /// True when [`update_record`](Self::update_record) also creates a missing record in the
    /// same statement (an upsert), so the provider never needs a separate insert.
    fn update_creates_missing_record(&self) -> bool {
        false
    }

    /// Creates the record, held by `record`, if there is no record for the name. An existing
    /// record, held or not, gives `NotAcquired`, never an error.
    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError>;

    /// Takes over the record if its `lock_until <= now`.
    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError>;

    /// `lock_until = now + lock_at_most_for`, only if `locked_by` still matches and
    /// `lock_until > now`. Returns whether a record changed.
    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        now: SystemTime,
    ) -> Result<bool, LockError>;

    /// `lock_until = max(now, locked_at + lock_at_least_for)`, only if `locked_by` still matches
    /// and `lock_until > now`. Rows are kept, never deleted. Returns whether a record changed.
    async fn unlock(&self, held: &HeldRecord, now: SystemTime) -> Result<bool, LockError>;
}

/// Names known to have a record, so a new acquisition skips the insert. Bounded: the oldest
/// name is forgotten first, which only costs one extra insert attempt later.
#[derive(Debug)]
struct NameCache {
    capacity: usize,
    names: HashSet<String>,
    order: VecDeque<String>,
}

impl NameCache {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            names: HashSet::new(),
            order: VecDeque::new(),
        }
    }

    fn contains(&self, name: &str) -> bool {
        self.names.contains(name)
    }

    fn insert(&mut self, name: &str) {
        if self.capacity == 0 || self.names.contains(name) {
            return;
        }
        while self.names.len() >= self.capacity {
            match self.order.pop_front() {
                Some(oldest) => {
                    self.names.remove(&oldest);
                }
                None => break,
            }
        }
        self.names.insert(name.to_owned());
        self.order.push_back(name.to_owned());
    }

    fn remove(&mut self, name: &str) {
        if self.names.remove(name) {
            self.order.retain(|cached| cached != name);
        }
    }

    fn clear(&mut self) {
        self.names.clear();
        self.order.clear();
    }
}

/// The default name-cache bound: enough for every scheduled task of a large service.
pub const DEFAULT_NAME_CACHE_CAPACITY: usize = 10_000;

/// The default limit on one storage operation before it counts as failed with unknown outcome.
pub const DEFAULT_OPERATION_TIMEOUT: Duration = Duration::from_secs(5);

/// A [`LockProvider`] over any [`LockStorage`]: ShedLock's storage-based algorithm.
///
/// To acquire: if the name is not known to exist, try to insert it (held by us); then, unless the
/// insert took it, try the conditional update of an expired record. A failed update forgets
/// the name, so a record deleted by hand is re-inserted next time.
pub struct StorageBasedLockProvider {
    storage: Arc<dyn LockStorage>,
    clock: Arc<dyn Clock>,
    holder: String,
    known_names: Mutex<NameCache>,
    operation_timeout: Duration,
}

impl fmt::Debug for StorageBasedLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageBasedLockProvider")
            .field("storage", &self.storage)
            .field("holder", &self.holder)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

/// This machine's host name, ShedLock's default `locked_by`.
pub fn default_holder() -> String {
    gethostname::gethostname().to_string_lossy().into_owned()
}

impl StorageBasedLockProvider {
    /// A provider on `storage`, identifying itself by host name, reading the system clock.
    pub fn new(storage: impl LockStorage + 'static) -> Self {
        Self::from_arc(Arc::new(storage))
    }

    /// Like [`new`](Self::new), for a storage shared with other providers.
    pub fn from_arc(storage: Arc<dyn LockStorage>) -> Self {
        Self {
            storage,
            clock: Arc::new(SystemClock),
            holder: default_holder(),
            known_names: Mutex::new(NameCache::new(DEFAULT_NAME_CACHE_CAPACITY)),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }

    /// The node clock handed to client-time storages (and to every storage as `now`).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The readable part of `locked_by` (default: the host name). Each acquisition appends
    /// `#<random>` to it, so two processes on one host never release each other's locks.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// The bound on the cache of names known to exist (0 disables it).
    pub fn with_name_cache_capacity(mut self, capacity: usize) -> Self {
        self.known_names = Mutex::new(NameCache::new(capacity));
        self
    }

    /// The limit on each storage operation; past it the operation fails with
    /// [`LockError::Timeout`] and the task does not run.
    pub fn with_operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Forgets which names are known to exist, as a restarted node would.
    pub fn clear_name_cache(&self) {
        self.known_names.lock().unwrap().clear();
    }

    /// The storage underneath.
    pub fn storage(&self) -> &Arc<dyn LockStorage> {
        &self.storage
    }

    fn is_known(&self, name: &str) -> bool {
        self.known_names.lock().unwrap().contains(name)
    }

    fn remember(&self, name: &str) {
        self.known_names.lock().unwrap().insert(name);
    }

    fn forget(&self, name: &str) {
        self.known_names.lock().unwrap().remove(name);
    }

    fn outcome(&self, record: &LockRecord<'_>, outcome: RecordOutcome) -> Acquisition {
        let fencing_token = match outcome {
            RecordOutcome::Acquired { fencing_token } => fencing_token,
            RecordOutcome::NotAcquired(holder) => return Acquisition::NotAcquired(holder),
            RecordOutcome::Missing => return Acquisition::NotAcquired(None),
        };
        Acquisition::Acquired(Box::new(StorageLock {
            storage: self.storage.clone(),
            clock: self.clock.clone(),
            operation_timeout: self.operation_timeout,
            time_source: self.storage.capabilities().time_source,
            held: HeldRecord {
                name: record.name.to_owned(),
                locked_by: record.locked_by.to_owned(),
                locked_at: record.now,
                lock_at_least_for: record.lock_at_least_for,
                fencing_token,
            },
            released: AtomicBool::new(false),
        }))
    }
}

async fn within<T>(
    storage: &dyn LockStorage,
    timeout: Duration,
    operation: Operation,
    name: &str,
    future: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    tokio::time::timeout(timeout, future)
        .await
        .unwrap_or_else(|_| {
            Err(LockError::Timeout {
                provider: storage.provider_name(),
                operation,
                name: name.to_owned(),
                after: timeout,
            })
        })
}

#[async_trait]
impl LockProvider for StorageBasedLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let storage = &*self.storage;
        let name = config.name();
        storage.check_name(name)?;
        let locked_by = format!("{}#{}", self.holder, uuid::Uuid::new_v4().simple());
        let record = LockRecord {
            name,
            locked_by: &locked_by,
            lock_at_most_for: config.lock_at_most_for(),
            lock_at_least_for: config.lock_at_least_for(),
            now: self.clock.now(),
        };
        let timeout = self.operation_timeout;
        if !storage.update_creates_missing_record() && !self.is_known(name) {
            let inserted = within(
                storage,
                timeout,
                Operation::Acquire,
                name,
                storage.insert_record(&record),
            )
            .await?;
            self.remember(name);
            if let RecordOutcome::Acquired { .. } = inserted {
                return Ok(self.outcome(&record, inserted));
            }
        }
        let updated = within(
            storage,
            timeout,
            Operation::Acquire,
            name,
            storage.update_record(&record),
        )
        .await;
        match updated {
            Ok(outcome @ (RecordOutcome::Acquired { .. } | RecordOutcome::NotAcquired(_))) => {
                Ok(self.outcome(&record, outcome))
            }
            Ok(RecordOutcome::Missing) => {
                self.forget(name);
                let inserted = within(
                    storage,
                    timeout,
                    Operation::Acquire,
                    name,
                    storage.insert_record(&record),
                )
                .await?;
                self.remember(name);
                Ok(self.outcome(&record, inserted))
            }
            Err(error) => {
                self.forget(name);
                Err(error)
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        self.storage.capabilities()
    }
}

/// The handle of one storage-based acquisition.
struct StorageLock {
    storage: Arc<dyn LockStorage>,
    clock: Arc<dyn Clock>,
    operation_timeout: Duration,
    time_source: TimeSource,
    held: HeldRecord,
    released: AtomicBool,
}

impl fmt::Debug for StorageLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageLock")
            .field("provider", &self.storage.provider_name())
            .field("name", &self.held.name)
            .field("locked_by", &self.held.locked_by)
            .field("fencing_token", &self.held.fencing_token)
            .field("released", &self.released.load(Ordering::Relaxed))
            .finish()
    }
}

#[async_trait]
impl LockHandle for StorageLock {
    fn name(&self) -> &str {
        &self.held.name
    }

    fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token
    }

    fn time_source(&self) -> TimeSource {
        self.time_source
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        if self.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        let released = within(
            &*self.storage,
            self.operation_timeout,
            Operation::Release,
            &self.held.name,
            self.storage.unlock(&self.held, self.clock.now()),
        )
        .await?;
        self.released.store(true, Ordering::Release);
        Ok(released)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if lock_at_most_for.is_zero() {
            return Err(crate::ConfigurationError::ZeroLockAtMostFor {
                name: self.held.name.clone(),
            }
            .into());
        }
        if self.released.load(Ordering::Acquire) {
            return Ok(false);
        }
        within(
            &*self.storage,
            self.operation_timeout,
            Operation::Extend,
            &self.held.name,
            self.storage
                .extend(&self.held, lock_at_most_for, self.clock.now()),
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_cache_is_bounded_and_forgets_oldest_first() {
        let mut cache = NameCache::new(2);
        cache.insert("a");
        cache.insert("b");
        cache.insert("a");
        cache.insert("c");
        assert!(!cache.contains("a"));
        assert!(cache.contains("b"));
        assert!(cache.contains("c"));
        cache.remove("b");
        assert!(!cache.contains("b"));
        cache.insert("d");
        assert!(cache.contains("c") && cache.contains("d"));
        cache.clear();
        assert!(!cache.contains("c"));
    }

    #[test]
    fn zero_capacity_cache_remembers_nothing() {
        let mut cache = NameCache::new(0);
        cache.insert("a");
        assert!(!cache.contains("a"));
    }
}
