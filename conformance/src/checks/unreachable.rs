//! Check 9: an unreachable backend is an error, in bounded time, and the task does not run.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use shedlock_core::{Acquisition, LockProvider, LockingTaskExecutor, TaskOutcome};
use tokio::time::Instant;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::{ConformanceHarness, Support};
use crate::names::NameSpace;
use crate::trace::{Trace, config, describe_acquisition};

use super::{node, timing_of};

/// The longest an acquire against an unreachable backend may take to fail.
pub const UNREACHABLE_LIMIT: Duration = Duration::from_secs(15);

/// Backend unreachable: `try_lock` returns an error (not "not acquired", not a hang: within
/// [`UNREACHABLE_LIMIT`]), and [`LockingTaskExecutor`] returns the error without running the
/// task.
///
/// Applies when the harness provides
/// [`unreachable_node`](ConformanceHarness::unreachable_node).
pub async fn check_backend_unreachable<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("backend_unreachable");
    let node = match harness.unreachable_node().await {
        Ok(Support::Supported(node)) => Arc::new(node),
        Ok(Support::NotApplicable(reason)) => return Ok(Verdict::NotApplicable(reason)),
        Err(error) => {
            return Err(trace.failure(
                Rule::HARNESS,
                format!(
                    "unreachable_node() failed instead of building a node without connecting: {error}"
                ),
            ));
        }
    };
    let lock = config(&names.name("lock"), Duration::from_secs(60), Duration::ZERO);
    let sent = Instant::now();
    let result = tokio::time::timeout(UNREACHABLE_LIMIT, node.try_lock(&lock)).await;
    let answered = Instant::now();
    let action = format!("try_lock {:?} on an unreachable backend", lock.name());
    match result {
        Err(_) => {
            trace.record("down", action, sent, answered, "no answer".to_owned());
            return Err(trace.failure(
                Rule::BOUNDED_TIME,
                format!("try_lock gave no answer within {UNREACHABLE_LIMIT:?}"),
            ));
        }
        Ok(result) => {
            trace.record(
                "down",
                action,
                sent,
                answered,
                describe_acquisition(&result),
            );
            match result {
                Err(_) => {}
                Ok(Acquisition::NotAcquired(_)) => {
                    return Err(trace.failure(
                        Rule::FAIL_CLOSED,
                        "try_lock answered \"not acquired\" while the backend is unreachable: an unknown outcome must be an error, or callers take an outage for another node's run",
                    ));
                }
                Ok(Acquisition::Acquired(_)) => {
                    return Err(trace.failure(
                        Rule::FAIL_CLOSED,
                        "try_lock answered \"acquired\" while the backend is unreachable",
                    ));
                }
            }
        }
    }
    let executor = LockingTaskExecutor::new(node.clone());
    let ran = Arc::new(AtomicBool::new(false));
    let task_ran = ran.clone();
    let sent = Instant::now();
    let executed = tokio::time::timeout(
        UNREACHABLE_LIMIT,
        executor.execute(&lock, async move { task_ran.store(true, Ordering::SeqCst) }),
    )
    .await;
    let answered = Instant::now();
    let outcome = match &executed {
        Err(_) => "no answer".to_owned(),
        Ok(Ok(TaskOutcome::Executed(()))) => "executed".to_owned(),
        Ok(Ok(TaskOutcome::Skipped(_))) => "skipped".to_owned(),
        Ok(Err(error)) => format!("error: {error}"),
    };
    trace.record(
        "down",
        "executor.execute".to_owned(),
        sent,
        answered,
        outcome,
    );
    if ran.load(Ordering::SeqCst) {
        return Err(trace.failure(
            Rule::FAIL_CLOSED,
            "the executor ran the task while the backend is unreachable",
        ));
    }
    match executed {
        Err(_) => Err(trace.failure(
            Rule::BOUNDED_TIME,
            format!("the executor gave no answer within {UNREACHABLE_LIMIT:?}"),
        )),
        Ok(Ok(_)) => Err(trace.failure(
            Rule::FAIL_CLOSED,
            "the executor answered without an error while the backend is unreachable",
        )),
        Ok(Err(_)) => Ok(Verdict::passed()),
    }
}

/// A backend lost under a working node: node A acquires, releases and extends, holds two
/// locks, and is then cut off from its backend ([`cut_off`](ConformanceHarness::cut_off)).
/// Every operation it sends afterwards is an error, within the kit's operation limit (15 s): `try_lock` of
/// a new name and of a name it holds (never "not acquired", never "acquired"), extend and
/// release of its held handles (never `false`, never `true`). Node B, whose backend works,
/// still finds node A's locks held: losing the backend frees nothing.
///
/// Applies when the harness provides [`cut_off`](ConformanceHarness::cut_off).
pub async fn check_backend_lost<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("backend_lost");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let long = timing_of(&capabilities).units(100);
    let extended = config(&names.name("extended"), long, Duration::ZERO);
    let released = config(&names.name("released"), long, Duration::ZERO);
    let held = config(&names.name("held"), long, Duration::ZERO);
    let fresh = config(&names.name("fresh"), long, Duration::ZERO);
    let first = trace.must_acquire_free("A", &a, &extended).await?.value;
    trace
        .must_acquire_and_release(
            "A",
            &a,
            &released,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody holds it",
        )
        .await?;
    if capabilities.extend {
        let extend = trace.extend("A", &*first, long).await?;
        if !extend.value {
            return Err(trace.failure(
                Rule::EXTEND,
                "node A's extend answered false while it held the lock and its backend worked",
            ));
        }
    }
    let second = trace.must_acquire_free("A", &a, &held).await?.value;
    match harness.cut_off(&a).await {
        Ok(Support::Supported(())) => trace.note("node A is cut off from its backend"),
        Ok(Support::NotApplicable(reason)) => return Ok(Verdict::NotApplicable(reason)),
        Err(error) => {
            return Err(trace.failure(Rule::HARNESS, format!("cut_off() failed: {error}")));
        }
    }
    for lock in [&fresh, &extended] {
        let tried = trace.try_lock("A", &a, lock).await?;
        if let Ok(acquisition) = tried.value {
            return Err(trace.failure(
                Rule::FAIL_CLOSED,
                format!(
                    "node A, cut off from its backend, answered try_lock {:?} with {}: an outcome the backend never gave must be an error",
                    lock.name(),
                    describe_acquisition(&Ok(acquisition))
                ),
            ));
        }
    }
    if capabilities.extend {
        let tried = trace.try_extend("A", &*first, long).await?;
        if let Ok(answer) = tried.value {
            return Err(trace.failure(
                Rule::THREE_OUTCOMES,
                format!(
                    "node A, cut off from its backend, answered extend {:?} with {answer}: false says the lock was lost, true that it was extended, and the backend said neither; it must be an error",
                    extended.name()
                ),
            ));
        }
    }
    let tried = trace.try_unlock("A", &*second).await?;
    if let Ok(answer) = tried.value {
        return Err(trace.failure(
            Rule::THREE_OUTCOMES,
            format!(
                "node A, cut off from its backend, answered unlock {:?} with {answer}: the backend said nothing, so it must be an error",
                held.name()
            ),
        ));
    }
    for lock in [&extended, &held] {
        trace
            .must_not_acquire(
                "B",
                &b,
                lock,
                Rule::FAIL_CLOSED,
                "node A holds it; losing its backend frees nothing",
            )
            .await?;
    }
    Ok(Verdict::passed())
}
