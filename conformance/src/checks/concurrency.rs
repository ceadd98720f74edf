//! Checks 6 and 7: many nodes hammering one name never overlap, and fencing tokens strictly
//! increase in acquisition order.

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use shedlock_core::{Acquisition, LockError, LockProvider};
use tokio::time::Instant;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{OPERATION_LIMIT, Trace, config, describe_acquisition, locked};

use super::{node, timing_of};

/// Who hammers: `tasks_per_node` tasks on each of `nodes`.
struct Contenders<N> {
    nodes: Vec<Arc<N>>,
    tasks_per_node: usize,
}

/// The shared state of one contended lock: who is inside, and what they did there.
#[derive(Debug, Default)]
struct CriticalSection {
    inside: AtomicUsize,
    overlaps: AtomicUsize,
    /// Incremented by read, yield, write: a lost update shows an overlap the counter missed.
    counter: AtomicU64,
    entries: AtomicU64,
    releases: AtomicU64,
    refusals: AtomicU64,
    /// Fencing tokens in the order their holders entered.
    tokens: Mutex<Vec<Option<u64>>>,
}

/// What the hammering saw, per lock name.
struct Hammered {
    sections: Vec<Arc<CriticalSection>>,
    attempts_per_name: u64,
}

/// Runs the contenders' tasks concurrently (tasks of one node share its
/// provider instance, as a scheduler's jobs do), each trying every name `attempts` times; a task
/// that gets a lock enters the name's critical section, stays a millisecond (one attempt in
/// four) or a bare yield, and releases. Each attempt also takes, at the same instant, a name of the task's own that
/// nobody else uses (`private` names under `private_prefix`): it must be acquired every time, however
/// busy the node is with the contended names, and its release must answer `true` after the
/// critical section, whatever other tasks of the node released meanwhile. A refusal of an own
/// name is marked as one ([`Trace::refusal`]), so the runner learns whether the backend made it.
async fn hammer<N: LockProvider + 'static>(
    trace: &Arc<Trace>,
    Contenders {
        nodes,
        tasks_per_node,
    }: Contenders<N>,
    names: &[String],
    private_prefix: &str,
    attempts: usize,
    at_most: Duration,
) -> Result<Hammered, CheckFailure> {
    let sections: Vec<Arc<CriticalSection>> = names
        .iter()
        .map(|_| Arc::new(CriticalSection::default()))
        .collect();
    let mut tasks = Vec::new();
    for (index, provider) in nodes
        .iter()
        .flat_map(|node| std::iter::repeat_n(node, tasks_per_node))
        .enumerate()
    {
        let provider = provider.clone();
        let capabilities = provider.capabilities();
        let trace = trace.clone();
        let sections = sections.clone();
        let configs: Vec<_> = names
            .iter()
            .map(|name| config(name, at_most, Duration::ZERO))
            .collect();
        let private = config(&format!("{private_prefix}{index}"), at_most, Duration::ZERO);
        tasks.push(tokio::spawn(async move {
            let label = format!(
                "node {} task {}",
                index / tasks_per_node,
                index % tasks_per_node
            );
            for attempt in 0..attempts * configs.len() {
                let which = (attempt + index) % configs.len();
                let lock = &configs[which];
                let section = &sections[which];
                let sent = Instant::now();
                let (result, own) = futures_util::future::join(
                    tokio::time::timeout(OPERATION_LIMIT, provider.try_lock(lock)),
                    tokio::time::timeout(OPERATION_LIMIT, provider.try_lock(&private)),
                )
                .await;
                let answered = Instant::now();
                let own = match own {
                    Ok(Ok(Acquisition::Acquired(handle))) => handle,
                    Ok(Ok(Acquisition::NotAcquired(holder))) if attempt > 0 => {
                        // Released with zero at-least last time: free for everyone at once,
                        // unless the backend kept it (at-least) or this node refused by itself.
                        let refused = describe_acquisition(&Ok(Acquisition::NotAcquired(holder)));
                        trace.record(&label, format!("try_lock {:?}", private.name()), sent, answered, refused);
                        return Err(trace.refusal(
                            Rule::AT_LEAST,
                            format!("{label}: lock {:?}, which only this task uses, was refused, though the task released it with lock_at_least_for = 0 last time (so it was free at once) while the node's other tasks were trying other names", private.name()),
                            &private,
                        ));
                    }
                    other => {
                        // The task's own name is short and plain: refusing it as invalid is a
                        // name rule's break, whatever else the node was doing.
                        let rule = match &other {
                            Ok(Err(LockError::InvalidName { .. })) => Rule::NAME_LENGTH,
                            Ok(Err(_)) => Rule::THREE_OUTCOMES,
                            _ => Rule::FREE_LOCK_IS_TAKEN,
                        };
                        let other = other.map(|result| describe_acquisition(&result));
                        trace.record(&label, format!("try_lock {:?}", private.name()), sent, answered, format!("{other:?}"));
                        return Err(trace.failure(
                            rule,
                            format!("{label}: lock {:?}, which only this task uses and nobody ever held, was not acquired ({other:?}) while the node's other tasks were trying other names", private.name()),
                        ));
                    }
                };
                let result = result.map_err(|_| {
                    trace.failure(
                        Rule::BOUNDED_TIME,
                        format!("{label}: try_lock {:?} gave no answer within {OPERATION_LIMIT:?}", lock.name()),
                    )
                })?;
                let outcome = describe_acquisition(&result);
                match result {
                    Ok(Acquisition::Acquired(handle)) => {
                        let before = section.inside.fetch_add(1, Ordering::SeqCst);
                        trace.record(&label, format!("try_lock {:?}", lock.name()), sent, answered, outcome);
                        if before != 0 {
                            section.overlaps.fetch_add(1, Ordering::SeqCst);
                            trace.note(format!(
                                "{label} entered the critical section of {:?} while {before} other holder(s) were inside",
                                lock.name()
                            ));
                        }
                        section.entries.fetch_add(1, Ordering::SeqCst);
                        let token = handle.fencing_token();
                        locked(&section.tokens).push(token);
                        let seen = section.counter.load(Ordering::SeqCst);
                        // Holds of two lengths: a millisecond lets racers pile up behind the
                        // holder; a bare yield lets a whole acquire-release cycle fit inside
                        // another task's single request, so a provider whose acquisition is two
                        // requests (a counter, then the lock) shows its race.
                        if attempt % 4 == 0 {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        } else {
                            tokio::task::yield_now().await;
                        }
                        section.counter.store(seen + 1, Ordering::SeqCst);
                        section.inside.fetch_sub(1, Ordering::SeqCst);
                        let sent = Instant::now();
                        let released = tokio::time::timeout(OPERATION_LIMIT, handle.unlock()).await;
                        let answered = Instant::now();
                        let text = format!("{released:?}");
                        trace.record(&label, format!("unlock {:?}", lock.name()), sent, answered, text);
                        match released {
                            Ok(Ok(true)) => {
                                section.releases.fetch_add(1, Ordering::SeqCst);
                            }
                            Ok(Ok(false)) => {
                                return Err(trace.failure(
                                    Rule::RELEASE_RESULT,
                                    format!("{label}: unlock {:?} answered false right after the critical section, well inside lock_at_most_for", lock.name()),
                                ));
                            }
                            Ok(Err(error)) => {
                                return Err(trace.failure(
                                    Rule::THREE_OUTCOMES,
                                    format!("{label}: unlock {:?} failed while the backend is up: {error}", lock.name()),
                                ));
                            }
                            Err(_) => {
                                return Err(trace.failure(
                                    Rule::BOUNDED_TIME,
                                    format!("{label}: unlock {:?} gave no answer within {OPERATION_LIMIT:?}", lock.name()),
                                ));
                            }
                        }
                    }
                    Ok(Acquisition::NotAcquired(_)) => {
                        section.refusals.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(error @ LockError::InvalidName { .. })
                        if capabilities.max_name_chars.is_none_or(|max| lock.name().chars().count() <= max) =>
                    {
                        trace.record(&label, format!("try_lock {:?}", lock.name()), sent, answered, outcome);
                        return Err(trace.failure(
                            Rule::NAME_LENGTH,
                            format!("{label}: lock {:?} ({} characters) was refused as an invalid name, though it is within the declared limit ({:?}): {error}", lock.name(), lock.name().chars().count(), capabilities.max_name_chars),
                        ));
                    }
                    Err(error) => {
                        trace.record(&label, format!("try_lock {:?}", lock.name()), sent, answered, outcome);
                        return Err(trace.failure(
                            Rule::THREE_OUTCOMES,
                            format!("{label}: try_lock {:?} failed while the backend is up: {error}", lock.name()),
                        ));
                    }
                }
                let sent = Instant::now();
                let released = tokio::time::timeout(OPERATION_LIMIT, own.unlock()).await;
                if !matches!(released, Ok(Ok(true))) {
                    trace.record(&label, format!("unlock {:?}", private.name()), sent, Instant::now(), format!("{released:?}"));
                    return Err(trace.failure(
                        Rule::OWNERSHIP,
                        format!("{label}: unlock {:?}, which only this task holds, answered {released:?}: did another task's release on this node free it? Every successful try_lock is its own acquisition", private.name()),
                    ));
                }
                tokio::task::yield_now().await;
            }
            Ok(())
        }));
    }
    let mut first_failure = None;
    for task in tasks {
        let result = task.await.unwrap_or_else(|panic| {
            Err(trace.failure(Rule::HARNESS, format!("a node's task panicked: {panic}")))
        });
        if let Err(failure) = result {
            first_failure.get_or_insert(failure);
        }
    }
    // Two holders at once usually show up first as a failed release (the other one overwrote
    // the record); the overlap is the cause, so it is what the failure names.
    for (name, section) in names.iter().zip(&sections) {
        let overlaps = section.overlaps.load(Ordering::SeqCst);
        let entries = section.entries.load(Ordering::SeqCst);
        let counter = section.counter.load(Ordering::SeqCst);
        let broken = if overlaps > 0 {
            format!("lock {name:?}: {overlaps} acquisitions overlapped another holder's")
        } else if counter != entries {
            format!(
                "lock {name:?}: {entries} acquisitions but the shared counter reached {counter}: updates were lost to concurrent holders"
            )
        } else {
            continue;
        };
        let observed = match &first_failure {
            Some(first) => format!(
                "{broken}; a node stopped on: [{}] {}",
                first.rule.id, first.observed
            ),
            None => broken,
        };
        return Err(trace.failure(Rule::MUTUAL_EXCLUSION, observed));
    }
    match first_failure {
        Some(failure) => Err(failure),
        None => Ok(Hammered {
            sections,
            attempts_per_name: (nodes.len() * tasks_per_node * attempts) as u64,
        }),
    }
}

/// A contending node whose clock runs `index` × 5 ms ahead: nodes of a fleet never agree to the
/// millisecond, and a client-time provider's check-then-write races show only when they do not
/// (well inside the skew such a provider documents; a server-time provider ignores it).
async fn contender<H: ConformanceHarness>(
    harness: &H,
    trace: &Trace,
    label: &str,
    index: usize,
) -> Result<H::Node, CheckFailure> {
    let ahead = Duration::from_millis(5) * u32::try_from(index).unwrap_or(0);
    let clock = shedlock_core::raw::SkewedClock::ahead(Arc::new(shedlock_core::SystemClock), ahead);
    super::node_with_clock(harness, trace, label, Arc::new(clock)).await
}

/// Checks that the tokens of a contended lock's holders, in the order they entered, strictly
/// increase from `last`; gives the last one.
fn increasing_in_entry_order(
    trace: &Trace,
    name: &str,
    tokens: &[Option<u64>],
    last: Option<u64>,
) -> Result<Option<u64>, CheckFailure> {
    let mut previous = last;
    for (order, token) in tokens.iter().enumerate() {
        match (*token, previous) {
            (None, _) => {
                return Err(trace.failure(
                    Rule::FENCING,
                    format!(
                        "lock {name:?}: contended acquisition #{} carries no fencing token",
                        order + 1
                    ),
                ));
            }
            (Some(token), Some(before)) if token <= before => {
                return Err(trace.failure(
                    Rule::FENCING,
                    format!(
                        "lock {name:?}: contended acquisition #{} got token {token}, not above the previous holder's {before} (tokens in entry order: {tokens:?})",
                        order + 1
                    ),
                ));
            }
            (Some(token), _) => previous = Some(token),
        }
    }
    Ok(previous)
}

/// Mutual exclusion under concurrency: four independent nodes, each with four tasks sharing
/// its provider instance, hammer two names (ShedLock's fuzz test, with overlap detection),
/// each attempt beside a name of the task's own. No two holders, of one node or of two, are
/// ever inside one name's critical section together, no update of the shared counter is lost,
/// every acquisition is released with `true`, every attempt is accounted for as acquired or
/// refused, and every task's own name is taken each time and released with `true`. With
/// fencing declared, the holders' tokens strictly increase in the order they entered.
pub async fn check_mutual_exclusion<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    const NODES: usize = 4;
    const TASKS_PER_NODE: usize = 4;
    const ATTEMPTS: usize = 10;
    let trace = Arc::new(Trace::new("mutual_exclusion"));
    let mut nodes = Vec::new();
    for index in 0..NODES {
        nodes.push(Arc::new(
            contender(harness, &trace, &format!("node {index}"), index).await?,
        ));
    }
    let capabilities = nodes[0].capabilities();
    let timing = timing_of(&capabilities);
    let lock_names = [names.name("first"), names.name("second")];
    let hammered = hammer(
        &trace,
        Contenders {
            nodes,
            tasks_per_node: TASKS_PER_NODE,
        },
        &lock_names,
        &names.name("own"),
        ATTEMPTS,
        timing.units(100),
    )
    .await?;
    let mut notes = Vec::new();
    for (name, section) in lock_names.iter().zip(&hammered.sections) {
        let entries = section.entries.load(Ordering::SeqCst);
        let releases = section.releases.load(Ordering::SeqCst);
        let refusals = section.refusals.load(Ordering::SeqCst);
        if releases != entries {
            return Err(trace.failure(
                Rule::RELEASE_RESULT,
                format!(
                    "lock {name:?}: {entries} acquisitions but {releases} releases answered true"
                ),
            ));
        }
        if entries + refusals != hammered.attempts_per_name {
            return Err(trace.failure(
                Rule::THREE_OUTCOMES,
                format!(
                    "lock {name:?}: {} attempts, but {entries} acquired + {refusals} refused",
                    hammered.attempts_per_name
                ),
            ));
        }
        if entries == 0 {
            return Err(trace.failure(
                Rule::FREE_LOCK_IS_TAKEN,
                format!(
                    "lock {name:?}: none of {} attempts acquired it, though every holder released at once",
                    hammered.attempts_per_name
                ),
            ));
        }
        if capabilities.fencing {
            let tokens = locked(&section.tokens).clone();
            increasing_in_entry_order(&trace, name, &tokens, None)?;
        }
        notes.push(format!(
            "{name}: {entries} acquired, {refusals} refused, 0 overlaps"
        ));
    }
    Ok(Verdict::Passed { notes })
}

