//! The time bounds of a lock: it lasts until `lock_at_most_for` if its holder vanishes, at
//! least `lock_at_least_for` if it is released early; a stale holder cannot touch the next
//! holder's lock, and a spent handle changes nothing.

use std::time::Duration;

use shedlock_core::LockProvider;
use tokio::time::Instant;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{HeldLock, Trace, config};

use super::{Attempt, node, probe_at, timing_of, until_conclusive};

/// At-most expiry: a holder that vanishes (its handle dropped, never released) keeps others
/// out until `lock_at_most_for` has passed, not before, and not much after.
///
/// Node A takes the lock for 3 units and a fraction (off the unit's grid, so a duration rounded
/// down shows) and drops the handle. Node B probes after 1 and 2 units and once more just
/// before the earliest possible expiry minus the early slack (the precision excuses lateness
/// only): each must be refused, so a provider that frees the lock a little early is caught too. Node B probes again
/// once the latest possible expiry (plus tolerance) has passed: it must get the lock. All of
/// it twice, on two locks taken at different points of the clock.
pub async fn check_at_most_expiry<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("at_most_expiry");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let timing = timing_of(&a.capabilities());
    let at_most = timing.off_grid(3);
    // Two proofs, the second begun once the first lock has expired (about half a second later
    // at the finest unit): what a provider that rounds stored times down to a coarser grid
    // than it declares loses depends on where on that grid the lock was taken, and one proof
    // can land where the loss is within the early slack (a whole-second column's probes did
    // about one run in 40).
    for round in 1..=2 {
        at_most_proof(&trace, &a, &b, &timing, names, at_most, round).await?;
    }
    Ok(Verdict::passed())
}

/// One proof of [`check_at_most_expiry`]: a lock of `at_most` whose holder vanishes is refused
/// to node B until just before it ends, and taken once it surely has.
async fn at_most_proof(
    trace: &Trace,
    a: &dyn LockProvider,
    b: &dyn LockProvider,
    timing: &crate::timing::Timing,
    names: &NameSpace,
    at_most: Duration,
    round: u32,
) -> Result<(), CheckFailure> {
    until_conclusive(
        trace,
        Rule::AT_MOST,
        "the lock held until just before at-most",
        async |attempt| {
            let lock = config(
                &names.name(&format!("lock{round}-{attempt}")),
                at_most,
                Duration::ZERO,
            );
            let taken = trace.must_acquire_free("A", a, &lock).await?;
            let surely_held_until = timing.surely_held_until(&taken, at_most);
            let surely_expired = timing.surely_over_by(&taken, at_most);
            let why = format!(
                "node A's acquisition (sent {}) holds it until {} at the earliest; does dropping a handle release the lock, or does it expire early?",
                trace.at(taken.sent),
                trace.at(taken.sent + at_most)
            );
            let probe_times = [
                taken.answered + timing.units(1),
                taken.answered + timing.units(2),
                timing.late_probe_at(surely_held_until, &taken),
            ];
            drop(taken.value);
            trace.note("node A vanishes: its handle is dropped without unlock");
            let held = HeldLock {
                lock: &lock,
                surely_held_until,
                rule: Rule::AT_MOST,
                why: &why,
            };
            if let late @ Attempt::Inconclusive(_) =
                probe_at(trace, "B", b, &held, probe_times).await?
            {
                return Ok(late);
            }
            trace.sleep_until(surely_expired).await;
            let expired_by = trace
                .must_acquire(
                    "B",
                    b,
                    &lock,
                    Rule::AT_MOST,
                    &format!(
                        "node A's lock expired by {} at the latest (answered {} + at most {at_most:?} + tolerance {:?})",
                        trace.at(surely_expired),
                        trace.at(taken.answered),
                        timing.tolerance
                    ),
                )
                .await;
            // Refused: A's lock ends late or never. Taken, B's own lock must hold until its
            // release (a lock that ends early shows there too).
            let b_taken = match expired_by {
                Ok(b_taken) => b_taken,
                Err(failure) => {
                    let due = taken.answered + at_most;
                    return Err(late_or_never(trace, b, &lock, failure, due, timing).await);
                }
            };
            trace.must_release_just_taken("B", b, &lock, b_taken).await?;
            Ok(Attempt::Proven)
        },
    )
    .await
}

