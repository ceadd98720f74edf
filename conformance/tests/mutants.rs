//! The kit's own proof that it catches broken providers: each mutant breaks one rule, and the
//! check that holds providers to that rule must fail on it, quoting that rule. The same store
//! without a defect passes every check, so the failures come from the defects, not from the
//! store. Every rule of the rulebook has at least one mutant here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use libtest_mimic::{Arguments, Failed, Trial};
use shedlock_conformance::{
    CASES_VARIABLE, Check, ConformanceHarness, ModelSettings, NameSpace, PlantedRecord, Rule,
    SEED_VARIABLE, SetupError, Status, Support, Verdict, async_trait, check_model,
    check_model_with,
};
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, Clock, ErrorKind, LockAdmin, LockConfiguration,
    LockError, LockHandle, LockHolder, LockInfo, LockPage, LockProvider, LockState, MonotonicClock,
    Operation, PageCursor, PageRequest, SystemClock, TimeSource,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome, StorageBasedLockProvider},
};

/// The one rule a mutant breaks, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defect {
    /// No defect: the reference the mutants are compared with.
    None,
    /// A fresh name can never be taken: the insert answers "not acquired".
    InsertRefused,
    /// A held lock is an error instead of "not acquired".
    ErrorsWhenHeld,
    /// Release never answers (and the provider sets no timeout of its own).
    HangsOnRelease,
    /// Two nodes can both see a free record and both write it (check, then act).
    RacyAcquire,
    /// An unreleased lock never expires.
    NeverExpires,
    /// An unreleased lock expires at 80 % of `lock_at_most_for`.
    ExpiresEarly,
    /// Release frees the lock at once, whatever `lock_at_least_for` says.
    IgnoresAtLeast,
    /// Release holds the lock for `lock_at_least_for` from the release, not the acquisition.
    AtLeastFromRelease,
    /// Taking over an existing record keeps its old `locked_at`.
    TakeoverKeepsLockedAt,
    /// Extend moves `locked_at` too, so a later release counts at-least from the extend.
    ExtendMovesLockedAt,
    /// Extend counts the new at-most from the acquisition, not from the extend.
    ExtendCountsFromAcquire,
    /// Declares extend, but answers `false` and changes nothing, even for the holder.
    ExtendRefused,
    /// Release deletes the record, whoever holds it.
    ReleaseDeletesWhoeverHolds,
    /// Extend moves the record's expiry, whoever holds it.
    ExtendsWhoeverHolds,
    /// Release ignores whether the acquisition expired (it checks the holder only).
    ReleaseIgnoresExpiry,
    /// The handle keeps no memory of its release: a second release or an extend after the
    /// release reach the record, which still names this holder during the at-least hold.
    HandleForgetsRelease,
    /// Declares server time but acquires with the node's (skewed) clock.
    TrustsClientClock,
    /// Declares server time but releases with the node's clock.
    ReleaseTrustsClientClock,
    /// Declares server time but extends with the node's clock.
    ExtendTrustsClientClock,
    /// Declares client time but reads the machine's clock, not the one it was given.
    IgnoresGivenClock,
    /// Declares fencing, but each node counts its own tokens.
    FencingPerNode,
    /// Declares no extend, yet extends.
    HidesExtend,
    /// Answers "not acquired" when its backend is down.
    NotAcquiredWhenDown,
    /// Declares a 64-character limit but truncates longer names instead of refusing them.
    TruncatesLongNames,
    /// Declares a 64-character limit but stores at most 64 bytes of a name.
    TruncatesBytes,
    /// Declares a 64-character limit but refuses names over 12 characters.
    RefusesNamesWithinLimit,
    /// Keys records by the lower-cased name.
    FoldsCase,
    /// Keys records by the name without combining marks (as an accent-insensitive collation).
    StripsCombiningMarks,
    /// The insert overwrites whatever record exists: only the name cache kept it from running.
    InsertOverwritesHeld,
    /// Takes over only records it wrote itself (`locked_by` with `#`), not Java ShedLock's.
    IgnoresForeignRecords,
    /// The harness cannot make a node.
    HarnessCannotConnect,
    /// Force-unlock frees whoever holds the lock, not only the acquisition it names.
    ForceUnlockIgnoresAcquisition,
    /// Force-unlock answers true but leaves the lock held.
    ForceUnlockLeavesItHeld,
    /// Force-unlock reads "now" before it waits for the record, then judges "still held" by
    /// it: a force-unlock that waited behind another sees that one's later "now" as ahead.
    ForceUnlockJudgesByAnEarlierNow,
    /// The handle remembers its release only once the store answered: unlocks sent together
    /// all pass the "already released?" test.
    ReleaseRememberedLate,
    /// A listing reads its prefix as a SQL `LIKE` pattern (`%`, `_` unescaped).
    PrefixIsAPattern,
    /// Each page after the first starts at its cursor's name, not after it: that lock is listed
    /// twice.
    PagesRepeatTheirCursor,
    /// A listing shows every record as held, expired or not.
    EveryRecordHeld,
    /// A listing leaves out the holder its refused acquisitions name.
    ListsNoHolder,
    /// Declares listing unsupported (`list_locks` answers `Unsupported`) only while no lock
    /// matches the prefix, as a scan that fails on an empty result would.
    ListingUnsupportedWhenEmpty,
    /// Not a defect: offers inspect and force-unlock but no listing, every time.
    NoListing,
}

