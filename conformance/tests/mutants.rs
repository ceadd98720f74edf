//! The kit's own proof that it catches broken providers: each mutant breaks one rule, and the
//! check that names that rule must fail on it, quoting that rule. The same store without a
//! defect passes every check, so the failures come from the defects, not from the store.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use libtest_mimic::{Arguments, Failed, Trial};
use shedlock_conformance::{
    Check, ConformanceHarness, ModelSettings, NameSpace, PlantedRecord, Rule, Support, Verdict,
    async_trait, check_model_with,
};
use shedlock_core::{
    Capabilities, Clock, HeldRecord, LockError, LockRecord, LockStorage, MonotonicClock, Operation,
    RecordOutcome, StorageBasedLockProvider, TimeSource,
};

/// The one rule a mutant breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Defect {
    /// No defect: the reference the mutants are compared with.
    None,
    /// An unreleased lock never expires.
    NeverExpires,
    /// Release frees the lock at once, whatever `lock_at_least_for` says.
    IgnoresAtLeast,
    /// Release deletes the record, whoever holds it.
    ReleaseDeletesWhoeverHolds,
    /// Declares server time but decides with the node's (skewed) clock.
    TrustsClientClock,
    /// Answers "not acquired" when its backend is down.
    NotAcquiredWhenDown,
    /// Declares a 64-character limit but truncates longer names instead of refusing them.
    TruncatesLongNames,
}

const NAME_LIMIT: usize = 64;

#[derive(Debug, Clone)]
struct Record {
    lock_until: SystemTime,
    locked_at: SystemTime,
    locked_by: String,
}

/// A record store with one optional defect; `down` makes it behave as an unreachable backend.
#[derive(Debug, Clone)]
struct MutantStore {
    defect: Defect,
    down: bool,
    records: Arc<Mutex<HashMap<String, Record>>>,
    clock: Arc<dyn Clock>,
}

impl MutantStore {
    fn new(defect: Defect) -> Self {
        Self {
            defect,
            down: false,
            records: Arc::new(Mutex::new(HashMap::new())),
            clock: Arc::new(MonotonicClock::new()),
        }
    }

    /// The store's "now": the backend's clock, or the node's for the clock-trusting mutant.
    fn now(&self, node_now: SystemTime) -> SystemTime {
        if self.defect == Defect::TrustsClientClock {
            node_now
        } else {
            self.clock.now()
        }
    }

    fn key(&self, name: &str) -> String {
        if self.defect == Defect::TruncatesLongNames {
            name.chars().take(NAME_LIMIT).collect()
        } else {
            name.to_owned()
        }
    }

    fn unreachable(&self, name: &str) -> Option<Result<RecordOutcome, LockError>> {
        if !self.down {
            return None;
        }
        Some(if self.defect == Defect::NotAcquiredWhenDown {
            Ok(RecordOutcome::NotAcquired(None))
        } else {
            Err(LockError::backend_message(
                "mutant",
                Operation::Acquire,
                name,
                "connection refused",
            ))
        })
    }

    fn take(&self, record: &LockRecord<'_>, now: SystemTime) -> Record {
        let lock_until = if self.defect == Defect::NeverExpires {
            now + Duration::from_secs(100 * 365 * 24 * 3600)
        } else {
            now + record.lock_at_most_for
        };
        Record {
            lock_until,
            locked_at: now,
            locked_by: record.locked_by.to_owned(),
        }
    }
}