/// How late a lock that should have freed itself at `due` (on the kit's clock) frees itself:
/// asked again every 50 ms for 5 s. Freed within them, the provider expires locks later than
/// its declared `time_precision` says (\[honest-capabilities\]: declare the lateness measured);
/// still held, it does not free them at at-most (\[at-most\]), and `failure` stands.
async fn late_or_never(
    trace: &Trace,
    node: &dyn LockProvider,
    lock: &shedlock_core::LockConfiguration,
    failure: CheckFailure,
    due: Instant,
    timing: &crate::timing::Timing,
) -> CheckFailure {
    if failure.rule != Rule::AT_MOST {
        return failure;
    }
    let give_up = Instant::now() + Duration::from_secs(5);
    while Instant::now() < give_up {
        trace
            .sleep_until(Instant::now() + Duration::from_millis(50))
            .await;
        let Ok(probe) = trace.acquire_unrecorded("B", node, lock).await else {
            return failure;
        };
        if let Some(handle) = probe.value.into_handle() {
            let _ = trace.unlock("B", &*handle).await;
            let late = probe.answered.saturating_duration_since(due);
            return trace.failure(
                Rule::HONEST_CAPABILITIES,
                format!(
                    "{}; node B got it at {}, {late:?} after at-most, more than the declared time_precision ({:?}) allows: the provider frees locks that late, so it must declare a precision of at least that",
                    failure.observed,
                    trace.at(probe.answered),
                    timing.tolerance.saturating_sub(Duration::from_millis(25))
                ),
            );
        }
    }
    failure
}

/// At-least hold: a release late in the `lock_at_least_for` window keeps others out until
/// `acquired_at + lock_at_least_for`, and lets them in right after it: not at `released_at +
/// lock_at_least_for`, and well before `lock_at_most_for`.
///
/// Run twice: on a new name (the acquisition inserts the record) and on a name whose record
/// exists and is free (the acquisition takes it over), as the two paths often differ in which
/// `acquired_at` they store. Node A takes the lock for at most 10 units and at least 4 and a
/// fraction, releases it after 2 and a fraction (late enough to tell `acquired_at` from the
/// release, early enough to be inside the window on a backend whose tolerance is a whole unit;
/// off the unit's grid, so times rounded down show); node B probes right after the release and
/// just before the at-least ends (refused) and just after it (acquired).
pub async fn check_at_least_hold<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("at_least_hold");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let timing = timing_of(&a.capabilities());
    let at_most = timing.units(10);
    let at_least = timing.off_grid(4);
    for path in [RecordPath::Insert, RecordPath::TakeOver] {
        until_conclusive(
            &trace,
            Rule::AT_LEAST,
            "the lock held until at-least",
            async |attempt| {
                let lock = config(
                    &names.name(&format!("{}{attempt}", path.tag())),
                    at_most,
                    at_least,
                );
                if path == RecordPath::TakeOver {
                    let free = config(lock.name(), at_most, Duration::ZERO);
                    trace
                        .must_acquire_and_release(
                            "A",
                            &a,
                            &free,
                            Rule::FREE_LOCK_IS_TAKEN,
                            "nobody held it; this leaves a free record to take over",
                        )
                        .await?;
                    // The old record's times must be clearly older than the new acquisition's,
                    // or a takeover that keeps them would go unnoticed.
                    trace.sleep_until(Instant::now() + timing.units(2)).await;
                }
                let taken = trace
                    .must_acquire(
                        "A",
                        &a,
                        &lock,
                        Rule::AT_LEAST,
                        "the lock was released with lock_at_least_for = 0, so it is free",
                    )
                    .await?;
                trace.sleep_until(taken.answered + timing.off_grid(2)).await;
                let released = trace.must_release("A", &*taken.value).await?;
                let why = format!(
                    "node A released late in the at-least window, {}, and its acquisition (sent {}) holds it until acquired_at + lock_at_least_for = {} at the earliest",
                    path.describe(),
                    trace.at(taken.sent),
                    trace.at(taken.sent + at_least)
                );
                let surely_held_until = timing.surely_held_until(&taken, at_least);
                let held = HeldLock {
                    lock: &lock,
                    surely_held_until,
                    rule: Rule::AT_LEAST,
                    why: &why,
                };
                let probe_times = [
                    released.answered,
                    timing.late_probe_at(surely_held_until, &released),
                ];
                if let late @ Attempt::Inconclusive(_) =
                    probe_at(&trace, "B", &b, &held, probe_times).await?
                {
                    return Ok(late);
                }
                let surely_free = timing.surely_over_by(&taken, at_least);
                trace.sleep_until(surely_free).await;
                let probe = trace.acquire("B", &b, &lock).await?;
                if probe.sent >= timing.surely_held_until(&taken, at_most) {
                    return Ok(Attempt::Inconclusive(
                        "the probe after at-least came so late that at-most had passed too",
                    ));
                }
                let Some(handle) = probe.value.into_handle() else {
                    return Err(trace.refusal(
                        Rule::AT_LEAST,
                        format!(
                            "node B was refused at {}, after acquired_at + lock_at_least_for had passed ({} at the latest; the release was answered at {}, {}): a release keeps the lock until max(now, acquired_at + lock_at_least_for), not released_at + lock_at_least_for, nor lock_at_most_for",
                            trace.at(probe.answered),
                            trace.at(surely_free),
                            trace.at(released.answered),
                            path.describe()
                        ),
                        &lock,
                    ));
                };
                trace.must_release("B", &*handle).await?;
                Ok(Attempt::Proven)
            },
        )
        .await?;
    }
    Ok(Verdict::passed())
}