/// Each mutant, the check that must catch it, and the rule that check must quote.
const MUTANTS: &[(Defect, Check, Rule)] = &[
    (
        Defect::InsertRefused,
        Check::AcquireSkipRelease,
        Rule::FREE_LOCK_IS_TAKEN,
    ),
    (
        Defect::ErrorsWhenHeld,
        Check::AcquireSkipRelease,
        Rule::THREE_OUTCOMES,
    ),
    (
        Defect::HangsOnRelease,
        Check::AcquireSkipRelease,
        Rule::BOUNDED_TIME,
    ),
    (
        Defect::RacyAcquire,
        Check::MutualExclusion,
        Rule::MUTUAL_EXCLUSION,
    ),
    (Defect::NeverExpires, Check::AtMostExpiry, Rule::AT_MOST),
    (Defect::ExpiresEarly, Check::AtMostExpiry, Rule::AT_MOST),
    (Defect::IgnoresAtLeast, Check::AtLeastHold, Rule::AT_LEAST),
    (
        Defect::AtLeastFromRelease,
        Check::AtLeastHold,
        Rule::AT_LEAST,
    ),
    (
        Defect::TakeoverKeepsLockedAt,
        Check::AtLeastHold,
        Rule::AT_LEAST,
    ),
    (Defect::ExtendMovesLockedAt, Check::Extend, Rule::EXTEND),
    (Defect::ExtendCountsFromAcquire, Check::Extend, Rule::EXTEND),
    (Defect::ExtendRefused, Check::Extend, Rule::EXTEND),
    (
        Defect::ReleaseDeletesWhoeverHolds,
        Check::OwnershipAfterExpiry,
        Rule::OWNERSHIP,
    ),
    (
        Defect::ExtendsWhoeverHolds,
        Check::OwnershipAfterExpiry,
        Rule::OWNERSHIP,
    ),
    (
        Defect::ReleaseIgnoresExpiry,
        Check::StaleHandleAnswers,
        Rule::RELEASE_RESULT,
    ),
    (
        Defect::HandleForgetsRelease,
        Check::StaleHandleAnswers,
        Rule::RELEASE_RESULT,
    ),
    (
        Defect::TrustsClientClock,
        Check::ClockSkew,
        Rule::SERVER_TIME,
    ),
    (
        Defect::ReleaseTrustsClientClock,
        Check::ClockSkew,
        Rule::SERVER_TIME,
    ),
    (
        Defect::ExtendTrustsClientClock,
        Check::ClockSkew,
        Rule::SERVER_TIME,
    ),
    (
        Defect::IgnoresGivenClock,
        Check::ClockSkew,
        Rule::CLIENT_TIME,
    ),
    (
        Defect::FencingPerNode,
        Check::FencingTokensIncrease,
        Rule::FENCING,
    ),
    (
        Defect::HidesExtend,
        Check::ExtendRefusedWhenNotDeclared,
        Rule::HONEST_CAPABILITIES,
    ),
    (
        Defect::NotAcquiredWhenDown,
        Check::BackendUnreachable,
        Rule::FAIL_CLOSED,
    ),
    (
        Defect::TruncatesLongNames,
        Check::NameLengthLimit,
        Rule::NAME_LENGTH,
    ),
    (
        Defect::TruncatesBytes,
        Check::NameLengthLimit,
        Rule::NAME_LENGTH,
    ),
    (
        Defect::RefusesNamesWithinLimit,
        Check::MutualExclusion,
        Rule::NAME_LENGTH,
    ),
    (
        Defect::FoldsCase,
        Check::NameEdgeCases,
        Rule::NAMES_ARE_DATA,
    ),
    (
        Defect::StripsCombiningMarks,
        Check::NameEdgeCases,
        Rule::NAMES_ARE_DATA,
    ),
    (
        Defect::InsertOverwritesHeld,
        Check::NameCacheClearedMidway,
        Rule::NAME_CACHE,
    ),
    (
        Defect::IgnoresForeignRecords,
        Check::ShedlockRecordTakeover,
        Rule::SHEDLOCK_RECORDS,
    ),
    (
        Defect::ForceUnlockIgnoresAcquisition,
        Check::AdminForceUnlock,
        Rule::ADMIN,
    ),
    (
        Defect::ForceUnlockLeavesItHeld,
        Check::AdminForceUnlock,
        Rule::ADMIN,
    ),
    (
        Defect::ForceUnlockJudgesByAnEarlierNow,
        Check::AdminConcurrentForceUnlock,
        Rule::ADMIN,
    ),
    (
        Defect::ReleaseRememberedLate,
        Check::ConcurrentRelease,
        Rule::RELEASE_RESULT,
    ),
    (Defect::PrefixIsAPattern, Check::AdminListing, Rule::ADMIN),
    (
        Defect::ListingUnsupportedWhenEmpty,
        Check::AdminListing,
        Rule::ADMIN,
    ),
    (
        Defect::PagesRepeatTheirCursor,
        Check::AdminListing,
        Rule::ADMIN,
    ),
    (Defect::EveryRecordHeld, Check::AdminListing, Rule::ADMIN),
    (Defect::ListsNoHolder, Check::AdminListing, Rule::ADMIN),
    (
        Defect::HarnessCannotConnect,
        Check::AcquireSkipRelease,
        Rule::HARNESS,
    ),
];

/// The name limit the limit-related mutants declare.
const NAME_LIMIT: usize = 64;

#[derive(Debug, Clone)]
struct Record {
    lock_until: SystemTime,
    locked_at: SystemTime,
    locked_by: String,
    /// The token of the acquisition that wrote it; `None` for a planted record.
    fencing_token: Option<u64>,
}

/// Which operation asks for "now", so a defect can use the wrong clock in one of them only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Acquire,
    Extend,
    Release,
}

