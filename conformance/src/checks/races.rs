//! Calls that race on one acquisition: however they interleave on the backend, the acquisition
//! is released once, freed once, and never revived after it was freed.
//!
//! The calls of a round are sent together (polled side by side, so each provider's pool or
//! connection carries them at once) many times over: a guard that judges "still held" by a
//! clock read before the call waited for another's write shows only in some interleavings.

use std::time::Duration;

use futures_util::future::join_all;
use shedlock_core::{AcquisitionId, LockAdmin, LockProvider};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{Timed, Trace, config};

use super::admin::admin_of;
use super::{node, timing_of};

/// Rounds of each race.
const ROUNDS: usize = 40;

/// Calls sent together in a round of unlocks or force-unlocks.
const RACERS: usize = 4;

/// Tasks sharing one handle call `unlock` together: exactly one answers `true`.
///
/// Each of 40 rounds takes a fresh lock on node A and has four calls of `unlock` on that one
/// handle sent at once, alternately with and without `lock_at_least_for`: one call releases the
/// acquisition and every other answers `false`, even while the record still names it (the
/// at-least hold). Then node B finds the lock free (no at-least) or held (at-least).
pub async fn check_concurrent_release<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("concurrent_release");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let long = timing_of(&a.capabilities()).units(100);
    for round in 0..ROUNDS {
        let at_least = if round % 2 == 0 { Duration::ZERO } else { long };
        let lock = config(&names.name(&format!("r{round}")), long, at_least);
        let held = trace.must_acquire_free("A", &a, &lock).await?.value;
        let released = trues(join_all((0..RACERS).map(|_| trace.unlock("A", &*held))).await)?;
        if released != 1 {
            return Err(trace.failure(
                Rule::RELEASE_RESULT,
                format!(
                    "round {round}: {RACERS} tasks of node A called unlock on one handle at once \
                     (lock_at_least_for {at_least:?}), and {released} answered true: one \
                     acquisition is released once, so exactly one must"
                ),
            ));
        }
        if at_least.is_zero() {
            trace
                .must_acquire_and_release(
                    "B",
                    &b,
                    &lock,
                    Rule::RELEASE_RESULT,
                    "node A released it, with no lock_at_least_for",
                )
                .await?;
        } else {
            trace
                .must_not_acquire(
                    "B",
                    &b,
                    &lock,
                    Rule::AT_LEAST,
                    "node A released it inside lock_at_least_for",
                )
                .await?;
        }
    }
    Ok(Verdict::Passed { notes: Vec::new() })
}

/// Force-unlocks race with each other and with the holder's extend: an acquisition is freed
/// once, and a lock an operator was told is free is free.
///
/// Each of 40 rounds of the first race has four operators (nodes of their own) force-unlock one
/// inspected acquisition at once: exactly one answers `true`, and node B takes the lock at
/// once. Each round of the second race (where extend is declared) sends the holder's extend and
/// one force-unlock together. Whatever order the backend applies them in, a force-unlock that
/// answered `true` leaves the lock free (an extend that came after it must not revive the
/// acquisition), and when it answered `false` the extend came first and answered `true`.
pub async fn check_admin_concurrent_force_unlock<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("admin_concurrent_force_unlock");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let mut operators = Vec::new();
    for racer in 1..=RACERS {
        let label = format!("O{racer}");
        let operator = node(harness, &trace, &label).await?;
        operators.push((label, operator));
    }
    let mut admins = Vec::new();
    for (label, operator) in &operators {
        match admin_of(harness, operator) {
            Ok(admin) => admins.push((label.as_str(), admin)),
            Err(verdict) => return Ok(verdict),
        }
    }
    let capabilities = a.capabilities();
    let long = timing_of(&capabilities).units(100);

    for round in 0..ROUNDS {
        let lock = config(&names.name(&format!("f{round}")), long, long);
        let _held = trace.must_acquire_free("A", &a, &lock).await?.value;
        let seen = inspected(&trace, admins[0].1, lock.name()).await?;
        let freed = trues(
            join_all(
                admins
                    .iter()
                    .map(|(label, admin)| trace.force_unlock(label, *admin, lock.name(), &seen)),
            )
            .await,
        )?;
        if freed != 1 {
            return Err(trace.failure(
                Rule::ADMIN,
                format!(
                    "round {round}: {RACERS} operators force-unlocked node A's acquisition of \
                     {:?} at once, and {freed} were told it was freed: it is freed once, so \
                     exactly one must answer true",
                    lock.name()
                ),
            ));
        }
        trace
            .must_acquire_and_release(
                "B",
                &b,
                &lock,
                Rule::ADMIN,
                "an operator force-unlocked it, which frees it at once",
            )
            .await?;
    }

    if !capabilities.extend {
        return Ok(Verdict::Passed {
            notes: vec![
                "extend racing force_unlock: not run, the provider declares no extend".to_owned(),
            ],
        });
    }
    let (operator, admin) = admins[0];
    for round in 0..ROUNDS {
        let lock = config(&names.name(&format!("e{round}")), long, long);
        let held = trace.must_acquire_free("A", &a, &lock).await?.value;
        let seen = inspected(&trace, admin, lock.name()).await?;
        let (extended, freed) = futures_util::future::join(
            trace.extend("A", &*held, long),
            trace.force_unlock(operator, admin, lock.name(), &seen),
        )
        .await;
        let (extended, freed) = (extended?.value, freed?.value);
        match (extended, freed) {
            (_, true) => {
                // An extend that answered true and left the lock held after the operator was
                // told it was freed acted on a freed acquisition: the extend's own break.
                let rule = if extended { Rule::EXTEND } else { Rule::ADMIN };
                trace
                    .must_acquire_and_release(
                        "B",
                        &b,
                        &lock,
                        rule,
                        &format!(
                            "round {round}: the operator was told node A's acquisition was freed \
                             (its extend, sent at the same moment, answered {extended}); an \
                             extend applied after a force-unlock must not revive it"
                        ),
                    )
                    .await?;
            }
            (true, false) => {
                trace
                    .must_not_acquire(
                        "B",
                        &b,
                        &lock,
                        Rule::EXTEND,
                        "node A extended it and the force-unlock sent with the extend freed nothing",
                    )
                    .await?;
            }
            (false, false) => {
                return Err(trace.failure(
                    Rule::ADMIN,
                    format!(
                        "round {round}: node A's extend and an operator's force-unlock of node \
                         A's acquisition of {:?}, sent together, both answered false: the \
                         acquisition was held until one of them acted, so if the extend found \
                         it gone the force-unlock freed it",
                        lock.name()
                    ),
                ));
            }
        }
    }
    Ok(Verdict::Passed { notes: Vec::new() })
}