/// Which write an acquisition makes: a new record, or a takeover of an existing free one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RecordPath {
    Insert,
    TakeOver,
}

impl RecordPath {
    fn tag(self) -> &'static str {
        match self {
            RecordPath::Insert => "new",
            RecordPath::TakeOver => "old",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            RecordPath::Insert => "on a new name (the acquisition inserted the record)",
            RecordPath::TakeOver => "on a name whose free record the acquisition took over",
        }
    }
}

/// A handle whose acquisition is over answers `false` and changes nothing, even while the lock
/// is still held for `lock_at_least_for`: releasing it a second time, extending it after its
/// release, and releasing it after it expired with nobody taking the lock since.
///
/// Each case then proves the lock kept the hold the first release gave it (held until
/// `acquired_at + lock_at_least_for`, free right after) or stayed free.
pub async fn check_stale_handle_answers<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("stale_handle_answers");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let timing = timing_of(&capabilities);
    let at_most = timing.units(10);
    let at_least = timing.units(3);
    let mut cases = vec![SpentHandle::ReleasedTwice];
    if capabilities.extend {
        cases.push(SpentHandle::ExtendedAfterRelease);
    }
    for case in cases {
        until_conclusive(
            &trace,
            Rule::RELEASE_RESULT,
            "a released lock held for its at-least",
            async |attempt| {
                let lock = config(
                    &names.name(&format!("{}{attempt}", case.tag())),
                    at_most,
                    at_least,
                );
                let taken = trace.must_acquire_free("A", &a, &lock).await?;
                trace.must_release("A", &*taken.value).await?;
                let (rule, answered) = match case {
                    SpentHandle::ReleasedTwice => {
                        let again = trace
                            .must_unlock_with(
                                "A",
                                &*taken.value,
                                false,
                                Rule::RELEASE_RESULT,
                                "this handle was already released; the lock is held for lock_at_least_for, but no longer by this acquisition",
                            )
                            .await?;
                        (Rule::RELEASE_RESULT, again.answered)
                    }
                    SpentHandle::ExtendedAfterRelease => {
                        let extended = trace.extend("A", &*taken.value, at_most).await?;
                        if extended.value {
                            return Err(trace.failure(
                                Rule::EXTEND,
                                format!(
                                    "node A extended lock {:?} at {} after releasing it; the record is still held for lock_at_least_for, but not by this acquisition any more",
                                    lock.name(),
                                    trace.at(extended.answered)
                                ),
                            ));
                        }
                        (Rule::EXTEND, extended.answered)
                    }
                };
                let why = format!(
                    "node A's release holds the lock until acquired_at + lock_at_least_for = {} at the earliest, and {} must change nothing",
                    trace.at(taken.sent + at_least),
                    case.describe()
                );
                let surely_held_until = timing.surely_held_until(&taken, at_least);
                let held = HeldLock {
                    lock: &lock,
                    surely_held_until,
                    rule,
                    why: &why,
                };
                let probe_times = [answered, timing.late_probe_at(surely_held_until, &taken)];
                if let late @ Attempt::Inconclusive(_) =
                    probe_at(&trace, "B", &b, &held, probe_times).await?
                {
                    return Ok(late);
                }
                let surely_free = timing.surely_over_by(&taken, at_least);
                trace.sleep_until(surely_free).await;
                trace
                    .must_acquire_and_release(
                        "B",
                        &b,
                        &lock,
                        rule,
                        &format!(
                            "the at-least hold ended by {} at the latest; {} must not have lengthened it",
                            trace.at(surely_free),
                            case.describe()
                        ),
                    )
                    .await?;
                Ok(Attempt::Proven)
            },
        )
        .await?;
    }

    let short = timing.units(2);
    let lock = config(&names.name("expired"), short, timing.unit);
    let taken = trace.must_acquire_free("A", &a, &lock).await?;
    let expired_by = timing.surely_over_by(&taken, short);
    trace.sleep_until(expired_by).await;
    trace
        .must_unlock_with(
            "A",
            &*taken.value,
            false,
            Rule::RELEASE_RESULT,
            &format!(
                "the acquisition expired by {} at the latest (nobody took the lock since, but it is not held by this acquisition any more)",
                trace.at(expired_by)
            ),
        )
        .await?;
    trace
        .must_acquire_and_release(
            "B",
            &b,
            &lock,
            Rule::RELEASE_RESULT,
            "the lock expired, and a release of the expired acquisition must not have revived it",
        )
        .await?;
    Ok(Verdict::passed())
}

