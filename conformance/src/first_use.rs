//! First use by a fleet ([`Rule::FIRST_USE`]): many nodes built at the same instant on storage
//! nothing has used yet, as replicas of a new deployment start together.
//!
//! Not a check of [`run`](crate::run): the harness's nodes all share one working backend, and
//! what this proves needs storage that is new for every round (a database without the table, a
//! key prefix without counters, a ZooKeeper root that does not exist). The provider's own tests
//! make that storage and call [`check_first_use`] with a builder for it, as many rounds as they
//! like.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{Acquisition, LockHandle, LockProvider};
use tokio::sync::Barrier;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio::time::error::Elapsed;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::trace::{Trace, config, describe_acquisition};

/// How many nodes a round builds at once unless told otherwise: a fleet's worth of replicas.
pub const FIRST_USE_NODES: usize = 16;

/// How long each node may take to be built, and each operation to answer, before the round
/// fails under [`Rule::BOUNDED_TIME`] instead of hanging.
const FIRST_USE_LIMIT: Duration = Duration::from_secs(60);

/// First use by a fleet: `nodes` providers, each built by `build(index)` on the same storage
/// that nothing has used yet, are built at the same instant (each on its own task), and must
/// all be built: whatever a provider creates or checks when it is built (a table, a
/// collection, an index, a root node) is made once, whoever is first, and every node ends with
/// it checked. Then all of them try one new name at the same instant, twice (released in
/// between): each time exactly one acquires, the others answer not acquired, none answers an
/// error, so whatever a first acquire creates (a row, a counter, a parent node) is created
/// once too; with fencing, the second token is greater than the first.
///
/// `build` must return futures that do nothing until polled (an `async` block does), so that
/// the builds start together.
pub async fn check_first_use<N, F, Fut, E>(nodes: usize, build: F) -> Result<Verdict, CheckFailure>
where
    N: LockProvider + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<N, E>> + Send + 'static,
    E: fmt::Display + Send + 'static,
{
    let trace = Arc::new(Trace::new("first_use"));
    let nodes = nodes.max(2);
    let builds = at_once((0..nodes).map(&build));
    let mut built = Vec::with_capacity(nodes);
    let mut failures = Vec::new();
    let mut slowest = Duration::ZERO;
    for (index, task) in builds.into_iter().enumerate() {
        let label = node_label(index);
        let (sent, answered, outcome) = task.await.map_err(|error| {
            trace.failure(
                Rule::HARNESS,
                format!("building node {label} panicked: {error}"),
            )
        })?;
        slowest = slowest.max(answered - sent);
        let outcome = match outcome {
            Ok(Ok(node)) => {
                built.push(node);
                "built".to_owned()
            }
            Ok(Err(error)) => {
                failures.push(format!("node {label}: {error}"));
                format!("error: {error}")
            }
            Err(_) => {
                failures.push(format!(
                    "node {label}: no answer within {FIRST_USE_LIMIT:?}"
                ));
                "no answer".to_owned()
            }
        };
        trace.record(&label, "build".to_owned(), sent, answered, outcome);
    }
    if !failures.is_empty() {
        return Err(trace.failure(
            Rule::FIRST_USE,
            format!(
                "{} of {nodes} nodes built at the same instant on new storage failed: {}",
                failures.len(),
                failures.join("; ")
            ),
        ));
    }
    let built: Vec<Arc<N>> = built.into_iter().map(Arc::new).collect();
    let lock = config(
        &format!("first-use-{}", uuid::Uuid::new_v4().simple()),
        FIRST_USE_LIMIT,
        Duration::ZERO,
    );
    let first = contend(&trace, &built, &lock, "first").await?;
    release(&trace, &first, &lock).await?;
    let second = contend(&trace, &built, &lock, "second").await?;
    release(&trace, &second, &lock).await?;
    if let (Some(earlier), Some(later)) = (first.1.fencing_token(), second.1.fencing_token())
        && later <= earlier
    {
        return Err(trace.failure(
            Rule::FENCING,
            format!(
                "the second acquisition of {:?} got token {later}, not greater than the first's {earlier}",
                lock.name()
            ),
        ));
    }
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{nodes} nodes built at once on new storage, the slowest in {slowest:?}; on a new name, twice, one of them acquired and {} answered not acquired",
            nodes - 1
        )],
    })
}

/// When a request was sent and answered, and its answer (`Err` when none came in time).
type Timed<T> = (Instant, Instant, Result<T, Elapsed>);

/// Starts `requests` at the same instant, each on its own task behind one barrier. Each task
/// answers, in order, when its request was sent and answered, and the answer (`Err` when none
/// came within [`FIRST_USE_LIMIT`]).
fn at_once<T, R>(requests: impl Iterator<Item = R>) -> Vec<JoinHandle<Timed<T>>>
where
    T: Send + 'static,
    R: Future<Output = T> + Send + 'static,
{
    let requests: Vec<R> = requests.collect();
    let barrier = Arc::new(Barrier::new(requests.len()));
    requests
        .into_iter()
        .map(|request| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let sent = Instant::now();
                let answer = tokio::time::timeout(FIRST_USE_LIMIT, request).await;
                (sent, Instant::now(), answer)
            })
        })
        .collect()
}