#[async_trait]
impl LockStorage for MutantStore {
    fn provider_name(&self) -> &'static str {
        "mutant"
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = Capabilities::new(TimeSource::Server).with_extend(true);
        if self.defect == Defect::TruncatesLongNames {
            capabilities.with_max_name_chars(NAME_LIMIT)
        } else {
            capabilities
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        if self.defect == Defect::TruncatesLongNames {
            return Ok(());
        }
        self.capabilities()
            .check_name_length(self.provider_name(), name)
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        if let Some(outcome) = self.unreachable(record.name) {
            return outcome;
        }
        let now = self.now(record.now);
        let mut records = self.records.lock().unwrap();
        let key = self.key(record.name);
        if records.contains_key(&key) {
            return Ok(RecordOutcome::NotAcquired(None));
        }
        records.insert(key, self.take(record, now));
        Ok(RecordOutcome::Acquired {
            fencing_token: None,
        })
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        if let Some(outcome) = self.unreachable(record.name) {
            return outcome;
        }
        let now = self.now(record.now);
        let mut records = self.records.lock().unwrap();
        let key = self.key(record.name);
        match records.get(&key) {
            None => Ok(RecordOutcome::Missing),
            Some(existing) if existing.lock_until > now => Ok(RecordOutcome::NotAcquired(None)),
            Some(_) => {
                records.insert(key, self.take(record, now));
                Ok(RecordOutcome::Acquired {
                    fencing_token: None,
                })
            }
        }
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        node_now: SystemTime,
    ) -> Result<bool, LockError> {
        let now = self.now(node_now);
        let mut records = self.records.lock().unwrap();
        match records.get_mut(&self.key(&held.name)) {
            Some(record) if record.locked_by == held.locked_by && record.lock_until > now => {
                record.lock_until = now + lock_at_most_for;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn unlock(&self, held: &HeldRecord, node_now: SystemTime) -> Result<bool, LockError> {
        let now = self.now(node_now);
        let mut records = self.records.lock().unwrap();
        let key = self.key(&held.name);
        if self.defect == Defect::ReleaseDeletesWhoeverHolds {
            return Ok(records.remove(&key).is_some());
        }
        match records.get_mut(&key) {
            Some(record) if record.locked_by == held.locked_by && record.lock_until > now => {
                record.lock_until = if self.defect == Defect::IgnoresAtLeast {
                    now
                } else {
                    now.max(record.locked_at + held.lock_at_least_for)
                };
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

struct MutantHarness {
    store: MutantStore,
}

#[async_trait]
impl ConformanceHarness for MutantHarness {
    type Node = StorageBasedLockProvider;

    fn name(&self) -> &str {
        "mutant"
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<StorageBasedLockProvider, LockError> {
        Ok(StorageBasedLockProvider::new(self.store.clone())
            .with_holder("mutant")
            .with_clock(clock))
    }

    async fn unreachable_node(&self) -> Result<Support<StorageBasedLockProvider>, LockError> {
        let mut down = self.store.clone();
        down.down = true;
        Ok(Support::Supported(
            StorageBasedLockProvider::new(down).with_holder("mutant"),
        ))
    }

    fn clear_name_cache(&self, node: &StorageBasedLockProvider) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, LockError> {
        self.store.records.lock().unwrap().insert(
            self.store.key(&record.name),
            Record {
                lock_until: record.lock_until,
                locked_at: record.locked_at,
                locked_by: record.locked_by.clone(),
            },
        );
        Ok(Support::Supported(()))
    }
}

/// Each mutant, the check that must catch it, and the rule that check must quote.
const MUTANTS: [(Defect, Check, Rule); 6] = [
    (Defect::NeverExpires, Check::AtMostExpiry, Rule::AT_MOST),
    (Defect::IgnoresAtLeast, Check::AtLeastHold, Rule::AT_LEAST),
    (
        Defect::ReleaseDeletesWhoeverHolds,
        Check::OwnershipAfterExpiry,
        Rule::OWNERSHIP,
    ),
    (
        Defect::TrustsClientClock,
        Check::ClockSkew,
        Rule::SERVER_TIME,
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
];

fn snake(defect: Defect) -> &'static str {
    match defect {
        Defect::None => "honest",
        Defect::NeverExpires => "never_expires",
        Defect::IgnoresAtLeast => "ignores_at_least",
        Defect::ReleaseDeletesWhoeverHolds => "release_deletes_whoever_holds",
        Defect::TrustsClientClock => "trusts_client_clock",
        Defect::NotAcquiredWhenDown => "not_acquired_when_down",
        Defect::TruncatesLongNames => "truncates_long_names",
    }
}

fn main() {
    let args = Arguments::from_args();
    let runtime = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime"),
    );
    let run = NameSpace::new_run();
    let mut trials = Vec::new();
    for (defect, check, rule) in MUTANTS {
        let runtime = runtime.clone();
        let names = check.names_in(&run);
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
    // The model check finds the same defects from random sequences alone, and shrinks them.
    for (defect, rules) in [
        (Defect::NeverExpires, &[Rule::AT_MOST][..]),
        (Defect::IgnoresAtLeast, &[Rule::AT_LEAST][..]),
    ] {
        let runtime = runtime.clone();
        let names = Check::Model.names_in(&run).child(snake(defect));
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
                    Err(failure)
                        if rules.contains(&failure.rule)
                            && failure.observed.contains("minimal failing sequence") =>
                    {
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
                        if check == Check::ExtendRefusedWhenNotDeclared
                            || check == Check::FencingTokensIncrease =>
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
    libtest_mimic::run(&args, trials).exit();
}
