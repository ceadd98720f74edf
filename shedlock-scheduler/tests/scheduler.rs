//! The scheduler on the in-memory provider, in tokio's paused time: tick instants are exact.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use shedlock_core::{
    Acquisition, Capabilities, Clock, LockConfiguration, LockError, LockProvider,
    LockingTaskExecutor, TaskOutcome, raw::async_trait,
};
use shedlock_memory::{MemoryLockProvider, MemoryLockStore};
use shedlock_scheduler::{
    Job, LockDefaults, MissedTicks, RunContext, RunOutcome, RunReport, Schedule, Scheduler,
    SchedulerError, Tz,
};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

const MS: Duration = Duration::from_millis(1);
/// Every wait in these tests is bounded by this much (virtual) time.
const LIMIT: Duration = Duration::from_secs(60);

/// A wall clock that follows tokio's (paused) clock, and can be jumped forward to expire locks.
#[derive(Debug)]
struct TokioClock {
    start_wall: SystemTime,
    start: Instant,
    jumped: Mutex<Duration>,
}

impl TokioClock {
    fn at(wall: &str) -> Arc<Self> {
        let wall: DateTime<Utc> = wall.parse().unwrap();
        Arc::new(Self {
            start_wall: wall.into(),
            start: Instant::now(),
            jumped: Mutex::new(Duration::ZERO),
        })
    }

    fn jump(&self, by: Duration) {
        *self.jumped.lock().unwrap() += by;
    }
}

impl Clock for TokioClock {
    fn now(&self) -> SystemTime {
        self.start_wall + self.start.elapsed() + *self.jumped.lock().unwrap()
    }
}

/// A store whose expiry follows tokio's clock, so `lock_at_least_for` passes in paused time.
fn store(clock: &Arc<TokioClock>) -> MemoryLockStore {
    MemoryLockStore::with_clock(clock.clone())
}

fn defaults(at_most_ms: u64, at_least_ms: u64) -> LockDefaults {
    LockDefaults::new(
        Duration::from_millis(at_most_ms),
        Duration::from_millis(at_least_ms),
    )
    .unwrap()
}

/// A scheduler whose reports arrive on the returned channel.
fn observed(
    provider: impl LockProvider + 'static,
    defaults: LockDefaults,
    clock: &Arc<TokioClock>,
) -> (Scheduler, mpsc::UnboundedReceiver<RunReport>) {
    let (sender, reports) = mpsc::unbounded_channel();
    let scheduler = Scheduler::builder(provider, defaults)
        .clock(clock.clone())
        .on_run(move |report| {
            let _ = sender.send(report.clone());
        })
        .build();
    (scheduler, reports)
}

async fn next_report(reports: &mut mpsc::UnboundedReceiver<RunReport>) -> RunReport {
    next_report_within(reports, LIMIT).await
}

async fn next_report_within(
    reports: &mut mpsc::UnboundedReceiver<RunReport>,
    limit: Duration,
) -> RunReport {
    timeout(limit, reports.recv())
        .await
        .expect("no report within the limit")
        .expect("the scheduler stopped reporting")
}

async fn reports_of(
    reports: &mut mpsc::UnboundedReceiver<RunReport>,
    count: usize,
) -> Vec<RunReport> {
    let mut collected = Vec::new();
    while collected.len() < count {
        collected.push(next_report(reports).await);
    }
    collected
}

/// Milliseconds since `start` for each report's due instant.
fn due_ms(reports: &[RunReport], start: Instant) -> Vec<u128> {
    reports
        .iter()
        .map(|report| report.tick.due.duration_since(start).as_millis())
        .collect()
}

/// A recorder of the instants (ms since `start`) at which a job's runs began.
#[derive(Clone)]
struct Starts(Arc<Mutex<Vec<u128>>>, Instant);

impl Starts {
    fn new() -> Self {
        Self(Arc::default(), Instant::now())
    }
    fn record(&self) {
        self.0.lock().unwrap().push(self.1.elapsed().as_millis());
    }
    fn get(&self) -> Vec<u128> {
        self.0.lock().unwrap().clone()
    }
}

#[tokio::test(start_paused = true)]
async fn a_fixed_rate_runs_at_exact_instants() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let recorder = starts.clone();
    scheduler
        .add(Job::new(
            "rate",
            Schedule::fixed_rate(100 * MS),
            move |_| {
                let recorder = recorder.clone();
                async move { recorder.record() }
            },
        ))
        .unwrap();
    let seen = reports_of(&mut reports, 4).await;
    assert_eq!(starts.get(), [0, 100, 200, 300]);
    assert_eq!(due_ms(&seen, starts.1), [0, 100, 200, 300]);
    assert!(seen.iter().all(|r| r.outcome == RunOutcome::Executed));
    assert_eq!(
        seen.iter().map(|r| r.tick.number).collect::<Vec<_>>(),
        [0, 1, 2, 3]
    );
    assert_eq!(seen[0].lock_name.as_deref(), Some("rate"));
    assert_eq!(seen[0].job, "rate");
    // The wall time of a fixed-rate tick is the scheduler's clock at that instant.
    assert_eq!(
        seen[3].tick.time,
        "2026-01-01T00:00:00.300Z".parse::<DateTime<Utc>>().unwrap()
    );
}

#[tokio::test(start_paused = true)]
async fn a_fixed_rate_misses_the_ticks_a_long_run_overlaps_and_keeps_its_grid() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let recorder = starts.clone();
    let running = Arc::new(AtomicU32::new(0));
    let overlapped = Arc::new(AtomicBool::new(false));
    let (running_in, overlapped_in) = (running.clone(), overlapped.clone());
    scheduler
        .add(Job::new(
            "slow-first",
            Schedule::fixed_rate(100 * MS),
            move |run: RunContext| {
                let (recorder, running, overlapped) =
                    (recorder.clone(), running_in.clone(), overlapped_in.clone());
                async move {
                    recorder.record();
                    if running.fetch_add(1, Ordering::SeqCst) > 0 {
                        overlapped.store(true, Ordering::SeqCst);
                    }
                    if run.tick().number == 0 {
                        sleep(250 * MS).await;
                    }
                    running.fetch_sub(1, Ordering::SeqCst);
                }
            },
        ))
        .unwrap();
    let seen = reports_of(&mut reports, 4).await;
    // Run 0 took 250 ms: ticks 1 (100 ms) and 2 (200 ms) are missed, tick 3 runs at 300 ms.
    assert_eq!(seen[0].outcome, RunOutcome::Executed);
    assert_eq!(seen[1].outcome, RunOutcome::Missed { ticks: 2 });
    assert_eq!(seen[1].tick.number, 3);
    assert_eq!(seen[1].lock_name, None);
    assert_eq!(seen[2].outcome, RunOutcome::Executed);
    assert_eq!((seen[2].tick.number, seen[3].tick.number), (3, 4));
    assert_eq!(starts.get(), [0, 300, 400]);
    assert!(!overlapped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_fixed_delay_counts_from_the_end_of_each_run_after_the_initial_delay() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let recorder = starts.clone();
    scheduler
        .add(Job::new(
            "delay",
            Schedule::fixed_delay(100 * MS).first_run_after(30 * MS),
            move |_| {
                let recorder = recorder.clone();
                async move {
                    recorder.record();
                    sleep(50 * MS).await;
                }
            },
        ))
        .unwrap();
    let seen = reports_of(&mut reports, 3).await;
    assert_eq!(starts.get(), [30, 180, 330]);
    assert!(seen.iter().all(|r| r.outcome == RunOutcome::Executed));
    assert_eq!(
        seen.iter().map(|r| r.tick.number).collect::<Vec<_>>(),
        [0, 1, 2]
    );
}