/// `A`, `B`, ... `Z`, then `node 26` and on.
fn node_label(index: usize) -> String {
    match u8::try_from(index) {
        Ok(letter @ 0..26) => char::from(b'A' + letter).to_string(),
        _ => format!("node {index}"),
    }
}

/// Every node tries `lock` at the same instant: exactly one must acquire, the others answer
/// not acquired. The winner's index and handle.
async fn contend<N: LockProvider + 'static>(
    trace: &Arc<Trace>,
    nodes: &[Arc<N>],
    lock: &shedlock_core::LockConfiguration,
    round: &str,
) -> Result<(usize, Box<dyn LockHandle>), CheckFailure> {
    let attempts = at_once(nodes.iter().map(|node| {
        let (node, lock) = (node.clone(), lock.clone());
        async move { node.try_lock(&lock).await }
    }));
    let mut winners = Vec::new();
    let mut problems = Vec::new();
    for (index, attempt) in attempts.into_iter().enumerate() {
        let label = node_label(index);
        let (sent, answered, answer) = attempt.await.map_err(|error| {
            trace.failure(
                Rule::HARNESS,
                format!("node {label}'s try_lock panicked: {error}"),
            )
        })?;
        let action = format!("try_lock {:?} ({round} time)", lock.name());
        match answer {
            Err(_) => {
                trace.record(&label, action, sent, answered, "no answer".to_owned());
                problems.push((
                    Rule::BOUNDED_TIME,
                    format!("node {label} gave no answer within {FIRST_USE_LIMIT:?}"),
                ));
            }
            Ok(answer) => {
                trace.record(
                    &label,
                    action,
                    sent,
                    answered,
                    describe_acquisition(&answer),
                );
                match answer {
                    Ok(Acquisition::Acquired(handle)) => winners.push((index, handle)),
                    Ok(Acquisition::NotAcquired(_)) => {}
                    Err(error) => problems.push((
                        Rule::FIRST_USE,
                        format!("node {label} answered an error on a working backend: {error}"),
                    )),
                }
            }
        }
    }
    if let Some((rule, observed)) = problems.into_iter().next() {
        return Err(trace.failure(
            rule,
            format!("the {round} time all nodes tried a new name at once, {observed}"),
        ));
    }
    match winners.len() {
        1 => Ok(winners.remove(0)),
        0 => Err(trace.failure(
            Rule::FREE_LOCK_IS_TAKEN,
            format!(
                "the {round} time all {} nodes tried the free lock {:?} at once, none acquired it",
                nodes.len(),
                lock.name()
            ),
        )),
        many => Err(trace.failure(
            Rule::MUTUAL_EXCLUSION,
            format!(
                "the {round} time all {} nodes tried lock {:?} at once, {many} acquired it: {}",
                nodes.len(),
                lock.name(),
                winners
                    .iter()
                    .map(|(index, _)| node_label(*index))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        )),
    }
}

/// The winner's unlock, which must answer true.
async fn release(
    trace: &Trace,
    (index, handle): &(usize, Box<dyn LockHandle>),
    lock: &shedlock_core::LockConfiguration,
) -> Result<(), CheckFailure> {
    let label = node_label(*index);
    let sent = Instant::now();
    let answer = tokio::time::timeout(FIRST_USE_LIMIT, handle.unlock()).await;
    let answered = Instant::now();
    let (outcome, failure) = match answer {
        Ok(Ok(true)) => ("true".to_owned(), None),
        Ok(Ok(false)) => (
            "false".to_owned(),
            Some((Rule::RELEASE_RESULT, "its unlock answered false".to_owned())),
        ),
        Ok(Err(error)) => (
            format!("error: {error}"),
            Some((
                Rule::FIRST_USE,
                format!("its unlock answered an error: {error}"),
            )),
        ),
        Err(_) => (
            "no answer".to_owned(),
            Some((
                Rule::BOUNDED_TIME,
                format!("its unlock gave no answer within {FIRST_USE_LIMIT:?}"),
            )),
        ),
    };
    trace.record(
        &label,
        format!("unlock {:?}", lock.name()),
        sent,
        answered,
        outcome,
    );
    match failure {
        None => Ok(()),
        Some((rule, observed)) => Err(trace.failure(
            rule,
            format!(
                "node {label} held {:?} just after acquiring it, but {observed}",
                lock.name()
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nodes_are_labelled_by_letter_then_by_number() {
        assert_eq!(node_label(0), "A");
        assert_eq!(node_label(25), "Z");
        assert_eq!(node_label(26), "node 26");
    }
}
