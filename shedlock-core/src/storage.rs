//! The time-bounded lock algorithm, written once for every backend that stores lock records.
//!
//! A backend with rows or documents (SQL, MongoDB, the in-memory map) implements [`LockStorage`]:
//! a handful of conditional writes. [`StorageBasedLockProvider`] turns it into a
//! [`LockProvider`]: per-acquisition owner identities, the cache of names known to exist,
//! operation timeouts, and the lock handle.

use std::fmt;
use std::pin::pin;
use std::sync::Arc;
use std::sync::Mutex;
use std::task::Poll;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::clock::{Clock, SystemClock};
use crate::error::{LockError, Operation};
use crate::identity::AcquisitionIds;
use crate::provider::{
    Acquisition, Capabilities, LockHandle, LockHolder, LockProvider, TimeSource,
};
use crate::raw::{HandleState, RecentNames, check_extend};
use shedlock_configuration::LockConfiguration;

/// The node's "now", handed to a storage only when the storage declares client time.
///
/// A server-time storage that read the node's clock would let one node with a wrong clock take
/// a lock that is still held; withholding the clock makes that mistake impossible to write.
/// [`StorageBasedLockProvider`] picks the variant from the storage's
/// [`Capabilities::time_source`], so a storage always gets the one its declaration implies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeTime {
    /// The storage declares [`TimeSource::Server`]: the node's clock is withheld; the storage
    /// reads its backend's clock (and, for release, the `locked_at` it stored at acquisition).
    ServerTime,
    /// The storage declares [`TimeSource::Client`]: the node's wall clock at this moment.
    ClientTime(SystemTime),
}

impl NodeTime {
    /// The node's clock for a client-time storage; `None` for a server-time one.
    pub fn client_time(self) -> Option<SystemTime> {
        match self {
            NodeTime::ServerTime => None,
            NodeTime::ClientTime(now) => Some(now),
        }
    }

    /// What a storage declaring `time_source` is given: the node's clock is read only for
    /// client time.
    fn for_storage(time_source: TimeSource, clock: &dyn Clock) -> Self {
        match time_source {
            TimeSource::Server => NodeTime::ServerTime,
            TimeSource::Client => NodeTime::ClientTime(clock.now()),
        }
    }
}

/// What one acquisition writes: ShedLock's `name`, `lock_until`, `locked_at`, `locked_by`.
#[derive(Debug, Clone, Copy)]
pub struct LockRecord<'a> {
    /// The lock's name.
    pub name: &'a str,
    /// This acquisition's identity, unique per acquisition across processes and hosts:
    /// `<holder>#<id>`, the id being 32 lowercase hex digits. Release and extend match on it,
    /// so they only ever touch this acquisition.
    pub locked_by: &'a str,
    /// `lock_until = now + lock_at_most_for`.
    pub lock_at_most_for: Duration,
    /// Kept for release: `lock_until = max(now, locked_at + lock_at_least_for)`.
    pub lock_at_least_for: Duration,
    /// The node's clock at this moment, for a client-time storage only.
    pub now: NodeTime,
    /// This node's last release of the name left the lock free at once (its
    /// `lock_at_least_for` had passed, by the node's clock), and no attempt of this node has
    /// touched the name since. A hint, never a fact: another node may have taken the lock
    /// since, so a take-over must still check `lock_until`. A storage whose take-over reads the
    /// record before it writes (to spare refused attempts a write) may write at once when it is
    /// set, as a node that takes the same lock again and again expects it free.
    pub freed_by_this_node: bool,
}