#[tokio::test(start_paused = true)]
async fn cron_ticks_on_its_seconds_field() {
    let clock = TokioClock::at("2026-01-01T00:00:00.500Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let recorder = starts.clone();
    scheduler
        .add(Job::new(
            "every-two-seconds",
            Schedule::cron("*/2 * * * * *", Tz::UTC).unwrap(),
            move |_| {
                let recorder = recorder.clone();
                async move { recorder.record() }
            },
        ))
        .unwrap();
    let seen = reports_of(&mut reports, 3).await;
    assert_eq!(starts.get(), [1500, 3500, 5500]);
    let times: Vec<String> = seen.iter().map(|r| r.tick.time.to_rfc3339()).collect();
    assert_eq!(
        times,
        [
            "2026-01-01T00:00:02+00:00",
            "2026-01-01T00:00:04+00:00",
            "2026-01-01T00:00:06+00:00"
        ]
    );
}

/// The UTC instants of a daily 02:30 Berlin job over `days` days from `start`.
async fn berlin_half_past_two(start: &str, days: usize) -> Vec<String> {
    let clock = TokioClock::at(start);
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    scheduler
        .add(Job::new(
            "nightly",
            Schedule::cron("0 30 2 * * *", Tz::Europe__Berlin).unwrap(),
            |_| async {},
        ))
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..days {
        seen.push(next_report_within(&mut reports, Duration::from_secs(2 * 24 * 3600)).await);
    }
    assert!(seen.iter().all(|r| r.outcome == RunOutcome::Executed));
    // Each tick ran when the wall clock showed its time.
    for report in &seen {
        let ran_at =
            DateTime::<Utc>::from(clock.start_wall + report.tick.due.duration_since(clock.start));
        assert_eq!(ran_at, report.tick.time);
    }
    seen.iter().map(|r| r.tick.time.to_rfc3339()).collect()
}

#[tokio::test(start_paused = true)]
async fn cron_in_a_time_zone_runs_a_time_skipped_by_spring_forward_after_the_gap() {
    // 2026-03-29 02:00 CET jumps to 03:00 CEST: 02:30 does not exist that day.
    assert_eq!(
        berlin_half_past_two("2026-03-28T00:00:00Z", 3).await,
        [
            "2026-03-28T01:30:00+00:00", // 02:30 CET
            "2026-03-29T01:00:00+00:00", // 03:00 CEST, the first instant after the gap
            "2026-03-30T00:30:00+00:00", // 02:30 CEST
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn cron_in_a_time_zone_runs_a_time_repeated_by_fall_back_once() {
    // 2026-10-25 03:00 CEST falls back to 02:00 CET: 02:30 happens twice that day.
    assert_eq!(
        berlin_half_past_two("2026-10-24T00:00:00Z", 3).await,
        [
            "2026-10-24T00:30:00+00:00", // 02:30 CEST
            "2026-10-25T00:30:00+00:00", // the first 02:30 (CEST) only
            "2026-10-26T01:30:00+00:00", // 02:30 CET
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn an_hourly_cron_keeps_its_pace_through_fall_back() {
    let clock = TokioClock::at("2026-10-24T23:30:00Z"); // 01:30 CEST
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    scheduler
        .add(Job::new(
            "hourly",
            Schedule::cron("0 0 * * * *", Tz::Europe__Berlin).unwrap(),
            |_| async {},
        ))
        .unwrap();
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(next_report_within(&mut reports, Duration::from_secs(2 * 3600)).await);
    }
    let times: Vec<String> = seen.iter().map(|r| r.tick.time.to_rfc3339()).collect();
    // 02:00 CEST, 02:00 CET, 03:00 CET, 04:00 CET: one run per real hour.
    assert_eq!(
        times,
        [
            "2026-10-25T00:00:00+00:00",
            "2026-10-25T01:00:00+00:00",
            "2026-10-25T02:00:00+00:00",
            "2026-10-25T03:00:00+00:00"
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn cron_ticks_passed_during_a_long_run_are_missed() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    scheduler
        .add(Job::new(
            "each-second",
            Schedule::cron("* * * * * *", Tz::UTC).unwrap(),
            |run: RunContext| async move {
                if run.tick().number == 0 {
                    sleep(Duration::from_millis(3500)).await;
                }
            },
        ))
        .unwrap();
    let seen = reports_of(&mut reports, 3).await;
    // Tick 0 at :01 ran until :04.5; :02, :03 and :04 were missed; :05 is tick 4.
    assert_eq!(seen[0].tick.time.to_rfc3339(), "2026-01-01T00:00:01+00:00");
    assert_eq!(seen[1].outcome, RunOutcome::Missed { ticks: 3 });
    assert_eq!(seen[2].outcome, RunOutcome::Executed);
    assert_eq!(seen[2].tick.number, 4);
    assert_eq!(seen[2].tick.time.to_rfc3339(), "2026-01-01T00:00:05+00:00");
}

/// Whether another node could take `name` right now (and gives it back at once).
async fn free(store: &MemoryLockStore, name: &str) -> bool {
    let config = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
    match store.node().try_lock(&config).await.unwrap() {
        Acquisition::Acquired(handle) => {
            assert!(handle.unlock().await.unwrap());
            true
        }
        Acquisition::NotAcquired(_) => false,
    }
}

#[tokio::test(start_paused = true)]
async fn jobs_hold_their_locks_for_the_defaults_unless_they_set_their_own() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(60_000, 250), &clock);
    let rate = Schedule::fixed_rate(Duration::from_secs(10));
    scheduler
        .add(Job::new("by-default", rate.clone(), |_| async {}))
        .unwrap();
    scheduler
        .add(Job::new("own-bounds", rate, |_| async {}).lock_at_least_for(50 * MS))
        .unwrap();
    reports_of(&mut reports, 2).await;
    sleep(40 * MS).await;
    assert!(!free(&store, "by-default").await);
    assert!(!free(&store, "own-bounds").await);
    sleep(20 * MS).await; // 60 ms
    assert!(!free(&store, "by-default").await);
    assert!(free(&store, "own-bounds").await);
    sleep(200 * MS).await; // 260 ms
    assert!(free(&store, "by-default").await);
}

#[tokio::test(start_paused = true)]
async fn a_node_whose_lock_is_held_elsewhere_skips_and_names_the_holder() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let runs = Arc::new(AtomicU32::new(0));
    let mut nodes = Vec::new();
    let mut all_reports = Vec::new();
    for holder in ["node-a", "node-b"] {
        let (mut scheduler, reports) = observed(
            store.node_with(holder, clock.clone()),
            defaults(60_000, 50),
            &clock,
        );
        let runs = runs.clone();
        scheduler
            .add(Job::new(
                "shared",
                Schedule::fixed_rate(100 * MS),
                move |_| {
                    let runs = runs.clone();
                    async move {
                        runs.fetch_add(1, Ordering::SeqCst);
                    }
                },
            ))
            .unwrap();
        nodes.push(scheduler);
        all_reports.push(reports);
    }
    let a = reports_of(&mut all_reports[0], 3).await;
    let b = reports_of(&mut all_reports[1], 3).await;
    // Node A ticks first at each instant, so it runs; node B skips and hears who holds it.
    assert!(a.iter().all(|r| r.outcome == RunOutcome::Executed));
    for report in &b {
        let RunOutcome::Skipped {
            holder: Some(holder),
        } = &report.outcome
        else {
            panic!("expected a skip naming the holder, got {report:?}");
        };
        let locked_by = holder.locked_by.as_deref().unwrap();
        assert_eq!(locked_by, "node-a");
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn lock_names_computed_per_run_are_used_and_checked_at_each_run() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let ran_under = Arc::new(Mutex::new(Vec::new()));
    let record = ran_under.clone();
    scheduler
        .add(
            Job::new("per-shard", Schedule::fixed_rate(100 * MS), move |run| {
                let record = record.clone();
                async move { record.lock().unwrap().push(run.lock_name().to_owned()) }
            })
            .lock_name_with(|tick| match tick.number {
                1 => String::new(),
                3 => panic!("no shard for tick 3"),
                n => format!("shard-{}", n % 2),
            }),
        )
        .unwrap();
    let seen = reports_of(&mut reports, 5).await;
    assert_eq!(
        *ran_under.lock().unwrap(),
        ["shard-0", "shard-0", "shard-0"]
    );
    assert_eq!(seen[0].lock_name.as_deref(), Some("shard-0"));
    assert_eq!(
        seen[1].outcome,
        RunOutcome::InvalidLock {
            error: "lock name must not be empty".to_owned()
        }
    );
    assert_eq!(seen[2].outcome, RunOutcome::Executed);
    let RunOutcome::Panicked { message } = &seen[3].outcome else {
        panic!("expected the name's panic, got {:?}", seen[3]);
    };
    assert_eq!(message, "computing the lock name: no shard for tick 3");
    assert_eq!(seen[4].outcome, RunOutcome::Executed);
}

#[tokio::test(start_paused = true)]
async fn a_computed_name_too_long_for_the_provider_skips_the_run() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let provider = Restricted::new(store(&clock).node(), Some(8), true);
    let (mut scheduler, mut reports) = observed(provider, defaults(60_000, 0), &clock);
    let runs = Arc::new(AtomicU32::new(0));
    let counted = runs.clone();
    scheduler
        .add(
            Job::new("short", Schedule::fixed_rate(100 * MS), move |_| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            })
            .lock_name_with(|tick| "x".repeat(7 + tick.number as usize)),
        )
        .unwrap();
    let seen = reports_of(&mut reports, 3).await;
    assert_eq!(seen[0].outcome, RunOutcome::Executed);
    assert_eq!(seen[1].outcome, RunOutcome::Executed);
    assert_eq!(
        seen[2].outcome,
        RunOutcome::InvalidLock {
            error: "lock name \"xxxxxxxxx\" is 9 characters long and the provider stores at most 8"
                .to_owned()
        }
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_job_releases_its_lock_and_stops_neither_itself_nor_other_jobs() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(60_000, 0), &clock);
    let steady_runs = Arc::new(AtomicU32::new(0));
    let counted = steady_runs.clone();
    scheduler
        .add(Job::new(
            "panics",
            Schedule::fixed_rate(100 * MS),
            |run: RunContext| async move {
                sleep(10 * MS).await;
                if run.tick().number < u64::MAX {
                    panic!("tick {} broke", run.tick().number);
                }
            },
        ))
        .unwrap();
    scheduler
        .add(Job::new(
            "steady",
            Schedule::fixed_rate(100 * MS),
            move |_| {
                let counted = counted.clone();
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
            },
        ))
        .unwrap();
    sleep(350 * MS).await;
    let mut panics = Vec::new();
    while let Ok(report) = reports.try_recv() {
        if report.job == "panics" {
            panics.push(report);
        }
    }
    assert_eq!(panics.len(), 4, "{panics:?}");
    for (number, report) in panics.iter().enumerate() {
        assert_eq!(report.tick.number, number as u64);
        assert_eq!(
            report.outcome,
            RunOutcome::Panicked {
                message: format!("tick {number} broke")
            }
        );
    }
    assert_eq!(steady_runs.load(Ordering::SeqCst), 4);
    // Released after each panic: free between runs.
    assert!(free(&store, "panics").await);
}

#[tokio::test(start_paused = true)]
async fn a_job_error_is_reported_and_the_lock_released() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(60_000, 0), &clock);
    scheduler
        .add(Job::new(
            "fails",
            Schedule::fixed_rate(Duration::from_secs(1)),
            |_| async { Err::<(), _>("disk full") },
        ))
        .unwrap();
    let report = next_report(&mut reports).await;
    assert_eq!(
        report.outcome,
        RunOutcome::Failed {
            error: "disk full".to_owned()
        }
    );
    assert!(free(&store, "fails").await);
}

#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_running_jobs_and_they_release_their_locks() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(60_000, 0), &clock);
    let finished = Arc::new(AtomicBool::new(false));
    let flag = finished.clone();
    scheduler
        .add(Job::new(
            "takes-200ms",
            Schedule::fixed_rate(Duration::from_secs(10)),
            move |_| {
                let flag = flag.clone();
                async move {
                    sleep(200 * MS).await;
                    flag.store(true, Ordering::SeqCst);
                }
            },
        ))
        .unwrap();
    let start = Instant::now();
    sleep(50 * MS).await;
    let report = timeout(LIMIT, scheduler.shutdown(Duration::from_secs(1)))
        .await
        .unwrap();
    assert!(report.stopped.is_empty());
    assert_eq!(start.elapsed(), 200 * MS);
    assert!(finished.load(Ordering::SeqCst));
    assert_eq!(
        next_report(&mut reports).await.outcome,
        RunOutcome::Executed
    );
    assert!(free(&store, "takes-200ms").await);
    // No run starts after shutdown.
    assert!(timeout(LIMIT, reports.recv()).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn shutdown_stops_runs_still_going_at_its_limit_and_they_keep_their_locks() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(60_000, 0), &clock);
    let saw_shutdown = Arc::new(AtomicBool::new(false));
    let saw = saw_shutdown.clone();
    scheduler
        .add(Job::new(
            "ignores-shutdown",
            Schedule::fixed_rate(Duration::from_secs(60)),
            |_| async { sleep(Duration::from_secs(3600)).await },
        ))
        .unwrap();
    scheduler
        .add(Job::new(
            "heeds-shutdown",
            Schedule::fixed_rate(Duration::from_secs(60)),
            move |run: RunContext| {
                let saw = saw.clone();
                async move {
                    run.shutdown().cancelled().await;
                    saw.store(true, Ordering::SeqCst);
                }
            },
        ))
        .unwrap();
    scheduler
        .add(Job::new(
            "idle",
            Schedule::fixed_rate(Duration::from_secs(60)).first_run_after(Duration::from_secs(5)),
            |_| async {},
        ))
        .unwrap();
    let start = Instant::now();
    sleep(10 * MS).await;
    let report = timeout(LIMIT, scheduler.shutdown(100 * MS)).await.unwrap();
    assert_eq!(start.elapsed(), 110 * MS);
    assert_eq!(report.stopped, ["ignores-shutdown"]);
    assert!(saw_shutdown.load(Ordering::SeqCst));
    let mut outcomes: Vec<(String, RunOutcome)> = reports_of(&mut reports, 2)
        .await
        .into_iter()
        .map(|r| (r.job, r.outcome))
        .collect();
    outcomes.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        outcomes,
        [
            ("heeds-shutdown".to_owned(), RunOutcome::Executed),
            ("ignores-shutdown".to_owned(), RunOutcome::Stopped)
        ]
    );
    // The finished run released its lock; the stopped one keeps its own until
    // lock_at_most_for (60 s), as if the node had died.
    assert!(free(&store, "heeds-shutdown").await);
    assert!(!free(&store, "ignores-shutdown").await);
    sleep(Duration::from_secs(59)).await; // 59.11 s
    assert!(!free(&store, "ignores-shutdown").await);
    sleep(Duration::from_secs(1)).await; // 60.11 s
    assert!(free(&store, "ignores-shutdown").await);
    assert!(timeout(LIMIT, reports.recv()).await.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn work_a_stopped_run_left_running_never_overlaps_another_nodes_run() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let start = Instant::now();
    // When node A's offloaded work ran, and when node B's runs started (ms since start).
    let offloaded = Arc::new(Mutex::new((None, None)));
    let b_runs = Starts::new();
    let (mut a, _a_reports) = observed(
        store.node_with("node-a", clock.clone()),
        defaults(4_000, 0),
        &clock,
    );
    let record = offloaded.clone();
    a.add(Job::new(
        "offloads",
        Schedule::fixed_rate_per_node(100 * MS),
        move |_| {
            let record = record.clone();
            async move {
                // Work handed to a task of its own, which a stopped run does not stop.
                let work = tokio::spawn(async move {
                    record.lock().unwrap().0 = Some(start.elapsed().as_millis());
                    sleep(Duration::from_secs(3)).await;
                    record.lock().unwrap().1 = Some(start.elapsed().as_millis());
                });
                let _ = work.await;
            }
        },
    ))
    .unwrap();
    sleep(10 * MS).await;
    let (mut b, _b_reports) = observed(
        store.node_with("node-b", clock.clone()),
        defaults(4_000, 0),
        &clock,
    );
    let recorder = b_runs.clone();
    b.add(Job::new(
        "offloads",
        Schedule::fixed_rate_per_node(100 * MS),
        move |_| {
            let recorder = recorder.clone();
            async move { recorder.record() }
        },
    ))
    .unwrap();
    // A shuts down 1 s in, with a 500 ms limit: its run is stopped at 1.5 s, its work goes on.
    sleep(990 * MS).await;
    let report = timeout(LIMIT, a.shutdown(500 * MS)).await.unwrap();
    assert_eq!(report.stopped, ["offloads"]);
    sleep(Duration::from_secs(5)).await; // 6.5 s
    let (work_started, work_ended) = *offloaded.lock().unwrap();
    assert_eq!((work_started, work_ended), (Some(0), Some(3000)));
    // B ran only once A's lock freed itself at lock_at_most_for (4 s), after the work ended.
    let runs = b_runs.get();
    assert!(!runs.is_empty(), "node B never ran");
    assert!(
        runs.iter().all(|&at| at >= 4_000),
        "node B ran at {runs:?} ms, while node A's lock should still hold (A's work ran 0 to 3000 ms)"
    );
    b.shutdown(LIMIT).await;
}

#[tokio::test(start_paused = true)]
async fn a_fixed_rate_ticks_on_the_fleet_grid_whenever_the_node_starts() {
    // 7.3 s past a whole ten seconds: the first tick is at 10 s, then every 10 s.
    let clock = TokioClock::at("2026-01-01T00:00:07.300Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let start = Instant::now();
    scheduler
        .add(Job::new(
            "grid",
            Schedule::fixed_rate(Duration::from_secs(10)),
            |_| async {},
        ))
        .unwrap();
    scheduler
        .add(Job::new(
            "grid-later",
            Schedule::fixed_rate(Duration::from_secs(10)).first_run_after(Duration::from_secs(5)),
            |_| async {},
        ))
        .unwrap();
    let seen = reports_of(&mut reports, 5).await;
    let ticks = |job: &str| {
        seen.iter()
            .filter(|report| report.job == job)
            .map(|report| {
                (
                    report.tick.number,
                    report.tick.time.to_rfc3339(),
                    report.tick.due.duration_since(start).as_millis(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(
        ticks("grid"),
        [
            (0, "2026-01-01T00:00:10+00:00".to_owned(), 2_700),
            (1, "2026-01-01T00:00:20+00:00".to_owned(), 12_700),
            (2, "2026-01-01T00:00:30+00:00".to_owned(), 22_700),
        ]
    );
    // Not before 12.3 s: the first grid instant after that is 20 s.
    assert_eq!(
        ticks("grid-later"),
        [
            (0, "2026-01-01T00:00:20+00:00".to_owned(), 12_700),
            (1, "2026-01-01T00:00:30+00:00".to_owned(), 22_700),
        ]
    );
}

/// Three nodes on one store, started `offsets` apart, each with a `schedule` of period 10 s
/// and lock_at_least_for 5 s: the grid instants (s since the first start) each run took.
async fn runs_of_three_nodes(offsets: [u64; 3], schedule: Schedule) -> Vec<u64> {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let start = Instant::now();
    let runs = Starts::new();
    let mut nodes = Vec::new();
    for (node, offset) in offsets.into_iter().enumerate() {
        sleep_until_ms(start, offset).await;
        let mut scheduler = Scheduler::builder(
            store.node_with(&format!("node-{node}"), clock.clone()),
            defaults(60_000, 5_000),
        )
        .clock(clock.clone())
        .build();
        let recorder = runs.clone();
        scheduler
            .add(Job::new("cleanup", schedule.clone(), move |_| {
                let recorder = recorder.clone();
                async move { recorder.record() }
            }))
            .unwrap();
        nodes.push(scheduler);
    }
    sleep_until_ms(start, 125_000).await;
    for node in nodes {
        node.shutdown(LIMIT).await;
    }
    runs.get().into_iter().map(|ms| ms as u64).collect()
}

async fn sleep_until_ms(start: Instant, ms: u64) {
    tokio::time::sleep_until(start + Duration::from_millis(ms)).await;
}

#[tokio::test(start_paused = true)]
async fn three_nodes_started_apart_run_each_fixed_rate_period_once_across_the_fleet() {
    let runs = runs_of_three_nodes(
        [0, 3_300, 6_600],
        Schedule::fixed_rate(Duration::from_secs(10)),
    )
    .await;
    // Every 10 s on the grid, once, from the first node's first tick: 0 s, 10 s, ... 120 s.
    assert_eq!(runs, (0..=12).map(|k| k * 10_000).collect::<Vec<_>>());
}

#[tokio::test(start_paused = true)]
async fn per_node_rates_run_up_to_once_per_period_per_node() {
    let runs = runs_of_three_nodes(
        [0, 3_300, 6_600],
        Schedule::fixed_rate_per_node(Duration::from_secs(10)),
    )
    .await;
    // Each node keeps its own grid (0, 3.3 and 6.6 s + k × 10 s) and takes the lock whenever
    // the last run's 5 s have passed: a run every 6.7 s, 19 in 125 s where the fleet's grid
    // has 13, and two in every other ten-second window.
    let expected: Vec<u64> = (0..19)
        .map(|run| run / 3 * 20_000 + [0, 6_600, 13_300][run as usize % 3])
        .collect();
    assert_eq!(runs, expected);
}

/// Everything a `tracing_subscriber::fmt` subscriber writes, as an operator's log shows it.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

/// What `body` returns and what it logged, run with a `fmt` subscriber as the thread's default
/// and a current-thread runtime (so the scheduler's tasks log on this thread too).
fn logged<T>(body: impl FnOnce(&tokio::runtime::Runtime) -> T) -> (T, String) {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_ansi(false)
        .finish();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let value = tracing::subscriber::with_default(subscriber, || {
        // With one dispatcher alone, a test beside this one (with none) could make tracing
        // skip these events for good.
        let _beside = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
        body(&runtime)
    });
    let text = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    (value, text)
}

/// The scheduler's own events (here a job's error) name the job, its lock and the tick by its
/// wall-clock time, the same on every replica.
#[test]
fn the_schedulers_own_events_name_the_job_and_the_tick_by_its_time() {
    let (report, logged) = logged(|runtime| {
        runtime.block_on(async {
            let (sender, mut reports) = mpsc::unbounded_channel();
            let mut scheduler = Scheduler::builder(MemoryLockProvider::new(), defaults(60_000, 0))
                .on_run(move |report| {
                    let _ = sender.send(report.clone());
                })
                .build();
            scheduler
                .add(Job::new(
                    "failing",
                    Schedule::fixed_rate(Duration::from_millis(20)),
                    |_| async { Err::<(), _>("disk full") },
                ))
                .unwrap();
            let report = timeout(Duration::from_secs(5), reports.recv())
                .await
                .unwrap()
                .unwrap();
            scheduler.shutdown(Duration::from_secs(1)).await;
            report
        })
    });
    let line = logged
        .lines()
        .find(|line| line.contains("job returned an error"))
        .unwrap_or_else(|| panic!("no event for the job's error in:\n{logged}"));
    let tick = report
        .tick
        .time
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    for part in [
        " WARN ",
        "job=\"failing\"",
        "lock=\"failing\"",
        &format!("tick={tick}"),
        "error=disk full",
    ] {
        assert!(line.contains(part), "{part:?} missing from: {line}");
    }
}

#[test]
fn a_lock_held_at_least_a_period_is_warned_about_when_the_job_is_added() {
    let ((), logged) = logged(|runtime| {
        let _runtime = runtime.enter();
        let mut scheduler = Scheduler::new(MemoryLockProvider::new(), defaults(60_000, 10_000));
        for (job, period) in [("halved", 10), ("fine", 11)] {
            scheduler
                .add(Job::new(
                    job,
                    Schedule::fixed_rate(Duration::from_secs(period)),
                    |_| async {},
                ))
                .unwrap();
        }
        scheduler
            .add(Job::new(
                "per-node",
                Schedule::fixed_rate_per_node(Duration::from_secs(5)),
                |_| async {},
            ))
            .unwrap();
    });
    let warnings: Vec<&str> = logged
        .lines()
        .filter(|line| line.contains("lock_at_least_for is not shorter than the period"))
        .collect();
    assert_eq!(warnings.len(), 2, "{logged}");
    assert!(
        warnings[0].contains("WARN") && warnings[0].contains("job=halved"),
        "{logged}"
    );
    assert!(warnings[1].contains("job=per-node"), "{logged}");
}

#[tokio::test(start_paused = true)]
async fn dropping_the_scheduler_stops_its_jobs() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let runs = Arc::new(AtomicU32::new(0));
    let dropped = Arc::new(AtomicBool::new(false));
    struct SetOnDrop(Arc<AtomicBool>);
    impl Drop for SetOnDrop {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let mut scheduler = Scheduler::builder(store(&clock).node(), defaults(60_000, 0))
        .clock(clock.clone())
        .build();
    let (counted, flag) = (runs.clone(), dropped.clone());
    scheduler
        .add(Job::new(
            "forever",
            Schedule::fixed_rate(100 * MS),
            move |run: RunContext| {
                let (counted, flag) = (counted.clone(), flag.clone());
                async move {
                    counted.fetch_add(1, Ordering::SeqCst);
                    if run.tick().number == 2 {
                        let _guard = SetOnDrop(flag);
                        std::future::pending::<()>().await;
                    }
                }
            },
        ))
        .unwrap();
    sleep(250 * MS).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    drop(scheduler);
    sleep(MS).await;
    assert!(
        dropped.load(Ordering::SeqCst),
        "the run in progress was not dropped"
    );
    sleep(Duration::from_secs(1)).await;
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test(start_paused = true)]
async fn keep_alive_holds_the_lock_past_lock_at_most_for() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(300, 0), &clock);
    scheduler
        .add(
            Job::new(
                "long",
                Schedule::fixed_rate(Duration::from_secs(60)),
                |run: RunContext| async move {
                    tokio::select! {
                        () = sleep(Duration::from_secs(1)) => {}
                        () = run.lock_lost().cancelled() => panic!("lock lost"),
                    }
                },
            )
            .keep_alive(),
        )
        .unwrap();
    sleep(500 * MS).await;
    assert!(
        !free(&store, "long").await,
        "keep-alive let the lock expire"
    );
    let report = next_report(&mut reports).await;
    assert_eq!(report.outcome, RunOutcome::Executed);
    assert!(!report.lock_lost);
    assert!(free(&store, "long").await);
}

#[tokio::test(start_paused = true)]
async fn keep_alive_tells_the_job_when_its_lock_is_lost() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(300, 0), &clock);
    let start = Instant::now();
    let lost_at = Arc::new(Mutex::new(None));
    let record = lost_at.clone();
    scheduler
        .add(
            Job::new(
                "long",
                Schedule::fixed_rate(Duration::from_secs(60)),
                move |run: RunContext| {
                    let record = record.clone();
                    async move {
                        run.lock_lost().cancelled().await;
                        *record.lock().unwrap() = Some(start.elapsed());
                    }
                },
            )
            .keep_alive(),
        )
        .unwrap();
    sleep(50 * MS).await;
    // The store's clock leaps an hour: the lock has expired, and the first extend (at 100 ms)
    // finds it so.
    clock.jump(Duration::from_secs(3600));
    let report = next_report(&mut reports).await;
    assert_eq!(*lost_at.lock().unwrap(), Some(100 * MS));
    assert_eq!(report.outcome, RunOutcome::Executed);
    assert!(report.lock_lost);
}

/// The in-memory provider, declaring a name limit or no extend, as some real backends do.
#[derive(Debug)]
struct Restricted {
    inner: MemoryLockProvider,
    max_name_chars: Option<usize>,
    extend: bool,
}

impl Restricted {
    fn new(inner: MemoryLockProvider, max_name_chars: Option<usize>, extend: bool) -> Self {
        Self {
            inner,
            max_name_chars,
            extend,
        }
    }
}

#[async_trait]
impl LockProvider for Restricted {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = self.inner.capabilities().with_extend(self.extend);
        match self.max_name_chars {
            Some(max) => capabilities.with_max_name_chars(max),
            None => capabilities,
        }
    }

    fn provider_name(&self) -> &'static str {
        self.inner.provider_name()
    }
}

#[tokio::test]
async fn jobs_that_break_a_rule_are_refused_when_added() {
    let provider = Restricted::new(MemoryLockProvider::new(), Some(10), false);
    let mut scheduler = Scheduler::new(provider, defaults(1000, 0));
    let rate = Schedule::fixed_rate(Duration::from_secs(1));
    let noop = |_| async {};
    let refused = |scheduler: &mut Scheduler, job: Job| scheduler.add(job).unwrap_err();

    assert_eq!(
        refused(&mut scheduler, Job::new("", rate.clone(), noop)),
        SchedulerError::EmptyJobName
    );
    scheduler.add(Job::new("once", rate.clone(), noop)).unwrap();
    assert_eq!(
        refused(&mut scheduler, Job::new("once", rate.clone(), noop)).to_string(),
        "job \"once\" is already scheduled; job names must be unique in a scheduler"
    );
    assert_eq!(
        refused(
            &mut scheduler,
            Job::new("busy", Schedule::fixed_rate(Duration::ZERO), noop)
        )
        .to_string(),
        "job \"busy\": the fixed rate period must be greater than zero"
    );
    assert_eq!(
        refused(
            &mut scheduler,
            Job::new("busy", Schedule::fixed_delay(Duration::ZERO), noop)
        )
        .to_string(),
        "job \"busy\": the fixed delay must be greater than zero"
    );
    // A job's own bound against the scheduler's default.
    assert_eq!(
        refused(
            &mut scheduler,
            Job::new("greedy", rate.clone(), noop).lock_at_least_for(Duration::from_secs(2))
        )
        .to_string(),
        "job \"greedy\": lock \"greedy\": lock_at_least_for (2s) must not exceed lock_at_most_for (1s)"
    );
    // Bounds are checked for computed names too, under the job's name.
    assert!(matches!(
        refused(
            &mut scheduler,
            Job::new("computed", rate.clone(), noop)
                .lock_name_with(|_| "x".to_owned())
                .lock_at_most_for(Duration::ZERO)
        ),
        SchedulerError::InvalidLock { .. }
    ));
    assert_eq!(
        refused(
            &mut scheduler,
            Job::new("long-lock", rate.clone(), noop).lock_name("a-lock-name-of-24-chars!")
        )
        .to_string(),
        "job \"long-lock\": lock name \"a-lock-name-of-24-chars!\" is 24 characters long and the provider stores at most 10"
    );
    assert_eq!(
        refused(
            &mut scheduler,
            Job::new("kept", rate.clone(), noop).keep_alive()
        )
        .to_string(),
        "job \"kept\": keep-alive needs a provider that can extend locks, and this one cannot"
    );
    // The refused ones were not scheduled: their names are still free.
    scheduler.add(Job::new("busy", rate, noop)).unwrap();
}

#[test]
fn schedules_and_defaults_that_break_a_rule_are_refused() {
    let error = Schedule::cron("0 3 * * *", Tz::UTC)
        .unwrap_err()
        .to_string();
    assert!(
        error.starts_with("cron expression \"0 3 * * *\" is invalid: it has 5 fields; six are needed, seconds first"),
        "{error}"
    );
    let error = Schedule::cron("0 0 25 * * *", Tz::UTC).unwrap_err();
    assert!(
        matches!(&error, SchedulerError::InvalidCron { expression, .. } if expression == "0 0 25 * * *"),
        "{error:?}"
    );
    assert!(Schedule::cron("@daily", Tz::UTC).is_ok());
    assert_eq!(
        LockDefaults::new(Duration::ZERO, Duration::ZERO)
            .unwrap_err()
            .to_string(),
        "scheduler defaults: lock_at_most_for (0ns) must be greater than zero and at least lock_at_least_for (0ns)"
    );
    assert!(LockDefaults::new(Duration::from_secs(1), Duration::from_secs(2)).is_err());
    let defaults = LockDefaults::new(Duration::from_secs(2), Duration::from_secs(1)).unwrap();
    assert_eq!(
        (defaults.lock_at_most_for(), defaults.lock_at_least_for()),
        (Duration::from_secs(2), Duration::from_secs(1))
    );
}

#[test]
fn adding_a_job_outside_a_tokio_runtime_is_an_error() {
    let mut scheduler = Scheduler::new(MemoryLockProvider::new(), defaults(1000, 0));
    let job = Job::new(
        "no-runtime",
        Schedule::fixed_rate(Duration::from_secs(1)),
        |_| async {},
    );
    assert_eq!(
        scheduler.add(job),
        Err(SchedulerError::NoRuntime {
            job: "no-runtime".to_owned()
        })
    );
}

#[tokio::test(start_paused = true)]
async fn a_job_may_take_its_own_run_lock_again_through_the_schedulers_executor() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let executor: LockingTaskExecutor = scheduler.executor().clone();
    let nested = Arc::new(Mutex::new(None));
    let record = nested.clone();
    scheduler
        .add(Job::new(
            "outer",
            Schedule::fixed_rate(Duration::from_secs(60)),
            move |run: RunContext| {
                let (executor, record) = (executor.clone(), record.clone());
                async move {
                    let config = LockConfiguration::new(
                        run.lock_name(),
                        Duration::from_secs(1),
                        Duration::ZERO,
                    )
                    .unwrap();
                    let outcome = executor.execute(&config, async { 7 }).await.unwrap();
                    *record.lock().unwrap() = Some(outcome);
                }
            },
        ))
        .unwrap();
    assert_eq!(
        next_report(&mut reports).await.outcome,
        RunOutcome::Executed
    );
    assert_eq!(*nested.lock().unwrap(), Some(TaskOutcome::Executed(7)));
}

