//! Schedulers as a fleet runs them, on every backend, in real time: three replicas started at
//! random moments run each fixed-rate period once between them, and a replica that shuts down
//! while work its job offloaded still runs keeps the lock, so no other replica starts the job
//! beside that work.
//!
//! Each backend's tests exist when its feature is on (`cargo test -p shedlock --all-features`)
//! and need its server, named by `SHEDLOCK_TEST_<BACKEND>_URL`.

#![cfg(feature = "scheduler")]
// The helpers serve the backends whose features are on.
#![cfg_attr(not(every_backend), allow(dead_code, unused_imports))]

mod support;

use shedlock_test_support::settings;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shedlock::AnyLockProvider;
use shedlock::scheduler::{Job, LockDefaults, RunContext, Schedule, Scheduler};
use support::{unique, with_scheme};
use tokio::time::{Instant, sleep, sleep_until, timeout};

async fn provider(url: &str) -> AnyLockProvider {
    AnyLockProvider::builder()
        .create_table_if_missing()
        .connect(url)
        .await
        .unwrap_or_else(|error| panic!("connecting to {url}: {error}"))
}

/// Milliseconds since the epoch.
fn epoch_ms(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH).unwrap().as_millis()
}

/// Three offsets in `0..period`, different on every run (and shown when the test fails).
fn random_offsets(period: Duration) -> [Duration; 3] {
    let mut state = u64::from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos(),
    ) ^ u64::from(std::process::id()).rotate_left(32)
        | 1;
    let mut next = || {
        // xorshift64
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        Duration::from_millis(state % u64::try_from(period.as_millis()).unwrap())
    };
    let mut offsets = [next(), next(), next()];
    offsets.sort();
    offsets
}

/// Three replicas on `url`, started at random offsets within one `period` of each other, each
/// running one fixed-rate job with `lock_at_least_for` half the period: every grid period
/// while all three ran is run exactly once, and no period twice.
async fn three_replicas_run_each_period_once(url: &str, period: Duration, periods: u32) {
    let lock = unique("fleet");
    let offsets = random_offsets(period);
    // Runs by grid instant (ms since the epoch): which replicas ran it.
    let runs: Arc<Mutex<BTreeMap<u128, Vec<usize>>>> = Arc::default();
    let start = Instant::now();
    let mut replicas = Vec::new();
    for (replica, offset) in offsets.iter().enumerate() {
        sleep_until(start + *offset).await;
        let defaults = LockDefaults::new(Duration::from_secs(30), period / 2).unwrap();
        let mut scheduler = Scheduler::new(provider(url).await, defaults);
        let runs = runs.clone();
        scheduler
            .add(
                Job::new(
                    "cleanup",
                    Schedule::fixed_rate(period),
                    move |run: RunContext| {
                        let runs = runs.clone();
                        async move {
                            let grid = epoch_ms(run.tick().time.into());
                            runs.lock().unwrap().entry(grid).or_default().push(replica);
                        }
                    },
                )
                .lock_name(lock.clone()),
            )
            .unwrap();
        replicas.push(scheduler);
    }
    // All three are up from here; count the periods from the next grid instant on.
    let all_up = epoch_ms(SystemTime::now());
    sleep(period * periods).await;
    let stopping = epoch_ms(SystemTime::now());
    for scheduler in replicas {
        timeout(
            Duration::from_secs(30),
            scheduler.shutdown(Duration::from_secs(10)),
        )
        .await
        .expect("a replica did not shut down");
    }
    let runs = runs.lock().unwrap().clone();
    let period_ms = period.as_millis();
    let shown = format!("replicas started at offsets {offsets:?}; runs by grid instant: {runs:?}");
    for (instant, ran_on) in &runs {
        assert_eq!(instant % period_ms, 0, "a tick off the grid: {shown}");
        assert_eq!(
            ran_on.len(),
            1,
            "period {instant} ran more than once: {shown}"
        );
    }
    let first = all_up.div_ceil(period_ms) * period_ms;
    let mut counted = 0;
    let mut instant = first;
    // The last full period before shutdown began, with a period's margin for the run itself.
    while instant + period_ms < stopping {
        assert!(
            runs.contains_key(&instant),
            "period {instant} did not run: {shown}"
        );
        instant += period_ms;
        counted += 1;
    }
    assert!(
        counted + 2 >= u128::from(periods),
        "only {counted} periods counted: {shown}"
    );
}

