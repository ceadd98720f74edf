//! The records, kept in a map behind one mutex: each statement is atomic by construction.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use shedlock_core::{
    AcquisitionId, Capabilities, Clock, ErrorKind, LockAdmin, LockError, LockHolder, LockInfo,
    LockPage, LockState, Operation, PageCursor, PageRequest, TimeSource,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome},
};

/// One lock's record, shaped like ShedLock's row, plus the fencing counter.
#[derive(Debug, Clone)]
struct Record {
    lock_until: SystemTime,
    locked_at: SystemTime,
    locked_by: String,
    /// The token of the acquisition that wrote this record; 0 for a record planted by
    /// [`MemoryLockStore::put_record`], which no acquisition of this store wrote.
    fencing_token: u64,
}

#[derive(Debug, Default)]
struct Records {
    by_name: HashMap<String, Record, foldhash::fast::RandomState>,
    /// The last fencing token issued, for any name: one counter for the store means a token
    /// never repeats, even after a record is removed.
    last_fencing_token: u64,
}

/// The shared lock table. Clones share the same records.
#[derive(Debug, Clone)]
pub struct MemoryLockStore {
    records: Arc<Mutex<Records>>,
    clock: Arc<dyn Clock>,
}

impl MemoryLockStore {
    /// The records, locked. A panic while another call held them (a caller's task aborted
    /// mid-call, a bug) does not lock every later call out: each change under this guard is
    /// one assignment made after every check, so no record is ever left half-written, and the
    /// mutex's poison flag is ignored.
    fn records(&self) -> MutexGuard<'_, Records> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A new empty store whose expiry decisions read `clock` (a [`shedlock_core::raw::ManualClock`]
    /// gives tests exact control of time).
    pub fn with_clock(clock: Arc<dyn Clock>) -> Self {
        Self {
            records: Arc::new(Mutex::new(Records::default())),
            clock,
        }
    }

    /// The holder and expiry of `name`, as a skipped run reports it; `None` if never locked.
    pub fn holder(&self, name: &str) -> Option<LockHolder> {
        let records = self.records();
        records.by_name.get(name).map(describe)
    }

    /// Deletes the record of `name`, as an operator freeing a stuck lock by hand would; returns
    /// whether there was one. Fencing tokens keep increasing: they come from a store-wide counter.
    pub fn remove_record(&self, name: &str) -> bool {
        self.records().by_name.remove(name).is_some()
    }

    /// Creates or overwrites the record for `name` as another program would have left it
    /// (Java ShedLock, a crashed node), for migration and conformance tests.
    pub fn put_record(
        &self,
        name: &str,
        lock_until: SystemTime,
        locked_at: SystemTime,
        locked_by: &str,
    ) {
        let mut records = self.records();
        records.by_name.insert(
            name.to_owned(),
            Record {
                lock_until,
                locked_at,
                locked_by: locked_by.to_owned(),
                fencing_token: 0,
            },
        );
    }
}

fn describe(record: &Record) -> LockHolder {
    LockHolder::from_stored(Some(&record.locked_by), Some(record.lock_until))
}

/// `duration` after `now`, or an error when the clock cannot count that far (a duration of
/// hundreds of billions of years, such as `Duration::MAX`): refused before the records are
/// touched, never a panic, which would leave the store's mutex poisoned for every node.
fn deadline(
    now: SystemTime,
    duration: Duration,
    operation: Operation,
    name: &str,
) -> Result<SystemTime, LockError> {
    now.checked_add(duration).ok_or_else(|| {
        LockError::backend_message(
            ErrorKind::Limit,
            "memory",
            operation,
            name,
            format!(
                "lock_at_most_for {duration:?} ends past the latest time this store's clock can \
                 count; nothing was written"
            ),
        )
    })
}

impl Record {
    /// Makes `record` the holder until `lock_until`. The record is overwritten in place,
    /// reusing its `locked_by` buffer: a name taken over and over allocates nothing here.
    fn hold(
        &mut self,
        record: &LockRecord<'_>,
        now: SystemTime,
        lock_until: SystemTime,
        fencing_token: u64,
    ) {
        self.lock_until = lock_until;
        self.locked_at = now;
        self.locked_by.clear();
        self.locked_by.push_str(record.locked_by);
        self.fencing_token = fencing_token;
    }