/// A job that records when each run began (ms since the recorder's start), then sleeps as long
/// as `long` says for that run.
fn recording_job(
    name: &str,
    schedule: Schedule,
    starts: &Starts,
    long: impl Fn(&RunContext) -> Duration + Send + Sync + 'static,
) -> Job {
    let recorder = starts.clone();
    let long = Arc::new(long);
    Job::new(name, schedule, move |run: RunContext| {
        let (recorder, long) = (recorder.clone(), long.clone());
        async move {
            recorder.record();
            sleep(long(&run)).await;
        }
    })
}

#[tokio::test(start_paused = true)]
async fn run_latest_runs_the_latest_missed_tick_at_once_and_keeps_the_grid() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let job = recording_job("catch-up", Schedule::fixed_rate(100 * MS), &starts, |run| {
        if run.tick().number == 0 {
            250 * MS
        } else {
            Duration::ZERO
        }
    });
    scheduler
        .add(job.missed_ticks(MissedTicks::RunLatest))
        .unwrap();
    let seen = reports_of(&mut reports, 4).await;
    // Run 0 took 250 ms: of ticks 1 (100 ms) and 2 (200 ms), tick 1 is passed over and tick 2,
    // the latest, runs at once (late, at 250 ms); tick 3 runs on the grid at 300 ms.
    assert_eq!(seen[0].outcome, RunOutcome::Executed);
    assert_eq!(seen[1].outcome, RunOutcome::Missed { ticks: 1 });
    assert_eq!(seen[2].outcome, RunOutcome::Executed);
    assert_eq!(seen[2].tick.number, 2);
    assert_eq!(
        seen[2].tick.time,
        "2026-01-01T00:00:00.200Z".parse::<DateTime<Utc>>().unwrap(),
        "the late run is tick 2's, named by its time"
    );
    assert_eq!(
        (seen[3].tick.number, seen[3].outcome.clone()),
        (3, RunOutcome::Executed)
    );
    assert_eq!(starts.get(), [0, 250, 300]);
}

