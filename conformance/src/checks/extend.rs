//! Check 4: extend moves a held lock's expiry, fails on an expired or released lock, and is
//! refused outright by providers that do not declare it.

use std::time::Duration;

use shedlock_core::{LockError, LockProvider};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::{ATTEMPTS, node, stalled, timing_of};

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
    let mut proven = false;
    for attempt in 1..=ATTEMPTS {
        let lock = config(
            &names.name(&format!("lock{attempt}")),
            at_most,
            Duration::ZERO,
        );
        let taken = trace
            .must_acquire("A", &a, &lock, Rule::FREE_LOCK_IS_TAKEN, "nobody held it")
            .await?;
        trace.sleep_until(taken.answered + timing.unit).await;
        let extend = trace.extend("A", &*taken.value, extended_to).await?;
        if !extend.value {
            if extend.answered <= taken.sent + at_most - timing.tolerance {
                return Err(trace.failure(
                    Rule::EXTEND,
                    format!(
                        "node A's extend answered false at {}, while its lock was surely still held (until {} at the earliest)",
                        trace.at(extend.answered),
                        trace.at(taken.sent + at_most)
                    ),
                ));
            }
            trace.note(format!(
                "attempt {attempt}: the extend came too late to prove anything; retrying"
            ));
            continue;
        }
        let original_expiry = taken.answered + at_most + timing.tolerance;
        trace.sleep_until(original_expiry).await;
        let probe = trace.acquire("B", &b, &lock).await?;
        if probe.answered > extend.sent + extended_to - timing.tolerance {
            trace.note(format!(
                "attempt {attempt}: the probe came too late to prove anything; retrying"
            ));
            continue;
        }
        if probe.value.is_acquired() {
            return Err(trace.failure(
                Rule::EXTEND,
                format!(
                    "node B got the lock at {}, after the original at-most but before the extended expiry ({} at the earliest)",
                    trace.at(probe.answered),
                    trace.at(extend.sent + extended_to)
                ),
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
        let after = trace
            .must_acquire(
                "B",
                &b,
                &lock,
                Rule::AT_LEAST,
                "node A released its extended lock (lock_at_least_for = 0)",
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
        proven = true;
        break;
    }
    if !proven {
        return Err(stalled(
            &trace,
            Rule::EXTEND,
            "an extended lock outliving its original at-most",
        ));
    }

    let expired = config(&names.name("expired"), timing.unit, Duration::ZERO);
    let taken = trace
        .must_acquire(
            "A",
            &a,
            &expired,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody held it",
        )
        .await?;
    trace
        .sleep_until(taken.answered + timing.unit + timing.tolerance)
        .await;
    let late = trace.extend("A", &*taken.value, extended_to).await?;
    if late.value {
        return Err(trace.failure(
            Rule::EXTEND,
            format!(
                "node A extended its lock at {}, after it had expired ({} at the latest)",
                trace.at(late.sent),
                trace.at(taken.answered + timing.unit + timing.tolerance)
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
    let taken = trace
        .must_acquire(
            "A",
            &a,
            &released,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody held it",
        )
        .await?;
    trace
        .must_unlock_with(
            "A",
            &*taken.value,
            true,
            Rule::RELEASE_RESULT,
            "node A held it",
        )
        .await?;
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
    let taken = trace
        .must_acquire("A", &a, &lock, Rule::FREE_LOCK_IS_TAKEN, "nobody held it")
        .await?;
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
    trace
        .must_unlock_with(
            "A",
            &*taken.value,
            true,
            Rule::RELEASE_RESULT,
            "node A held it",
        )
        .await?;
    Ok(Verdict::passed())
}
