//! Check 8: clock skew cannot break exclusion for server-time providers, and stays within the
//! documented bound for client-time providers.

use std::sync::Arc;

use futures_util::StreamExt;
use std::time::Duration;

use shedlock_core::{Clock, LockProvider, SystemClock, TimeSource, raw::SkewedClock};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{HeldLock, HeldProbe, Trace, config};

use super::{
    Attempt, COARSE_UNIT, PROBED_TOO_LATE, node, node_with_clock, timing_of, until_conclusive,
};

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
/// each skewed node probes a lock N surely holds; then each skewed node runs every operation on
/// a lock of its own (acquire, extend when declared, release with `lock_at_least_for`) while N
/// probes it after each step, and N must get it once the at-least hold is over. Under server
/// time the node's clock decides nothing in any of these steps; under client time every bound
/// may move by the skew, and the skewed nodes also probe N's lock just before
/// `lock_at_most_for - skew`.
#[allow(clippy::too_many_arguments)]
async fn exclusion_across_clocks<N: LockProvider>(
    trace: &Trace,
    normal: &N,
    skewed: &[SkewedNode<N>],
    timing: Timing,
    at_most: Duration,
    at_least: Duration,
    names: &NameSpace,
    promise: SkewPromise,
) -> Result<(), CheckFailure> {
    let rule = promise.rule();
    // A lock may look free to a node on another clock this much early, and held this much late.
    let skew = promise.allowed_skew();
    let breach = promise.breach();
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
            surely_held_until: timing.surely_held_until(&taken, at_most - skew),
            rule,
            why: &why,
        };
        // Under client time a node ahead by the skew sees the lock end that much early: it is
        // probed once more just before then.
        let mut probe_times = vec![taken.answered];
        if matches!(promise, SkewPromise::ClientTimeWithin { .. }) {
            probe_times.push(timing.late_probe_at(held.surely_held_until, &taken));
        }
        for time in probe_times {
            trace.sleep_until(time).await;
            // Side by side, so the last node's probe is as early as the first's.
            let probes = skewed
                .iter()
                .map(|node| trace.probe_while_held(&node.label, &node.node, &held));
            for probe in futures_util::future::join_all(probes).await {
                if probe? != HeldProbe::Refused {
                    return Ok(Attempt::Inconclusive(PROBED_TOO_LATE));
                }
            }
        }
        // Each skewed node works on its own lock. On a backend whose unit is seconds the
        // cycles mostly wait, so they run side by side and the check takes as long as one;
        // elsewhere they run one after the other, as concurrent writers would only slow a
        // backend that serialises writes (SQLite) past the probes' deadlines.
        let side_by_side = if timing.unit >= COARSE_UNIT {
            skewed.len()
        } else {
            1
        };
        let lock_names: Vec<String> = (0..skewed.len())
            .map(|index| names.name(&format!("by{index}-{attempt}")))
            .collect();
        let cycles = skewed.iter().zip(&lock_names).map(|(node, name)| {
            operations_while_probed(
                trace, normal, node, name, timing, at_most, at_least, promise,
            )
        });
        let outcomes: Vec<_> = futures_util::stream::iter(cycles)
            .buffered(side_by_side)
            .collect()
            .await;
        for outcome in outcomes {
            if let Attempt::Inconclusive(why) = outcome? {
                return Ok(Attempt::Inconclusive(why));
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
    let at_most = timing.units(4);
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
        // Three units of at-most's four: on a backend whose tolerance is a whole unit, one
        // would leave no moment at which the at-least hold is surely still on, and the steps
        // before the release need room too.
        timing.units(3),
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
                Rule::FREE_LOCK_IS_TAKEN,
                "nobody ever held this name, so it is free whatever the node's clock says",
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
            "server time: nodes 2x at-most and 1 h ahead and behind took no held lock, and their own acquire, extend and release kept the backend's times".to_owned(),
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
    exclusion_across_clocks(
        trace,
        normal,
        &within,
        timing,
        at_most,
        timing.units(3),
        names,
        SkewPromise::ClientTimeWithin { skew, at_most },
    )
    .await?;
    // Far beyond the bound a client-time provider must do what its clock says: a node an hour
    // ahead sees N's lock as long expired. Refusing it means the provider decided with a clock
    // other than the one it was given, so nothing it documents about skew can be trusted.
    let far = skewed_node(harness, trace, true, Duration::from_secs(3600)).await?;
    let beyond = config(&names.name("beyond"), at_most, Duration::ZERO);
    let held = trace.must_acquire_free("N", normal, &beyond).await?;
    let probe = trace
        .acquire(&far.label, &far.node as &dyn LockProvider, &beyond)
        .await?;
    if !probe.value.is_acquired() {
        return Err(trace.failure(
            Rule::CLIENT_TIME,
            format!(
                "the node with {} was refused lock {:?} at {}, which node N took at {} for only {at_most:?}: by the clock this node was given the lock expired an hour ago, so the provider decided with some other clock (a client-time provider must read the clock it is given)",
                far.label,
                beyond.name(),
                trace.at(probe.answered),
                trace.at(held.answered)
            ),
        ));
    }
    // A clock that jumps while the node runs (an NTP step): the provider must read it at each
    // decision, not once, then count on a clock of its own.
    let clock = Arc::new(JumpingClock::default());
    let jumping = node_with_clock(harness, trace, "J", clock.clone()).await?;
    let jump = config(&names.name("jump"), at_most, Duration::ZERO);
    let _held = trace.must_acquire_free("N", normal, &jump).await?;
    trace
        .must_not_acquire(
            "J",
            &jumping,
            &jump,
            Rule::MUTUAL_EXCLUSION,
            "node N holds it, and node J's clock agrees with N's",
        )
        .await?;
    clock.jump_ahead(Duration::from_secs(3600));
    trace.note("node J's clock jumps an hour ahead");
    let probe = trace.acquire("J", &jumping, &jump).await?;
    let Some(handle) = probe.value.into_handle() else {
        return Err(trace.failure(
            Rule::CLIENT_TIME,
            format!(
                "node J was refused lock {:?} at {} after its clock jumped an hour ahead: by that clock node N's lock expired long ago, so the provider did not read the clock it was given at this decision (read once and counted on some other clock?)",
                jump.name(),
                trace.at(probe.answered)
            ),
        ));
    };
    trace.must_release("J", &*handle).await?;
    Ok(Verdict::Passed {
        notes: vec![format!(
            "client time: exclusion held with skew {skew:?} (a third of lock_at_most_for = {at_most:?}) through acquire, extend and release; the node with {} took a held lock, as its clock says, and so did a node whose clock jumped an hour ahead while it ran",
            far.label
        )],
    })
}

/// A wall clock that jumps when the kit says, as an NTP step would: the system clock plus an
/// offset changed while the node runs.
#[derive(Debug, Default)]
struct JumpingClock {
    ahead_ms: std::sync::atomic::AtomicU64,
}

impl JumpingClock {
    fn jump_ahead(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.ahead_ms
            .fetch_add(by, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Clock for JumpingClock {
    fn now(&self) -> std::time::SystemTime {
        SystemClock.now()
            + Duration::from_millis(self.ahead_ms.load(std::sync::atomic::Ordering::SeqCst))
    }
}

/// Why an attempt proved nothing: the node's own extend or release answered `false` only after
/// its lock could have expired by the backend's clock.
const ANSWERED_TOO_LATE: &str =
    "the node's own extend or release answered false after its lock could have expired";

/// One skewed node's acquire, extend (when declared) and release with `lock_at_least_for` on
/// lock `name`, with node N probing after each step and taking the lock once the at-least
/// hold is over.
#[allow(clippy::too_many_arguments)]
async fn operations_while_probed<N: LockProvider>(
    trace: &Trace,
    normal: &N,
    node: &SkewedNode<N>,
    name: &str,
    timing: Timing,
    at_most: Duration,
    at_least: Duration,
    promise: SkewPromise,
) -> Result<Attempt, CheckFailure> {
    let rule = promise.rule();
    let skew = promise.allowed_skew();
    let breach = promise.breach();
    let lock = config(name, at_most, at_least);
    let theirs = trace
        .must_acquire(
            &node.label,
            &node.node,
            &lock,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody ever held this name, so it is free whatever the node's clock says",
        )
        .await?;
    let why = format!(
        "the node with {} took it at {} for {at_most:?}; {breach}",
        node.label,
        trace.at(theirs.answered)
    );
    let mut probe = HeldLock {
        lock: &lock,
        surely_held_until: timing.surely_held_until(&theirs, at_most - skew),
        rule,
        why: &why,
    };
    if trace.probe_while_held("N", normal, &probe).await? != HeldProbe::Refused {
        return Ok(Attempt::Inconclusive(PROBED_TOO_LATE));
    }
    // Until when the backend surely still holds this node's lock (its acquire or last extend
    // plus lock_at_most_for): a `false` from its own extend or release proves the node's clock
    // decided only when that answer came before it. One answered later (a backend stalled by
    // the machine's load: seen once, an SQLite release that waited 540 ms for the database's
    // write lock) proves nothing, and the attempt is made again.
    let mut held_until = timing.surely_held_until(&theirs, at_most - skew);
    if normal.capabilities().extend {
        let extended = trace.extend(&node.label, &*theirs.value, at_most).await?;
        if !extended.value && extended.answered > held_until {
            return Ok(Attempt::Inconclusive(ANSWERED_TOO_LATE));
        }
        if !extended.value {
            return Err(trace.failure(
                    rule,
                    format!(
                        "the node with {} could not extend its own lock at {} (taken at {} for {at_most:?}): its clock must not make its own lock look expired; {breach}",
                        node.label,
                        trace.at(extended.answered),
                        trace.at(theirs.answered)
                    ),
                ));
        }
        let why = format!(
            "the node with {} extended it at {} for {at_most:?}; {breach}",
            node.label,
            trace.at(extended.sent)
        );
        let extended_probe = HeldLock {
            surely_held_until: timing.surely_held_until(&extended, at_most - skew),
            why: &why,
            ..probe
        };
        if trace.probe_while_held("N", normal, &extended_probe).await? != HeldProbe::Refused {
            return Ok(Attempt::Inconclusive(PROBED_TOO_LATE));
        }
        held_until = extended_probe.surely_held_until;
    }
    let released = trace.unlock(&node.label, &*theirs.value).await?;
    if !released.value && released.answered > held_until {
        return Ok(Attempt::Inconclusive(ANSWERED_TOO_LATE));
    }
    if !released.value {
        return Err(trace.failure(
            rule,
            format!(
                "node {}: unlock {:?} returned Ok(false) (answered {}, while its lock was surely held until {}): this node holds the lock; its clock must not make its own lock look expired; {breach}",
                node.label,
                lock.name(),
                trace.at(released.answered),
                trace.at(held_until)
            ),
        ));
    }
    let why = format!(
        "the node with {} released it, which keeps it until acquired_at + lock_at_least_for = {} at the earliest; {breach}",
        node.label,
        trace.at(theirs.sent + at_least)
    );
    probe.surely_held_until = timing.surely_held_until(&theirs, at_least - skew);
    probe.why = &why;
    if trace.probe_while_held("N", normal, &probe).await? != HeldProbe::Refused {
        return Ok(Attempt::Inconclusive(PROBED_TOO_LATE));
    }
    let surely_free = timing.surely_over_by(&theirs, at_least) + skew;
    trace.sleep_until(surely_free).await;
    trace
            .must_acquire_and_release(
                "N",
                normal,
                &lock,
                rule,
                &format!(
                    "the node with {} released the lock, so it was free by {} at the latest (acquired_at + lock_at_least_for, by the backend's clock{}); {breach}",
                    node.label,
                    trace.at(surely_free),
                    if skew.is_zero() { String::new() } else { format!(", plus the allowed skew {skew:?}") }
                ),
            )
            .await?;
    Ok(Attempt::Proven)
}