/// A record this node holds, as release and extend need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRecord {
    /// The lock's name.
    pub name: String,
    /// The identity written at acquisition; release and extend match on it.
    pub locked_by: String,
    /// The node's clock at acquisition (the `locked_at` a client-time storage wrote); a
    /// server-time storage reads the `locked_at` it stored instead.
    pub locked_at: NodeTime,
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
/// A storage holds only what differs between backends: [`StorageBasedLockProvider`] adds
/// what every backend needs the same way (an identity per acquisition, the cache of names
/// known to exist, operation timeouts, the lock handle), so that part cannot be got wrong
/// twice. Each method must be atomic on the backend, because two nodes run it at the same
/// moment and at most one of them may be told `Acquired`. The rules a storage must keep, and the
/// checks that prove them, are in the conformance kit's rulebook (RULES.md in
/// shedlock-conformance); run the kit from the storage's tests.
///
/// Whose clock decides expiry is declared once, in [`capabilities`](Self::capabilities), and
/// the provider honours it: a storage declaring [`TimeSource::Server`] gets
/// [`NodeTime::ServerTime`] and never the node's clock, so it can only compute `now` from its
/// backend (SQL `now()`, Mongo `$$NOW`) and one node's wrong clock cannot break exclusion; a
/// storage declaring [`TimeSource::Client`] gets [`NodeTime::ClientTime`] with the node's clock.
///
/// The trait methods are `async` through [`async_trait`](crate::raw::async_trait), re-exported
/// here so an implementation needs no dependency of its own for it.
///
/// # Example
///
/// A client-time storage on a `HashMap`, wrapped in the provider that turns it into locks:
///
/// ```
/// # #![deny(warnings, unused)]
/// use std::collections::HashMap;
/// use std::sync::{Mutex, MutexGuard, PoisonError};
/// use std::time::{Duration, SystemTime};
///
/// use shedlock_core::raw::{
///     HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome, StorageBasedLockProvider,
///     async_trait,
/// };
/// use shedlock_core::{
///     Capabilities, ErrorKind, LockConfiguration, LockError, LockHolder, LockProvider, Operation,
///     TimeSource,
/// };
///
/// /// ShedLock's record: `lock_until`, `locked_at` and `locked_by` per name.
/// #[derive(Debug)]
/// struct Record {
///     lock_until: SystemTime,
///     locked_at: SystemTime,
///     locked_by: String,
/// }
///
/// #[derive(Debug, Default)]
/// struct MapStorage {
///     records: Mutex<HashMap<String, Record>>,
/// }
///
/// /// The node's clock. This storage declares client time, so the provider always hands it
/// /// over; if it ever did not, guessing a time could free a held lock, so it is an error.
/// fn node_now(now: NodeTime, operation: Operation, name: &str) -> Result<SystemTime, LockError> {
///     let missing = "a client-time storage was given no node time";
///     now.client_time()
///         .ok_or_else(|| LockError::backend_message(ErrorKind::Configuration, "map", operation, name, missing))
/// }
///
/// /// The records, even after a panic elsewhere held their lock: every write below leaves
/// /// the map whole, so one panic must not turn every later acquire into an error.
/// fn records(storage: &MapStorage) -> MutexGuard<'_, HashMap<String, Record>> {
///     storage.records.lock().unwrap_or_else(PoisonError::into_inner)
/// }
///
/// fn held_by(record: &LockRecord<'_>, now: SystemTime) -> Record {
///     Record {
///         lock_until: now + record.lock_at_most_for,
///         locked_at: now,
///         locked_by: record.locked_by.to_owned(),
///     }
/// }
///
/// #[async_trait]
/// impl LockStorage for MapStorage {
///     fn provider_name(&self) -> &'static str {
///         "map"
///     }
///
///     fn capabilities(&self) -> Capabilities {
///         // No `with_extend`: every storage has `extend`, so the provider declares it.
///         Capabilities::new(TimeSource::Client)
///     }
///
///     async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
///         let now = node_now(record.now, Operation::Acquire, record.name)?;
///         let mut records = records(self);
///         if records.contains_key(record.name) {
///             // Held or not: taking an expired record over is update_record's job.
///             return Ok(RecordOutcome::NotAcquired(None));
///         }
///         records.insert(record.name.to_owned(), held_by(record, now));
///         Ok(RecordOutcome::Acquired { fencing_token: None })
///     }
///
///     async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
///         let now = node_now(record.now, Operation::Acquire, record.name)?;
///         let mut records = records(self);
///         match records.get_mut(record.name) {
///             // Deleted behind the name cache's back: the provider inserts it again.
///             None => Ok(RecordOutcome::Missing),
///             Some(existing) if existing.lock_until > now => {
///                 Ok(RecordOutcome::NotAcquired(Some(LockHolder {
///                     locked_by: Some(existing.locked_by.clone()),
///                     held_until: Some(existing.lock_until),
///                 })))
///             }
///             Some(expired) => {
///                 *expired = held_by(record, now);
///                 Ok(RecordOutcome::Acquired { fencing_token: None })
///             }
///         }
///     }
///
///     async fn extend(
///         &self,
///         held: &HeldRecord,
///         lock_at_most_for: Duration,
///         now: NodeTime,
///     ) -> Result<bool, LockError> {
///         let now = node_now(now, Operation::Extend, &held.name)?;
///         let mut records = records(self);
///         match records.get_mut(&held.name) {
///             // Only this acquisition, and only while it still holds the lock.
///             Some(record) if record.locked_by == held.locked_by && record.lock_until > now => {
///                 record.lock_until = now + lock_at_most_for;
///                 Ok(true)
///             }
///             _ => Ok(false),
///         }
///     }
///
///     async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
///         let now = node_now(now, Operation::Release, &held.name)?;
///         let mut records = records(self);
///         match records.get_mut(&held.name) {
///             // The record is kept: ShedLock's readers expect it.
///             Some(record) if record.locked_by == held.locked_by && record.lock_until > now => {
///                 record.lock_until = now.max(record.locked_at + held.lock_at_least_for);
///                 Ok(true)
///             }
///             _ => Ok(false),
///         }
///     }
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), LockError> {
/// let provider = StorageBasedLockProvider::new(MapStorage::default());
/// assert!(provider.capabilities().extend);
///
/// let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
/// let handle = provider.try_lock(&config).await?.into_handle().expect("nobody holds it");
/// assert!(!provider.try_lock(&config).await?.is_acquired(), "held, so refused");
/// assert!(handle.extend(Duration::from_secs(120)).await?);
/// assert!(handle.unlock().await?);
/// assert!(provider.try_lock(&config).await?.is_acquired(), "released, so free");
/// # Ok(())
/// # }
/// ```
#[async_trait]
pub trait LockStorage: Send + Sync + fmt::Debug {
    /// A short provider name for errors and logs (`"postgres"`).
    fn provider_name(&self) -> &'static str;

    /// What this storage promises.
    ///
    /// [`Capabilities::extend`] need not be set: every storage has
    /// [`extend`](Self::extend), so [`StorageBasedLockProvider`] always declares it, whatever
    /// this says. The time source chosen here decides which [`NodeTime`] every call is given.
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
        now: NodeTime,
    ) -> Result<bool, LockError>;

    /// `lock_until = max(now, locked_at + lock_at_least_for)`, only if `locked_by` still matches
    /// and `lock_until > now`. Rows are kept, never deleted. Returns whether a record changed.
    async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError>;
}

