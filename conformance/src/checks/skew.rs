//! Check 8: clock skew cannot break exclusion for server-time providers, and stays within the
//! documented bound for client-time providers.

use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{Clock, LockProvider, SkewedClock, SystemClock, TimeSource};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{Trace, config};

use super::{ATTEMPTS, node, node_with_clock, stalled, timing_of};

/// A node whose wall clock is off by a fixed amount.
struct SkewedNode<N> {
    label: String,
    node: N,
}

async fn skewed_node<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    ahead: bool,
    offset: Duration,
    label: String,
) -> Result<SkewedNode<H::Node>, CheckFailure> {
    let system: Arc<dyn Clock> = Arc::new(SystemClock);
    let clock: Arc<dyn Clock> = if ahead {
        Arc::new(SkewedClock::ahead(system, offset))
    } else {
        Arc::new(SkewedClock::behind(system, offset))
    };
    let node = node_with_clock(harness, trace, &label, clock).await?;
    Ok(SkewedNode { label, node })
}

/// Clock skew.
///
/// Server time ([`TimeSource::Server`]): nodes whose clocks run ahead or behind by twice
/// `lock_at_most_for` and by an hour must not take a lock another node holds; a lock they take
/// must not look expired to others, must be freed by their release at once, and must expire
/// at the real at-most, not an hour late.
///
/// Client time ([`TimeSource::Client`]): with skew inside the documented bound (a third of
/// `lock_at_most_for`) exclusion must hold both ways; beyond it (twice `lock_at_most_for`) the
/// kit reports what happened, as the bound is all the provider promises.
pub async fn check_clock_skew<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("clock_skew");
    let normal = node(harness, &trace, "N").await?;
    let capabilities = normal.capabilities();
    let timing = timing_of(&capabilities);
    match capabilities.time_source {
        TimeSource::Server => server_time(harness, &trace, &normal, timing, names).await,
        TimeSource::Client => client_time(harness, &trace, &normal, timing, names).await,
    }
}

fn describe(ahead: bool, offset: Duration) -> String {
    let direction = if ahead { "+" } else { "-" };
    if offset >= Duration::from_secs(3600) {
        format!("clock {direction}{}h", offset.as_secs() / 3600)
    } else {
        format!("clock {direction}{}ms", offset.as_millis())
    }
}

async fn server_time<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    normal: &H::Node,
    timing: Timing,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let at_most = timing.units(3);
    let mut skewed = Vec::new();
    for offset in [at_most * 2, Duration::from_secs(3600)] {
        for ahead in [true, false] {
            skewed.push((
                ahead,
                offset,
                skewed_node(harness, trace, ahead, offset, describe(ahead, offset)).await?,
            ));
        }
    }
    let mut proven = false;
    for attempt in 1..=ATTEMPTS {
        // Skewed nodes against a lock held by a node with a true clock.
        let held = config(
            &names.name(&format!("held{attempt}")),
            at_most,
            Duration::ZERO,
        );
        let taken = trace
            .must_acquire(
                "N",
                normal,
                &held,
                Rule::FREE_LOCK_IS_TAKEN,
                "nobody held it",
            )
            .await?;
        let surely_held_until = taken.sent + at_most - timing.tolerance;
        let mut conclusive = true;
        for (_, _, node) in &skewed {
            let probe = trace.acquire(&node.label, &node.node, &held).await?;
            if probe.answered > surely_held_until {
                conclusive = false;
                break;
            }
            if probe.value.is_acquired() {
                return Err(trace.failure(
                    Rule::SERVER_TIME,
                    format!(
                        "node with {} took lock {:?} at {}, which node N holds until {} at the earliest: the provider declares server time but decided with the node's clock",
                        node.label,
                        held.name(),
                        trace.at(probe.answered),
                        trace.at(taken.sent + at_most)
                    ),
                ));
            }
        }
        // Locks taken by skewed nodes, as seen by a node with a true clock.
        for (index, (_, _, node)) in skewed.iter().enumerate() {
            if !conclusive {
                break;
            }
            let lock = config(
                &names.name(&format!("by{index}-{attempt}")),
                at_most,
                Duration::ZERO,
            );
            let theirs = trace
                .must_acquire(
                    &node.label,
                    &node.node,
                    &lock,
                    Rule::SERVER_TIME,
                    "nobody held it; under server time a node's clock does not matter",
                )
                .await?;
            let probe = trace.acquire("N", normal, &lock).await?;
            if probe.answered > theirs.sent + at_most - timing.tolerance {
                conclusive = false;
                break;
            }
            if probe.value.is_acquired() {
                return Err(trace.failure(
                    Rule::SERVER_TIME,
                    format!(
                        "node N took lock {:?} at {}, which the node with {} took at {} for {at_most:?}: its held-until was computed from the node's clock",
                        lock.name(),
                        trace.at(probe.answered),
                        node.label,
                        trace.at(theirs.answered)
                    ),
                ));
            }
            trace
                .must_unlock_with(
                    &node.label,
                    &*theirs.value,
                    true,
                    Rule::SERVER_TIME,
                    "this node holds the lock; its clock must not make its own lock look expired",
                )
                .await?;
            let after = trace
                .must_acquire(
                    "N",
                    normal,
                    &lock,
                    Rule::SERVER_TIME,
                    &format!(
                        "the node with {} released the lock (lock_at_least_for = 0): held-until is the backend's now, not the node's",
                        node.label
                    ),
                )
                .await?;
            trace
                .must_unlock_with(
                    "N",
                    &*after.value,
                    true,
                    Rule::RELEASE_RESULT,
                    "node N held it",
                )
                .await?;
        }
        if conclusive {
            proven = true;
            break;
        }
        trace.note(format!(
            "attempt {attempt}: a probe came too late to prove anything; retrying"
        ));
    }
    if !proven {
        return Err(stalled(
            trace,
            Rule::SERVER_TIME,
            "skewed nodes against held locks",
        ));
    }
    // A lock taken by a node an hour ahead expires at the real at-most.
    for (ahead, offset, node) in &skewed {
        if !*ahead || *offset < Duration::from_secs(3600) {
            continue;
        }
        let lock = config(&names.name("expiry"), at_most, Duration::ZERO);
        let theirs = trace
            .must_acquire(
                &node.label,
                &node.node,
                &lock,
                Rule::SERVER_TIME,
                "nobody held it",
            )
            .await?;
        drop(theirs.value);
        trace.note(format!(
            "the node with {} vanishes without unlock",
            node.label
        ));
        let surely_expired = theirs.answered + at_most + timing.tolerance;
        trace.sleep_until(surely_expired).await;
        let after = trace
            .must_acquire(
                "N",
                normal,
                &lock,
                Rule::SERVER_TIME,
                &format!(
                    "the lock taken by the node with {} for {at_most:?} expired by {} at the latest: held-until must be the backend's now + at-most",
                    node.label,
                    trace.at(surely_expired)
                ),
            )
            .await?;
        trace
            .must_unlock_with(
                "N",
                &*after.value,
                true,
                Rule::RELEASE_RESULT,
                "node N held it",
            )
            .await?;
    }
    Ok(Verdict::Passed {
        notes: vec![
            "server time: nodes 2x at-most and 1 h ahead and behind neither took held locks nor broke their own".to_owned(),
        ],
    })
}

