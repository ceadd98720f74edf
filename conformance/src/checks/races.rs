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
                trace
                    .must_acquire_and_release(
                        "B",
                        &b,
                        &lock,
                        Rule::ADMIN,
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
    match trace.inspect_lock("O1", admin, name).await? {
        Some(seen) => Ok(seen.acquisition),
        None => Err(trace.failure(
            Rule::ADMIN,
            format!("node A holds lock {name:?}, but inspecting it shows none"),
        )),
    }
}
