//! One node of a fleet running a scheduled job: start it several times, on one machine or many,
//! with the same URL, and each tick runs on exactly one of them.
//!
//! ```sh
//! cargo run -p shedlock-examples --bin scheduled_job -- \
//!     --url postgres://postgres@127.0.0.1:5432/test --node a --period 2s --ticks 20
//! ```
//!
//! Options (the URL may come from `SHEDLOCK_URL` instead):
//!
//! - `--url <URL>`: any URL `shedlock::connect` takes (`postgres://`, `mysql://`, `mariadb://`,
//!   `sqlite:`, `redis://`, `etcd://`, `mongodb://`, `zk://`). The SQL backends need ShedLock's
//!   table (see each provider's docs); `connect` says so when it is missing.
//! - `--node <NAME>`: printed on each line, to tell the processes apart (default `node-<pid>`).
//! - `--period <DURATION>`: the fixed rate, in whole milliseconds (`500ms`, `2s`; default `2s`).
//!   At least twice the backend's time precision: etcd, whose leases hold a lock up to 2 s
//!   longer than asked, needs `4s` or more.
//! - `--ticks <N>`: stop after N ticks (default: run until Ctrl-C).
//! - `--lock <NAME>`: the lock's name (default `scheduled-job-example`).
//! - `--panic-every-third`: the job panics on every third run on this node, to show that a
//!   panic is contained: its lock is released and the next ticks run as usual.
//!
//! A fixed rate's ticks sit on the fleet's grid (multiples of the period since the Unix epoch, in
//! UTC), so the same tick falls at the same instant on every node, however far apart the nodes
//! started, as with a cron expression. Each tick
//! prints one line on stdout, on the node that ran it and on each node that skipped it (and a
//! `panicked` line after `ran` when the job panicked); `started` and `done` lines frame them:
//!
//! ```text
//! ran tick=2026-12-01T10:00:02.000Z node=a token=17
//! skipped tick=2026-12-01T10:00:02.000Z node=b holder=host-1 held_until=2026-12-01T10:00:03.000Z
//! ```
//!
//! `token` is the lock's fencing token (`none` where the backend has none), `holder` the holder
//! the backend named (the host name by default; `unknown` where the backend does not say), and
//! `held_until` when its lock frees itself, where the backend says. Logs (`RUST_LOG`, default
//! `warn`: a panic is an `error` naming the job) go to stderr.

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use shedlock::LockProvider;
use shedlock::scheduler::{Job, LockDefaults, RunOutcome, RunReport, Schedule, Scheduler, Tick};
use tokio::sync::Notify;

/// How long a node that dies mid-run keeps the lock, at the shortest; a longer period holds it
/// for one period.
const MIN_LOCK_AT_MOST_FOR: Duration = Duration::from_secs(30);
/// How long shutdown waits for a run in progress before stopping it and releasing its lock.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(10);

struct Options {
    url: String,
    node: String,
    period: Duration,
    ticks: Option<u64>,
    lock: String,
    panic_every_third: bool,
}

const USAGE: &str = "usage: scheduled_job --url <URL> [--node <NAME>] [--period <DURATION>] \
                     [--ticks <N>] [--lock <NAME>] [--panic-every-third] \
                     (the URL may come from SHEDLOCK_URL instead)";

impl Options {
    fn parse(mut args: impl Iterator<Item = String>) -> Result<Self, String> {
        let mut url = std::env::var("SHEDLOCK_URL").ok();
        let mut node = format!("node-{}", std::process::id());
        let mut period = Duration::from_secs(2);
        let mut ticks = None;
        let mut lock = "scheduled-job-example".to_owned();
        let mut panic_every_third = false;
        while let Some(flag) = args.next() {
            let mut value = || {
                args.next()
                    .ok_or_else(|| format!("{flag} needs a value; {USAGE}"))
            };
            match flag.as_str() {
                "--url" => url = Some(value()?),
                "--node" => node = value()?,
                "--period" => {
                    let text = value()?;
                    period = shedlock::parse_duration(&text)
                        .map_err(|error| format!("--period {text:?}: {error}"))?;
                }
                "--ticks" => {
                    let text = value()?;
                    let count = text
                        .parse()
                        .ok()
                        .filter(|&count| count > 0)
                        .ok_or_else(|| format!("--ticks {text:?}: expected a whole number > 0"))?;
                    ticks = Some(count);
                }
                "--lock" => lock = value()?,
                "--panic-every-third" => panic_every_third = true,
                other => return Err(format!("unknown argument {other:?}; {USAGE}")),
            }
        }
        // Tick labels are milliseconds on the wall clock: a finer period would give two ticks
        // one label.
        if period < Duration::from_millis(1) || !period.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(format!(
                "--period {period:?}: expected a whole number of milliseconds, at least 1ms"
            ));
        }
        Ok(Self {
            url: url.ok_or_else(|| format!("no lock provider URL; {USAGE}"))?,
            node,
            period,
            ticks,
            lock,
            panic_every_third,
        })
    }
}

/// A tick's instant on the fleet's grid, the same text on every node.
fn label(tick: &Tick) -> String {
    tick.time.to_rfc3339_opts(SecondsFormat::Millis, true)
}

