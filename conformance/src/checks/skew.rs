//! Check 8: clock skew cannot break exclusion for server-time providers, and stays within the
//! documented bound for client-time providers.

use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{Clock, LockProvider, SkewedClock, SystemClock, TimeSource};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{HeldLock, HeldProbe, Trace, config};

use super::{Attempt, node, node_with_clock, timing_of, until_conclusive};

/// A node whose wall clock is off by a fixed amount.
struct SkewedNode<N> {
    /// Whether its clock runs ahead (else behind).
    ahead: bool,
    offset: Duration,
    /// How the timeline names it ("clock +1h").
    label: String,
    node: N,
}

async fn skewed_node<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    ahead: bool,
    offset: Duration,
) -> Result<SkewedNode<H::Node>, CheckFailure> {
    let system: Arc<dyn Clock> = Arc::new(SystemClock);
    let clock: Arc<dyn Clock> = if ahead {
        Arc::new(SkewedClock::ahead(system, offset))
    } else {
        Arc::new(SkewedClock::behind(system, offset))
    };
    let label = describe(ahead, offset);
    let node = node_with_clock(harness, trace, &label, clock).await?;
    Ok(SkewedNode {
        ahead,
        offset,
        label,
        node,
    })
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

/// What a provider's time source promises nodes whose clocks are skewed; the skew probes
/// differ only in what follows from it.
#[derive(Debug, Clone, Copy)]
enum SkewPromise {
    /// Server time: a node's clock decides nothing.
    ServerTime,
    /// Client time: exclusion holds while the clocks differ by `skew`, inside the documented
    /// bound for locks of `at_most`.
    ClientTimeWithin { skew: Duration, at_most: Duration },
}

impl SkewPromise {
    /// The rule a broken exclusion breaks.
    fn rule(self) -> Rule {
        match self {
            SkewPromise::ServerTime => Rule::SERVER_TIME,
            SkewPromise::ClientTimeWithin { .. } => Rule::CLIENT_TIME,
        }
    }

    /// How much earlier than its at-most a lock may look free to a node on another clock.
    fn allowed_skew(self) -> Duration {
        match self {
            SkewPromise::ServerTime => Duration::ZERO,
            SkewPromise::ClientTimeWithin { skew, .. } => skew,
        }
    }

    /// What a broken exclusion says about the provider, for the failure.
    fn breach(self) -> String {
        match self {
            SkewPromise::ServerTime => {
                "the provider declares server time but decided with the node's clock".to_owned()
            }
            SkewPromise::ClientTimeWithin { at_most, .. } => {
                format!("the skew is inside the documented bound of lock_at_most_for = {at_most:?}")
            }
        }
    }

    /// What the probes observe, for the failure when every attempt stalled.
    fn observation(self) -> &'static str {
        match self {
            SkewPromise::ServerTime => "skewed nodes against held locks",
            SkewPromise::ClientTimeWithin { .. } => "skewed nodes inside the bound",
        }
    }
}