#[tokio::test(start_paused = true)]
async fn run_latest_on_cron_runs_the_latest_missed_instant() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let job = recording_job(
        "cron-catch-up",
        Schedule::cron("* * * * * *", Tz::UTC).unwrap(),
        &starts,
        |run| {
            if run.tick().number == 0 {
                3_500 * MS
            } else {
                Duration::ZERO
            }
        },
    );
    scheduler
        .add(job.missed_ticks(MissedTicks::RunLatest))
        .unwrap();
    let seen = reports_of(&mut reports, 4).await;
    // The first run (00:01) took 3.5 s: 00:02 and 00:03 are passed over, 00:04 runs late at
    // 00:04.5, and 00:05 on time.
    assert_eq!(seen[1].outcome, RunOutcome::Missed { ticks: 2 });
    let times: Vec<String> = [&seen[0], &seen[2], &seen[3]]
        .iter()
        .map(|report| report.tick.time.format("%M:%S").to_string())
        .collect();
    assert_eq!(times, ["00:01", "00:04", "00:05"]);
    assert_eq!(starts.get(), [1_000, 4_500, 5_000]);
}

#[tokio::test(start_paused = true)]
async fn a_paused_job_passes_its_ticks_over_and_resumes_at_its_next_tick() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let job = recording_job("pausable", Schedule::fixed_rate(100 * MS), &starts, |_| {
        Duration::ZERO
    });
    scheduler.add(job).unwrap();
    let jobs = scheduler.handle();
    assert_eq!(next_report(&mut reports).await.tick.number, 0);
    let at = |ms: &str| {
        format!("2026-01-01T00:00:00.{ms}Z")
            .parse::<DateTime<Utc>>()
            .unwrap()
    };
    assert_eq!(jobs.next_run("pausable").unwrap(), Some(at("100")));

    jobs.pause("pausable").unwrap();
    sleep_until_ms(starts.1, 350).await;
    let status = jobs.job("pausable").unwrap();
    assert!(status.paused && !status.running, "{status:?}");
    assert_eq!(status.next_run, None);
    assert_eq!(status.last.unwrap().outcome, RunOutcome::Executed);
    assert!(
        reports.try_recv().is_err(),
        "nothing ran or was reported while paused"
    );

    jobs.resume("pausable").unwrap();
    let resumed = next_report(&mut reports).await;
    // The ticks passed while paused are neither missed nor caught up.
    assert_eq!(resumed.outcome, RunOutcome::Executed);
    assert_eq!(resumed.tick.number, 4);
    assert_eq!(starts.get(), [0, 400]);
    assert!(!jobs.job("pausable").unwrap().paused);
}

