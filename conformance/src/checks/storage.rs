//! Check 12: storage-based providers keep their answers when the name cache is cleared, and
//! honour records that Java ShedLock (or a crashed node) left behind.

use std::time::{Duration, SystemTime};

use shedlock_core::LockProvider;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::{ConformanceHarness, PlantedRecord, Support};
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::{node, timing_of};

/// The name cache cleared in the middle: a held lock stays held for every node, release still
/// works, and a cleared node can take the lock again (its insert finds the record, its update
/// takes it over).
///
/// Applies when the harness provides
/// [`clear_name_cache`](ConformanceHarness::clear_name_cache).
pub async fn check_name_cache_cleared_midway<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("name_cache_cleared_midway");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let clear = |node: &H::Node, label: &str| {
        trace.note(format!("clear node {label}'s name cache"));
        harness.clear_name_cache(node)
    };
    if let Support::NotApplicable(reason) = clear(&a, "A") {
        return Ok(Verdict::NotApplicable(reason));
    }
    let timing = timing_of(&a.capabilities());
    let lock = config(&names.name("lock"), timing.units(100), Duration::ZERO);
    let held = trace.must_acquire_free("A", &a, &lock).await?;
    clear(&a, "A");
    clear(&b, "B");
    for (label, node) in [("A", &a), ("B", &b)] {
        trace
            .must_not_acquire(
                label,
                node,
                &lock,
                Rule::NAME_CACHE,
                "node A holds it; a cleared cache changes nothing",
            )
            .await?;
    }
    clear(&a, "A");
    trace
        .must_unlock_with(
            "A",
            &*held.value,
            true,
            Rule::NAME_CACHE,
            "node A holds it; release does not depend on the cache",
        )
        .await?;
    clear(&b, "B");
    let again = trace
        .must_acquire("B", &b, &lock, Rule::NAME_CACHE, "the lock was released; node B's cleared cache must not stop it from taking the existing record")
        .await?;
    trace
        .must_not_acquire("A", &a, &lock, Rule::NAME_CACHE, "node B holds it")
        .await?;
    clear(&b, "B");
    trace
        .must_unlock_with(
            "B",
            &*again.value,
            true,
            Rule::NAME_CACHE,
            "node B holds it",
        )
        .await?;
    clear(&a, "A");
    trace
        .must_acquire_and_release("A", &a, &lock, Rule::NAME_CACHE, "the lock was released")
        .await?;
    Ok(Verdict::passed())
}

/// ShedLock-format records: an expired record as Java ShedLock leaves it is taken over, and a
/// record a Java node holds keeps Rust nodes out.
///
/// Applies when the harness provides [`write_record`](ConformanceHarness::write_record).
pub async fn check_shedlock_record_takeover<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("shedlock_record_takeover");
    let a = node(harness, &trace, "A").await?;
    let timing = timing_of(&a.capabilities());
    let hour = Duration::from_secs(3600);
    let now = SystemTime::now();
    let plant = |name: String, lock_until: SystemTime, locked_at: SystemTime| {
        trace.note(format!(
            "plant a ShedLock record {name:?} locked by java-node, lock_until {}",
            if lock_until < now {
                "an hour ago"
            } else {
                "in an hour"
            }
        ));
        PlantedRecord {
            name,
            lock_until,
            locked_at,
            locked_by: "java-node".to_owned(),
        }
    };
    let expired = plant(names.name("expired"), now - hour, now - 2 * hour);
    match harness.write_record(&expired).await {
        Ok(Support::Supported(())) => {}
        Ok(Support::NotApplicable(reason)) => return Ok(Verdict::NotApplicable(reason)),
        Err(error) => {
            return Err(trace.failure(Rule::HARNESS, format!("write_record failed: {error}")));
        }
    }
    let lock = config(&expired.name, timing.units(100), Duration::ZERO);
    trace
        .must_acquire_and_release(
            "A",
            &a,
            &lock,
            Rule::SHEDLOCK_RECORDS,
            "the record's lock_until passed an hour ago",
        )
        .await?;

    let held = plant(names.name("held"), now + hour, now);
    if let Err(error) = harness.write_record(&held).await {
        return Err(trace.failure(Rule::HARNESS, format!("write_record failed: {error}")));
    }
    let lock = config(&held.name, timing.units(100), Duration::ZERO);
    trace
        .must_not_acquire(
            "A",
            &a,
            &lock,
            Rule::SHEDLOCK_RECORDS,
            "a Java node holds the record for another hour",
        )
        .await?;
    Ok(Verdict::passed())
}
