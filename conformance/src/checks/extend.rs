//! Check 4: extend moves a held lock's expiry, fails on an expired or released lock, and is
//! refused outright by providers that do not declare it.

use std::time::Duration;

use shedlock_core::{LockError, LockHandle, LockProvider};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{HeldLock, Timed, Trace, config};

use super::{Attempt, node, probe_at, timing_of, until_conclusive};

/// Extend: the holder extends past the original at-most, and others stay out until the new
/// expiry, counted from the extend with the extend's own duration, probed right after the
/// original at-most and just before the new one; right after the new one the lock is free.
/// Extend then release with `lock_at_least_for`: free at `acquired_at + lock_at_least_for` (an
/// extend does not move `acquired_at`). An extend may shorten the lock too: held until the new,
/// shorter at-most and free right after it; shortened and then released inside the at-least, it
/// is held until the at-least ends. A release after the at-least window frees an extended lock
/// at once. Durations and moments are off the unit's grid, so rounding shows.
/// Extending an expired lock answers `false`, does not revive it and ends the acquisition: its
/// release answers `false` too. (Extending a released lock is [`check_stale_handle_answers`](crate::check_stale_handle_answers)'s.)
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
    let at_most = timing.units(2);
    let extended_to = timing.units(4);
    until_conclusive(
        &trace,
        Rule::EXTEND,
        "an extended lock held until its new at-most",
        async |attempt| {
            let name = names.name(&format!("lock{attempt}"));
            let durations = (at_most, extended_to);
            held_until_the_new_at_most(&trace, &timing, (&a, &b), &name, durations).await
        },
    )
    .await?;

    // Lengthened, or shortened to end before the at-least does, then released inside the
    // at-least: held until acquired_at + lock_at_least_for either way.
    let lengthen = Resize {
        at_most: timing.units(4),
        at_least: timing.units(3),
        after: timing.unit,
        to: timing.units(6),
    };
    let shortened = Resize {
        at_most: timing.units(10),
        at_least: timing.off_grid(3),
        after: timing.unit / 2,
        to: timing.unit,
    };
    for (tag, resize) in [("least", lengthen), ("cut", shortened)] {
        until_conclusive(
            &trace,
            Rule::AT_LEAST,
            "an extended and released lock held until its at-least",
            async |attempt| {
                let name = names.name(&format!("{tag}{attempt}"));
                release_inside_at_least(&trace, &timing, (&a, &b), &name, resize).await
            },
        )
        .await?;
    }

    until_conclusive(
        &trace,
        Rule::EXTEND,
        "a shortened lock freed at its new at-most",
        async |attempt| {
            let name = names.name(&format!("short{attempt}"));
            let durations = (timing.units(10), timing.off_grid(2));
            held_until_the_new_at_most(&trace, &timing, (&a, &b), &name, durations).await
        },
    )
    .await?;
    until_conclusive(
        &trace,
        Rule::AT_LEAST,
        "an extended lock released after its at-least",
        async |attempt| {
            release_after_at_least(
                &trace,
                &timing,
                &a,
                &b,
                &names.name(&format!("after{attempt}")),
            )
            .await
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
    // `false` means the acquisition is over: its release, even with nobody else holding the
    // lock yet, finds nothing of its own to free.
    trace
        .must_unlock_with(
            "A",
            &*taken.value,
            false,
            Rule::RELEASE_RESULT,
            "its lock expired, as its extend's false said, so the acquisition is over and nothing is left to release",
        )
        .await?;
    trace
        .must_acquire(
            "B",
            &b,
            &expired,
            Rule::EXTEND,
            "the lock expired and the failed extend must not have revived it",
        )
        .await?;

    Ok(Verdict::passed())
}

/// Node A takes the lock for `at_most` and, a unit later, extends it to `to`, longer or
/// shorter (the new at-most counts from the extend). Node B is refused just before the new
/// at-most (and, for a longer lock, just after the original one, which a provider that ignored
/// the extend would have ended) and, once A vanishes, takes the lock right after it. A shorter
/// lock must end long before the original at-most: an extend honours a shorter
/// `lock_at_most_for` as well as a longer one.
async fn held_until_the_new_at_most(
    trace: &Trace,
    timing: &Timing,
    (a, b): (&dyn LockProvider, &dyn LockProvider),
    name: &str,
    (at_most, to): (Duration, Duration),
) -> Result<Attempt, CheckFailure> {
    let longer = to > at_most;
    let lock = config(name, at_most, Duration::ZERO);
    let taken = trace.must_acquire_free("A", a, &lock).await?;
    trace.sleep_until(taken.answered + timing.unit).await;
    let Some(extend) = extend_held(trace, timing, &taken, at_most, to).await? else {
        return Ok(Attempt::Inconclusive(
            "the extend came too late to prove anything",
        ));
    };
    let surely_held_until = timing.surely_held_until(&extend, to);
    let why = if longer {
        format!(
            "node A extended the lock at {} for {to:?}, so it is held until {} at the earliest (the new lock_at_most_for counts from the extend)",
            trace.at(extend.sent),
            trace.at(extend.sent + to)
        )
    } else {
        format!(
            "node A shortened its lock at {} to {to:?}, so it is held until {} at the earliest",
            trace.at(extend.sent),
            trace.at(extend.sent + to)
        )
    };
    let held = HeldLock {
        lock: &lock,
        surely_held_until,
        rule: Rule::EXTEND,
        why: &why,
    };
    let past_the_original = longer.then(|| timing.surely_over_by(&taken, at_most));
    let probe_times = past_the_original
        .into_iter()
        .chain([timing.late_probe_at(surely_held_until, &extend)]);
    if let late @ Attempt::Inconclusive(_) = probe_at(trace, "B", b, &held, probe_times).await? {
        return Ok(late);
    }
    let original_until = timing.surely_held_until(&taken, at_most);
    drop(taken.value);
    trace.note("node A vanishes: its handle is dropped without unlock");
    let surely_free = timing.surely_over_by(&extend, to);
    trace.sleep_until(surely_free).await;
    if !longer && surely_free >= original_until {
        return Ok(Attempt::Inconclusive(
            "the probe after the shortened at-most came so late that the original had passed too",
        ));
    }
    let why_free = if longer {
        format!(
            "node A's extend (answered {}) held the lock for {to:?}, so it expired by {} at the latest",
            trace.at(extend.answered),
            trace.at(surely_free)
        )
    } else {
        format!(
            "node A's extend (answered {}) shortened the lock to {to:?}, so it expired by {} at the latest; an extend honours a shorter lock_at_most_for as well as a longer one (the original held it until {})",
            trace.at(extend.answered),
            trace.at(surely_free),
            trace.at(original_until)
        )
    };
    trace
        .must_acquire_and_release("B", b, &lock, Rule::EXTEND, &why_free)
        .await?;
    Ok(Attempt::Proven)
}

/// The durations of [`release_inside_at_least`]: the lock's, and the extend's moment (after
/// the acquisition) and duration.
#[derive(Debug, Clone, Copy)]
struct Resize {
    at_most: Duration,
    at_least: Duration,
    after: Duration,
    to: Duration,
}

/// Node A takes the lock, extends it as `resize` says (longer or shorter), and releases it at
/// once, inside the at-least: node B is refused just before `acquired_at + lock_at_least_for`
/// and gets the lock right after it. A release sets held-until to max(now, acquired_at +
/// lock_at_least_for), whatever the extend set: an extend moves neither acquired_at nor the
/// at-least.
async fn release_inside_at_least(
    trace: &Trace,
    timing: &Timing,
    (a, b): (&dyn LockProvider, &dyn LockProvider),
    name: &str,
    resize: Resize,
) -> Result<Attempt, CheckFailure> {
    let lock = config(name, resize.at_most, resize.at_least);
    let taken = trace.must_acquire_free("A", a, &lock).await?;
    trace.sleep_until(taken.answered + resize.after).await;
    let Some(extend) = extend_held(trace, timing, &taken, resize.at_most, resize.to).await? else {
        return Ok(Attempt::Inconclusive(
            "the extend came too late to prove anything",
        ));
    };
    let released = trace.unlock("A", &*taken.value).await?;
    // A lock shortened to a unit ends a unit after the extend: a release answered by then may
    // have reached the backend after that end, which is over whatever the at-least says, and
    // `false` is then a fair answer.
    if !released.value {
        if released.answered >= extend.sent + resize.to {
            return Ok(Attempt::Inconclusive(
                "the release answered after the extended lock could have ended",
            ));
        }
        return Err(trace.failure(
            Rule::EXTEND,
            format!(
                "node A: unlock {:?} returned Ok(false) (answered {}): node A extended its lock to {:?} at {} and still holds it",
                lock.name(),
                trace.at(released.answered),
                resize.to,
                trace.at(extend.sent)
            ),
        ));
    }
    let surely_held_until = timing.surely_held_until(&taken, resize.at_least);
    let why = format!(
        "node A extended its lock to {:?}, then released it, which keeps it until acquired_at + lock_at_least_for = {} at the earliest, whatever the extend set",
        resize.to,
        trace.at(taken.sent + resize.at_least)
    );
    let held = HeldLock {
        lock: &lock,
        surely_held_until,
        rule: Rule::AT_LEAST,
        why: &why,
    };
    let probe_time = timing.late_probe_at(surely_held_until, &released);
    if let late @ Attempt::Inconclusive(_) = probe_at(trace, "B", b, &held, [probe_time]).await? {
        return Ok(late);
    }
    let surely_free = timing.surely_over_by(&taken, resize.at_least);
    trace.sleep_until(surely_free).await;
    let freed = trace
        .must_acquire_and_release(
            "B",
            b,
            &lock,
            Rule::EXTEND,
            &format!(
                "the release keeps the lock until acquired_at + lock_at_least_for, {} at the latest: an extend moves held-until, not acquired_at, and a release does not keep the extended at-most",
                trace.at(surely_free)
            ),
        )
        .await;
    freed?;
    Ok(Attempt::Proven)
}

/// Node A takes the lock for at most 10 units and at least 1 and a fraction, extends it to 8
/// units after half a unit, and releases it once the at-least has surely passed: the release
/// frees the lock at once, not at the extended at-most.
async fn release_after_at_least(
    trace: &Trace,
    timing: &Timing,
    a: &dyn LockProvider,
    b: &dyn LockProvider,
    name: &str,
) -> Result<Attempt, CheckFailure> {
    let at_most = timing.units(10);
    let at_least = timing.off_grid(1);
    let lock = config(name, at_most, at_least);
    let taken = trace.must_acquire_free("A", a, &lock).await?;
    trace.sleep_until(taken.answered + timing.unit / 2).await;
    if extend_held(trace, timing, &taken, at_most, timing.units(8))
        .await?
        .is_none()
    {
        return Ok(Attempt::Inconclusive(
            "the extend came too late to prove anything",
        ));
    }
    let surely_past = timing.surely_over_by(&taken, at_least);
    trace.sleep_until(surely_past).await;
    let released = trace
        .must_unlock_with(
            "A",
            &*taken.value,
            true,
            Rule::EXTEND,
            "node A extended its lock and still holds it",
        )
        .await?;
    let freed = trace
        .must_acquire_and_release(
            "B",
            b,
            &lock,
            Rule::AT_LEAST,
            &format!(
                "node A released its extended lock at {}, after acquired_at + lock_at_least_for ({} at the latest): a release frees the lock at max(now, acquired_at + lock_at_least_for), whatever an extend set",
                trace.at(released.answered),
                trace.at(surely_past)
            ),
        )
        .await;
    freed?;
    Ok(Attempt::Proven)
}

/// Node A extends the lock it `taken` for `at_most` to `duration`: `Some` with the timed
/// answer when it extended; `None` when it answered `false` too late to prove anything (the lock
/// may have expired first). A `false` while the lock was surely held fails.
async fn extend_held(
    trace: &Trace,
    timing: &Timing,
    taken: &Timed<Box<dyn LockHandle>>,
    at_most: Duration,
    duration: Duration,
) -> Result<Option<Timed<bool>>, CheckFailure> {
    let extend = trace.extend("A", &*taken.value, duration).await?;
    if extend.value {
        return Ok(Some(extend));
    }
    if extend.answered <= timing.surely_held_until(taken, at_most) {
        return Err(trace.failure(
            Rule::EXTEND,
            format!(
                "node A's extend answered false at {}, while its lock was surely still held (until {} at the earliest)",
                trace.at(extend.answered),
                trace.at(taken.sent + at_most)
            ),
        ));
    }
    Ok(None)
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
