//! Three schedulers on one PostgreSQL server, each with its own provider and connection, as
//! three replicas of a service would be.

use shedlock_test_support::settings;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shedlock_postgres::PostgresLockProvider;
use shedlock_scheduler::{
    Job, LockDefaults, RunContext, RunOutcome, RunReport, Schedule, Scheduler,
};
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};

/// A name no other run of these tests uses, so runs can share a server.
fn unique(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{prefix}_{}_{nanos}", std::process::id())
}

async fn provider(table: &str, holder: &str) -> PostgresLockProvider {
    PostgresLockProvider::builder()
        .table_name(table)
        .create_table_if_missing()
        .holder(holder)
        .connect(settings::POSTGRES.value())
        .await
        .unwrap()
}

/// A second per tick, held at least half of it: a replica may tick up to half a period late
/// (or its acquire may be that slow) before a tick could run twice or not at all. CI runs this
/// beside the whole workspace's tests on two cores, where 300 ms ticks (150 ms of margin) failed
/// once.
const PERIOD: Duration = Duration::from_secs(1);
const TICKS: u64 = 9;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_run_each_tick_exactly_once_and_survive_panics() {
    let table = unique("sched");
    let job_name = "replicated-job";
    // Runs per tick number, across the three replicas.
    let runs: Arc<Mutex<BTreeMap<u64, Vec<usize>>>> = Arc::default();
    let (sender, mut reports) = mpsc::unbounded_channel::<(usize, RunReport)>();
    let mut replicas = Vec::new();
    for replica in 0..3 {
        let provider = provider(&table, &format!("replica-{replica}")).await;
        let sender = sender.clone();
        // Held at least half a period: a replica that ticks a few ms later skips the tick.
        let defaults = LockDefaults::new(Duration::from_secs(5), PERIOD / 2).unwrap();
        replicas.push(
            Scheduler::builder(provider, defaults)
                .on_run(move |report| {
                    let _ = sender.send((replica, report.clone()));
                })
                .build(),
        );
    }
    drop(sender);
    let first_tick = Instant::now() + Duration::from_millis(200);
    for (replica, scheduler) in replicas.iter_mut().enumerate() {
        let runs = runs.clone();
        // One grid from one shared first instant, so the replicas number their ticks alike.
        let schedule = Schedule::fixed_rate_per_node(PERIOD)
            .first_run_after(first_tick.saturating_duration_since(Instant::now()));
        scheduler
            .add(Job::new(job_name, schedule, move |run: RunContext| {
                let runs = runs.clone();
                async move {
                    let tick = run.tick().number;
                    runs.lock().unwrap().entry(tick).or_default().push(replica);
                    if tick % 3 == 2 {
                        panic!("tick {tick} fails on purpose");
                    }
                }
            }))
            .unwrap();
    }

    // Every replica reports every tick: wait until each has reported the last one.
    let mut by_replica: [Vec<RunReport>; 3] = Default::default();
    let collect = async {
        while by_replica
            .iter()
            .any(|seen| seen.iter().all(|r| r.tick.number < TICKS - 1))
        {
            let (replica, report) = reports.recv().await.expect("a replica stopped reporting");
            by_replica[replica].push(report);
        }
    };
    timeout(PERIOD * (TICKS as u32 + 10), collect)
        .await
        .expect("the replicas did not reach the last tick in time");
    for scheduler in replicas {
        let report = timeout(
            Duration::from_secs(10),
            scheduler.shutdown(Duration::from_secs(5)),
        )
        .await
        .unwrap();
        assert!(report.stopped.is_empty());
    }

    let runs = runs.lock().unwrap().clone();
    for tick in 0..TICKS {
        let ran_on = runs.get(&tick).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            ran_on.len(),
            1,
            "tick {tick} ran on replicas {ran_on:?}: {runs:?}"
        );
    }
    let mut panicked = 0;
    for (replica, seen) in by_replica.iter().enumerate() {
        // Each replica reported each tick once, in order, and went on after every panic.
        let ticks: Vec<u64> = seen.iter().map(|r| r.tick.number).collect();
        assert_eq!(
            ticks[..TICKS as usize],
            (0..TICKS).collect::<Vec<_>>(),
            "replica {replica}: {seen:#?}"
        );
        for report in &seen[..TICKS as usize] {
            match &report.outcome {
                RunOutcome::Executed => assert_ne!(report.tick.number % 3, 2),
                RunOutcome::Panicked { message } => {
                    assert_eq!(
                        *message,
                        format!("tick {} fails on purpose", report.tick.number)
                    );
                    panicked += 1;
                }
                // The SQL providers do not say who holds a refused lock (the memory tests
                // check the holder); should one ever say, it must be a replica.
                RunOutcome::Skipped { holder } => {
                    let holder = holder.as_ref().and_then(|h| h.locked_by.as_deref());
                    assert!(
                        holder.is_none_or(|h| h.starts_with("replica-")),
                        "replica {replica} skipped tick {}, held by {holder:?}",
                        report.tick.number
                    );
                }
                other => panic!("replica {replica}: unexpected {other:?}"),
            }
        }
    }
    assert_eq!(panicked, TICKS / 3);
    drop_table(&table).await;
}