/// A replica whose job handed its work to `spawn_blocking` shuts down with a limit shorter
/// than that work: the run is stopped, its lock kept until `lock_at_most_for`, and another
/// replica runs the job only after the work ended.
async fn a_stopped_run_keeps_its_lock_while_its_offloaded_work_runs(url: &str, at_most: Duration) {
    let lock = unique("offload");
    let work_for = at_most / 2;
    let start = Instant::now();
    // When replica A's offloaded work started and ended, and when replica B's runs started.
    let work: Arc<Mutex<(Option<Instant>, Option<Instant>)>> = Arc::default();
    let b_runs: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let defaults = LockDefaults::new(at_most, Duration::ZERO).unwrap();

    let mut a = Scheduler::new(provider(url).await, defaults);
    let recorded = work.clone();
    a.add(
        Job::new(
            "offloads",
            Schedule::fixed_rate_per_node(Duration::from_millis(100)),
            move |_| {
                let recorded = recorded.clone();
                async move {
                    let blocking = tokio::task::spawn_blocking(move || {
                        recorded.lock().unwrap().0 = Some(Instant::now());
                        std::thread::sleep(work_for);
                        recorded.lock().unwrap().1 = Some(Instant::now());
                    });
                    let _ = blocking.await;
                }
            },
        )
        .lock_name(lock.clone()),
    )
    .unwrap();
    timeout(Duration::from_secs(10), async {
        while work.lock().unwrap().0.is_none() {
            sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("replica A's job never started");

    let mut b = Scheduler::new(provider(url).await, defaults);
    let recorded = b_runs.clone();
    b.add(
        Job::new(
            "offloads",
            Schedule::fixed_rate_per_node(Duration::from_millis(100)),
            move |_| {
                let recorded = recorded.clone();
                async move { recorded.lock().unwrap().push(Instant::now()) }
            },
        )
        .lock_name(lock.clone()),
    )
    .unwrap();
    sleep(Duration::from_millis(200)).await;
    let report = a.shutdown(Duration::from_millis(200)).await;
    assert_eq!(
        report.stopped,
        ["offloads"],
        "replica A's run was not stopped"
    );
    // B gets the lock once A's frees itself: lock_at_most_for after A took it (etcd's leases
    // may add up to 2 s).
    let deadline = start + at_most + Duration::from_secs(4);
    timeout(deadline - Instant::now() + Duration::from_secs(5), async {
        while b_runs.lock().unwrap().is_empty() {
            sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("replica B never ran the job after A's lock expired");
    b.shutdown(Duration::from_secs(10)).await;
    let (started, ended) = *work.lock().unwrap();
    let ended = ended.expect("replica A's offloaded work did not finish");
    let first_b = b_runs.lock().unwrap()[0];
    assert!(
        first_b >= ended,
        "replica B ran at {:?} while replica A's offloaded work (from {:?} to {:?}) still ran",
        first_b - start,
        started.map(|at| at - start),
        ended - start
    );
}

#[cfg(feature = "memory")]
mod memory {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_replicas_run_each_fixed_rate_period_once() {
        let url = format!("memory://{}", unique("fleet"));
        three_replicas_run_each_period_once(&url, Duration::from_secs(1), 8).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_run_keeps_its_lock() {
        let url = format!("memory://{}", unique("offload"));
        a_stopped_run_keeps_its_lock_while_its_offloaded_work_runs(&url, Duration::from_secs(3))
            .await;
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;

    fn url() -> String {
        let dir = std::env::temp_dir().join(unique("shedlock-fleet"));
        std::fs::create_dir_all(&dir).unwrap();
        format!("sqlite://{}?mode=rwc", dir.join("locks.db").display())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_replicas_run_each_fixed_rate_period_once() {
        three_replicas_run_each_period_once(&url(), Duration::from_secs(1), 8).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stopped_run_keeps_its_lock() {
        a_stopped_run_keeps_its_lock_while_its_offloaded_work_runs(&url(), Duration::from_secs(3))
            .await;
    }
}

/// A module of the two tests for a backend whose URL comes from `$var` (passed through `$url`).
macro_rules! server_backend {
    ($feature:literal, $module:ident, $url:expr, $period:expr, $at_most:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn three_replicas_run_each_fixed_rate_period_once() {
                three_replicas_run_each_period_once(&$url, $period, 8).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_stopped_run_keeps_its_lock() {
                a_stopped_run_keeps_its_lock_while_its_offloaded_work_runs(&$url, $at_most).await;
            }
        }
    };
}

server_backend!(
    "postgres",
    postgres,
    settings::POSTGRES.value(),
    Duration::from_secs(1),
    Duration::from_secs(3)
);
server_backend!(
    "mysql",
    mysql,
    settings::MYSQL.value(),
    Duration::from_secs(1),
    Duration::from_secs(3)
);
server_backend!(
    "redis",
    redis,
    settings::REDIS.value(),
    Duration::from_secs(1),
    Duration::from_secs(3)
);
// etcd's leases count whole seconds and may hold a lock up to 2 s longer than asked, so its
// period leaves room for that after lock_at_least_for.
server_backend!(
    "etcd",
    etcd,
    with_scheme("etcd", &settings::ETCD.value()),
    Duration::from_secs(6),
    Duration::from_secs(4)
);
server_backend!(
    "mongo",
    mongo,
    format!(
        "{}/shedlock_fleet",
        settings::MONGO.value().trim_end_matches('/')
    ),
    Duration::from_secs(1),
    Duration::from_secs(3)
);
server_backend!(
    "zookeeper",
    zookeeper,
    format!("zk://{}", settings::ZOOKEEPER.value()),
    Duration::from_secs(1),
    Duration::from_secs(3)
);