    /// This acquisition as [`LockAdmin::force_unlock`] compares it: the fencing token is
    /// unique per acquisition, and a planted record (token 0) is told apart by its holder and
    /// time, as a Java node's host name alone would not be.
    fn acquisition(&self) -> AcquisitionId {
        let locked_at = self
            .locked_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos();
        AcquisitionId::new(format!(
            "{}@{locked_at}/{}",
            self.fencing_token, self.locked_by
        ))
    }

    fn info(&self, name: &str, now: SystemTime) -> LockInfo {
        let info = LockInfo::new(name, LockState::Free, self.acquisition())
            .with_locked_by(&self.locked_by)
            .with_locked_at(self.locked_at)
            .judged_at(self.lock_until, now);
        match self.fencing_token {
            0 => info,
            token => info.with_fencing_token(token),
        }
    }
}

impl Records {
    /// Creates the record of a name that has none, held by `record` until `lock_until`.
    fn insert_held(
        &mut self,
        record: &LockRecord<'_>,
        now: SystemTime,
        lock_until: SystemTime,
    ) -> RecordOutcome {
        let fencing_token = self.next_fencing_token();
        self.by_name.insert(
            record.name.to_owned(),
            Record {
                lock_until,
                locked_at: now,
                locked_by: record.locked_by.to_owned(),
                fencing_token,
            },
        );
        acquired(fencing_token)
    }

    fn next_fencing_token(&mut self) -> u64 {
        self.last_fencing_token += 1;
        self.last_fencing_token
    }
}

fn acquired(fencing_token: u64) -> RecordOutcome {
    RecordOutcome::Acquired {
        fencing_token: Some(fencing_token),
    }
}