/// Names known to have a record, so a new acquisition skips the insert, each with whether this
/// node's own release left it free ([`LockRecord::freed_by_this_node`]). Bounded: the oldest
/// name is forgotten first, which only costs one extra insert attempt later.
type NameCache = RecentNames<bool>;

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
    /// Shared with this node's handles, whose releases mark the names they left free.
    known_names: Arc<Mutex<NameCache>>,
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
            known_names: Arc::new(Mutex::new(NameCache::new(DEFAULT_NAME_CACHE_CAPACITY))),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }

    /// The node's wall clock. It is read only for a storage that declares
    /// [`TimeSource::Client`]; a server-time storage never sees it.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The readable part of `locked_by` (default: the host name). Each acquisition appends
    /// `#<id>`, 32 lowercase hex digits unique to that acquisition across processes and hosts
    /// (the same length as a simple-format UUID), so two processes on one host never release
    /// each other's locks.
    pub fn with_holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// The bound on the cache of names known to exist (0 disables it).
    pub fn with_name_cache_capacity(mut self, capacity: usize) -> Self {
        self.known_names = Arc::new(Mutex::new(NameCache::new(capacity)));
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
        self.known_names().clear();
    }

    /// The storage underneath.
    pub fn storage(&self) -> &Arc<dyn LockStorage> {
        &self.storage
    }

    fn known_names(&self) -> std::sync::MutexGuard<'_, NameCache> {
        lock_names(&self.known_names)
    }

    #[cfg(test)]
    fn is_known(&self, name: &str) -> bool {
        self.known_names().contains(name)
    }

    /// `None` if `name` is not known to have a record, else whether this node's own release
    /// left it free, that hint forgotten as it is handed out: one attempt acts on it, whatever
    /// that attempt finds. One look at the cache answers both.
    fn recall(&self, name: &str) -> Option<bool> {
        self.known_names().get_mut(name).map(std::mem::take)
    }

    fn remember(&self, name: &str) {
        let mut names = self.known_names();
        if !names.contains(name) {
            names.insert(name, false);
        }
    }

    fn forget(&self, name: &str) {
        self.known_names().remove(name);
    }

    /// Writes `record` as the holder: an insert for a name not `known` to exist, else the
    /// conditional update, and an insert again if the update finds the record deleted.
    async fn write_record(
        &self,
        record: &LockRecord<'_>,
        known: bool,
    ) -> Result<RecordOutcome, LockError> {
        let storage = &*self.storage;
        let (timeout, name) = (self.operation_timeout, record.name);
        if !storage.update_creates_missing_record() && !known {
            let inserted = within(
                storage,
                timeout,
                Operation::Acquire,
                name,
                storage.insert_record(record),
            )
            .await?;
            self.remember(name);
            if let RecordOutcome::Acquired { .. } = inserted {
                return Ok(inserted);
            }
        }
        let updated = within(
            storage,
            timeout,
            Operation::Acquire,
            name,
            storage.update_record(record),
        )
        .await;
        match updated {
            Ok(RecordOutcome::Missing) => {
                self.forget(name);
                let inserted = within(
                    storage,
                    timeout,
                    Operation::Acquire,
                    name,
                    storage.insert_record(record),
                )
                .await?;
                self.remember(name);
                Ok(inserted)
            }
            Ok(outcome) => Ok(outcome),
            Err(error) => {
                self.forget(name);
                Err(error)
            }
        }
    }
}

