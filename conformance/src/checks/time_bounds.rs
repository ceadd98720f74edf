//! Checks 2, 3 and 5: the lock lasts until `lock_at_most_for` if its holder vanishes, at
//! least `lock_at_least_for` if it is released early, and a stale holder cannot touch the
//! next holder's lock.

use std::time::Duration;

use shedlock_core::LockProvider;
use tokio::time::Instant;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{HeldLock, HeldProbe, Trace, config};

use super::{Attempt, node, timing_of, until_conclusive};

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
    until_conclusive(
        &trace,
        Rule::AT_MOST,
        "the lock held before at-most",
        async |attempt| {
            let lock = config(
                &names.name(&format!("lock{attempt}")),
                at_most,
                Duration::ZERO,
            );
            let taken = trace.must_acquire_free("A", &a, &lock).await?;
            let surely_held_until = timing.surely_held_until(&taken, at_most);
            let surely_expired = timing.surely_over_by(&taken, at_most);
            let why = format!(
                "node A's acquisition (sent {}) holds it until {} at the earliest; does dropping a handle release the lock?",
                trace.at(taken.sent),
                trace.at(taken.sent + at_most)
            );
            let probe_times = [1, 2].map(|units| taken.answered + timing.units(units));
            drop(taken.value);
            trace.note("node A vanishes: its handle is dropped without unlock");
            let held = HeldLock {
                lock: &lock,
                surely_held_until,
                rule: Rule::AT_MOST,
                why: &why,
            };
            if !probe_at(&trace, "B", &b, &held, probe_times).await? {
                return Ok(Attempt::Inconclusive(
                    "no probe was answered early enough to prove anything",
                ));
            }
            trace.sleep_until(surely_expired).await;
            trace
                .must_acquire_and_release(
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
            Ok(Attempt::Proven)
        },
    )
    .await?;
    Ok(Verdict::passed())
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
    until_conclusive(
        &trace,
        Rule::AT_LEAST,
        "the lock held until at-least",
        async |attempt| {
            let lock = config(&names.name(&format!("lock{attempt}")), at_most, at_least);
            let taken = trace.must_acquire_free("A", &a, &lock).await?;
            let released = trace.must_release("A", &*taken.value).await?;
            let why = format!(
                "node A released early, and its acquisition (sent {}) holds it for lock_at_least_for until {} at the earliest",
                trace.at(taken.sent),
                trace.at(taken.sent + at_least)
            );
            let held = HeldLock {
                lock: &lock,
                surely_held_until: timing.surely_held_until(&taken, at_least),
                rule: Rule::AT_LEAST,
                why: &why,
            };
            let probe_times = [released.answered, released.answered + timing.unit];
            if !probe_at(&trace, "B", &b, &held, probe_times).await? {
                return Ok(Attempt::Inconclusive(
                    "no probe was answered early enough to prove anything",
                ));
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
                return Err(trace.failure(
                    Rule::AT_LEAST,
                    format!(
                        "node B was refused at {}, after lock_at_least_for had passed ({} at the latest); a release must keep the lock only until max(now, acquired_at + lock_at_least_for), not until lock_at_most_for",
                        trace.at(probe.answered),
                        trace.at(surely_free)
                    ),
                ));
            };
            trace.must_release("B", &*handle).await?;
            Ok(Attempt::Proven)
        },
    )
    .await?;
    Ok(Verdict::passed())
}

/// Probes `held` from `node` at each of `times`: a probe answered by its deadline must be
/// refused. Answers whether the probes proved anything: some probe was early enough, and no late
/// one took the lock (which would hold it for reasons of its own).
async fn probe_at(
    trace: &Trace,
    node: &str,
    provider: &dyn LockProvider,
    held: &HeldLock<'_>,
    times: impl IntoIterator<Item = Instant>,
) -> Result<bool, CheckFailure> {
    let mut conclusive = false;
    for time in times {
        trace.sleep_until(time).await;
        match trace.probe_while_held(node, provider, held).await? {
            HeldProbe::Refused => conclusive = true,
            // A late probe that got the lock now holds it (its handle is gone) until its own
            // at-most: the rest of this attempt would be refused for that reason, not the
            // provider's. Start over on a fresh name.
            HeldProbe::TooLate { acquired: true } => return Ok(false),
            HeldProbe::TooLate { acquired: false } => {}
        }
    }
    Ok(conclusive)
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