#[async_trait]
impl LockStorage for MemoryLockStore {
    fn provider_name(&self) -> &'static str {
        "memory"
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_time_precision(Duration::from_nanos(1))
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        let now = self.clock.now();
        let until = deadline(
            now,
            record.lock_at_most_for,
            Operation::Acquire,
            record.name,
        )?;
        let mut records = self.records();
        if let Some(existing) = records.by_name.get(record.name) {
            return Ok(RecordOutcome::NotAcquired(Some(describe(existing))));
        }
        Ok(records.insert_held(record, now, until))
    }

    /// Under the one mutex an upsert costs no more than an update, and it spares every
    /// acquisition the provider's lookup of names known to exist.
    fn update_creates_missing_record(&self) -> bool {
        true
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        let now = self.clock.now();
        let until = deadline(
            now,
            record.lock_at_most_for,
            Operation::Acquire,
            record.name,
        )?;
        let mut records = self.records();
        let Records {
            by_name,
            last_fencing_token,
        } = &mut *records;
        match by_name.get_mut(record.name) {
            None => Ok(records.insert_held(record, now, until)),
            Some(existing) if existing.lock_until > now => {
                Ok(RecordOutcome::NotAcquired(Some(describe(existing))))
            }
            Some(expired) => {
                *last_fencing_token += 1;
                expired.hold(record, now, until, *last_fencing_token);
                Ok(acquired(*last_fencing_token))
            }
        }
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        _server_time: NodeTime,
    ) -> Result<bool, LockError> {
        let now = self.clock.now();
        let until = deadline(now, lock_at_most_for, Operation::Extend, &held.name)?;
        let mut records = self.records();
        match records.by_name.get_mut(&held.name) {
            Some(record) if record.locked_by == held.locked_by && record.lock_until > now => {
                record.lock_until = until;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn unlock(&self, held: &HeldRecord, _server_time: NodeTime) -> Result<bool, LockError> {
        let now = self.clock.now();
        let mut records = self.records();
        match records.by_name.get_mut(&held.name) {
            Some(record) if record.locked_by == held.locked_by && record.lock_until > now => {
                // lock_at_least_for is at most the lock_at_most_for this acquisition was
                // stored with, so the sum was counted once already.
                record.lock_until = record
                    .locked_at
                    .checked_add(held.lock_at_least_for)
                    .map_or(record.lock_until, |at_least| now.max(at_least));
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// Whether `acquisition` has the shape [`Record::acquisition`] gives ids:
/// `<fencing token>@<nanoseconds>/<holder>`.
fn is_acquisition_id(acquisition: &AcquisitionId) -> bool {
    let digits = |text: &str| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    acquisition
        .as_str()
        .split_once('/')
        .and_then(|(write, _holder)| write.split_once('@'))
        .is_some_and(|(token, nanos)| {
            digits(token)
                && token.parse::<u64>().is_ok()
                && digits(nanos)
                && nanos.parse::<u128>().is_ok()
        })
}

/// The store's own view for operators: every record, judged by the store's clock.
#[async_trait]
impl LockAdmin for MemoryLockStore {
    /// Pages in name order; the cursor is the last name of the previous page.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let now = self.clock.now();
        let records = self.records();
        let after = request.after.as_ref().map(PageCursor::as_str);
        let mut names: Vec<&String> = records
            .by_name
            .keys()
            .filter(|name| name.starts_with(&request.prefix))
            .filter(|name| after.is_none_or(|after| name.as_str() > after))
            .collect();
        names.sort_unstable();
        let more = names.len() > request.limit;
        names.truncate(request.limit);
        let locks: Vec<LockInfo> = names
            .iter()
            .map(|name| records.by_name[*name].info(name, now))
            .collect();
        let next = match (more, locks.last()) {
            (true, Some(last)) => Some(PageCursor::new(last.name.clone())),
            _ => None,
        };
        Ok(LockPage { locks, next })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let now = self.clock.now();
        let records = self.records();
        Ok(records
            .by_name
            .get(name)
            .map(|record| record.info(name, now)))
    }

    /// Frees by setting `lock_until` to now: the record stays, as after a release.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        if !is_acquisition_id(acquisition) {
            return Err(LockError::invalid_request(
                self.provider_name(),
                Operation::ForceUnlock,
                name,
                format!(
                    "acquisition id {:?} is not one the memory provider produced \
                     (<fencing token>@<nanoseconds since the epoch>/<holder>, as a listing or \
                     inspect shows it); nothing was changed",
                    acquisition.as_str()
                ),
            ));
        }
        let now = self.clock.now();
        let mut records = self.records();
        match records.by_name.get_mut(name) {
            Some(record) if record.lock_until > now && record.acquisition() == *acquisition => {
                record.lock_until = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_core::{LockConfiguration, LockProvider, SystemClock};

    /// One panic under the store's mutex used to poison it, and every later call on every
    /// node then panicked in turn.
    #[tokio::test]
    async fn a_panic_under_the_mutex_does_not_lock_out_later_calls() {
        let store = MemoryLockStore::with_clock(Arc::new(SystemClock));
        let poisoner = store.clone();
        let panicked = std::thread::spawn(move || {
            let _records = poisoner.records.lock().unwrap();
            panic!("a panic while the records are locked");
        })
        .join();
        assert!(panicked.is_err());
        assert!(store.records.is_poisoned());

        let configuration =
            LockConfiguration::new("after-panic", Duration::from_secs(60), Duration::ZERO).unwrap();
        let node = store.node_with("after-panic-node", Arc::new(SystemClock));
        let acquisition = node.try_lock(&configuration).await.unwrap();
        assert!(
            acquisition.is_acquired(),
            "a free name must be taken after the panic"
        );
        let holder = store
            .holder("after-panic")
            .and_then(|holder| holder.locked_by);
        assert!(
            holder
                .as_deref()
                .is_some_and(|holder| holder.starts_with("after-panic-node")),
            "held by {holder:?}"
        );
        let again = store.node().try_lock(&configuration).await.unwrap();
        assert!(
            !again.is_acquired(),
            "the lock taken after the panic must be held"
        );
    }
}
