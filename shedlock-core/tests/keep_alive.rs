//! Keep-alive: while a task runs, its lock is extended every third of `lock_at_most_for`, and the
//! task is told (its `CancellationToken` is cancelled) once the lock is lost.
//!
//! Most tests run on tokio's paused clock, with a store whose clock follows it, so every extend
//! happens at an exact virtual time and locks expire in that same time. A storage wrapper answers
//! extends from a script, to inject backend errors.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, CancellationToken, Capabilities, Clock, ErrorKind, LockConfiguration, LockError,
    LockProvider, LockingTaskExecutor, Operation, TaskOutcome,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome, StorageBasedLockProvider},
};
use shedlock_memory::{MemoryLockProvider, MemoryLockStore};
use tokio::time::{Instant, sleep};

const SECOND: Duration = Duration::from_secs(1);
/// `lock_at_most_for` of the scripted tests: keep-alive extends every second.
const AT_MOST: Duration = Duration::from_secs(3);
/// Keep-alive extends every third of `AT_MOST`.
const INTERVAL: Duration = Duration::from_secs(1);
/// How long a task runs unless it is told the lock is lost: a quarter second past the tenth
/// extend, so that no two things happen at the same virtual instant.
const TASK: Duration = Duration::from_millis(10_250);

fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

async fn runs(executor: &LockingTaskExecutor, config: &LockConfiguration) -> bool {
    executor
        .execute(config, async {})
        .await
        .unwrap()
        .was_executed()
}

/// Fails the test instead of hanging it. Under paused time the limit is virtual, so a stuck
/// test fails at once; it is longer than any scenario here.
async fn bounded<F: Future>(test: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(20), test)
        .await
        .expect("the test did not finish within 20 s")
}

/// Wall-clock time that moves with tokio's clock: paused in these tests, so the store's locks
/// expire in the same virtual time the executor sleeps in.
#[derive(Debug)]
struct TokioClock {
    origin_wall: SystemTime,
    origin: Instant,
}

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        self.origin_wall + self.origin.elapsed()
    }
}

/// What the scripted storage answers to one extend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answer {
    /// Pass the extend on to the store (normally `Ok(true)`).
    Store,
    /// A backend error, the store untouched.
    Fail,
    /// `Ok(false)`, as if the lock had expired, the store untouched.
    Lost,
    /// No answer ever: the provider's operation timeout (5 s) turns it into an error.
    Hang,
}

/// The answers to give, in order, then `then` forever.
#[derive(Debug)]
struct Script {
    answers: VecDeque<Answer>,
    then: Answer,
}

/// What one extend returned, in a form tests can compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Extended {
    Yes,
    No,
    Failed,
}

/// Everything the scripted storage saw, at virtual times since the test started.
#[derive(Debug, Default)]
struct Log {
    extends: Vec<(Duration, Extended)>,
    unlocks: Vec<(Duration, bool)>,
}

/// A [`MemoryLockStore`] whose extends follow a script; everything else is passed on.
#[derive(Debug, Clone)]
struct ScriptedStorage {
    inner: MemoryLockStore,
    origin: Instant,
    /// Virtual time each acquisition attempt takes before it reaches the store.
    acquire_latency: Duration,
    script: Arc<Mutex<Script>>,
    log: Arc<Mutex<Log>>,
}

impl ScriptedStorage {
    fn next_answer(&self) -> Answer {
        let mut script = self.script.lock().unwrap();
        script.answers.pop_front().unwrap_or(script.then)
    }

    async fn acquire_delay(&self) {
        if !self.acquire_latency.is_zero() {
            sleep(self.acquire_latency).await;
        }
    }
}