#[tokio::test(start_paused = true)]
async fn run_now_runs_at_once_under_the_lock_and_keeps_the_planned_tick() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(store.node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let job = recording_job(
        "on-demand",
        Schedule::fixed_rate(1_000 * MS),
        &starts,
        |run| {
            if run.tick().requested {
                100 * MS
            } else {
                Duration::ZERO
            }
        },
    );
    scheduler.add(job).unwrap();
    let jobs = scheduler.handle();
    assert_eq!(next_report(&mut reports).await.tick.number, 0);

    sleep_until_ms(starts.1, 200).await;
    jobs.run_now("on-demand").unwrap();
    sleep_until_ms(starts.1, 250).await;
    assert!(jobs.job("on-demand").unwrap().running);
    assert!(
        !free(&store, "on-demand").await,
        "the requested run holds the job's lock"
    );
    assert!(matches!(
        jobs.run_now("on-demand"),
        Err(SchedulerError::JobRunning { job }) if job == "on-demand"
    ));
    let requested = next_report(&mut reports).await;
    assert_eq!(requested.outcome, RunOutcome::Executed);
    assert!(requested.tick.requested);
    assert_eq!(
        requested.tick.number, 1,
        "numbered as the planned tick it came before"
    );
    assert_eq!(
        requested.tick.time,
        "2026-01-01T00:00:00.200Z".parse::<DateTime<Utc>>().unwrap()
    );
    // The planned tick still runs, on time, and the refused request asked for nothing more.
    let planned = next_report(&mut reports).await;
    assert!(!planned.tick.requested);
    assert_eq!(planned.tick.number, 1);
    assert_eq!(starts.get(), [0, 200, 1_000]);
}

