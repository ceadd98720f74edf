//! One node of `shedlock demo`: its own process and connection, running the demo's job on the
//! scheduler like any replica of a service.
//!
//! It talks to the demo on its standard streams: it prints `ready` once connected, reads
//! `start <first tick, ms since the Unix epoch>`, then prints one line per tick (`ran N`,
//! `skipped N`, `other N <what happened>`) and exits after the last. The end of its input means
//! the demo is gone, and the node stops with it.

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Args;
use shedlock::scheduler::{
    Job, LockDefaults, RunContext, RunOutcome, RunReport, Schedule, Scheduler,
};
use tokio::sync::{Notify, oneshot};

use crate::Failure;
use crate::backend::{self, ConnectOptions};

/// How long a run still going at the end may take to finish and release its lock.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(2);

/// What the demo tells a node on its command line (the URL comes in `SHEDLOCK_URL`).
// No `Debug`: the URL may hold a password.
#[derive(Args)]
pub struct NodeArgs {
    #[arg(long, env = "SHEDLOCK_URL", hide_env_values = true)]
    url: String,
    #[arg(long)]
    name: String,
    #[arg(long)]
    lock: String,
    #[arg(long)]
    every_ms: u64,
    #[arg(long)]
    ticks: u32,
    #[arg(long)]
    at_most_ms: u64,
    #[arg(long)]
    at_least_ms: u64,
    #[arg(long)]
    timeout_ms: u64,
    #[arg(long)]
    tls_ca_file: Option<PathBuf>,
}

/// Connects, waits for the first tick, runs the ticks and reports each.
pub fn run(args: NodeArgs) -> Result<(), Failure> {
    crate::runtime()?.block_on(run_node(args))
}

async fn run_node(args: NodeArgs) -> Result<(), Failure> {
    let options = ConnectOptions {
        timeout: Duration::from_millis(args.timeout_ms),
        tls_ca_file: args.tls_ca_file.clone(),
    };
    let provider = backend::connect(&args.url, &options).await?;
    let defaults = LockDefaults::new(
        Duration::from_millis(args.at_most_ms),
        Duration::from_millis(args.at_least_ms),
    )
    .map_err(|error| Failure::from_error("", &error))?;
    say("ready");

    let (start, parent_gone) = listen_to_the_demo();
    let first_tick = start.await.map_err(|_| {
        Failure::Error(format!(
            "{}: the demo ended before the first tick",
            args.name
        ))
    })?;
    let until_first = first_tick
        .duration_since(SystemTime::now())
        .unwrap_or_default();

    let last_reported = Arc::new(Notify::new());
    let observer = {
        let last_reported = last_reported.clone();
        let last = u64::from(args.ticks) - 1;
        move |report: &RunReport| {
            report_tick(report);
            if report.tick.number >= last {
                last_reported.notify_one();
            }
        }
    };
    let mut scheduler = Scheduler::builder(provider, defaults)
        .on_run(observer)
        .build();
    let every = Duration::from_millis(args.every_ms);
    scheduler
        .add(
            Job::new(
                "shedlock-demo",
                // The demo hands every node the same first instant, so a grid counted from
                // it numbers the ticks alike on every node.
                Schedule::fixed_rate_per_node(every).first_run_after(until_first),
                // The job itself: say which tick this node runs. Its lock is held for
                // lock_at_least_for after it returns.
                |run: RunContext| async move { say(&format!("ran {}", run.tick().number)) },
            )
            .lock_name(args.lock.clone()),
        )
        .map_err(|error| Failure::from_error("", &error))?;

    let outcome = tokio::select! {
        () = last_reported.notified() => Ok(()),
        () = parent_gone.notified() => Err(Failure::Error(format!(
            "{}: the demo that started this node has gone; stopping",
            args.name
        ))),
    };
    scheduler.shutdown(SHUTDOWN_LIMIT).await;
    outcome
}

/// One line to the demo, at once.
fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

/// The ticks the job's own line does not cover.
fn report_tick(report: &RunReport) {
    let tick = report.tick.number;
    match &report.outcome {
        RunOutcome::Executed => {}
        RunOutcome::Skipped { .. } => say(&format!("skipped {tick}")),
        RunOutcome::Missed { ticks } => {
            // The report's tick is the next one planned; the missed ones came just before.
            for missed in tick.saturating_sub(*ticks)..tick {
                say(&format!(
                    "other {missed} missed: the previous run outlasted it"
                ));
            }
        }
        RunOutcome::LockFailed { error, .. } => say(&format!("other {tick} lock failed: {error}")),
        RunOutcome::Failed { error } => say(&format!("other {tick} job failed: {error}")),
        RunOutcome::Panicked { message } => say(&format!("other {tick} job panicked: {message}")),
        other => say(&format!("other {tick} {other:?}")),
    }
}

/// The first tick, when the demo sends it, and a notice when the demo goes away (the end of
/// this process's input), read on a thread of their own as reading stdin blocks.
fn listen_to_the_demo() -> (oneshot::Receiver<SystemTime>, Arc<Notify>) {
    let (start, started) = oneshot::channel();
    let gone = Arc::new(Notify::new());
    let notice = gone.clone();
    std::thread::spawn(move || {
        let mut lines = std::io::stdin().lock().lines();
        let first_tick = lines.next().and_then(Result::ok).and_then(|line| {
            let millis = line.strip_prefix("start ")?.trim().parse().ok()?;
            Some(UNIX_EPOCH + Duration::from_millis(millis))
        });
        match first_tick {
            Some(first_tick) => {
                let _ = start.send(first_tick);
            }
            // No start: dropping the sender tells the node.
            None => return,
        }
        for line in lines {
            if line.is_err() {
                break;
            }
        }
        notice.notify_one();
    });
    (started, gone)
}