/// Fencing tokens strictly increase in acquisition order: across release, across expiry and
/// takeover, under contention of four nodes with four tasks each, 80 attempts per task, and in
/// tight acquire-release cycles of eight tasks per node (tokens read inside the
/// critical section, in entry order).
///
/// Applies when the provider declares [`shedlock_core::Capabilities::fencing`].
pub async fn check_fencing_tokens_increase<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Arc::new(Trace::new("fencing_tokens_increase"));
    let a = node(harness, &trace, "A").await?;
    let capabilities = a.capabilities();
    if !capabilities.fencing {
        return Ok(Verdict::not_applicable(
            "the provider declares no fencing tokens (Capabilities::fencing = false)",
        ));
    }
    let b = node(harness, &trace, "B").await?;
    let timing = timing_of(&capabilities);
    let name = names.name("lock");
    let long = config(&name, timing.units(100), Duration::ZERO);
    let short = config(&name, timing.unit, Duration::ZERO);
    let mut last: Option<u64> = None;
    let token_of = |handle: &dyn shedlock_core::LockHandle,
                    last: &mut Option<u64>,
                    how: &str|
     -> Result<(), CheckFailure> {
        match (handle.fencing_token(), *last) {
            (None, _) => Err(trace.failure(
                Rule::FENCING,
                format!(
                    "the provider declares fencing, but the acquisition {how} carries no token"
                ),
            )),
            (Some(token), Some(previous)) if token <= previous => Err(trace.failure(
                Rule::FENCING,
                format!(
                    "the acquisition {how} got token {token}, not above the previous {previous}"
                ),
            )),
            (Some(token), _) => {
                *last = Some(token);
                Ok(())
            }
        }
    };

    let first = trace.must_acquire_free("A", &a, &long).await?;
    token_of(&*first.value, &mut last, "first")?;
    trace.must_release("A", &*first.value).await?;
    let second = trace
        .must_acquire("B", &b, &short, Rule::AT_LEAST, "node A released it")
        .await?;
    token_of(&*second.value, &mut last, "after a release")?;
    drop(second.value);
    trace.note("node B vanishes: its handle is dropped without unlock");
    trace
        .sleep_until(second.answered + timing.unit + timing.tolerance)
        .await;
    let third = trace
        .must_acquire("A", &a, &long, Rule::AT_MOST, "node B's lock expired")
        .await?;
    token_of(&*third.value, &mut last, "after an expiry")?;
    trace.must_release("A", &*third.value).await?;

    let mut nodes = vec![Arc::new(a), Arc::new(b)];
    for index in 2..4 {
        nodes.push(Arc::new(
            contender(harness, &trace, &format!("node {index}"), index).await?,
        ));
    }
    let cyclists = nodes.clone();
    let hammered = hammer(
        &trace,
        Contenders {
            nodes,
            tasks_per_node: 4,
        },
        std::slice::from_ref(&name),
        &names.name("own"),
        80,
        timing.units(100),
    )
    .await?;
    let tokens = locked(&hammered.sections[0].tokens).clone();
    let previous = increasing_in_entry_order(&trace, &name, &tokens, last)?;
    let cycled = tight_cycles(&trace, &cyclists, &name, 60).await?;
    let previous = increasing_in_entry_order(&trace, &name, &cycled, previous)?;
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{} tokens in strictly increasing order, last {}",
            tokens.len() + cycled.len() + 3,
            previous.unwrap_or_default()
        )],
    })
}

