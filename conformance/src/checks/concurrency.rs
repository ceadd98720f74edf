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
use crate::trace::{OPERATION_LIMIT, Trace, config, describe_acquisition};

use super::{node, timing_of};

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

/// Runs `nodes` tasks concurrently, each trying every name `attempts` times; a task that gets
/// a lock enters the name's critical section, stays about a millisecond, and releases.
async fn hammer<N: LockProvider + 'static>(
    trace: &Arc<Trace>,
    nodes: Vec<Arc<N>>,
    names: &[String],
    attempts: usize,
    at_most: Duration,
) -> Result<Hammered, CheckFailure> {
    let sections: Vec<Arc<CriticalSection>> = names
        .iter()
        .map(|_| Arc::new(CriticalSection::default()))
        .collect();
    let mut tasks = Vec::new();
    for (index, provider) in nodes.iter().enumerate() {
        let provider = provider.clone();
        let capabilities = provider.capabilities();
        let trace = trace.clone();
        let sections = sections.clone();
        let configs: Vec<_> = names
            .iter()
            .map(|name| config(name, at_most, Duration::ZERO))
            .collect();
        tasks.push(tokio::spawn(async move {
            let label = format!("node {index}");
            for attempt in 0..attempts * configs.len() {
                let which = (attempt + index) % configs.len();
                let lock = &configs[which];
                let section = &sections[which];
                let sent = Instant::now();
                let result = tokio::time::timeout(OPERATION_LIMIT, provider.try_lock(lock)).await;
                let answered = Instant::now();
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
                        section.tokens.lock().unwrap().push(handle.fencing_token());
                        let seen = section.counter.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(1)).await;
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
            attempts_per_name: (nodes.len() * attempts) as u64,
        }),
    }
}

/// Mutual exclusion under concurrency: eight independent nodes hammer two names (ShedLock's
/// fuzz test, with overlap detection). No two holders are ever inside one name's critical
/// section together, no update of the shared counter is lost, every acquisition is released
/// with `true`, and every attempt is accounted for as acquired or refused.
pub async fn check_mutual_exclusion<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    const NODES: usize = 8;
    const ATTEMPTS: usize = 20;
    let trace = Arc::new(Trace::new("mutual_exclusion"));
    let mut nodes = Vec::new();
    for index in 0..NODES {
        nodes.push(Arc::new(
            node(harness, &trace, &format!("node {index}")).await?,
        ));
    }
    let timing = timing_of(&nodes[0].capabilities());
    let lock_names = [names.name("first"), names.name("second")];
    let hammered = hammer(&trace, nodes, &lock_names, ATTEMPTS, timing.units(100)).await?;
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
        notes.push(format!(
            "{name}: {entries} acquired, {refusals} refused, 0 overlaps"
        ));
    }
    Ok(Verdict::Passed { notes })
}

/// Fencing tokens strictly increase in acquisition order: across release, across expiry and
/// takeover, and under contention (tokens read inside the critical section, in entry order).
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
            node(harness, &trace, &format!("node {index}")).await?,
        ));
    }
    let hammered = hammer(
        &trace,
        nodes,
        std::slice::from_ref(&name),
        12,
        timing.units(100),
    )
    .await?;
    let tokens = hammered.sections[0].tokens.lock().unwrap().clone();
    let mut previous = last;
    for (order, token) in tokens.iter().enumerate() {
        match (*token, previous) {
            (None, _) => {
                return Err(trace.failure(
                    Rule::FENCING,
                    format!(
                        "contended acquisition #{} carries no fencing token",
                        order + 1
                    ),
                ));
            }
            (Some(token), Some(before)) if token <= before => {
                return Err(trace.failure(
                    Rule::FENCING,
                    format!(
                        "contended acquisition #{} got token {token}, not above the previous holder's {before} (tokens in entry order: {tokens:?})",
                        order + 1
                    ),
                ));
            }
            (Some(token), _) => previous = Some(token),
        }
    }
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{} tokens in strictly increasing order, last {}",
            tokens.len() + 3,
            previous.unwrap_or_default()
        )],
    })
}
