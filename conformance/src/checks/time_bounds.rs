//! Checks 2, 3 and 5: the lock lasts until `lock_at_most_for` if its holder vanishes, at
//! least `lock_at_least_for` if it is released early, and a stale holder cannot touch the
//! next holder's lock.

use std::time::Duration;

use shedlock_core::LockProvider;
use tokio::time::Instant;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::{ATTEMPTS, node, stalled, timing_of};

/// At-most expiry: a holder that vanishes (its handle dropped, never released) keeps others
/// out until `lock_at_most_for` has passed, not before, and not much after.
///
/// Node A takes the lock for 3 units and drops the handle. Node B probes after 1 and 2 units:
/// each probe answered before the earliest possible expiry must be refused. Node B probes again
/// once the latest possible expiry (plus tolerance) has passed: it must get the lock.
pub async fn check_at_most_expiry<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("at_most_expiry");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let timing = timing_of(&a.capabilities());
    let at_most = timing.units(3);
    for attempt in 1..=ATTEMPTS {
        let lock = config(
            &names.name(&format!("lock{attempt}")),
            at_most,
            Duration::ZERO,
        );
        let taken = trace
            .must_acquire("A", &a, &lock, Rule::FREE_LOCK_IS_TAKEN, "nobody held it")
            .await?;
        drop(taken.value);
        trace.note("node A vanishes: its handle is dropped without unlock");
        let surely_held_until = taken.sent + at_most - timing.tolerance;
        let mut conclusive = false;
        for units in [1, 2] {
            trace
                .sleep_until(taken.answered + timing.units(units))
                .await;
            let probe = trace.acquire("B", &b, &lock).await?;
            if probe.answered <= surely_held_until {
                conclusive = true;
                if probe.value.is_acquired() {
                    return Err(trace.failure(
                        Rule::AT_MOST,
                        format!(
                            "node B got the lock at {}, but node A's acquisition (sent {}) holds it until {} at the earliest; does dropping a handle release the lock?",
                            trace.at(probe.answered),
                            trace.at(taken.sent),
                            trace.at(taken.sent + at_most)
                        ),
                    ));
                }
            } else if probe.value.is_acquired() {
                break;
            }
        }
        if !conclusive {
            trace.note(format!(
                "attempt {attempt}: no probe was answered early enough to prove anything; retrying"
            ));
            continue;
        }
        let surely_expired = taken.answered + at_most + timing.tolerance;
        trace.sleep_until(surely_expired).await;
        let after = trace
            .must_acquire(
                "B",
                &b,
                &lock,
                Rule::AT_MOST,
                &format!(
                    "node A's lock expired by {} at the latest (answered {} + at most {at_most:?} + tolerance {:?})",
                    trace.at(surely_expired),
                    trace.at(taken.answered),
                    timing.tolerance
                ),
            )
            .await?;
        trace
            .must_unlock_with(
                "B",
                &*after.value,
                true,
                Rule::RELEASE_RESULT,
                "node B held it",
            )
            .await?;
        return Ok(Verdict::passed());
    }
    Err(stalled(
        &trace,
        Rule::AT_MOST,
        "the lock held before at-most",
    ))
}

/// At-least hold: a release before `lock_at_least_for` keeps others out until then, and
/// lets them in after it (well before `lock_at_most_for`).
pub async fn check_at_least_hold<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("at_least_hold");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let timing = timing_of(&a.capabilities());
    let at_most = timing.units(8);
    let at_least = timing.units(3);
    for attempt in 1..=ATTEMPTS {
        let lock = config(&names.name(&format!("lock{attempt}")), at_most, at_least);
        let taken = trace
            .must_acquire("A", &a, &lock, Rule::FREE_LOCK_IS_TAKEN, "nobody held it")
            .await?;
        trace
            .must_unlock_with(
                "A",
                &*taken.value,
                true,
                Rule::RELEASE_RESULT,
                "node A held the lock",
            )
            .await?;
        let surely_held_until = taken.sent + at_least - timing.tolerance;
        let mut conclusive = false;
        for wait in [Duration::ZERO, timing.unit] {
            trace.sleep_until(Instant::now() + wait).await;
            let probe = trace.acquire("B", &b, &lock).await?;
            if probe.answered <= surely_held_until {
                conclusive = true;
                if probe.value.is_acquired() {
                    return Err(trace.failure(
                        Rule::AT_LEAST,
                        format!(
                            "node B got the lock at {}, but node A released early and its acquisition (sent {}) holds it for lock_at_least_for until {} at the earliest",
                            trace.at(probe.answered),
                            trace.at(taken.sent),
                            trace.at(taken.sent + at_least)
                        ),
                    ));
                }
            } else if probe.value.is_acquired() {
                break;
            }
        }
        if !conclusive {
            trace.note(format!(
                "attempt {attempt}: no probe was answered early enough to prove anything; retrying"
            ));
            continue;
        }
        let surely_free = taken.answered + at_least + timing.tolerance;
        trace.sleep_until(surely_free).await;
        let probe = trace.acquire("B", &b, &lock).await?;
        if probe.sent >= taken.sent + at_most - timing.tolerance {
            trace.note(format!(
                "attempt {attempt}: the probe after at-least came so late that at-most had passed too; retrying"
            ));
            continue;
        }
        match probe.value.into_handle() {
            Some(handle) => {
                trace
                    .must_unlock_with("B", &*handle, true, Rule::RELEASE_RESULT, "node B held it")
                    .await?;
                return Ok(Verdict::passed());
            }
            None => {
                return Err(trace.failure(
                    Rule::AT_LEAST,
                    format!(
                        "node B was refused at {}, after lock_at_least_for had passed ({} at the latest); a release must keep the lock only until max(now, acquired_at + lock_at_least_for), not until lock_at_most_for",
                        trace.at(probe.answered),
                        trace.at(surely_free)
                    ),
                ));
            }
        }
    }
    Err(stalled(
        &trace,
        Rule::AT_LEAST,
        "the lock held until at-least",
    ))
}

/// Ownership: after a holder's lock expires and another node takes it, the old holder's
/// release and extend change nothing and answer `false`. Also with the old and the new
/// acquisition on the same node (ShedLock issues #186, #317).
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
    let scenarios: [(&str, &str, &H::Node); 2] = [("other-node", "B", &b), ("same-node", "A", &a)];
    for (local, new_label, new_node) in scenarios {
        let name = names.name(local);
        let stale = trace
            .must_acquire(
                "A",
                &a,
                &config(&name, short, Duration::ZERO),
                Rule::FREE_LOCK_IS_TAKEN,
                "nobody held it",
            )
            .await?;
        trace
            .sleep_until(stale.answered + short + timing.tolerance)
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
        trace
            .must_unlock_with(
                "A",
                &*stale.value,
                false,
                Rule::OWNERSHIP,
                &format!(
                    "node A's acquisition expired and node {new_label} took the lock; the stale release must change nothing"
                ),
            )
            .await?;
        if capabilities.extend {
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