#[async_trait]
impl LockStorage for ScriptedStorage {
    fn provider_name(&self) -> &'static str {
        "scripted"
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        self.inner.check_name(name)
    }

    fn update_creates_missing_record(&self) -> bool {
        self.inner.update_creates_missing_record()
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.acquire_delay().await;
        self.inner.insert_record(record).await
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.acquire_delay().await;
        self.inner.update_record(record).await
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let sent = self.origin.elapsed();
        let result = match self.next_answer() {
            Answer::Store => self.inner.extend(held, lock_at_most_for, now).await,
            Answer::Fail => Err(LockError::backend_message(
                ErrorKind::OutcomeUnknown,
                "scripted",
                Operation::Extend,
                &held.name,
                "injected failure",
            )),
            Answer::Lost => Ok(false),
            Answer::Hang => std::future::pending().await,
        };
        let extended = match result {
            Ok(true) => Extended::Yes,
            Ok(false) => Extended::No,
            Err(_) => Extended::Failed,
        };
        self.log.lock().unwrap().extends.push((sent, extended));
        result
    }

    async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
        let released = self.inner.unlock(held, now).await?;
        let at = self.origin.elapsed();
        self.log.lock().unwrap().unlocks.push((at, released));
        Ok(released)
    }
}

/// Node `a` runs tasks through the scripted storage; node `b` shares its store, unscripted.
struct Scene {
    origin: Instant,
    log: Arc<Mutex<Log>>,
    a: LockingTaskExecutor,
    b: MemoryLockProvider,
    config: LockConfiguration,
}

impl Scene {
    /// Must be called first thing in a paused-time test: the origin is virtual time zero.
    fn new(answers: impl IntoIterator<Item = Answer>, then: Answer) -> Self {
        Self::with_acquire_latency(answers, then, Duration::ZERO)
    }

    fn with_acquire_latency(
        answers: impl IntoIterator<Item = Answer>,
        then: Answer,
        acquire_latency: Duration,
    ) -> Self {
        let origin = Instant::now();
        let clock = TokioClock {
            origin_wall: SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
            origin,
        };
        let store = MemoryLockStore::with_clock(Arc::new(clock));
        let log = Arc::new(Mutex::new(Log::default()));
        let scripted = ScriptedStorage {
            inner: store.clone(),
            origin,
            acquire_latency,
            script: Arc::new(Mutex::new(Script {
                answers: answers.into_iter().collect(),
                then,
            })),
            log: log.clone(),
        };
        Self {
            origin,
            a: LockingTaskExecutor::new(StorageBasedLockProvider::new(scripted)),
            b: store.node(),
            log,
            config: config("job", AT_MOST, Duration::ZERO),
        }
    }

    /// Runs a [`TASK`]-long task on `a` with keep-alive; returns when (since the scene began)
    /// the task was told the lock is lost, or `None` if it ran to its end untold.
    async fn told_at(&self) -> Option<Duration> {
        let outcome = self
            .a
            .execute_with_keep_alive(&self.config, async |lost: CancellationToken| {
                tokio::select! {
                    _ = lost.cancelled() => Some(self.origin.elapsed()),
                    _ = sleep(TASK) => None,
                }
            })
            .await
            .unwrap();
        outcome.executed().expect("nobody else held the lock")
    }

    /// Like [`told_at`](Self::told_at), and node `b` tries to take the lock every second at
    /// x.5 s while the task runs; returns also what each try got.
    async fn told_at_probed(&self) -> (Option<Duration>, Vec<bool>) {
        let outcome = self
            .a
            .execute_with_keep_alive(&self.config, async |lost: CancellationToken| {
                let mut b_acquired = Vec::new();
                let probes = async {
                    sleep(SECOND / 2).await;
                    loop {
                        let acquisition = self.b.try_lock(&self.config).await.unwrap();
                        b_acquired.push(acquisition.is_acquired());
                        sleep(SECOND).await;
                    }
                };
                let told = tokio::select! {
                    _ = lost.cancelled() => Some(self.origin.elapsed()),
                    _ = sleep(TASK) => None,
                    never = probes => match never {},
                };
                (told, b_acquired)
            })
            .await
            .unwrap();
        outcome.executed().expect("nobody else held the lock")
    }