/// A scheduler on `provider` (locks held at most 5 s), and the reports of its runs.
fn reporting(provider: PostgresLockProvider) -> (Scheduler, mpsc::UnboundedReceiver<RunReport>) {
    let (sender, reports) = mpsc::unbounded_channel();
    let defaults = LockDefaults::new(Duration::from_secs(5), Duration::ZERO).unwrap();
    let scheduler = Scheduler::builder(provider, defaults)
        .on_run(move |report| {
            let _ = sender.send(report.clone());
        })
        .build();
    (scheduler, reports)
}

async fn drop_table(table: &str) {
    let pool = sqlx::PgPool::connect(&settings::POSTGRES.value())
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
        .execute(&pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_run_whose_lock_outcome_is_unknown_does_not_run() {
    let table = unique("sched_gone");
    let provider = provider(&table, "replica").await;
    // The table disappears under the provider: every acquire now fails.
    drop_table(&table).await;
    let (mut scheduler, mut reports) = reporting(provider);
    let ran = Arc::new(Mutex::new(false));
    let flag = ran.clone();
    scheduler
        .add(Job::new(
            "needs-its-lock",
            Schedule::fixed_rate_per_node(Duration::from_secs(60)),
            move |_| {
                let flag = flag.clone();
                async move { *flag.lock().unwrap() = true }
            },
        ))
        .unwrap();
    let report = timeout(Duration::from_secs(10), reports.recv())
        .await
        .unwrap()
        .unwrap();
    let RunOutcome::LockFailed { kind, error } = &report.outcome else {
        panic!("expected a failed acquire, got {report:?}");
    };
    // The table was dropped under the provider: a schema to fix, not a server to wait for.
    assert_eq!(*kind, shedlock_core::ErrorKind::Configuration, "{error}");
    assert!(
        error.contains("acquire of lock \"needs-its-lock\""),
        "{error}"
    );
    assert!(!*ran.lock().unwrap());
    assert!(
        scheduler
            .shutdown(Duration::from_secs(1))
            .await
            .stopped
            .is_empty()
    );
}

/// Everything a `tracing_subscriber::fmt` subscriber writes, as an operator's log shows it.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Written {
    type Writer = Written;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_tick_whose_backend_is_down_is_logged_once_naming_the_job_the_tick_and_each_cause_once() {
    let written = Written::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(written.clone())
        .with_ansi(false)
        .finish();
    let _default = tracing::subscriber::set_default(subscriber);
    // A second dispatcher while this one is the thread's default: with one alone, tracing
    // caches for good the answer of whichever thread first reaches a log statement, and the
    // tests beside this one run with none, answering "never".
    let _beside = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    // Nothing listens on port 1: every connection is refused.
    let provider = PostgresLockProvider::builder()
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .await
        .unwrap();
    let (mut scheduler, mut reports) = reporting(provider);
    scheduler
        .add(Job::new(
            "nightly-report",
            Schedule::cron("*/1 * * * * *", chrono_tz::UTC).unwrap(),
            |_| async {},
        ))
        .unwrap();
    let report = timeout(Duration::from_secs(10), reports.recv())
        .await
        .unwrap()
        .unwrap();
    scheduler.shutdown(Duration::from_secs(1)).await;
    assert!(
        matches!(report.outcome, RunOutcome::LockFailed { .. }),
        "{report:?}"
    );
    let logged = String::from_utf8(written.0.lock().unwrap().clone()).unwrap();
    let warnings: Vec<&str> = logged.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(
        warnings.len(),
        1,
        "one event for one failed tick:\n{logged}"
    );
    let warning = warnings[0];
    // The tick by its cron instant, the same on every replica, not a per-node counter.
    let tick = format!(
        "tick={}",
        report
            .tick
            .time
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
    );
    for part in [
        "job{job=nightly-report ",
        &tick,
        "provider=\"postgres\"",
        "lock=\"nightly-report\"",
        "not run: unreachable",
    ] {
        assert!(warning.contains(part), "{part:?} missing from: {warning}");
    }
    // The error and each cause, said once each.
    let refused = warning.matches("Connection refused").count();
    assert_eq!(refused, 1, "a cause said {refused} times: {warning}");
}
