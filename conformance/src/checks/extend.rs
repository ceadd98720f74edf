//! Check 4: extend moves a held lock's expiry, fails on an expired or released lock, and is
//! refused outright by providers that do not declare it.

use std::time::Duration;

use shedlock_core::{LockError, LockProvider};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{HeldLock, HeldProbe, Trace, config};

use super::{Attempt, node, timing_of, until_conclusive};

/// Extend: the holder extends past the original at-most and others stay out until the new
/// expiry; release after extend frees the lock; extending an expired lock answers `false` and
/// does not revive it; extending a released lock answers `false`.
///
/// Applies when the provider declares [`shedlock_core::Capabilities::extend`].
pub async fn check_extend<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("extend");
    let a = node(harness, &trace, "A").await?;
    let capabilities = a.capabilities();
    if !capabilities.extend {
        return Ok(Verdict::not_applicable(
            "the provider declares no extend support (Capabilities::extend = false)",
        ));
    }
    let b = node(harness, &trace, "B").await?;
    let timing = timing_of(&capabilities);
    let at_most = timing.units(3);
    let extended_to = timing.units(6);
    until_conclusive(
        &trace,
        Rule::EXTEND,
        "an extended lock outliving its original at-most",
        async |attempt| {
            let lock = config(
                &names.name(&format!("lock{attempt}")),
                at_most,
                Duration::ZERO,
            );
            let taken = trace.must_acquire_free("A", &a, &lock).await?;
            trace.sleep_until(taken.answered + timing.unit).await;
            let extend = trace.extend("A", &*taken.value, extended_to).await?;
            if !extend.value {
                if extend.answered <= timing.surely_held_until(&taken, at_most) {
                    return Err(trace.failure(
                        Rule::EXTEND,
                        format!(
                            "node A's extend answered false at {}, while its lock was surely still held (until {} at the earliest)",
                            trace.at(extend.answered),
                            trace.at(taken.sent + at_most)
                        ),
                    ));
                }
                return Ok(Attempt::Inconclusive(
                    "the extend came too late to prove anything",
                ));
            }
            trace
                .sleep_until(timing.surely_over_by(&taken, at_most))
                .await;
            let why = format!(
                "the original at-most has passed, but node A extended the lock until {} at the earliest",
                trace.at(extend.sent + extended_to)
            );
            let held = HeldLock {
                lock: &lock,
                surely_held_until: timing.surely_held_until(&extend, extended_to),
                rule: Rule::EXTEND,
                why: &why,
            };
            if trace.probe_while_held("B", &b, &held).await? != HeldProbe::Refused {
                return Ok(Attempt::Inconclusive(
                    "the probe came too late to prove anything",
                ));
            }
            trace
                .must_unlock_with(
                    "A",
                    &*taken.value,
                    true,
                    Rule::EXTEND,
                    "node A extended its lock and still holds it",
                )
                .await?;
            trace
                .must_acquire_and_release(
                    "B",
                    &b,
                    &lock,
                    Rule::AT_LEAST,
                    "node A released its extended lock (lock_at_least_for = 0)",
                )
                .await?;
            Ok(Attempt::Proven)
        },
    )
    .await?;

    let expired = config(&names.name("expired"), timing.unit, Duration::ZERO);
    let taken = trace.must_acquire_free("A", &a, &expired).await?;
    let expired_by = timing.surely_over_by(&taken, timing.unit);
    trace.sleep_until(expired_by).await;
    let late = trace.extend("A", &*taken.value, extended_to).await?;
    if late.value {
        return Err(trace.failure(
            Rule::EXTEND,
            format!(
                "node A extended its lock at {}, after it had expired ({} at the latest)",
                trace.at(late.sent),
                trace.at(expired_by)
            ),
        ));
    }
    trace
        .must_acquire(
            "B",
            &b,
            &expired,
            Rule::EXTEND,
            "the lock expired and the failed extend must not have revived it",
        )
        .await?;

    let released = config(&names.name("released"), at_most, Duration::ZERO);
    let taken = trace.must_acquire_free("A", &a, &released).await?;
    trace.must_release("A", &*taken.value).await?;
    let after_release = trace.extend("A", &*taken.value, extended_to).await?;
    if after_release.value {
        return Err(trace.failure(
            Rule::EXTEND,
            "node A extended a lock it had already released",
        ));
    }
    Ok(Verdict::passed())
}

/// A provider that does not declare extend must refuse it with [`LockError::Unsupported`],
/// not pretend to extend (`true`) or claim the lock expired (`false`).
///
/// Applies when the provider does not declare [`shedlock_core::Capabilities::extend`].
pub async fn check_extend_refused_when_not_declared<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("extend_refused_when_not_declared");
    let a = node(harness, &trace, "A").await?;
    let capabilities = a.capabilities();
    if capabilities.extend {
        return Ok(Verdict::not_applicable(
            "the provider declares extend support; the `extend` check covers it",
        ));
    }
    let timing = timing_of(&capabilities);
    let lock = config(&names.name("lock"), timing.units(20), Duration::ZERO);
    let taken = trace.must_acquire_free("A", &a, &lock).await?;
    let extend = trace
        .try_extend("A", &*taken.value, timing.units(40))
        .await?;
    match extend.value {
        Err(LockError::Unsupported { .. }) => {}
        other => {
            return Err(trace.failure(
                Rule::HONEST_CAPABILITIES,
                format!(
                    "extend answered {other:?} though the provider declares no extend support; it must answer LockError::Unsupported (or declare Capabilities::extend)"
                ),
            ));
        }
    }
    trace.must_release("A", &*taken.value).await?;
    Ok(Verdict::passed())
}
