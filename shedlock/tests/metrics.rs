//! What the facade adds to the executor's metrics (`shedlock-core/tests/metrics.rs`), read back
//! from a recording recorder: a real backend's failure by its kind, and a scheduler's ticks.

use std::time::Duration;

use shedlock::memory::MemoryLockStore;
use shedlock::metrics::{
    ACQUIRE_SECONDS, JOB_MISSED_TICKS, JOB_RUNS, LOCK_FAILURES, LOCKS_ACQUIRED, RUN_SECONDS,
};
use shedlock::scheduler::{Job, LockDefaults, RunOutcome, Schedule, Scheduler};
use shedlock::{AnyLockProvider, LockConfiguration, LockingTaskExecutor};
use shedlock_test_support::metrics_capture::{counter, counters_with, histogram, install};
use tokio::sync::mpsc;

fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

#[tokio::test]
async fn a_failed_attempt_is_counted_by_its_error_kind() {
    install();
    // Nothing listens on port 1: the attempt fails, and the task does not run.
    let provider = AnyLockProvider::builder()
        .operation_timeout(Duration::from_secs(5))
        .connect_lazy("postgres://postgres@127.0.0.1:1/test")
        .await
        .unwrap();
    let executor = LockingTaskExecutor::new(provider);
    let lock = "metrics-failed";
    let error = executor
        .execute(&config(lock), async { panic!("ran without its lock") })
        .await
        .unwrap_err();
    let kind = error.kind().as_str().replace(' ', "_");
    assert_eq!(kind, "unreachable", "{error}");

    assert_eq!(
        counters_with(LOCK_FAILURES, ("lock", lock)),
        [(
            vec![
                ("kind".to_owned(), kind),
                ("lock".to_owned(), lock.to_owned())
            ],
            1
        )]
    );
    assert_eq!(counter(LOCKS_ACQUIRED, &[("lock", lock)]), 0);
    let failed = histogram(ACQUIRE_SECONDS, &[("lock", lock), ("outcome", "failed")]);
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(histogram(RUN_SECONDS, &[("lock", lock)]).is_empty());
}

#[tokio::test]
async fn a_schedulers_ticks_are_counted_by_outcome_and_its_missed_ticks_by_number() {
    install();
    let defaults = LockDefaults::new(Duration::from_secs(60), Duration::ZERO).unwrap();
    let (reports, mut reported) = mpsc::unbounded_channel();
    let mut scheduler = Scheduler::builder(MemoryLockStore::new().node(), defaults)
        .on_run(move |report| {
            let _ = reports.send(report.clone());
        })
        .build();
    // Fails each run, and each run outlasts two of its 40 ms periods.
    scheduler
        .add(Job::new(
            "metrics-job",
            Schedule::fixed_rate_per_node(Duration::from_millis(40)),
            |_run| async {
                tokio::time::sleep(Duration::from_millis(100)).await;
                Err::<(), _>("the report's data is not there yet")
            },
        ))
        .unwrap();
    let (mut failed, mut missed) = (0, 0);
    while failed < 2 || missed == 0 {
        let report = tokio::time::timeout(Duration::from_secs(10), reported.recv())
            .await
            .expect("a report within 10 s")
            .unwrap();
        match report.outcome {
            RunOutcome::Failed { .. } => failed += 1,
            RunOutcome::Missed { ticks } => missed += ticks,
            other => panic!("{other:?}"),
        }
    }
    scheduler.shutdown(Duration::from_secs(5)).await;
    // Whatever came after the loop stopped reading is counted too.
    while let Ok(report) = reported.try_recv() {
        match report.outcome {
            RunOutcome::Failed { .. } => failed += 1,
            RunOutcome::Missed { ticks } => missed += ticks,
            other => panic!("{other:?}"),
        }
    }

    let job = ("job", "metrics-job");
    assert_eq!(counter(JOB_RUNS, &[job, ("outcome", "failed")]), failed);
    assert_eq!(counter(JOB_RUNS, &[job, ("outcome", "executed")]), 0);
    assert_eq!(counter(JOB_MISSED_TICKS, &[job]), missed);
    // The executor's metrics under the job's lock, named after the job.
    assert_eq!(counter(LOCKS_ACQUIRED, &[("lock", "metrics-job")]), failed);
}