/// Tasks that take `name` and give it back at once, as fast as they can, `attempts` times each
/// (eight tasks on each of `nodes`): the tokens of their acquisitions, in the order they were
/// taken (each is recorded before its release, so no later holder can come first). A token
/// drawn apart from the lock (a counter read, then the lock written) shows its race only when a
/// whole acquire-release cycle fits between another racer's two requests.
async fn tight_cycles<N: LockProvider + 'static>(
    trace: &Trace,
    nodes: &[Arc<N>],
    name: &str,
    attempts: usize,
) -> Result<Vec<Option<u64>>, CheckFailure> {
    let lock = config(name, Duration::from_secs(60), Duration::ZERO);
    let tokens = Mutex::new(Vec::new());
    let cycles = nodes
        .iter()
        .flat_map(|node| std::iter::repeat_n(node, 8))
        .map(|node| async {
            for _ in 0..attempts {
                let acquired = trace.acquire_unrecorded("cyclist", &**node, &lock).await?;
                if let Acquisition::Acquired(handle) = acquired.value {
                    let token = handle.fencing_token();
                    locked(&tokens).push(token);
                    if !matches!(handle.unlock().await, Ok(true)) {
                        return Err(trace.failure(
                            Rule::RELEASE_RESULT,
                            format!(
                                "a holder of {name:?} released it at once and was not told true"
                            ),
                        ));
                    }
                }
            }
            Ok(())
        });
    for outcome in futures_util::future::join_all(cycles).await {
        outcome?;
    }
    Ok(tokens.into_inner().unwrap())
}