#[tokio::test(start_paused = true)]
async fn run_now_is_skipped_when_another_node_holds_the_lock_and_runs_while_paused() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let store = store(&clock);
    let (mut scheduler, mut reports) = observed(
        store.node_with("node-a", clock.clone()),
        defaults(60_000, 0),
        &clock,
    );
    let starts = Starts::new();
    let job = recording_job("guarded", Schedule::fixed_rate(1_000 * MS), &starts, |_| {
        Duration::ZERO
    });
    scheduler.add(job).unwrap();
    let jobs = scheduler.handle();
    next_report(&mut reports).await;
    jobs.pause("guarded").unwrap();

    let other = store.node_with("node-b", clock.clone());
    let config =
        LockConfiguration::new("guarded", Duration::from_secs(60), Duration::ZERO).unwrap();
    let Acquisition::Acquired(held) = other.try_lock(&config).await.unwrap() else {
        panic!("the lock is free between runs");
    };
    jobs.run_now("guarded").unwrap();
    let skipped = next_report(&mut reports).await;
    assert!(skipped.tick.requested);
    assert!(
        matches!(skipped.outcome, RunOutcome::Skipped { .. }),
        "{skipped:?}"
    );
    assert!(held.unlock().await.unwrap());

    jobs.run_now("guarded").unwrap();
    let ran = next_report(&mut reports).await;
    assert!(ran.tick.requested);
    assert_eq!(
        ran.outcome,
        RunOutcome::Executed,
        "a paused job still runs when asked"
    );
    assert_eq!(starts.get().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_planned_tick_that_falls_during_a_requested_run_is_missed() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let job = recording_job("busy", Schedule::fixed_rate(100 * MS), &starts, |run| {
        if run.tick().requested {
            120 * MS
        } else {
            Duration::ZERO
        }
    });
    scheduler.add(job).unwrap();
    let jobs = scheduler.handle();
    next_report(&mut reports).await;
    sleep_until_ms(starts.1, 50).await;
    jobs.run_now("busy").unwrap();
    let seen = reports_of(&mut reports, 3).await;
    // The requested run went from 50 to 170 ms: tick 1 (100 ms) is missed, tick 2 runs.
    assert!(seen[0].tick.requested);
    assert_eq!(seen[1].outcome, RunOutcome::Missed { ticks: 1 });
    assert_eq!(
        (seen[2].tick.number, seen[2].outcome.clone()),
        (2, RunOutcome::Executed)
    );
    assert_eq!(starts.get(), [0, 50, 200]);
}