/// The names known to exist, locked. A panic while another call held them would leave the
/// mutex poisoned and, with `unwrap`, fail every later acquisition of this node; the cache only
/// saves round trips, so after a panic it starts over empty instead.
fn lock_names(names: &Mutex<NameCache>) -> std::sync::MutexGuard<'_, NameCache> {
    names.lock().unwrap_or_else(|poisoned| {
        let mut cache = poisoned.into_inner();
        cache.clear();
        names.clear_poison();
        cache
    })
}

async fn within<T>(
    storage: &dyn LockStorage,
    timeout: Duration,
    operation: Operation,
    name: &str,
    future: impl Future<Output = Result<T, LockError>>,
) -> Result<T, LockError> {
    let mut future = pin!(future);
    // An in-process storage answers on its first poll; arming a timer for it (and reading the
    // clock to set it) would cost more than the operation itself. A poll cannot be interrupted
    // anyway, so the limit counts from the moment the operation first has to wait.
    if let Poll::Ready(result) =
        std::future::poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
    {
        return result;
    }
    // Boxed so the timer's state is allocated only by an operation that waits, instead of
    // enlarging (and so copying) every acquisition's future.
    Box::pin(tokio::time::timeout(timeout, future))
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
        let name = config.name();
        self.storage.check_name(name)?;
        let time_source = self.storage.capabilities().time_source;
        let locked_by = AcquisitionIds::process().locked_by(&self.holder);
        let now = NodeTime::for_storage(time_source, &*self.clock);
        let recalled = self.recall(name);
        let record = LockRecord {
            name,
            locked_by: &locked_by,
            lock_at_most_for: config.lock_at_most_for(),
            lock_at_least_for: config.lock_at_least_for(),
            now,
            freed_by_this_node: recalled == Some(true),
        };
        let fencing_token = match self.write_record(&record, recalled.is_some()).await? {
            RecordOutcome::Acquired { fencing_token } => fencing_token,
            RecordOutcome::NotAcquired(holder) => return Ok(Acquisition::NotAcquired(holder)),
            RecordOutcome::Missing => return Ok(Acquisition::NotAcquired(None)),
        };
        // Without a minimum hold, the release frees the lock at once; with one, from the
        // moment it has passed by this node's clock (read only then).
        let least = config.lock_at_least_for();
        let frees_from = (!least.is_zero()).then(|| self.clock.now() + least);
        Ok(Acquisition::Acquired(Box::new(StorageLock {
            storage: self.storage.clone(),
            known_names: self.known_names.clone(),
            frees_from,
            clock: self.clock.clone(),
            operation_timeout: self.operation_timeout,
            time_source,
            held: HeldRecord {
                name: name.to_owned(),
                locked_by,
                locked_at: now,
                lock_at_least_for: config.lock_at_least_for(),
                fencing_token,
            },
            state: HandleState::new(()),
        })))
    }

    fn capabilities(&self) -> Capabilities {
        // `LockStorage::extend` is required, so every storage has it, declared or not.
        self.storage.capabilities().with_extend(true)
    }

    fn provider_name(&self) -> &'static str {
        self.storage.provider_name()
    }
}

