//! Check 1: a free lock is taken, a held one is skipped, a released one is free again.

use std::time::Duration;

use shedlock_core::LockProvider;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::{node, timing_of};

/// How many acquire/release rounds follow each other without pause.
const ROUNDS: usize = 10;

/// Acquire, skip and release basics, as ShedLock's own kit has them and a little more.
///
/// A free lock is taken; another node and the holder itself are refused while it is held; an
/// unrelated name is independent; release answers `true` once and `false` after; the lock can
/// be taken again at once after release, ten rounds in a row. The releases of those rounds
/// free their own acquisitions only: the unrelated lock node B holds all along, under the same
/// durations, is still held after them (\[ownership\]: a lock another acquisition of the same
/// node holds). The handle reports the lock's name, the declared time source and, when fencing
/// is declared, a token.
pub async fn check_acquire_skip_release<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("acquire_skip_release");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let timing = timing_of(&capabilities);
    let long = timing.units(100);
    let lock = config(&names.name("lock"), long, Duration::ZERO);
    let other = config(&names.name("other"), long, Duration::ZERO);

    let held = trace.must_acquire_free("A", &a, &lock).await?.value;
    if held.name() != lock.name() {
        return Err(trace.failure(
            Rule::HONEST_CAPABILITIES,
            format!(
                "the handle names lock {:?}, but {:?} was acquired",
                held.name(),
                lock.name()
            ),
        ));
    }
    if held.time_source() != capabilities.time_source {
        return Err(trace.failure(
            Rule::HONEST_CAPABILITIES,
            format!(
                "the handle reports time source {:?}, the provider declares {:?}",
                held.time_source(),
                capabilities.time_source
            ),
        ));
    }
    if capabilities.fencing && held.fencing_token().is_none() {
        return Err(trace.failure(
            Rule::FENCING,
            "the provider declares fencing, but the handle carries no fencing token",
        ));
    }
    trace
        .must_not_acquire("B", &b, &lock, Rule::MUTUAL_EXCLUSION, "node A holds it")
        .await?;
    trace
        .must_not_acquire(
            "A",
            &a,
            &lock,
            Rule::MUTUAL_EXCLUSION,
            "node A already holds it through another handle (locking twice in a row must fail; re-entrancy is the executor's job)",
        )
        .await?;
    let independent = trace
        .must_acquire(
            "B",
            &b,
            &other,
            Rule::FREE_LOCK_IS_TAKEN,
            "a different name is a different lock, and nobody held this one",
        )
        .await?
        .value;
    trace.must_release("A", &*held).await?;
    trace
        .must_unlock_with(
            "A",
            &*held,
            false,
            Rule::RELEASE_RESULT,
            "this acquisition was already released",
        )
        .await?;

    let nodes = [("A", &a), ("B", &b)];
    for round in 0..ROUNDS {
        let (holder_label, holder) = nodes[round % 2];
        let (other_label, other_node) = nodes[(round + 1) % 2];
        let handle = trace
            .must_acquire(
                holder_label,
                holder,
                &lock,
                Rule::AT_LEAST,
                &format!(
                    "round {}: the lock was released with lock_at_least_for = 0, so it is free at once",
                    round + 1
                ),
            )
            .await?
            .value;
        trace
            .must_not_acquire(
                other_label,
                other_node,
                &lock,
                Rule::MUTUAL_EXCLUSION,
                &format!("round {}: node {holder_label} holds it", round + 1),
            )
            .await?;
        trace.must_release(holder_label, &*handle).await?;
    }
    trace
        .must_not_acquire(
            "A",
            &a,
            &other,
            Rule::OWNERSHIP,
            "node B holds it: its releases of another lock, taken and released while it held this one, must not have freed it",
        )
        .await?;
    trace.must_release("B", &*independent).await?;
    Ok(Verdict::passed())
}
