//! The checks, each a plain public async function over a [`ConformanceHarness`], and the
//! catalogue the runner turns into one named test each.

mod admin;
mod basics;
mod concurrency;
mod extend;
mod model;
mod names;
mod races;
mod scale;
mod skew;
mod storage;
mod time_bounds;
mod unreachable;

use std::sync::Arc;

use shedlock_core::{Capabilities, Clock, SystemClock};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::{ConformanceHarness, Support};
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{HeldLock, HeldProbe, Trace};
use shedlock_core::LockProvider;
use tokio::time::Instant;

pub use admin::{check_admin_force_unlock, check_admin_listing};
pub use basics::check_acquire_skip_release;
pub use concurrency::{check_fencing_tokens_increase, check_mutual_exclusion};
pub use extend::{check_extend, check_extend_refused_when_not_declared};
pub use model::{CASES_VARIABLE, ModelSettings, SEED_VARIABLE, check_model, check_model_with};
pub use names::{
    EDGE_CASE_NAMES, check_generated_names, check_name_edge_cases, check_name_length_limit,
};
pub use races::{
    check_admin_concurrent_force_unlock, check_concurrent_release, check_stale_call_at_expiry,
};
pub use scale::{DEEP_VARIABLE, check_long_durations_and_counts};
pub use skew::check_clock_skew;
pub use storage::{check_name_cache_cleared_midway, check_shedlock_record_takeover};
pub use time_bounds::{
    check_at_least_hold, check_at_most_expiry, check_ownership_after_expiry,
    check_stale_handle_answers,
};
pub use unreachable::{UNREACHABLE_LIMIT, check_backend_lost, check_backend_unreachable};

/// One check of the kit, by name; [`Check::ALL`] is the whole kit in the order it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Check {
    /// [`check_acquire_skip_release`]
    AcquireSkipRelease,
    /// [`check_at_most_expiry`]
    AtMostExpiry,
    /// [`check_at_least_hold`]
    AtLeastHold,
    /// [`check_extend`]
    Extend,
    /// [`check_extend_refused_when_not_declared`]
    ExtendRefusedWhenNotDeclared,
    /// [`check_ownership_after_expiry`]
    OwnershipAfterExpiry,
    /// [`check_stale_handle_answers`]
    StaleHandleAnswers,
    /// [`check_mutual_exclusion`]
    MutualExclusion,
    /// [`check_fencing_tokens_increase`]
    FencingTokensIncrease,
    /// [`check_clock_skew`]
    ClockSkew,
    /// [`check_backend_unreachable`]
    BackendUnreachable,
    /// [`check_backend_lost`]
    BackendLost,
    /// [`check_name_length_limit`]
    NameLengthLimit,
    /// [`check_name_edge_cases`]
    NameEdgeCases,
    /// [`check_generated_names`]
    GeneratedNames,
    /// [`check_long_durations_and_counts`]
    LongDurationsAndCounts,
    /// [`check_stale_call_at_expiry`]
    StaleCallAtExpiry,
    /// [`check_model`]
    Model,
    /// [`check_name_cache_cleared_midway`]
    NameCacheClearedMidway,
    /// [`check_shedlock_record_takeover`]
    ShedlockRecordTakeover,
    /// [`check_admin_listing`]
    AdminListing,
    /// [`check_admin_force_unlock`]
    AdminForceUnlock,
    /// [`check_concurrent_release`]
    ConcurrentRelease,
    /// [`check_admin_concurrent_force_unlock`]
    AdminConcurrentForceUnlock,
}

impl Check {
    /// Every check, in the order the runner lists them. The long-running ones come first so
    /// that parallel test threads finish together.
    pub const ALL: [Check; 24] = [
        Check::Model,
        Check::MutualExclusion,
        Check::ConcurrentRelease,
        Check::AdminConcurrentForceUnlock,
        Check::AcquireSkipRelease,
        Check::AtMostExpiry,
        Check::AtLeastHold,
        Check::Extend,
        Check::ExtendRefusedWhenNotDeclared,
        Check::OwnershipAfterExpiry,
        Check::StaleHandleAnswers,
        Check::StaleCallAtExpiry,
        Check::LongDurationsAndCounts,
        Check::FencingTokensIncrease,
        Check::ClockSkew,
        Check::BackendUnreachable,
        Check::BackendLost,
        Check::NameLengthLimit,
        Check::NameEdgeCases,
        Check::GeneratedNames,
        Check::NameCacheClearedMidway,
        Check::ShedlockRecordTakeover,
        Check::AdminListing,
        Check::AdminForceUnlock,
    ];