/// A record store with one optional defect. Each node has its own copy of the struct (its own
/// clock, and for [`Defect::FencingPerNode`] its own counter) over the shared records; `down`
/// makes it behave as an unreachable backend (set from the start for an unreachable node, or
/// later by the harness's `cut_off`).
#[derive(Debug, Clone)]
struct MutantStore {
    defect: Defect,
    down: Arc<AtomicBool>,
    records: Arc<Mutex<HashMap<String, Record>>>,
    tokens: Arc<AtomicU64>,
    /// The backend's clock.
    clock: Arc<dyn Clock>,
    /// The node's clock, which a server-time storage is never handed: the clock-trusting
    /// mutants capture it when their node is made, as a careless provider might.
    node_clock: Arc<dyn Clock>,
}

impl MutantStore {
    fn new(defect: Defect) -> Self {
        Self {
            defect,
            down: Arc::new(AtomicBool::new(false)),
            records: Arc::new(Mutex::new(HashMap::new())),
            tokens: Arc::new(AtomicU64::new(0)),
            clock: Arc::new(MonotonicClock::new()),
            node_clock: Arc::new(SystemClock),
        }
    }

    /// This store as node `clock` sees it.
    fn for_node(&self, clock: Arc<dyn Clock>) -> Self {
        let mut store = self.clone();
        store.node_clock = clock;
        store.down = Arc::new(AtomicBool::new(false));
        if self.defect == Defect::FencingPerNode {
            store.tokens = Arc::new(AtomicU64::new(0));
        }
        store
    }

    fn now(&self, step: Step, given: NodeTime) -> SystemTime {
        match (self.defect, step) {
            (Defect::TrustsClientClock, Step::Acquire)
            | (Defect::ExtendTrustsClientClock, Step::Extend)
            | (Defect::ReleaseTrustsClientClock, Step::Release) => self.node_clock.now(),
            (Defect::IgnoresGivenClock, _) => SystemTime::now(),
            _ => given.client_time().unwrap_or_else(|| self.clock.now()),
        }
    }

    fn key(&self, name: &str) -> String {
        match self.defect {
            Defect::TruncatesLongNames => name.chars().take(NAME_LIMIT).collect(),
            Defect::TruncatesBytes => {
                let mut end = name.len().min(NAME_LIMIT);
                while !name.is_char_boundary(end) {
                    end -= 1;
                }
                name[..end].to_owned()
            }
            Defect::FoldsCase => name.to_lowercase(),
            Defect::StripsCombiningMarks => name
                .chars()
                .filter(|c| !('\u{300}'..='\u{36f}').contains(c))
                .collect(),
            _ => name.to_owned(),
        }
    }

    /// An error when the backend is down, for a release or an extend.
    fn reachable(&self, operation: Operation, name: &str) -> Result<(), LockError> {
        if self.down.load(Ordering::SeqCst) {
            return Err(LockError::backend_message(
                ErrorKind::Unreachable,
                "mutant",
                operation,
                name,
                "connection refused",
            ));
        }
        Ok(())
    }

    fn unreachable(&self, name: &str) -> Option<Result<RecordOutcome, LockError>> {
        if !self.down.load(Ordering::SeqCst) {
            return None;
        }
        Some(if self.defect == Defect::NotAcquiredWhenDown {
            Ok(RecordOutcome::NotAcquired(None))
        } else {
            Err(LockError::backend_message(
                ErrorKind::Unreachable,
                "mutant",
                Operation::Acquire,
                name,
                "connection refused",
            ))
        })
    }

    fn take(
        &self,
        record: &LockRecord<'_>,
        now: SystemTime,
        previous: Option<&Record>,
    ) -> (Record, RecordOutcome) {
        let lock_until = match self.defect {
            Defect::NeverExpires => now + Duration::from_secs(100 * 365 * 24 * 3600),
            Defect::ExpiresEarly => now + record.lock_at_most_for * 4 / 5,
            _ => now + record.lock_at_most_for,
        };
        let locked_at = match (self.defect, previous) {
            (Defect::TakeoverKeepsLockedAt, Some(previous)) => previous.locked_at,
            _ => now,
        };
        let token = self.tokens.fetch_add(1, Ordering::SeqCst) + 1;
        (
            Record {
                lock_until,
                locked_at,
                locked_by: record.locked_by.to_owned(),
                fencing_token: Some(token),
            },
            RecordOutcome::Acquired {
                fencing_token: Some(token),
            },
        )
    }

    /// The record's state as a racing writer saw it: a yield between the read and the write.
    /// An update read and written under one lock, as a backend's update is one atomic step:
    /// nodes on other threads of a multi-threaded runtime run at the same time.
    fn update_at_once(
        &self,
        record: &LockRecord<'_>,
        now: SystemTime,
        key: String,
    ) -> Result<RecordOutcome, LockError> {
        let mut records = self.records.lock().unwrap();
        match records.get(&key).cloned() {
            None => Ok(RecordOutcome::Missing),
            Some(existing) if existing.lock_until > now => {
                if self.defect == Defect::ErrorsWhenHeld {
                    return Err(LockError::backend_message(
                        ErrorKind::OutcomeUnknown,
                        "mutant",
                        Operation::Acquire,
                        record.name,
                        "the record is locked",
                    ));
                }
                Ok(RecordOutcome::NotAcquired(Some(LockHolder {
                    locked_by: Some(existing.locked_by.clone()),
                    held_until: Some(existing.lock_until),
                })))
            }
            Some(existing)
                if self.defect == Defect::IgnoresForeignRecords
                    && !existing.locked_by.contains('#') =>
            {
                Ok(RecordOutcome::NotAcquired(None))
            }
            Some(existing) => {
                let (taken, outcome) = self.take(record, now, Some(&existing));
                records.insert(key, taken);
                Ok(outcome)
            }
        }
    }