/// How many of the calls sent together answered `true`; the first error fails the check.
fn trues(answers: Vec<Result<Timed<bool>, CheckFailure>>) -> Result<usize, CheckFailure> {
    answers
        .into_iter()
        .try_fold(0, |count, answer| Ok(count + usize::from(answer?.value)))
}

/// The acquisition an operator sees holding `name`, which a node has just taken.
async fn inspected(
    trace: &Trace,
    admin: &dyn LockAdmin,
    name: &str,
) -> Result<AcquisitionId, CheckFailure> {
    let seen = trace.must_inspect_held("O1", admin, name, "A").await?;
    Ok(seen.acquisition)
}

/// Trials of one sweep of [`check_stale_call_at_expiry`], how many sweeps it makes, and how
/// many trials run side by side.
const EXPIRY_TRIALS: usize = 160;
const EXPIRY_SWEEPS: usize = 2;
const EXPIRY_TRIALS_AT_ONCE: usize = 16;

/// A stale holder's release or extend sent at the very instant its lock expires, while another
/// node takes the lock as soon as it can: whichever way they interleave on the backend, the new
/// holder's lock is untouched (\[ownership\], \[extend\]).
///
/// Each of 160 trials (16 side by side, on names of their own) has node A take a lock for one
/// unit, and node B try it again and again from a few milliseconds before its expiry until it
/// gets it. Node A sends its release (or, alternately where extend is declared, an extend) at
/// an offset swept in 160 steps from 3.5 ms and two of its round trips before the expiry to
/// 0.5 ms after it (the last millisecond waited for by yielding, as a timer is not that fine),
/// so a provider whose release or extend is a read and a later write gets its read in before
/// the expiry and its write past it in some trials. A second sweep of 160 lands between the
/// first's steps. The window is that wide, and each kind of call is tried 160 times, because
/// whether a trial lands in the gap between the read and the write depends on the machine's
/// load: a call that takes longer to reach the backend must be sent earlier, and a provider
/// whose release reads, then writes, went uncaught in loaded CI runs of a single sweep over a
/// fixed 3.5 ms. Once
/// both are done: an extend answered `true` and an acquisition by B must not both have
/// happened (two holders); a lock node B took must still refuse node C, and node B's release
/// must answer `true`. The pause point is wherever the provider's own requests put it: the kit
/// does not need to know the protocol.
pub async fn check_stale_call_at_expiry<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("stale_call_at_expiry");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let c = node(harness, &trace, "C").await?;
    let capabilities = a.capabilities();
    let timing = timing_of(&capabilities);
    let mut taken_by_b = 0;
    for batch in 0..EXPIRY_SWEEPS * EXPIRY_TRIALS / EXPIRY_TRIALS_AT_ONCE {
        let trials = (0..EXPIRY_TRIALS_AT_ONCE).map(|slot| {
            let trial = batch * EXPIRY_TRIALS_AT_ONCE + slot;
            let extend = capabilities.extend && trial % 2 == 1;
            expiry_trial(&trace, &timing, [&a, &b, &c], names, trial, extend)
        });
        for outcome in join_all(trials).await {
            if outcome? {
                taken_by_b += 1;
            }
        }
    }
    let trials = EXPIRY_SWEEPS * EXPIRY_TRIALS;
    if taken_by_b == 0 {
        return Err(trace.failure(
            Rule::AT_MOST,
            format!(
                "in {trials} trials node B never took a lock whose holder stopped at its expiry"
            ),
        ));
    }
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{trials} stale calls at the expiry instant; node B took the lock in {taken_by_b}, and kept it"
        )],
    })
}