    /// The test name `cargo test` shows and filters on.
    pub fn name(self) -> &'static str {
        match self {
            Check::AcquireSkipRelease => "acquire_skip_release",
            Check::AtMostExpiry => "at_most_expiry",
            Check::AtLeastHold => "at_least_hold",
            Check::Extend => "extend",
            Check::ExtendRefusedWhenNotDeclared => "extend_refused_when_not_declared",
            Check::OwnershipAfterExpiry => "ownership_after_expiry",
            Check::StaleHandleAnswers => "stale_handle_answers",
            Check::MutualExclusion => "mutual_exclusion",
            Check::FencingTokensIncrease => "fencing_tokens_increase",
            Check::ClockSkew => "clock_skew",
            Check::BackendUnreachable => "backend_unreachable",
            Check::BackendLost => "backend_lost",
            Check::NameLengthLimit => "name_length_limit",
            Check::NameEdgeCases => "name_edge_cases",
            Check::GeneratedNames => "generated_names",
            Check::LongDurationsAndCounts => "long_durations_and_counts",
            Check::StaleCallAtExpiry => "stale_call_at_expiry",
            Check::Model => "model",
            Check::NameCacheClearedMidway => "name_cache_cleared_midway",
            Check::ShedlockRecordTakeover => "shedlock_record_takeover",
            Check::AdminListing => "admin_listing",
            Check::AdminForceUnlock => "admin_force_unlock",
            Check::ConcurrentRelease => "concurrent_release",
            Check::AdminConcurrentForceUnlock => "admin_concurrent_force_unlock",
        }
    }

    /// A two-letter tag for this check's lock names (they must stay short).
    fn tag(self) -> &'static str {
        match self {
            Check::AcquireSkipRelease => "as",
            Check::AtMostExpiry => "am",
            Check::AtLeastHold => "al",
            Check::Extend => "ex",
            Check::ExtendRefusedWhenNotDeclared => "en",
            Check::OwnershipAfterExpiry => "ow",
            Check::StaleHandleAnswers => "sh",
            Check::MutualExclusion => "mx",
            Check::FencingTokensIncrease => "ft",
            Check::ClockSkew => "cs",
            Check::BackendUnreachable => "bu",
            Check::BackendLost => "bl",
            Check::NameLengthLimit => "nl",
            Check::NameEdgeCases => "ne",
            Check::GeneratedNames => "gn",
            Check::LongDurationsAndCounts => "lc",
            Check::StaleCallAtExpiry => "se",
            Check::Model => "md",
            Check::NameCacheClearedMidway => "nc",
            Check::ShedlockRecordTakeover => "sr",
            Check::AdminListing => "ls",
            Check::AdminForceUnlock => "fu",
            Check::ConcurrentRelease => "cr",
            Check::AdminConcurrentForceUnlock => "cf",
        }
    }

    /// The check whose [`name`](Self::name) is `name`.
    pub fn from_name(name: &str) -> Option<Check> {
        Check::ALL.into_iter().find(|check| check.name() == name)
    }

    /// This check's names inside a run's name space.
    pub fn names_in(self, run: &NameSpace) -> NameSpace {
        run.child(self.tag())
    }

    /// Runs this check against `harness`, with lock names from `names`. When the failure is
    /// a node refused a lock the check expected to be free, a fresh node asks for it at once:
    /// if the backend had it free, the failure names \[free-lock-is-taken\] (the refused
    /// node's acquire path), not the rule that should have freed it.
    pub async fn run<H: ConformanceHarness>(
        self,
        harness: &H,
        names: &NameSpace,
    ) -> Result<Verdict, CheckFailure> {
        let outcome = match self {
            Check::AcquireSkipRelease => check_acquire_skip_release(harness, names).await,
            Check::AtMostExpiry => check_at_most_expiry(harness, names).await,
            Check::AtLeastHold => check_at_least_hold(harness, names).await,
            Check::Extend => check_extend(harness, names).await,
            Check::ExtendRefusedWhenNotDeclared => {
                check_extend_refused_when_not_declared(harness, names).await
            }
            Check::OwnershipAfterExpiry => check_ownership_after_expiry(harness, names).await,
            Check::StaleHandleAnswers => check_stale_handle_answers(harness, names).await,
            Check::MutualExclusion => check_mutual_exclusion(harness, names).await,
            Check::FencingTokensIncrease => check_fencing_tokens_increase(harness, names).await,
            Check::ClockSkew => check_clock_skew(harness, names).await,
            Check::BackendUnreachable => check_backend_unreachable(harness, names).await,
            Check::BackendLost => check_backend_lost(harness, names).await,
            Check::NameLengthLimit => check_name_length_limit(harness, names).await,
            Check::NameEdgeCases => check_name_edge_cases(harness, names).await,
            Check::GeneratedNames => check_generated_names(harness, names).await,
            Check::LongDurationsAndCounts => check_long_durations_and_counts(harness, names).await,
            Check::StaleCallAtExpiry => check_stale_call_at_expiry(harness, names).await,
            Check::Model => check_model(harness, names).await,
            Check::NameCacheClearedMidway => check_name_cache_cleared_midway(harness, names).await,
            Check::ShedlockRecordTakeover => check_shedlock_record_takeover(harness, names).await,
            Check::AdminListing => check_admin_listing(harness, names).await,
            Check::AdminForceUnlock => check_admin_force_unlock(harness, names).await,
            Check::ConcurrentRelease => check_concurrent_release(harness, names).await,
            Check::AdminConcurrentForceUnlock => {
                check_admin_concurrent_force_unlock(harness, names).await
            }
        };
        match outcome {
            Err(failure) => Err(diagnose_refusal(harness, failure).await),
            passed => passed,
        }
    }
}