    async fn racy_pause(&self) {
        if self.defect == Defect::RacyAcquire {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// What the record of `name` says now, for a handle that acts on the store directly.
    fn held_record(
        &self,
        name: &str,
        config: &LockConfiguration,
        token: Option<u64>,
    ) -> HeldRecord {
        let records = self.records.lock().unwrap();
        let record = records
            .get(&self.key(name))
            .expect("the record just acquired");
        HeldRecord {
            name: name.to_owned(),
            locked_by: record.locked_by.clone(),
            locked_at: NodeTime::ServerTime,
            lock_at_least_for: config.lock_at_least_for(),
            fencing_token: token,
        }
    }
}

#[async_trait]
impl LockStorage for MutantStore {
    fn provider_name(&self) -> &'static str {
        "mutant"
    }

    fn capabilities(&self) -> Capabilities {
        let time_source = if self.defect == Defect::IgnoresGivenClock {
            TimeSource::Client
        } else {
            TimeSource::Server
        };
        let capabilities = Capabilities::new(time_source).with_fencing(true);
        match self.defect {
            Defect::TruncatesLongNames
            | Defect::TruncatesBytes
            | Defect::RefusesNamesWithinLimit => capabilities.with_max_name_chars(NAME_LIMIT),
            _ => capabilities,
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        match self.defect {
            Defect::TruncatesLongNames => Ok(()),
            Defect::RefusesNamesWithinLimit if name.chars().count() > 12 => Err(
                LockError::invalid_name("mutant", name, "names over 12 characters are refused"),
            ),
            _ => self
                .capabilities()
                .check_name_length(self.provider_name(), name),
        }
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        if let Some(outcome) = self.unreachable(record.name) {
            return outcome;
        }
        let now = self.now(Step::Acquire, record.now);
        let key = self.key(record.name);
        let holder_of = |existing: &Record| LockHolder {
            locked_by: Some(existing.locked_by.clone()),
            held_until: Some(existing.lock_until),
        };
        if self.defect == Defect::RacyAcquire {
            let holder = self.records.lock().unwrap().get(&key).map(holder_of);
            if holder.is_some() {
                return Ok(RecordOutcome::NotAcquired(holder));
            }
            self.racy_pause().await;
            let (taken, outcome) = self.take(record, now, None);
            self.records.lock().unwrap().insert(key, taken);
            return Ok(outcome);
        }
        // Read and write under one lock, as a backend's insert is one atomic step: nodes on
        // other threads of a multi-threaded runtime run at the same time.
        let mut records = self.records.lock().unwrap();
        let holder = records.get(&key).map(holder_of);
        let exists = holder.is_some();
        if self.defect == Defect::InsertRefused
            || (exists && self.defect != Defect::InsertOverwritesHeld)
        {
            // A refusal names the holder, as most backends can in the same round trip.
            return Ok(RecordOutcome::NotAcquired(holder));
        }
        let (taken, outcome) = self.take(record, now, None);
        records.insert(key, taken);
        Ok(outcome)
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        if let Some(outcome) = self.unreachable(record.name) {
            return outcome;
        }
        let now = self.now(Step::Acquire, record.now);
        let key = self.key(record.name);
        if self.defect != Defect::RacyAcquire {
            return self.update_at_once(record, now, key);
        }
        // The racy mutant lets go of the store between its read and its write.
        let existing = self.records.lock().unwrap().get(&key).cloned();
        match existing {
            None => Ok(RecordOutcome::Missing),
            Some(existing) if existing.lock_until > now => {
                Ok(RecordOutcome::NotAcquired(Some(LockHolder {
                    locked_by: Some(existing.locked_by.clone()),
                    held_until: Some(existing.lock_until),
                })))
            }
            Some(existing) => {
                self.racy_pause().await;
                let (taken, outcome) = self.take(record, now, Some(&existing));
                self.records.lock().unwrap().insert(key, taken);
                Ok(outcome)
            }
        }
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        self.reachable(Operation::Extend, &held.name)?;
        let now = self.now(Step::Extend, now);
        let mut records = self.records.lock().unwrap();
        match records.get_mut(&self.key(&held.name)) {
            Some(record)
                if (record.locked_by == held.locked_by
                    || self.defect == Defect::ExtendsWhoeverHolds)
                    && record.lock_until > now
                    && self.defect != Defect::ExtendRefused =>
            {
                record.lock_until = if self.defect == Defect::ExtendCountsFromAcquire {
                    record.locked_at + lock_at_most_for
                } else {
                    now + lock_at_most_for
                };
                if self.defect == Defect::ExtendMovesLockedAt {
                    record.locked_at = now;
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
        if self.defect == Defect::HangsOnRelease {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        self.reachable(Operation::Release, &held.name)?;
        let now = self.now(Step::Release, now);
        let mut records = self.records.lock().unwrap();
        let key = self.key(&held.name);
        if self.defect == Defect::ReleaseDeletesWhoeverHolds {
            return Ok(records.remove(&key).is_some());
        }
        match records.get_mut(&key) {
            Some(record)
                if record.locked_by == held.locked_by
                    && (record.lock_until > now || self.defect == Defect::ReleaseIgnoresExpiry) =>
            {
                record.lock_until = match self.defect {
                    Defect::IgnoresAtLeast => now,
                    Defect::AtLeastFromRelease => now + held.lock_at_least_for,
                    _ => now.max(record.locked_at + held.lock_at_least_for),
                };
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// A node: the core's storage-based provider over the node's view of the store, with the
/// defects that live outside the storage (capabilities, handles).
#[derive(Debug)]
struct MutantNode {
    inner: StorageBasedLockProvider,
    store: MutantStore,
}

#[async_trait]
impl LockProvider for MutantNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let acquisition = self.inner.try_lock(config).await?;
        Ok(match acquisition {
            Acquisition::Acquired(handle)
                if matches!(
                    self.store.defect,
                    Defect::HandleForgetsRelease | Defect::ReleaseRememberedLate
                ) =>
            {
                let held = self
                    .store
                    .held_record(config.name(), config, handle.fencing_token());
                let remembered = (self.store.defect == Defect::ReleaseRememberedLate)
                    .then(|| AtomicBool::new(false));
                Acquisition::Acquired(Box::new(StoreHandle {
                    store: self.store.clone(),
                    held,
                    remembered,
                }))
            }
            other => other,
        })
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = self.inner.capabilities();
        if self.store.defect == Defect::HidesExtend {
            capabilities.with_extend(false)
        } else {
            capabilities
        }
    }

    fn provider_name(&self) -> &'static str {
        self.inner.provider_name()
    }
}

/// Whether `name` matches `pattern` as SQL `LIKE` does (`%` any run, `_` any one character),
/// as a provider that forgot to escape a prefix would match it.
fn like(name: &[char], pattern: &[char]) -> bool {
    match pattern.split_first() {
        None => name.is_empty(),
        Some(('%', rest)) => (0..=name.len()).any(|skip| like(&name[skip..], rest)),
        Some(('_', rest)) => !name.is_empty() && like(&name[1..], rest),
        Some((c, rest)) => name.first() == Some(c) && like(&name[1..], rest),
    }
}

impl MutantNode {
    fn info(&self, name: &str, record: &Record) -> LockInfo {
        let now = self.store.clock.now();
        let acquisition =
            AcquisitionId::new(format!("{:?}/{}", record.locked_at, record.locked_by));
        let mut info = LockInfo::new(name, LockState::Free, acquisition)
            .with_locked_by(&record.locked_by)
            .with_locked_at(record.locked_at)
            .judged_at(record.lock_until, now);
        info.fencing_token = record.fencing_token;
        if self.store.defect == Defect::ListsNoHolder {
            info.locked_by = None;
        }
        if self.store.defect == Defect::EveryRecordHeld {
            info.judged_at(record.lock_until.max(now + Duration::from_millis(1)), now)
        } else {
            info
        }
    }
}

#[async_trait]
impl LockAdmin for MutantNode {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let records = self.store.records.lock().unwrap();
        let unsupported = match self.store.defect {
            Defect::NoListing => true,
            Defect::ListingUnsupportedWhenEmpty => {
                !records.keys().any(|name| name.starts_with(&request.prefix))
            }
            _ => false,
        };
        if unsupported {
            return Err(LockError::unsupported(
                "mutant",
                Operation::List,
                request.prefix.clone(),
            ));
        }
        let pattern: Vec<char> = format!("{}%", request.prefix).chars().collect();
        let matches = |name: &String| match self.store.defect {
            Defect::PrefixIsAPattern => like(&name.chars().collect::<Vec<_>>(), &pattern),
            _ => name.starts_with(&request.prefix),
        };
        let after = request.after.as_ref().map(PageCursor::as_str);
        let repeats = self.store.defect == Defect::PagesRepeatTheirCursor;
        let mut names: Vec<&String> = records
            .keys()
            .filter(|name| matches(name))
            .filter(|name| {
                after.is_none_or(|after| {
                    name.as_str() > after || (repeats && name.as_str() == after)
                })
            })
            .collect();
        names.sort();
        let more = names.len() > request.limit;
        names.truncate(request.limit);
        let next = match (more, names.last()) {
            (true, Some(last)) => Some(PageCursor::new(last.as_str())),
            _ => None,
        };
        let locks = names
            .into_iter()
            .map(|name| self.info(name, &records[name]))
            .collect();
        Ok(LockPage { locks, next })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let records = self.store.records.lock().unwrap();
        Ok(records.get(name).map(|record| self.info(name, record)))
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let judged_at = self.store.clock.now();
        if self.store.defect == Defect::ForceUnlockJudgesByAnEarlierNow {
            // The round trip to the record, during which another force-unlock may land.
            tokio::task::yield_now().await;
        }
        let mut records = self.store.records.lock().unwrap();
        let now = self.store.clock.now();
        let judged_at = if self.store.defect == Defect::ForceUnlockJudgesByAnEarlierNow {
            judged_at
        } else {
            now
        };
        let Some(record) = records.get_mut(name) else {
            return Ok(false);
        };
        let named = format!("{:?}/{}", record.locked_at, record.locked_by) == acquisition.as_str();
        let held = record.lock_until > judged_at;
        match self.store.defect {
            Defect::ForceUnlockLeavesItHeld if held && named => Ok(true),
            Defect::ForceUnlockIgnoresAcquisition if held => {
                record.lock_until = now;
                Ok(true)
            }
            _ if held && named => {
                record.lock_until = now;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// A handle that asks the store itself, with a broken memory of its own release: none at all
/// (`remembered: None`), or a flag set only once the store answered.
#[derive(Debug)]
struct StoreHandle {
    store: MutantStore,
    held: HeldRecord,
    remembered: Option<AtomicBool>,
}

#[async_trait]
impl LockHandle for StoreHandle {
    fn name(&self) -> &str {
        &self.held.name
    }

    fn fencing_token(&self) -> Option<u64> {
        self.held.fencing_token
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let Some(released) = &self.remembered else {
            return self.store.unlock(&self.held, NodeTime::ServerTime).await;
        };
        if released.load(Ordering::SeqCst) {
            return Ok(false);
        }
        // The round trip, during which another task's unlock passes the test above.
        tokio::task::yield_now().await;
        let answer = self.store.unlock(&self.held, NodeTime::ServerTime).await?;
        released.store(true, Ordering::SeqCst);
        Ok(answer)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if let Some(released) = &self.remembered
            && released.load(Ordering::SeqCst)
        {
            return Ok(false);
        }
        self.store
            .extend(&self.held, lock_at_most_for, NodeTime::ServerTime)
            .await
    }
}

struct MutantHarness {
    store: MutantStore,
}

impl MutantHarness {
    fn node_on(&self, store: MutantStore) -> MutantNode {
        // The hanging mutant must hang in the provider, not hit the core's own timeout first.
        let timeout = if store.defect == Defect::HangsOnRelease {
            Duration::from_secs(3600)
        } else {
            shedlock_core::raw::DEFAULT_OPERATION_TIMEOUT
        };
        MutantNode {
            inner: StorageBasedLockProvider::new(store.clone())
                .with_holder("mutant")
                .with_clock(store.node_clock.clone())
                .with_operation_timeout(timeout),
            store,
        }
    }
}

#[async_trait]
impl ConformanceHarness for MutantHarness {
    type Node = MutantNode;

    fn name(&self) -> &str {
        "mutant"
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<MutantNode, SetupError> {
        if self.store.defect == Defect::HarnessCannotConnect {
            return Err(SetupError::new(
                "connection refused: the mutant harness cannot reach its backend",
            ));
        }
        Ok(self.node_on(self.store.for_node(clock)))
    }

    async fn unreachable_node(&self) -> Result<Support<MutantNode>, SetupError> {
        let down = self.store.for_node(Arc::new(SystemClock));
        down.down.store(true, Ordering::SeqCst);
        Ok(Support::Supported(self.node_on(down)))
    }

    async fn cut_off(&self, node: &MutantNode) -> Result<Support<()>, SetupError> {
        node.store.down.store(true, Ordering::SeqCst);
        Ok(Support::Supported(()))
    }

    fn clear_name_cache(&self, node: &MutantNode) -> Support<()> {
        node.inner.clear_name_cache();
        Support::Supported(())
    }

    fn admin<'node>(&self, node: &'node MutantNode) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        self.store.records.lock().unwrap().insert(
            self.store.key(&record.name),
            Record {
                lock_until: record.lock_until,
                locked_at: record.locked_at,
                locked_by: record.locked_by.clone(),
                fencing_token: None,
            },
        );
        Ok(Support::Supported(()))
    }
}

fn snake(defect: Defect) -> String {
    let mut out = String::new();
    for (index, c) in format!("{defect:?}").chars().enumerate() {
        if c.is_ascii_uppercase() && index > 0 {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn main() {
    if std::env::var_os(REPORT_CHILD).is_some() {
        std::process::exit(match verdict_in_code() {
            Ok(()) => 0,
            Err(failed) => {
                println!("{failed:?}");
                1
            }
        });
    }
    let args = Arguments::from_args();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime"),
    );
    let run = NameSpace::new_run();
    let mut trials = Vec::new();
    for &(defect, check, rule) in MUTANTS {
        let runtime = runtime.clone();
        let names = check.names_in(&run).child(&snake(defect));
        trials.push(Trial::test(
            format!("mutant_{}_fails_{}", snake(defect), check.name()),
            move || {
                let harness = MutantHarness {
                    store: MutantStore::new(defect),
                };
                match runtime.block_on(check.run(&harness, &names)) {
                    Err(failure) if failure.check == check.name() && failure.rule == rule => {
                        println!("{defect:?} caught:\n{failure}");
                        Ok(())
                    }
                    Err(failure) => Err(Failed::from(format!(
                        "{defect:?} was caught, but under rule {} instead of {}:\n{failure}",
                        failure.rule.id, rule.id
                    ))),
                    Ok(verdict) => Err(Failed::from(format!(
                        "the kit did not catch {defect:?}: `{}` answered {verdict:?}",
                        check.name()
                    ))),
                }
            },
        ));
    }
    // The verdict in code, in a child process of this binary with a report folder of its own.
    trials.push(Trial::test(
        "run_and_report_returns_the_verdict_and_writes_it",
        run_and_report_in_a_child,
    ));
    // A provider without a listing, saying so every time, is not a defect: the listing check
    // does not apply, and inspect and force-unlock are still checked (and pass).
    {
        let runtime = runtime.clone();
        let names = run.child("no-listing");
        trials.push(Trial::test(
            "no_listing_is_not_applicable_and_force_unlock_still_checked",
            move || {
                let harness = MutantHarness {
                    store: MutantStore::new(Defect::NoListing),
                };
                let listing =
                    runtime.block_on(Check::AdminListing.run(&harness, &names.child("l")));
                if !matches!(&listing, Ok(Verdict::NotApplicable(reason)) if reason.contains("Unsupported"))
                {
                    return Err(Failed::from(format!(
                        "admin_listing answered {listing:?}, not \"not applicable\" naming Unsupported"
                    )));
                }
                for check in [Check::AdminForceUnlock, Check::AdminConcurrentForceUnlock] {
                    let outcome = runtime.block_on(check.run(&harness, &names.child(check.name())));
                    if !matches!(outcome, Ok(Verdict::Passed { .. })) {
                        return Err(Failed::from(format!(
                            "{} answered {outcome:?} for a provider without a listing",
                            check.name()
                        )));
                    }
                }
                Ok(())
            },
        ));
    }
    // The model check finds defects from random sequences alone, and shrinks them. Each
    // failure must say what an author needs to replay and read it: the rule, the seed and
    // sequence number, the minimal sequence step by step (nodes by letter), and the fragment
    // listed here of its own account of what went wrong. Shrinking must bring the sequence
    // down to the few steps that show the defect: at most the number listed here (a defect
    // that takes a few steps to show may keep one or two more when shrinking reaches its
    // limit of runs first).
    for (defect, rules, says, most_steps) in [
        // A lock that never expires also answers true to a release or extend the model knows
        // came after the expiry: whichever the random sequence shows first is a fair catch.
        (
            Defect::NeverExpires,
            &[Rule::AT_MOST, Rule::RELEASE_RESULT, Rule::EXTEND][..],
            &["at the latest"][..],
            6,
        ),
        (
            Defect::IgnoresAtLeast,
            &[Rule::AT_LEAST][..],
            &["acquired at"][..],
            6,
        ),
        // The model's own bounds, each noticed without the dedicated checks: a fresh lock
        // refused, a `true` to a release sent after the lock surely expired, a `false` to an
        // extend while the lock was surely held, and a fencing token that does not grow.
        // (A lock that expires at 80 % of at-most hides inside the model's tolerance over 64
        // short sequences; the at-most check's probes find it.)
        (
            Defect::InsertRefused,
            &[Rule::FREE_LOCK_IS_TAKEN][..],
            &["nobody ever held this lock"][..],
            1,
        ),
        (
            Defect::ReleaseIgnoresExpiry,
            &[Rule::RELEASE_RESULT][..],
            &["release answered true", "but the hold of the "][..],
            6,
        ),
        (
            Defect::ExtendRefused,
            &[Rule::EXTEND][..],
            &["extend answered false", "but the hold of the "][..],
            2,
        ),
        (
            Defect::FencingPerNode,
            &[Rule::FENCING][..],
            &["does not exceed the previous"][..],
            6,
        ),
    ] {
        let runtime = runtime.clone();
        let names = Check::Model.names_in(&run).child(&snake(defect));
        trials.push(Trial::test(
            format!("mutant_{}_fails_model", snake(defect)),
            move || {
                let harness = MutantHarness {
                    store: MutantStore::new(defect),
                };
                let settings = ModelSettings {
                    cases: Some(64),
                    seed: Some(20_261_129),
                };
                match runtime.block_on(check_model_with(&harness, &names, settings)) {
                    Err(failure) if rules.contains(&failure.rule) => {
                        let text = failure.to_string();
                        let missing: Vec<&str> = says
                            .iter()
                            .copied()
                            .chain([
                            "of 64 (seed 20261129) failed; minimal failing sequence",
                            "  #1 ",
                            " acquire L",
                            "SHEDLOCK_CONFORMANCE_SEED=20261129",
                        ])
                        .filter(|fragment| !text.contains(fragment))
                        .collect();
                        if !missing.is_empty() {
                            return Err(Failed::from(format!(
                                "{defect:?} was caught by the model check, but its failure lacks {missing:?}:\n{text}"
                            )));
                        }
                        if text.contains("after 0 shrink runs") {
                            return Err(Failed::from(format!(
                                "{defect:?}: the failure was not shrunk at all:\n{text}"
                            )));
                        }
                        let steps = text.matches("\n  #").count();
                        if steps == 0 || steps > most_steps {
                            return Err(Failed::from(format!(
                                "{defect:?}: the minimal failing sequence has {steps} steps, expected 1 to {most_steps}: shrinking did not do its work:\n{text}"
                            )));
                        }
                        if !["A acquire L", "B acquire L", "C acquire L"]
                            .iter()
                            .any(|step| text.contains(step))
                        {
                            return Err(Failed::from(format!(
                                "{defect:?}: the failing sequence names no node by its letter:\n{text}"
                            )));
                        }
                        println!("{defect:?} caught by the model check:\n{failure}");
                        Ok(())
                    }
                    Err(failure) => Err(Failed::from(format!(
                        "{defect:?} was caught by the model check under an unexpected rule:\n{failure}"
                    ))),
                    Ok(verdict) => Err(Failed::from(format!(
                        "the model check did not catch {defect:?} in 64 sequences: {verdict:?}"
                    ))),
                }
            },
        ));
    }
    for check in Check::ALL {
        let runtime = runtime.clone();
        let names = check.names_in(&run).child("honest");
        trials.push(Trial::test(
            format!("honest_store_passes_{}", check.name()),
            move || {
                let harness = MutantHarness {
                    store: MutantStore::new(Defect::None),
                };
                match runtime.block_on(check.run(&harness, &names)) {
                    Ok(Verdict::Passed { .. }) => Ok(()),
                    Ok(Verdict::NotApplicable(reason))
                        if check == Check::ExtendRefusedWhenNotDeclared =>
                    {
                        println!("{}: not applicable, as expected: {reason}", check.name());
                        Ok(())
                    }
                    Ok(Verdict::NotApplicable(reason)) => Err(Failed::from(format!(
                        "the honest store should run `{}`, but it was not applicable: {reason}",
                        check.name()
                    ))),
                    Err(failure) => Err(Failed::from(failure.to_string())),
                }
            },
        ));
    }
    // The model check's two environment variables, read in a child process of this binary
    // (the environment is the process's; setting it here would race the other trials).
    if std::env::var_os(ENVIRONMENT_CHILD).is_some() {
        let runtime = runtime.clone();
        let names = Check::Model.names_in(&run).child("environment");
        trials.push(Trial::test(ENVIRONMENT_CHILD_TRIAL, move || {
            let harness = MutantHarness {
                store: MutantStore::new(Defect::None),
            };
            match runtime.block_on(check_model(&harness, &names)) {
                Ok(verdict) => println!("verdict: {verdict:?}"),
                Err(failure) => println!("failure: {failure}"),
            }
            Ok(())
        }));
    } else {
        trials.push(Trial::test(
            "model_takes_its_sequence_count_and_seed_from_the_environment",
            model_reads_the_environment,
        ));
    }
    libtest_mimic::run(&args, trials).exit();
}

/// Set in the child process that runs [`ENVIRONMENT_CHILD_TRIAL`].
const ENVIRONMENT_CHILD: &str = "SHEDLOCK_KIT_TEST_ENVIRONMENT_CHILD";
const ENVIRONMENT_CHILD_TRIAL: &str = "model_with_the_environment_child";

/// What the model check says under each setting of its variables: a number is used, anything
/// else fails the check naming the variable, never ignored.
fn model_reads_the_environment() -> Result<(), Failed> {
    let cases: [(Option<&str>, &str, &[&str]); 4] = [
        (
            None,
            "7",
            &["verdict: Passed", "250 random sequences", "(seed 7;"],
        ),
        (
            Some("3"),
            "7",
            &["verdict: Passed", "3 random sequences", "(seed 7;"],
        ),
        (
            Some("three"),
            "7",
            &[
                "failure: ",
                "[harness]",
                "SHEDLOCK_CONFORMANCE_MODEL_CASES is \"three\", not a number of sequences",
            ],
        ),
        (
            Some("2"),
            "-1",
            &[
                "failure: ",
                "SHEDLOCK_CONFORMANCE_SEED is \"-1\", not a seed",
            ],
        ),
    ];
    for (count, seed, expected) in cases {
        let mut child =
            std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?);
        child
            .args([
                "--exact",
                ENVIRONMENT_CHILD_TRIAL,
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env(ENVIRONMENT_CHILD, "1")
            .env(SEED_VARIABLE, seed);
        match count {
            Some(count) => child.env(CASES_VARIABLE, count),
            None => child.env_remove(CASES_VARIABLE),
        };
        let output = child.output().map_err(|e| e.to_string())?;
        let count = count.unwrap_or("unset");
        let stdout = String::from_utf8_lossy(&output.stdout);
        for fragment in expected {
            if !stdout.contains(fragment) {
                return Err(Failed::from(format!(
                    "with {CASES_VARIABLE}={count} {SEED_VARIABLE}={seed}, the model check's output lacks {fragment:?}:\n{stdout}"
                )));
            }
        }
    }
    Ok(())
}

/// Set in the child process that runs [`verdict_in_code`].
const REPORT_CHILD: &str = "SHEDLOCK_KIT_TEST_REPORT_CHILD";

/// `run_and_report` on one check, against an honest store and then a store that refuses free
/// locks: the first report passes with its one check and a cleanup, the second fails under
/// the rule broken.
fn verdict_in_code() -> Result<(), Failed> {
    let only = |check: Check| Arguments {
        filter: Some(check.name().to_owned()),
        exact: true,
        ..Arguments::default()
    };
    let harness_of = |defect| {
        move || async move {
            Ok(MutantHarness {
                store: MutantStore::new(defect),
            })
        }
    };
    let (_, report) = shedlock_conformance::run_and_report(
        only(Check::AcquireSkipRelease),
        harness_of(Defect::None),
    );
    let lines: Vec<_> = report
        .checks
        .iter()
        .map(|line| (line.check.as_str(), line.status))
        .collect();
    if !report.passed()
        || lines != [("acquire_skip_release", Status::Passed)]
        || report.cleanup.as_ref().map(|line| line.status) != Some(Status::Passed)
    {
        return Err(Failed::from(format!(
            "an honest store's report: {report:?}"
        )));
    }
    let (_, report) = shedlock_conformance::run_and_report(
        only(Check::AcquireSkipRelease),
        harness_of(Defect::InsertRefused),
    );
    let failures: Vec<_> = report.failures().map(|line| line.detail.clone()).collect();
    if report.passed() || failures.len() != 1 || !failures[0].starts_with("[free-lock-is-taken]") {
        return Err(Failed::from(format!(
            "a store that refuses free locks: {report:?}"
        )));
    }
    Ok(())
}

/// Runs [`verdict_in_code`] in a child with a report folder of its own (the environment is the
/// process's): it must pass, and the folder must hold the last run's report, failed.
fn run_and_report_in_a_child() -> Result<(), Failed> {
    let dir = std::env::temp_dir().join(format!("shedlock-kit-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let output = std::process::Command::new(std::env::current_exe().map_err(|e| e.to_string())?)
        .env(REPORT_CHILD, "1")
        .env(shedlock_conformance::REPORT_DIR_VARIABLE, &dir)
        .output()
        .map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(Failed::from(format!(
            "the child failed:\n{}",
            String::from_utf8_lossy(&output.stdout)
        )));
    }
    let reports = shedlock_conformance::read_reports(&dir).map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dir);
    match &reports[..] {
        [report] if !report.passed() && report.cleanup.is_some() => Ok(()),
        other => Err(Failed::from(format!(
            "the report folder holds {other:?}, not the failed run's report"
        ))),
    }
}