fn wall_time(time: Option<SystemTime>) -> String {
    time.map_or_else(
        || "unknown".to_owned(),
        |time| DateTime::<Utc>::from(time).to_rfc3339_opts(SecondsFormat::Millis, true),
    )
}

/// What this node did, for the last line.
#[derive(Default)]
struct Counts {
    ran: AtomicU64,
    skipped: AtomicU64,
    panicked: AtomicU64,
    other: AtomicU64,
}

/// Prints the line of a tick the job's own line does not cover, and notices the last tick.
fn observe(report: &RunReport, node: &str, counts: &Counts, last: Option<(u64, &Notify)>) {
    let tick = label(&report.tick);
    match &report.outcome {
        // The job printed its own line.
        RunOutcome::Executed => {}
        RunOutcome::Skipped { holder } => {
            counts.skipped.fetch_add(1, Ordering::Relaxed);
            let locked_by = holder
                .as_ref()
                .and_then(|holder| holder.locked_by.as_deref());
            let held_until = holder.as_ref().and_then(|holder| holder.held_until);
            println!(
                "skipped tick={tick} node={node} holder={} held_until={}",
                locked_by.unwrap_or("unknown"),
                wall_time(held_until)
            );
        }
        RunOutcome::Panicked { message } => {
            counts.panicked.fetch_add(1, Ordering::Relaxed);
            println!("panicked tick={tick} node={node} message={message:?}");
        }
        RunOutcome::Missed { ticks } => {
            counts.other.fetch_add(1, Ordering::Relaxed);
            // The report's tick is the next one planned; the missed ones came before it.
            println!("missed ticks={ticks} before_tick={tick} node={node}");
            return;
        }
        other => {
            counts.other.fetch_add(1, Ordering::Relaxed);
            println!("not_run tick={tick} node={node} outcome={other:?}");
        }
    }
    if let Some((ticks, done)) = last
        && report.tick.number + 1 >= ticks
    {
        done.notify_one();
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("scheduled_job: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let options = Options::parse(std::env::args().skip(1))?;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();

    let provider = shedlock::connect(&options.url).await?;
    // A backend may hold a lock up to its time precision longer than asked (etcd's leases count
    // whole seconds, 2 s at the least): half a period held at least, plus that, must end before
    // the next tick, or the next tick finds the lock still taken and nobody runs it.
    let precision = provider.capabilities().time_precision;
    if options.period < precision * 2 {
        return Err(format!(
            "--period {:?} is too short for this backend: it may hold a lock up to {precision:?} \
             longer than asked (its time precision), so ticks must be at least {:?} apart",
            options.period,
            precision * 2
        )
        .into());
    }
    // Held at least half a period: a node whose tick fires up to half a period late still finds
    // the lock taken, and the lock is free again half a period before the next tick.
    let lock_at_least_for = options.period / 2;
    let defaults = LockDefaults::new(options.period.max(MIN_LOCK_AT_MOST_FOR), lock_at_least_for)?;

    let node: Arc<str> = options.node.into();
    let counts = Arc::new(Counts::default());
    let done = Arc::new(Notify::new());
    let observer = {
        let (node, counts, done, ticks) =
            (node.clone(), counts.clone(), done.clone(), options.ticks);
        move |report: &RunReport| {
            observe(report, &node, &counts, ticks.map(|ticks| (ticks, &*done)));
        }
    };
    let mut scheduler = Scheduler::builder(provider, defaults)
        .on_run(observer)
        .build();

    let runs_here = Arc::new(AtomicU64::new(0));
    let job = {
        let (node, counts) = (node.clone(), counts.clone());
        let panic_every_third = options.panic_every_third;
        move |run: shedlock::scheduler::RunContext| {
            let (node, counts, runs_here) = (node.clone(), counts.clone(), runs_here.clone());
            async move {
                let tick = label(run.tick());
                let token = shedlock::active_fencing_token()
                    .map_or_else(|| "none".to_owned(), |token| token.to_string());
                counts.ran.fetch_add(1, Ordering::Relaxed);
                println!("ran tick={tick} node={node} token={token}");
                let run_number = runs_here.fetch_add(1, Ordering::Relaxed) + 1;
                if panic_every_third && run_number % 3 == 0 {
                    panic!("tick {tick}: the job panics on every third run, as asked");
                }
            }
        }
    };
    scheduler.add(
        Job::new("scheduled-job", Schedule::fixed_rate(options.period), job)
            .lock_name(options.lock),
    )?;
    println!(
        "started node={node} period={:?} ticks={}",
        options.period,
        options
            .ticks
            .map_or_else(|| "until-ctrl-c".to_owned(), |ticks| ticks.to_string())
    );

    tokio::select! {
        () = done.notified() => {}
        signal = tokio::signal::ctrl_c() => signal?,
    }
    let report = scheduler.shutdown(SHUTDOWN_LIMIT).await;
    println!(
        "done node={node} ran={} skipped={} panicked={} other={} stopped_at_shutdown={}",
        counts.ran.load(Ordering::Relaxed),
        counts.skipped.load(Ordering::Relaxed),
        counts.panicked.load(Ordering::Relaxed),
        counts.other.load(Ordering::Relaxed),
        report.stopped.len()
    );
    Ok(())
}