/// The time unit from which a provider counts as coarse-grained (whole-second leases): its
/// checks mostly wait, so waiting side by side costs nothing.
pub(crate) const COARSE_UNIT: std::time::Duration = std::time::Duration::from_millis(500);

/// A request answered this late points at the provider, not the machine: no backend on one
/// machine takes a quarter of a second for one lock operation unless something waits.
const SLOW_ANSWER: std::time::Duration = std::time::Duration::from_millis(250);

/// How many times a timing-sensitive scenario is retried when the machine stalled so long
/// that an observation proved nothing either way. An inconclusive attempt never passes a
/// check, so more attempts cost a correct provider nothing and let no broken one through; they
/// outlast a longer stall. Three did not: in CI, SQLite's writers queued behind its file lock
/// while the kit's other checks ran beside `clock_skew`, and all three attempts (1.7 s) came too
/// late.
const ATTEMPTS: u32 = 6;

/// A node on the system clock, or a failure naming the harness.
async fn node<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    label: &str,
) -> Result<H::Node, CheckFailure> {
    node_with_clock(harness, trace, label, Arc::new(SystemClock)).await
}

/// A node reading `clock`, or a failure naming the harness.
async fn node_with_clock<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    label: &str,
    clock: Arc<dyn Clock>,
) -> Result<H::Node, CheckFailure> {
    harness.node(clock).await.map_err(|error| {
        trace.failure(
            Rule::HARNESS,
            format!(
                "harness `{}` could not make node {label}: {error}",
                harness.name()
            ),
        )
    })
}

/// The rules that free a lock for every node alike: by time (at-most, at-least, an extend's new
/// end), by a release, or by a force-unlock. A refusal under one of them is either the backend
/// still holding the lock or the refused node's own acquire path, and a witness tells the two
/// apart. Under any other rule the refused node's own state is the point (its skewed clock,
/// its cleared cache, a record Java wrote that it cannot read), and a witness that shares none of
/// it proves nothing. Under [`Rule::ADMIN`] the operator view is what is on trial, so only the
/// witness's own acquisition counts.
const FREEING_RULES: [Rule; 5] = [
    Rule::AT_MOST,
    Rule::AT_LEAST,
    Rule::EXTEND,
    Rule::RELEASE_RESULT,
    Rule::ADMIN,
];

