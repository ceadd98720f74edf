//! Calls of `#[scheduler_lock]` fns on the in-process provider: two executors on one store are
//! two nodes of a fleet.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock::memory::MemoryLockStore;
use shedlock::{
    ConfigurationError, LockConfiguration, LockError, LockingTaskExecutor, TaskOutcome,
};
use shedlock_macros::scheduler_lock;
use tokio::sync::{Notify, oneshot};
use tokio::time::timeout;

/// Long enough for any step here; a hang fails the test instead of stalling it.
const LIMIT: Duration = Duration::from_secs(10);

fn two_nodes() -> (LockingTaskExecutor, LockingTaskExecutor) {
    let store = MemoryLockStore::new();
    (
        LockingTaskExecutor::new(store.node()),
        LockingTaskExecutor::new(store.node()),
    )
}

/// Whether another node could take `name` right now (taking and releasing it if so).
async fn is_free(node: &LockingTaskExecutor, name: &str) -> bool {
    let config = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
    node.execute(&config, async {})
        .await
        .unwrap()
        .was_executed()
}

#[scheduler_lock(name = "checked", lock_at_most_for = "1m")]
async fn checked(executor: &LockingTaskExecutor, value: u32) -> Result<u32, LockError> {
    shedlock::assert_locked()?;
    Ok(value * 2)
}

#[tokio::test]
async fn the_body_runs_under_the_lock_and_its_value_is_returned() {
    let (node, _) = two_nodes();
    let outcome = timeout(LIMIT, checked(&node, 21)).await.unwrap().unwrap();
    assert_eq!(outcome.executed().map(Result::unwrap), Some(42));
}

/// Holds its lock until `release` fires, after telling `entered` it runs.
#[scheduler_lock(name = "report-{region}", lock_at_most_for = "1m")]
async fn report(
    executor: &LockingTaskExecutor,
    region: &str,
    entered: &Notify,
    release: oneshot::Receiver<()>,
    runs: &AtomicUsize,
) -> String {
    runs.fetch_add(1, Ordering::SeqCst);
    entered.notify_one();
    release.await.unwrap();
    format!("{region} done")
}

#[tokio::test]
async fn a_concurrent_call_on_another_node_is_skipped_and_the_lock_is_released_after() {
    let (node_a, node_b) = two_nodes();
    let (entered, runs) = (Notify::new(), AtomicUsize::new(0));
    let (release_a, hold_a) = oneshot::channel();
    let first = report(&node_a, "eu", &entered, hold_a, &runs);
    let second = async {
        entered.notified().await;
        let (_unused, hold_b) = oneshot::channel();
        let skipped = report(&node_b, "eu", &Notify::new(), hold_b, &runs).await;
        release_a.send(()).unwrap();
        skipped
    };
    let (first, second) = timeout(LIMIT, async { tokio::join!(first, second) })
        .await
        .unwrap();
    assert_eq!(first.unwrap().executed().as_deref(), Some("eu done"));
    assert!(
        !second.unwrap().was_executed(),
        "node B must skip while A holds report-eu"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "only node A's body ran");
    assert!(
        is_free(&node_b, "report-eu").await,
        "released after the call"
    );
}