#[tokio::test(start_paused = true)]
async fn a_removed_job_finishes_its_run_then_stops_and_its_name_is_free_again() {
    let clock = TokioClock::at("2026-01-01T00:00:00Z");
    let (mut scheduler, mut reports) = observed(store(&clock).node(), defaults(60_000, 0), &clock);
    let starts = Starts::new();
    let job = recording_job("removable", Schedule::fixed_rate(100 * MS), &starts, |_| {
        50 * MS
    });
    scheduler.add(job.clone()).unwrap();
    let jobs = scheduler.handle();
    sleep_until_ms(starts.1, 20).await;
    assert!(jobs.job("removable").unwrap().running);
    jobs.remove("removable").unwrap();
    assert!(matches!(
        jobs.job("removable"),
        Err(SchedulerError::UnknownJob { job }) if job == "removable"
    ));
    assert!(jobs.jobs().is_empty());
    assert_eq!(
        scheduler.add(job.clone()).unwrap_err().to_string(),
        "job \"removable\" was removed and its last run is still going; add it again once that \
         run has ended"
    );
    // The run in progress ends and is reported; nothing after it.
    assert_eq!(
        next_report(&mut reports).await.outcome,
        RunOutcome::Executed
    );
    sleep_until_ms(starts.1, 500).await;
    assert!(reports.try_recv().is_err());
    assert_eq!(starts.get(), [0]);
    // Its name is free again.
    scheduler.add(job).unwrap();
    assert_eq!(
        next_report(&mut reports).await.outcome,
        RunOutcome::Executed
    );
    assert_eq!(jobs.jobs().len(), 1);
    assert!(matches!(
        jobs.pause("never-added"),
        Err(SchedulerError::UnknownJob { .. })
    ));
}