/// Names the rule a refusal of a lock that should be free broke. `failure` is a node's refusal
/// under the rule that should have freed the lock (at-least after a release, at-most after an
/// expiry, an extend's new end); a witness, a new node of `harness` that has never asked for
/// the lock (so it has no view of it to be stale), then asks for it at once. If it gets it, or
/// the operator view (where the harness gives one) shows the lock free, the backend had the lock
/// free and the refusal came from the refused node's acquire path (a cache, a stale view, a
/// condition that never matches, an error answered as "not acquired"):
/// \[free-lock-is-taken\]. Otherwise the backend still holds it, and the rule stands. Any other
/// failure is returned as it is.
///
/// One place for every check: [`Check::run`] diagnoses each refusal it is handed, so a check
/// only marks one ([`Trace::refusal`]). Only refusals under [`FREEING_RULES`] are diagnosed.
pub(crate) async fn diagnose_refusal<H: ConformanceHarness>(
    harness: &H,
    failure: CheckFailure,
) -> CheckFailure {
    let Some(refusal) = failure.refused.clone() else {
        return failure;
    };
    if !FREEING_RULES.contains(&failure.rule) {
        return failure;
    }
    let trace = Trace::continuing(&failure, &refusal);
    trace.note(
        "a node was refused a lock that should be free: a witness that never asked for it asks now",
    );
    let Ok(witness) = node(harness, &trace, "W").await else {
        return failure;
    };
    let Ok(probe) = trace.acquire("W", &witness, &refusal.lock).await else {
        return failure;
    };
    let why = if let Some(handle) = probe.value.into_handle() {
        let _ = trace.unlock("W", &*handle).await;
        "node W asked right after and got it"
    } else if failure.rule != Rule::ADMIN
        && let Support::Supported(admin) = harness.admin(&witness)
        && let Ok(seen) = trace.inspect_lock("W", admin, refusal.lock.name()).await
        && seen.is_none_or(|seen| seen.state == shedlock_core::LockState::Free)
    {
        "node W was refused too, but the operator view shows the lock free"
    } else {
        return failure;
    };
    trace.failure(
        Rule::FREE_LOCK_IS_TAKEN,
        format!(
            "{}; {why}, so the backend had it free: the refusal came from the provider's acquire path (a cache, a stale view, a condition that never matches, an error answered as \"not acquired\"), not from the lock",
            failure.observed
        ),
    )
}

/// The capabilities a node declares, and the kit's durations for them.
fn timing_of(capabilities: &Capabilities) -> Timing {
    Timing::for_precision(capabilities.time_precision)
}

/// What one attempt of a timing-sensitive scenario showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// Every observation was early or late enough to prove something, and the rule held.
    Proven,
    /// The machine stalled so that an observation proved nothing either way; why, for the
    /// timeline.
    Inconclusive(&'static str),
}

/// Why an attempt proved nothing: a probe was answered after the moment it had to beat.
pub(crate) const PROBED_TOO_LATE: &str = "a probe was answered too late to prove anything";

/// Probes `held` from `node` at each of `times`: a probe answered by its deadline must be
/// refused. [`Attempt::Proven`] when every probe was answered by the deadline (the last one is
/// the one that matters: it catches a lock that frees itself a little early).
async fn probe_at(
    trace: &Trace,
    node: &str,
    provider: &dyn LockProvider,
    held: &HeldLock<'_>,
    times: impl IntoIterator<Item = Instant>,
) -> Result<Attempt, CheckFailure> {
    // On a coarse-precision backend the tolerance eats into the window; a probe time past the
    // deadline could prove nothing, so it is not sent.
    for time in times
        .into_iter()
        .filter(|time| *time < held.surely_held_until)
    {
        trace.sleep_until(time).await;
        // A late probe that got the lock now holds it (its handle is gone) until its own
        // at-most: the rest of the attempt would be refused for that reason, not the
        // provider's. The caller starts over on a fresh name.
        if trace.probe_while_held(node, provider, held).await? != HeldProbe::Refused {
            return Ok(Attempt::Inconclusive(PROBED_TOO_LATE));
        }
    }
    Ok(Attempt::Proven)
}

/// Runs `scenario` (given the attempt number, from 1) until an attempt proves something, at
/// most [`ATTEMPTS`] times, noting each inconclusive attempt on the timeline. When every
/// attempt stayed inconclusive the check fails under `rule`: it could not observe `what`.
async fn until_conclusive(
    trace: &Trace,
    rule: Rule,
    what: &str,
    mut scenario: impl AsyncFnMut(u32) -> Result<Attempt, CheckFailure>,
) -> Result<(), CheckFailure> {
    for attempt in 1..=ATTEMPTS {
        match scenario(attempt).await? {
            Attempt::Proven => return Ok(()),
            Attempt::Inconclusive(why) => {
                trace.note(format!("attempt {attempt}: {why}; retrying"));
            }
        }
    }
    // A provider that waits before answering (a retry loop, a sleep, a queue behind a lock of
    // its own) makes every probe late: that is its own [bounded-time] matter, not the machine's.
    let slowest = trace.slowest();
    let (rule, why) = if slowest >= SLOW_ANSWER {
        (
            Rule::BOUNDED_TIME,
            format!(
                "the slowest request of this check took {slowest:?} to answer: a provider that waits before it answers (a retry, a sleep, a queue behind its own lock) makes every probe late, and the wait is the provider's to remove"
            ),
        )
    } else {
        (
            rule,
            format!(
                "single requests answered within {slowest:?}, so the time went between them: is the machine or the backend overloaded?"
            ),
        )
    };
    Err(trace.failure(
        rule,
        format!(
            "could not observe {what}: in {ATTEMPTS} attempts every probe was answered too late to prove anything; {why}"
        ),
    ))
}