/// The handle of one storage-based acquisition.
struct StorageLock {
    storage: Arc<dyn LockStorage>,
    /// The node's name cache, where a release that left the lock free says so.
    known_names: Arc<Mutex<NameCache>>,
    /// When, by the node's clock, a release leaves the lock free at once; `None`: always.
    frees_from: Option<SystemTime>,
    clock: Arc<dyn Clock>,
    operation_timeout: Duration,
    time_source: TimeSource,
    held: HeldRecord,
    /// Whether the acquisition is over. Held across each unlock and extend, so calls on one
    /// handle (shared by several tasks) reach the storage one at a time and a second unlock
    /// waits for the first and answers `false`, whatever the record still says during
    /// `lock_at_least_for`.
    state: HandleState<()>,
}

impl fmt::Debug for StorageLock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageLock")
            .field("provider", &self.storage.provider_name())
            .field("name", &self.held.name)
            .field("locked_by", &self.held.locked_by)
            .field("fencing_token", &self.held.fencing_token)
            .field("state", &self.state)
            .finish()
    }
}

impl StorageLock {
    fn node_time(&self) -> NodeTime {
        NodeTime::for_storage(self.time_source, &*self.clock)
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
        let Some(mut ongoing) = self.state.ongoing().await else {
            return Ok(false);
        };
        let frees = self.frees_from.is_none_or(|from| self.clock.now() >= from);
        let answer = within(
            &*self.storage,
            self.operation_timeout,
            Operation::Release,
            &self.held.name,
            self.storage.unlock(&self.held, self.node_time()),
        )
        .await?;
        if answer && frees {
            // A name no longer cached is left out: its next attempt inserts first anyway. Not a
            // use of the name: a name locked once and released must not outstay a job's.
            if let Some(freed) = lock_names(&self.known_names).peek_mut(&self.held.name) {
                *freed = true;
            }
        }
        // `false` too: the acquisition is not ours any more, so nothing is left to release.
        ongoing.end();
        Ok(answer)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        check_extend(&self.held.name, lock_at_most_for)?;
        let Some(mut ongoing) = self.state.ongoing().await else {
            return Ok(false);
        };
        let extended = within(
            &*self.storage,
            self.operation_timeout,
            Operation::Extend,
            &self.held.name,
            self.storage
                .extend(&self.held, lock_at_most_for, self.node_time()),
        )
        .await?;
        if !extended {
            // Expired or taken: the lock is not this acquisition's any more.
            ongoing.end();
        }
        Ok(extended)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;

    /// Takes every lock and writes down the node time each call was handed.
    #[derive(Debug)]
    struct TimeRecorder {
        time_source: TimeSource,
        seen: Mutex<Vec<(&'static str, NodeTime)>>,
        /// [`LockRecord::freed_by_this_node`] of each take-over, in order.
        freed_hints: Mutex<Vec<bool>>,
        /// What `extend` answers: `true` unless a test says the lock was lost.
        extend_answer: std::sync::atomic::AtomicBool,
        /// What `unlock` answers: `true` unless a test says the lock was lost.
        unlock_answer: std::sync::atomic::AtomicBool,
    }

    impl TimeRecorder {
        fn new(time_source: TimeSource) -> Arc<Self> {
            Arc::new(Self {
                time_source,
                seen: Mutex::new(Vec::new()),
                freed_hints: Mutex::new(Vec::new()),
                extend_answer: std::sync::atomic::AtomicBool::new(true),
                unlock_answer: std::sync::atomic::AtomicBool::new(true),
            })
        }

        fn seen(&self) -> Vec<(&'static str, NodeTime)> {
            self.seen.lock().unwrap().clone()
        }

        fn see(&self, call: &'static str, now: NodeTime) {
            self.seen.lock().unwrap().push((call, now));
        }
    }

    #[async_trait]
    impl LockStorage for TimeRecorder {
        fn provider_name(&self) -> &'static str {
            "recorder"
        }

        fn capabilities(&self) -> Capabilities {
            Capabilities::new(self.time_source)
        }

        async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
            self.see("insert", record.now);
            Ok(RecordOutcome::Acquired {
                fencing_token: None,
            })
        }

        async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
            self.see("update", record.now);
            self.freed_hints
                .lock()
                .unwrap()
                .push(record.freed_by_this_node);
            Ok(RecordOutcome::Acquired {
                fencing_token: None,
            })
        }