/// Nodes on skewed clocks and node N on the true clock keep each other out under `promise`:
/// each skewed node probes a lock N surely holds, then N probes a lock each skewed node took.
/// Under server time a skewed node's own lock and release must work as if its clock were
/// true, and its release frees the lock for N at once.
async fn exclusion_across_clocks<N: LockProvider>(
    trace: &Trace,
    normal: &N,
    skewed: &[SkewedNode<N>],
    timing: Timing,
    at_most: Duration,
    names: &NameSpace,
    promise: SkewPromise,
) -> Result<(), CheckFailure> {
    let rule = promise.rule();
    // A node `allowed_skew` ahead may see a lock held only until at-most minus the skew.
    let surely_held_for = at_most - promise.allowed_skew();
    let breach = promise.breach();
    let too_late = "a probe came too late to prove anything";
    until_conclusive(trace, rule, promise.observation(), async |attempt| {
        let held = config(
            &names.name(&format!("held{attempt}")),
            at_most,
            Duration::ZERO,
        );
        let taken = trace.must_acquire_free("N", normal, &held).await?;
        let why = format!(
            "node N holds it until {} at the earliest; {breach}",
            trace.at(taken.sent + at_most)
        );
        let held = HeldLock {
            lock: &held,
            surely_held_until: timing.surely_held_until(&taken, surely_held_for),
            rule,
            why: &why,
        };
        for node in skewed {
            if trace.probe_while_held(&node.label, &node.node, &held).await? != HeldProbe::Refused
            {
                return Ok(Attempt::Inconclusive(too_late));
            }
        }
        for (index, node) in skewed.iter().enumerate() {
            let lock = config(
                &names.name(&format!("by{index}-{attempt}")),
                at_most,
                Duration::ZERO,
            );
            let theirs = match promise {
                SkewPromise::ServerTime => {
                    trace
                        .must_acquire(
                            &node.label,
                            &node.node,
                            &lock,
                            Rule::SERVER_TIME,
                            "nobody held it; under server time a node's clock does not matter",
                        )
                        .await?
                }
                SkewPromise::ClientTimeWithin { .. } => {
                    trace
                        .must_acquire_free(&node.label, &node.node, &lock)
                        .await?
                }
            };
            let why = format!(
                "the node with {} took it at {} for {at_most:?}; {breach}",
                node.label,
                trace.at(theirs.answered)
            );
            let held = HeldLock {
                lock: &lock,
                surely_held_until: timing.surely_held_until(&theirs, surely_held_for),
                rule,
                why: &why,
            };
            if trace.probe_while_held("N", normal, &held).await? != HeldProbe::Refused {
                return Ok(Attempt::Inconclusive(too_late));
            }
            match promise {
                SkewPromise::ServerTime => {
                    trace
                        .must_unlock_with(
                            &node.label,
                            &*theirs.value,
                            true,
                            Rule::SERVER_TIME,
                            "this node holds the lock; its clock must not make its own lock look expired",
                        )
                        .await?;
                    trace
                        .must_acquire_and_release(
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
                }
                SkewPromise::ClientTimeWithin { .. } => {
                    trace.must_release(&node.label, &*theirs.value).await?;
                }
            }
        }
        Ok(Attempt::Proven)
    })
    .await
}

async fn server_time<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    normal: &H::Node,
    timing: Timing,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let at_most = timing.units(3);
    let hour = Duration::from_secs(3600);
    let mut skewed = Vec::new();
    for offset in [at_most * 2, hour] {
        for ahead in [true, false] {
            skewed.push(skewed_node(harness, trace, ahead, offset).await?);
        }
    }
    exclusion_across_clocks(
        trace,
        normal,
        &skewed,
        timing,
        at_most,
        names,
        SkewPromise::ServerTime,
    )
    .await?;
    // A lock taken by a node an hour ahead expires at the real at-most.
    for node in skewed
        .iter()
        .filter(|node| node.ahead && node.offset >= hour)
    {
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
        let surely_expired = timing.surely_over_by(&theirs, at_most);
        drop(theirs.value);
        trace.note(format!(
            "the node with {} vanishes without unlock",
            node.label
        ));
        trace.sleep_until(surely_expired).await;
        trace
            .must_acquire_and_release(
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
    let within = [
        skewed_node(harness, trace, true, skew).await?,
        skewed_node(harness, trace, false, skew).await?,
    ];
    let far = skewed_node(harness, trace, true, at_most * 2).await?;
    exclusion_across_clocks(
        trace,
        normal,
        &within,
        timing,
        at_most,
        names,
        SkewPromise::ClientTimeWithin { skew, at_most },
    )
    .await?;
    let beyond = config(&names.name("beyond"), at_most, Duration::ZERO);
    let _held = trace.must_acquire_free("N", normal, &beyond).await?;
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
