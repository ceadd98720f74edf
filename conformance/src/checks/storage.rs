//! Check 12: storage-based providers keep their answers when the name cache is cleared, and
//! honour records that Java ShedLock (or a crashed node) left behind.

use std::time::{Duration, SystemTime};

use shedlock_core::LockProvider;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::{ConformanceHarness, PlantedRecord, Support};
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::{node, timing_of};

/// The name cache cleared in the middle: a held lock stays held for every node, extend (when
/// declared) and release still work, and a cleared node can take the lock again (its insert finds the record, its update
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
    if a.capabilities().extend {
        let extended = trace
            .extend("A", &*held.value, lock.lock_at_most_for())
            .await?;
        if !extended.value {
            return Err(trace.failure(
                Rule::NAME_CACHE,
                "node A's extend answered false right after its name cache was cleared, though it holds the lock: extend does not depend on the cache",
            ));
        }
        clear(&a, "A");
    }
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
/// record a Java node holds keeps Rust nodes out. A Java node on this very host (its
/// `locked_by` the host part of the Rust node's own) takes a name after the Rust node's
/// acquisition expired: the Rust node's stale extend and release leave that record alone.
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
        .await
        .map_err(on_java_record)?;

    let mut held = plant(names.name("held"), now + hour, now);
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
        .await
        .map_err(on_java_record)?;

    // A Java node on this very host writes the bare host name, which is the host part of the
    // Rust node's own `locked_by`: the record is still not the Rust node's.
    let b = node(harness, &trace, "B").await?;
    let short = timing.units(2);
    held.name = names.name("own-host");
    let stale = trace
        .must_acquire_free("A", &a, &config(&held.name, short, Duration::ZERO))
        .await?;
    let refused = trace.acquire("B", &b, &lock_of(&held.name, timing)).await?;
    let reported = match &refused.value {
        shedlock_core::Acquisition::NotAcquired(Some(holder)) => holder.locked_by.clone(),
        _ => None,
    };
    drop(refused);
    held.locked_by = reported
        .as_deref()
        .map(shedlock_core::raw::holder_of)
        .filter(|host| !host.is_empty())
        .map_or_else(this_host, str::to_owned);
    trace
        .sleep_until(timing.surely_over_by(&stale, short))
        .await;
    let now = SystemTime::now();
    held.lock_until = now + hour;
    held.locked_at = now;
    trace.note(format!(
        "node A's lock expired; a Java node on this host plants {:?} locked by {:?}, lock_until in an hour",
        held.name, held.locked_by
    ));
    if let Err(error) = harness.write_record(&held).await {
        return Err(trace.failure(Rule::HARNESS, format!("write_record failed: {error}")));
    }
    let why = format!(
        "node A's acquisition expired, and a Java node on the same host ({:?}) holds the record now: the same host name is not the same acquisition",
        held.locked_by
    );
    if a.capabilities().extend {
        let extended = trace.extend("A", &*stale.value, timing.units(100)).await?;
        if extended.value {
            return Err(trace.failure(
                Rule::SHEDLOCK_RECORDS,
                format!("node A's stale handle extended the record: {why}"),
            ));
        }
    }
    trace
        .must_unlock_with("A", &*stale.value, false, Rule::SHEDLOCK_RECORDS, &why)
        .await?;
    trace
        .must_not_acquire(
            "B",
            &b,
            &lock_of(&held.name, timing),
            Rule::SHEDLOCK_RECORDS,
            &format!("the Java node's record must still hold: {why}"),
        )
        .await?;
    Ok(Verdict::passed())
}

/// An error answered on a record Java ShedLock wrote is the provider not reading Java's records
/// (\[shedlock-records\]), not an outage: the backend was up.
fn on_java_record(failure: CheckFailure) -> CheckFailure {
    if failure.rule != Rule::THREE_OUTCOMES {
        return failure;
    }
    CheckFailure {
        rule: Rule::SHEDLOCK_RECORDS,
        observed: format!(
            "{} (on a record as Java ShedLock writes it: a provider reads every such record)",
            failure.observed
        ),
        ..failure
    }
}

/// A probe of `name` for a long hold.
fn lock_of(name: &str, timing: crate::timing::Timing) -> shedlock_core::LockConfiguration {
    config(name, timing.units(100), Duration::ZERO)
}

/// This machine's host name, as Java ShedLock would write it, for a provider whose refusals do
/// not name the holder.
fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|host| host.trim().to_owned())
        .filter(|host| !host.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}