        async fn extend(
            &self,
            _held: &HeldRecord,
            _lock_at_most_for: Duration,
            now: NodeTime,
        ) -> Result<bool, LockError> {
            self.see("extend", now);
            Ok(self.extend_answer.load(std::sync::atomic::Ordering::SeqCst))
        }

        async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
            self.see("unlock: locked_at", held.locked_at);
            self.see("unlock", now);
            Ok(self.unlock_answer.load(std::sync::atomic::Ordering::SeqCst))
        }
    }

    /// A node's release that leaves the lock free tells the node's next take-over of the name,
    /// once: a storage may then skip a read it makes to spare refused attempts a write. No
    /// release, a release answered false, or one made within `lock_at_least_for` (by the node's
    /// clock, to the millisecond) says nothing.
    #[tokio::test]
    async fn a_release_that_frees_the_lock_tells_the_next_take_over_once() {
        let storage = TimeRecorder::new(TimeSource::Server);
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH + Duration::from_secs(1000));
        let provider =
            StorageBasedLockProvider::from_arc(storage.clone()).with_clock(Arc::new(clock.clone()));
        let minute = Duration::from_secs(60);
        let at_least = |least| LockConfiguration::new("job", minute, least).unwrap();
        let held = |acquisition: Acquisition| match acquisition {
            Acquisition::Acquired(handle) => handle,
            Acquisition::NotAcquired(_) => panic!("the recorder grants every lock"),
        };
        let free = at_least(Duration::ZERO);
        let ten_seconds = at_least(Duration::from_secs(10));

        // Inserted (a new name), released: the next take-over is told, the one after is not.
        let first = held(provider.try_lock(&free).await.unwrap());
        assert!(first.unlock().await.unwrap());
        let second = held(provider.try_lock(&free).await.unwrap());
        drop(provider.try_lock(&free).await.unwrap());
        // Released, but the storage says the acquisition was not ours any more.
        storage
            .unlock_answer
            .store(false, std::sync::atomic::Ordering::SeqCst);
        assert!(!second.unlock().await.unwrap());
        storage
            .unlock_answer
            .store(true, std::sync::atomic::Ordering::SeqCst);
        // Released a millisecond before lock_at_least_for ends, then as it ends.
        let early = held(provider.try_lock(&ten_seconds).await.unwrap());
        clock.advance(Duration::from_secs(10) - Duration::from_millis(1));
        assert!(early.unlock().await.unwrap());
        let on_time = held(provider.try_lock(&ten_seconds).await.unwrap());
        clock.advance(Duration::from_secs(10));
        assert!(on_time.unlock().await.unwrap());
        drop(provider.try_lock(&free).await.unwrap());

        assert_eq!(
            *storage.freed_hints.lock().unwrap(),
            [true, false, false, false, true],
            "the hint of each take-over: after a release that freed the lock, after none, \
             after one answered false, after one within lock_at_least_for, after one as it ended"
        );
    }

    /// A panic while the name cache was locked poisons its mutex; the node goes on acquiring
    /// (with the cache emptied, so the next acquisition of a name inserts first).
    #[tokio::test]
    async fn a_panic_under_the_name_cache_does_not_stop_the_node() {
        let storage = TimeRecorder::new(TimeSource::Server);
        let provider = Arc::new(StorageBasedLockProvider::from_arc(storage.clone()));
        let config =
            LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
        provider.try_lock(&config).await.unwrap();
        assert!(provider.is_known("job"));
        let poisoner = provider.clone();
        let panicked = std::thread::spawn(move || {
            let _names = poisoner.known_names.lock().unwrap();
            panic!("a panic while the name cache is locked");
        })
        .join();
        assert!(panicked.is_err());

        let acquisition = provider.try_lock(&config).await.unwrap();
        assert!(acquisition.is_acquired());
        let calls: Vec<_> = storage.seen().into_iter().map(|(call, _)| call).collect();
        assert_eq!(
            calls,
            ["insert", "insert"],
            "the emptied cache inserts again"
        );
        assert!(!provider.known_names.is_poisoned());
    }

    /// Lock `job`, held for a minute.
    fn job() -> LockConfiguration {
        LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap()
    }

    /// Takes `job` on `provider`, which must grant it.
    async fn take_job(provider: &StorageBasedLockProvider) -> Box<dyn LockHandle> {
        provider
            .try_lock(&job())
            .await
            .unwrap()
            .into_handle()
            .unwrap()
    }

    /// An extend the storage answers `false` (expired or taken) ends the acquisition: the
    /// handle's release and extend answer `false` without reaching the storage again.
    #[tokio::test]
    async fn an_extend_answered_false_ends_the_acquisition() {
        let storage = TimeRecorder::new(TimeSource::Server);
        storage
            .extend_answer
            .store(false, std::sync::atomic::Ordering::SeqCst);
        let provider = StorageBasedLockProvider::from_arc(storage.clone());
        let handle = take_job(&provider).await;
        assert!(!handle.extend(Duration::from_secs(60)).await.unwrap());
        assert!(!handle.unlock().await.unwrap());
        assert!(!handle.extend(Duration::from_secs(60)).await.unwrap());
        let calls: Vec<_> = storage.seen().into_iter().map(|(call, _)| call).collect();
        assert_eq!(calls, ["insert", "extend"], "nothing sent once it was over");
        assert!(format!("{handle:?}").contains("over: true"), "{handle:?}");
    }

    /// Acquires, extends and releases one lock on `storage`, the node clock stepping 1 s
    /// between calls, then acquires it again (an update: the name is known by then).
    async fn lock_cycle(storage: Arc<TimeRecorder>, clock: &ManualClock) -> Capabilities {
        let provider =
            StorageBasedLockProvider::from_arc(storage).with_clock(Arc::new(clock.clone()));
        let handle = take_job(&provider).await;
        clock.advance(Duration::from_secs(1));
        assert!(handle.extend(Duration::from_secs(60)).await.unwrap());
        clock.advance(Duration::from_secs(1));
        assert!(handle.unlock().await.unwrap());
        assert!(provider.try_lock(&job()).await.unwrap().is_acquired());
        provider.capabilities()
    }

    #[tokio::test]
    async fn server_time_storage_is_never_handed_the_node_clock() {
        let storage = TimeRecorder::new(TimeSource::Server);
        let clock = ManualClock::new(SystemTime::UNIX_EPOCH);
        let capabilities = lock_cycle(storage.clone(), &clock).await;
        assert!(
            capabilities.extend,
            "extend is declared although the storage did not"
        );
        assert_eq!(
            storage.seen(),
            [
                ("insert", NodeTime::ServerTime),
                ("extend", NodeTime::ServerTime),
                ("unlock: locked_at", NodeTime::ServerTime),
                ("unlock", NodeTime::ServerTime),
                ("update", NodeTime::ServerTime),
            ]
        );
    }

    #[tokio::test]
    async fn client_time_storage_is_handed_the_node_clock_of_each_call() {
        let storage = TimeRecorder::new(TimeSource::Client);
        let start = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let clock = ManualClock::new(start);
        let capabilities = lock_cycle(storage.clone(), &clock).await;
        assert!(
            capabilities.extend,
            "extend is declared although the storage did not"
        );
        let at = |secs| NodeTime::ClientTime(start + Duration::from_secs(secs));
        assert_eq!(
            storage.seen(),
            [
                ("insert", at(0)),
                ("extend", at(1)),
                ("unlock: locked_at", at(0)),
                ("unlock", at(2)),
                ("update", at(2)),
            ]
        );
        assert_eq!(at(2).client_time(), Some(start + Duration::from_secs(2)));
        assert_eq!(NodeTime::ServerTime.client_time(), None);
    }
}