async fn client_time<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    normal: &H::Node,
    timing: Timing,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let at_most = timing.units(6);
    let skew = at_most / 3;
    let ahead = skewed_node(harness, trace, true, skew, describe(true, skew)).await?;
    let behind = skewed_node(harness, trace, false, skew, describe(false, skew)).await?;
    let far = skewed_node(
        harness,
        trace,
        true,
        at_most * 2,
        describe(true, at_most * 2),
    )
    .await?;
    let mut proven = false;
    for attempt in 1..=ATTEMPTS {
        let held = config(
            &names.name(&format!("held{attempt}")),
            at_most,
            Duration::ZERO,
        );
        let taken = trace
            .must_acquire(
                "N",
                normal,
                &held,
                Rule::FREE_LOCK_IS_TAKEN,
                "nobody held it",
            )
            .await?;
        // Within the bound a node `skew` ahead sees the lock held until at-most minus skew.
        let surely_held_until = taken.sent + at_most - skew - timing.tolerance;
        let mut conclusive = true;
        for node in [&ahead, &behind] {
            let probe = trace.acquire(&node.label, &node.node, &held).await?;
            if probe.answered > surely_held_until {
                conclusive = false;
                break;
            }
            if probe.value.is_acquired() {
                return Err(trace.failure(
                    Rule::CLIENT_TIME,
                    format!(
                        "node with {} (inside the documented bound of lock_at_most_for = {at_most:?}) took lock {:?} at {}, held by node N until {} at the earliest",
                        node.label,
                        held.name(),
                        trace.at(probe.answered),
                        trace.at(taken.sent + at_most)
                    ),
                ));
            }
        }
        for (index, node) in [&ahead, &behind].into_iter().enumerate() {
            if !conclusive {
                break;
            }
            let lock = config(
                &names.name(&format!("by{index}-{attempt}")),
                at_most,
                Duration::ZERO,
            );
            let theirs = trace
                .must_acquire(
                    &node.label,
                    &node.node,
                    &lock,
                    Rule::FREE_LOCK_IS_TAKEN,
                    "nobody held it",
                )
                .await?;
            let probe = trace.acquire("N", normal, &lock).await?;
            if probe.answered > theirs.sent + at_most - skew - timing.tolerance {
                conclusive = false;
                break;
            }
            if probe.value.is_acquired() {
                return Err(trace.failure(
                    Rule::CLIENT_TIME,
                    format!(
                        "node N took lock {:?} at {}, which the node with {} (inside the documented bound) took at {} for {at_most:?}",
                        lock.name(),
                        trace.at(probe.answered),
                        node.label,
                        trace.at(theirs.answered)
                    ),
                ));
            }
            trace
                .must_unlock_with(
                    &node.label,
                    &*theirs.value,
                    true,
                    Rule::RELEASE_RESULT,
                    "this node holds the lock",
                )
                .await?;
        }
        if conclusive {
            proven = true;
            break;
        }
        trace.note(format!(
            "attempt {attempt}: a probe came too late to prove anything; retrying"
        ));
    }
    if !proven {
        return Err(stalled(
            trace,
            Rule::CLIENT_TIME,
            "skewed nodes inside the bound",
        ));
    }
    let beyond = config(&names.name("beyond"), at_most, Duration::ZERO);
    let _held = trace
        .must_acquire(
            "N",
            normal,
            &beyond,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody held it",
        )
        .await?;
    let probe = trace
        .acquire(&far.label, &far.node as &dyn LockProvider, &beyond)
        .await?;
    let seen = if probe.value.is_acquired() {
        "took the held lock, as the documented bound allows"
    } else {
        "was refused (the provider is safer than its documented bound)"
    };
    Ok(Verdict::Passed {
        notes: vec![format!(
            "client time: exclusion held with skew {skew:?} (a third of lock_at_most_for = {at_most:?}); beyond the bound a node with {} {seen}",
            far.label
        )],
    })
}