/// One trial of [`check_stale_call_at_expiry`]: whether node B took the lock.
async fn expiry_trial(
    trace: &Trace,
    timing: &crate::timing::Timing,
    [a, b, c]: [&dyn LockProvider; 3],
    names: &NameSpace,
    trial: usize,
    extend: bool,
) -> Result<bool, CheckFailure> {
    use tokio::time::Instant;

    let long = timing.units(100);
    let name = names.name(&format!("t{trial}"));
    let short = config(&name, timing.unit, Duration::ZERO);
    let lock = config(&name, long, Duration::ZERO);
    let taken = trace.must_acquire_free("A", a, &short).await?;
    let expiry = taken.sent + timing.unit;
    // The window opens 3.5 ms before the expiry and two of node A's round trips more: a call
    // that takes longer to reach the backend must be sent earlier to arrive at the expiry. The
    // second sweep lands halfway between the first's steps.
    let round_trip = taken.answered.saturating_duration_since(taken.sent);
    let lead = Duration::from_micros(3500) + round_trip * 2;
    let step = (lead + Duration::from_micros(500)) / EXPIRY_TRIALS as u32;
    let (sweep, index) = (trial / EXPIRY_TRIALS, trial % EXPIRY_TRIALS);
    let offset = step * index as u32 + step * sweep as u32 / EXPIRY_SWEEPS as u32;
    let stale_at = expiry - lead + offset;
    let give_up = timing.surely_over_by(&taken, timing.unit) + timing.unit;
    let taker = async {
        trace.sleep_until(expiry - Duration::from_millis(3)).await;
        loop {
            let probe = trace.acquire_unrecorded("B", b, &lock).await?;
            if let shedlock_core::Acquisition::Acquired(handle) = probe.value {
                trace.record(
                    "B",
                    format!("try_lock {name:?} (the first of its tries to succeed)"),
                    probe.sent,
                    probe.answered,
                    "acquired".to_owned(),
                );
                return Ok::<_, CheckFailure>(Some(Timed {
                    sent: probe.sent,
                    answered: probe.answered,
                    value: handle,
                }));
            }
            if Instant::now() > give_up {
                return Ok(None);
            }
        }
    };
    let stale = async {
        trace.sleep_until(stale_at - Duration::from_millis(2)).await;
        while Instant::now() < stale_at {
            tokio::task::yield_now().await;
        }
        let call = if extend {
            trace.try_extend("A", &*taken.value, long).await?
        } else {
            trace.try_unlock("A", &*taken.value).await?
        };
        Ok::<_, CheckFailure>(extend && matches!(call.value, Ok(true)))
    };
    let (taker, extended) = futures_util::future::join(taker, stale).await;
    let (taker, extended) = (taker?, extended?);
    let Some(held) = taker else {
        if extended {
            trace.must_release("A", &*taken.value).await?;
        }
        return Ok(false);
    };
    // A stale extend that acts is the extend's own break ("otherwise it answers false and
    // changes nothing"); a stale release that acts is the owner check's.
    let (what, rule) = if extend {
        ("extend", Rule::EXTEND)
    } else {
        ("release", Rule::OWNERSHIP)
    };
    if extended {
        return Err(trace.failure(
            Rule::EXTEND,
            format!(
                "node A's stale extend of {name:?}, sent at its expiry ({}), answered true, and node B acquired it (at {}): two holders at once",
                trace.at(stale_at),
                trace.at(held.answered)
            ),
        ));
    }
    trace
        .must_not_acquire(
            "C",
            c,
            &lock,
            rule,
            &format!(
                "node B took {name:?} at {} after node A's lock expired; node A's stale {what}, sent at the expiry instant ({}), must not have touched node B's lock",
                trace.at(held.answered),
                trace.at(stale_at)
            ),
        )
        .await?;
    trace
        .must_unlock_with(
            "B",
            &*held.value,
            true,
            rule,
            &format!("node B holds {name:?}; node A's stale {what} must not have touched it"),
        )
        .await?;
    Ok(true)
}