/// A handle whose acquisition was already released, and what is asked of it again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SpentHandle {
    ReleasedTwice,
    ExtendedAfterRelease,
}

impl SpentHandle {
    fn tag(self) -> &'static str {
        match self {
            SpentHandle::ReleasedTwice => "twice",
            SpentHandle::ExtendedAfterRelease => "ext",
        }
    }

    fn describe(self) -> &'static str {
        match self {
            SpentHandle::ReleasedTwice => "the second release (answered false)",
            SpentHandle::ExtendedAfterRelease => "the extend after the release (answered false)",
        }
    }
}

/// Ownership: after a holder's lock expires and another node takes it, the old holder's
/// release and extend change nothing and answer `false`. Also with the old and the new
/// acquisition on the same node (ShedLock issues #186, #317), and with a stale release that is
/// the handle's first word since it lost the lock (no failed extend told it first).
pub async fn check_ownership_after_expiry<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("ownership_after_expiry");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let c = node(harness, &trace, "C").await?;
    let capabilities = a.capabilities();
    let timing = timing_of(&capabilities);
    let short = timing.units(2);
    let long = timing.units(100);
    // The last scenario sends the stale release alone: a handle that learned of its loss from a
    // failed extend may answer `false` without asking the backend, so only a release that
    // reaches storage proves the backend's owner check.
    let scenarios: [(&str, &str, &H::Node, bool); 3] = [
        ("other-node", "B", &b, true),
        ("same-node", "A", &a, true),
        ("release-only", "B", &b, false),
    ];
    for (local, new_label, new_node, extend_first) in scenarios {
        let name = names.name(local);
        let stale = trace
            .must_acquire_free("A", &a, &config(&name, short, Duration::ZERO))
            .await?;
        trace
            .sleep_until(timing.surely_over_by(&stale, short))
            .await;
        let fresh = trace
            .must_acquire(
                new_label,
                new_node as &dyn LockProvider,
                &config(&name, long, Duration::ZERO),
                Rule::AT_MOST,
                "node A's lock had expired",
            )
            .await?;
        // Extend first: a handle that has been released answers false without asking the
        // backend, so an extend after the release would prove nothing about the backend's
        // owner check.
        if capabilities.extend && extend_first {
            let extended = trace.extend("A", &*stale.value, long).await?;
            if extended.value {
                return Err(trace.failure(
                    Rule::OWNERSHIP,
                    format!(
                        "node A's stale handle extended lock {name:?} at {}, which node {new_label} holds now",
                        trace.at(extended.answered)
                    ),
                ));
            }
        }
        let released = trace.unlock("A", &*stale.value).await?;
        if released.value {
            // True is wrong either way; which rule depends on whether it also freed the lock.
            let probe = trace
                .acquire("C", &c, &config(&name, long, Duration::ZERO))
                .await?;
            let (rule, what) = if probe.value.is_acquired() {
                (
                    Rule::OWNERSHIP,
                    "and freed the new holder's lock (node C got it)",
                )
            } else {
                (
                    Rule::RELEASE_RESULT,
                    "though it changed nothing (node C is still refused): true says this acquisition held the lock and released it",
                )
            };
            return Err(trace.failure(
                rule,
                format!(
                    "node A's stale release of {name:?} answered true at {}, after its acquisition expired and node {new_label} took the lock, {what}",
                    trace.at(released.answered)
                ),
            ));
        }
        trace
            .must_not_acquire(
                "C",
                &c,
                &config(&name, long, Duration::ZERO),
                Rule::OWNERSHIP,
                &format!(
                    "node {new_label} holds the lock; the stale holder's release must not have freed it"
                ),
            )
            .await?;
        trace
            .must_unlock_with(
                new_label,
                &*fresh.value,
                true,
                Rule::OWNERSHIP,
                "this is the current holder; a stale holder's operations must not have touched its lock",
            )
            .await?;
    }
    Ok(Verdict::passed())
}