    fn extends(&self) -> Vec<(Duration, Extended)> {
        self.log.lock().unwrap().extends.clone()
    }

    fn unlocks(&self) -> Vec<(Duration, bool)> {
        self.log.lock().unwrap().unlocks.clone()
    }
}

use Answer::{Fail, Hang, Lost, Store};
use Extended::{Failed, No, Yes};

#[tokio::test(start_paused = true)]
async fn failing_extends_tell_the_task_one_interval_before_the_known_expiry() {
    let scene = Scene::new([], Fail);
    bounded(async {
        // Held until 3 s at least. At 1 s a retry at 2 s is still in time (1 + 1 < 3); at 2 s
        // the next retry would come at 3 s, when the lock may be gone (2 + 1 < 3 is false).
        assert_eq!(scene.told_at().await, Some(2 * SECOND));
        assert_eq!(
            scene.extends(),
            [(SECOND, Failed), (2 * SECOND, Failed)],
            "retried once, then stopped trying"
        );
        assert_eq!(
            scene.unlocks(),
            [(2 * SECOND, true)],
            "the task was told while the lock was still held, and it was released"
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn one_failed_extend_then_success_keeps_the_lock() {
    let scene = Scene::new([Fail], Store);
    bounded(async {
        let (told, b_acquired) = scene.told_at_probed().await;
        assert_eq!(told, None, "the task ran to its end untold");
        assert_eq!(
            b_acquired, [false; 10],
            "another node was refused at 0.5 s, 1.5 s, ..., 9.5 s"
        );
        let mut expected = vec![(SECOND, Failed)];
        expected.extend((2..=10).map(|s| (s * SECOND, Yes)));
        assert_eq!(scene.extends(), expected);
        assert_eq!(scene.unlocks(), [(TASK, true)], "still held at release");
        assert!(
            scene.b.try_lock(&scene.config).await.unwrap().is_acquired(),
            "released at the end"
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn every_other_extend_failing_keeps_the_lock() {
    // Each success moves the known expiry to its send time + 3 s, so each failure after it
    // still has time for one retry.
    let scene = Scene::new([Fail, Store].repeat(5), Fail);
    bounded(async {
        let (told, b_acquired) = scene.told_at_probed().await;
        assert_eq!(told, None, "the task ran to its end untold");
        assert_eq!(b_acquired, [false; 10], "another node was always refused");
        let expected: Vec<_> = (1..=10)
            .map(|s| (s * SECOND, if s % 2 == 1 { Failed } else { Yes }))
            .collect();
        assert_eq!(scene.extends(), expected);
        assert_eq!(scene.unlocks(), [(TASK, true)]);
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn failures_after_successes_count_from_the_last_successful_extend() {
    let scene = Scene::new([Store, Store], Fail);
    bounded(async {
        // The extend sent at 2 s holds the lock until 5 s: retries at 3 s (3 + 1 < 5) and 4 s,
        // which is the last (4 + 1 < 5 is false).
        assert_eq!(scene.told_at().await, Some(4 * SECOND));
        assert_eq!(
            scene.extends(),
            [
                (SECOND, Yes),
                (2 * SECOND, Yes),
                (3 * SECOND, Failed),
                (4 * SECOND, Failed),
            ]
        );
        assert_eq!(
            scene.unlocks(),
            [(4 * SECOND, true)],
            "told before the lock expired at 5 s"
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_extend_finding_the_lock_expired_tells_the_task_at_once() {
    let scene = Scene::new([Lost], Store);
    bounded(async {
        assert_eq!(scene.told_at().await, Some(SECOND));
        assert_eq!(
            scene.extends(),
            [(SECOND, No)],
            "no extend after the lock was lost"
        );
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn the_known_expiry_counts_from_before_a_slow_acquisition() {
    // The acquisition takes 1 s: the lock may have been written at 0 s, so it is only known to
    // be held until 3 s. Keep-alive starts at 1 s, extends at 2 s, and 2 + 1 < 3 is false.
    let scene = Scene::with_acquire_latency([], Fail, SECOND);
    bounded(async {
        assert_eq!(scene.told_at().await, Some(2 * SECOND));
        assert_eq!(scene.extends(), [(2 * SECOND, Failed)]);
    })
    .await;
}

/// An extend that never answers (the provider's operation timeout, 5 s, is longer than the
/// lock) is given until half an interval before the lock's last known expiry.
#[tokio::test(start_paused = true)]
async fn a_hanging_extend_tells_the_task_before_the_known_expiry() {
    let scene = Scene::new([], Hang);
    bounded(async {
        let told = scene.told_at().await.expect("the task was told");
        assert_eq!(told, AT_MOST - INTERVAL / 2, "3 s lock, extends every 1 s");
    })
    .await;
}

/// Real time: the in-memory store reads its monotonic clock here.
mod real_time {
    use super::*;

    #[tokio::test]
    async fn keeps_a_long_task_locked_past_at_most() {
        bounded(async {
            let store = MemoryLockStore::new();
            let (a, b) = (
                LockingTaskExecutor::new(store.node()),
                LockingTaskExecutor::new(store.node()),
            );
            let config = config("long-job", Duration::from_millis(600), Duration::ZERO);
            let outcome = a
                .execute_with_keep_alive(&config, async |lost| {
                    let mut others_ran = 0;
                    for _ in 0..15 {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        others_ran += usize::from(runs(&b, &config).await);
                    }
                    (others_ran, lost.is_cancelled())
                })
                .await
                .unwrap();
            assert_eq!(
                outcome,
                TaskOutcome::Executed((0, false)),
                "1.5 s task, 0.6 s at-most"
            );
            assert!(runs(&b, &config).await, "released at the end");
        })
        .await;
    }

    #[tokio::test]
    async fn tells_the_task_when_the_lock_is_lost() {
        bounded(async {
            let store = MemoryLockStore::new();
            let a = LockingTaskExecutor::new(store.node());
            let config = config("lost-job", Duration::from_millis(300), Duration::ZERO);
            let outcome = a
                .execute_with_keep_alive(&config, async |lost| {
                    // Someone takes the lock over behind our back (an operator, a clock jump).
                    let now = SystemTime::now();
                    store.put_record("lost-job", now + 60 * SECOND, now, "intruder");
                    tokio::time::timeout(Duration::from_secs(5), lost.cancelled())
                        .await
                        .is_ok()
                })
                .await
                .unwrap();
            assert_eq!(
                outcome,
                TaskOutcome::Executed(true),
                "the task was signalled"
            );
            let holder = store.holder("lost-job").unwrap();
            assert_eq!(
                holder.locked_by.as_deref(),
                Some("intruder"),
                "release did not touch it"
            );
        })
        .await;
    }

    #[tokio::test]
    async fn refuses_a_provider_without_extend_before_taking_the_lock() {
        #[derive(Debug)]
        struct NoExtend(MemoryLockProvider);
        #[async_trait]
        impl LockProvider for NoExtend {
            async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
                self.0.try_lock(config).await
            }
            fn capabilities(&self) -> Capabilities {
                self.0.capabilities().with_extend(false)
            }
            fn provider_name(&self) -> &'static str {
                self.0.provider_name()
            }
        }
        bounded(async {
            let store = MemoryLockStore::new();
            let executor = LockingTaskExecutor::new(NoExtend(store.node()));
            let config = config("job", SECOND, Duration::ZERO);
            let error = executor
                .execute_with_keep_alive(&config, async |_| {})
                .await
                .unwrap_err();
            assert!(matches!(error, LockError::Unsupported { .. }), "{error}");
            assert!(store.holder("job").is_none(), "nothing was written");
        })
        .await;
    }
}
