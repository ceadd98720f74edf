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