#[tokio::test]
async fn names_from_arguments_are_distinct_locks() {
    let (node_a, node_b) = two_nodes();
    let (entered, runs) = (Notify::new(), AtomicUsize::new(0));
    let (release_eu, hold_eu) = oneshot::channel();
    let eu = report(&node_a, "eu", &entered, hold_eu, &runs);
    let others = async {
        entered.notified().await;
        // The filled-in name is exactly "report-eu": a plain executor call with it is skipped.
        let eu_held = !is_free(&node_b, "report-eu").await;
        let (release_us, hold_us) = oneshot::channel();
        release_us.send(()).unwrap();
        let us = report(&node_b, "us", &Notify::new(), hold_us, &runs).await;
        release_eu.send(()).unwrap();
        (eu_held, us)
    };
    let (eu, (eu_held, us)) = timeout(LIMIT, async { tokio::join!(eu, others) })
        .await
        .unwrap();
    assert!(eu_held, "report-eu is held while its call runs");
    assert_eq!(us.unwrap().executed().as_deref(), Some("us done"));
    assert_eq!(eu.unwrap().executed().as_deref(), Some("eu done"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[scheduler_lock(
    name = "at-least",
    lock_at_most_for = "PT1H",
    lock_at_least_for = "30m"
)]
async fn held_at_least(executor: &LockingTaskExecutor) {}

#[tokio::test]
async fn lock_at_least_for_keeps_the_lock_after_the_call() {
    let (node_a, node_b) = two_nodes();
    let outcome = timeout(LIMIT, held_at_least(&node_a)).await.unwrap();
    assert!(outcome.unwrap().was_executed());
    assert!(!is_free(&node_b, "at-least").await);
    let again = timeout(LIMIT, held_at_least(&node_b)).await.unwrap();
    assert!(
        !again.unwrap().was_executed(),
        "skipped for lock_at_least_for"
    );
}

#[scheduler_lock(name = "short", lock_at_most_for = "100ms", executor = executor)]
async fn outlives_its_lock(executor: &LockingTaskExecutor, other: &LockingTaskExecutor) -> bool {
    tokio::time::sleep(Duration::from_millis(400)).await;
    is_free(other, "short").await
}

#[tokio::test]
async fn lock_at_most_for_bounds_the_hold() {
    let (node_a, node_b) = two_nodes();
    let outcome = timeout(LIMIT, outlives_its_lock(&node_a, &node_b))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        outcome.executed(),
        Some(true),
        "after 400 ms a lock held at most 100 ms is free to another node"
    );
}

#[scheduler_lock(name = "{shard}", lock_at_most_for = "1m")]
async fn by_shard(executor: &LockingTaskExecutor, shard: &str, runs: &AtomicUsize) {
    runs.fetch_add(1, Ordering::SeqCst);
}

#[tokio::test]
async fn a_name_that_fills_in_empty_is_an_error_and_the_body_does_not_run() {
    let (node, _) = two_nodes();
    let runs = AtomicUsize::new(0);
    let error = by_shard(&node, "", &runs).await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Configuration(ConfigurationError::EmptyName)
        ),
        "{error:?}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert!(by_shard(&node, "7", &runs).await.unwrap().was_executed());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[scheduler_lock(name = "parse", lock_at_most_for = "1m")]
async fn parse(executor: &LockingTaskExecutor, text: &str) -> Result<u8, std::num::ParseIntError> {
    if text.is_empty() {
        return Ok(0);
    }
    let value: u8 = text.parse()?;
    Ok(value + 1)
}

#[tokio::test]
async fn question_mark_and_return_leave_the_body_not_the_lock() {
    let (node, _) = two_nodes();
    let ran = |text| {
        let node = &node;
        async move { parse(node, text).await.unwrap().executed().unwrap() }
    };
    assert_eq!(ran("").await, Ok(0));
    assert_eq!(ran("4").await, Ok(5));
    assert!(
        ran("x").await.is_err(),
        "the body's error is the body's value"
    );
    assert!(is_free(&node, "parse").await);
}

#[scheduler_lock(name = "panics", lock_at_most_for = "1h")]
async fn panics(executor: &LockingTaskExecutor) {
    panic!("the job failed");
}

#[tokio::test]
async fn a_panicking_body_releases_the_lock_and_the_panic_continues() {
    let (node_a, node_b) = two_nodes();
    let caught = tokio::spawn(async move { panics(&node_a).await }).await;
    assert!(caught.unwrap_err().is_panic());
    assert!(
        is_free(&node_b, "panics").await,
        "released before the panic went on"
    );
}

#[scheduler_lock(name = "nested", lock_at_most_for = "1m")]
async fn outer(executor: &LockingTaskExecutor) -> Result<TaskOutcome<()>, LockError> {
    inner(executor).await
}

#[scheduler_lock(name = "nested", lock_at_most_for = "1m")]
async fn inner(executor: &LockingTaskExecutor) {}

#[tokio::test]
async fn the_same_lock_inside_the_body_runs_directly() {
    let (node, _) = two_nodes();
    let outcome = outer(&node).await.unwrap().executed().unwrap().unwrap();
    assert!(outcome.was_executed(), "re-entrant on the same executor");
}

struct Service {
    executor: LockingTaskExecutor,
    runs: AtomicUsize,
}

impl Service {
    #[scheduler_lock(name = "service-{day}", lock_at_most_for = "1m", executor = self.executor)]
    async fn run(&self, day: u32) -> u32 {
        self.runs.fetch_add(1, Ordering::SeqCst);
        shedlock::assert_locked().unwrap();
        day
    }
}

#[tokio::test]
async fn a_method_can_lock_with_an_executor_it_keeps() {
    let (node, other) = two_nodes();
    let service = Service {
        executor: node,
        runs: AtomicUsize::new(0),
    };
    assert_eq!(service.run(3).await.unwrap().executed(), Some(3));
    assert_eq!(service.runs.load(Ordering::SeqCst), 1);
    assert!(is_free(&other, "service-3").await);
}

#[scheduler_lock(name = "chosen", lock_at_most_for = "1m", executor = primary)]
async fn two_executors(primary: Arc<LockingTaskExecutor>, secondary: &LockingTaskExecutor) -> bool {
    // The lock is on `primary`'s provider, so `secondary` (another node) cannot take it.
    !is_free(secondary, "chosen").await
}

#[tokio::test]
async fn the_attribute_names_the_executor_among_several() {
    let (node_a, node_b) = two_nodes();
    let held_on_primary = two_executors(Arc::new(node_a), &node_b).await.unwrap();
    assert_eq!(held_on_primary.executed(), Some(true));
}

mod core_only {
    use shedlock_core::LockingTaskExecutor;
    use shedlock_macros::scheduler_lock;

    #[scheduler_lock(name = "core", lock_at_most_for = "1m", crate = ::shedlock_core)]
    pub(super) async fn job(executor: &LockingTaskExecutor) -> &'static str {
        "ran"
    }
}

#[tokio::test]
async fn crate_points_the_expansion_at_the_core() {
    let (node, _) = two_nodes();
    let outcome: Result<shedlock_core::TaskOutcome<&str>, shedlock_core::LockError> =
        core_only::job(&node).await;
    assert_eq!(outcome.unwrap().executed(), Some("ran"));
}

/// Runs for `run_for`, far longer than its 300 ms `lock_at_most_for`, checking the lost signal
/// on the way; answers how many of its steps ran and whether the lock was ever lost.
#[scheduler_lock(name = "import", lock_at_most_for = "300ms", keep_alive = lost)]
async fn import(
    executor: &LockingTaskExecutor,
    run_for: Duration,
    entered: &Notify,
) -> (u32, bool) {
    entered.notify_one();
    let mut steps = 0;
    let deadline = tokio::time::Instant::now() + run_for;
    while tokio::time::Instant::now() < deadline {
        if lost.is_cancelled() {
            return (steps, true);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        steps += 1;
    }
    (steps, lost.is_cancelled())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_holds_the_lock_past_lock_at_most_for_and_names_the_lost_signal() {
    let (node, other) = two_nodes();
    let entered = Notify::new();
    let call = import(&node, Duration::from_millis(1_200), &entered);
    let watch = async {
        entered.notified().await;
        // Three times the lock's 300 ms: without keep-alive the lock would have expired.
        tokio::time::sleep(Duration::from_millis(900)).await;
        is_free(&other, "import").await
    };
    let (outcome, free_meanwhile) = timeout(LIMIT, async { tokio::join!(call, watch) })
        .await
        .unwrap();
    assert!(
        !free_meanwhile,
        "another node took the lock while the call ran"
    );
    let (steps, lost) = outcome.unwrap().executed().expect("the call ran");
    assert!(!lost, "the lock was reported lost while it was kept alive");
    assert!(steps >= 20, "the call stopped early, after {steps} steps");
    assert!(is_free(&other, "import").await, "the lock was not released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_cancels_the_signal_when_the_lock_is_lost() {
    let store = MemoryLockStore::new();
    let node = LockingTaskExecutor::new(store.node());
    let entered = Notify::new();
    let call = import(&node, Duration::from_secs(5), &entered);
    let steal = async {
        entered.notified().await;
        // What an operator's force-unlock does, or an expiry: the record no longer names this
        // acquisition, so the next extend answers false.
        assert!(store.remove_record("import"));
        let thief = LockingTaskExecutor::new(store.node());
        let config =
            LockConfiguration::new("import", Duration::from_secs(60), Duration::ZERO).unwrap();
        let (taken, release) = oneshot::channel::<()>();
        let hold = thief.execute(&config, async {
            let _ = taken;
            tokio::time::sleep(Duration::from_secs(2)).await;
        });
        drop(release);
        hold.await.unwrap().was_executed()
    };
    let (outcome, stolen) = timeout(LIMIT, async { tokio::join!(call, steal) })
        .await
        .unwrap();
    assert!(stolen, "the thief could not take the removed lock");
    let (steps, lost) = outcome.unwrap().executed().expect("the call ran");
    assert!(lost, "the call was never told its lock was lost");
    assert!(
        steps < 100,
        "the call ran to its end ({steps} steps) after losing its lock"
    );
}
