//! `shedlock demo`: several processes, each its own node with its own connection, run one job
//! on the same schedule under one lock; every tick must run on exactly one of them.
//!
//! The command starts the nodes by running its own executable again (`demo-node`, hidden),
//! hands them the URL in their environment (never on the command line, which `ps` shows),
//! waits until each is connected, then gives them all the same first tick on the wall clock.
//! Each node reports every tick on stdout; this process gathers the reports per tick.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Local};
use clap::Args;
use shedlock::{LockProvider, redact_url};

use crate::backend::{self, ConnectOptions, DEFAULT_TIMEOUT, parse_timeout};
use crate::progress::Progress;
use crate::{Failure, runtime};

pub mod node;

const DEMO_HELP: &str = "\
How it works: each node is a separate process with its own connection, as replicas of a
service would be. They run the same job on the same schedule (ticks on multiples of --every on
the wall clock) and before each run take the lock; the node that gets it runs the tick, the
others skip it. The lock is held with ShedLock's two bounds:
  lock_at_most_for   9/10 of a tick: if the node running the job dies, the lock frees itself
                     before the next tick, so a dead node costs one tick at most;
  lock_at_least_for  3/4 of a tick: a run is short, and without it a node whose timer fires a
                     little late (a slower start, a clock a little behind) would find the lock
                     free and run the same tick again; it is still free before the next tick.
(Both less the backend's time precision, and ShedLock's advice in general: lock_at_most_for
well above a run's normal length, lock_at_least_for above the clock differences of the nodes.)

Without --url (or SHEDLOCK_URL) the nodes share a new SQLite file in the temporary directory,
which the output names; nothing else is needed. With a URL, the SQL backends need ShedLock's
table (the error says how to create it). memory:// is a store inside each process: every node
then runs every tick, which is what the lock prevents on a shared backend.

Examples:
  shedlock demo
  shedlock demo --nodes 5 --ticks 10
  shedlock demo --url postgres://postgres@localhost/test --every 2s
  SHEDLOCK_URL=redis://localhost:6379 shedlock demo

Exit codes: 0 every tick ran exactly once, 1 a tick ran on no node or on several (the table
says which) or an error, 2 usage error.";

/// Watch separate processes share one lock: each tick runs on exactly one of them.
// No `Debug`: the URL may hold a password.
#[derive(Args)]
#[command(after_help = DEMO_HELP)]
pub struct DemoArgs {
    /// How many nodes (separate processes, each with its own connection).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u16).range(1..=32))]
    nodes: u16,
    /// How many ticks to run.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    ticks: u32,
    /// Time between ticks, in whole milliseconds, at least 100ms (`1s`, `500ms`, `PT2S`); ticks
    /// fall on multiples of it on the wall clock.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_every)]
    every: Duration,
    /// The backend the nodes share (default: a new SQLite file in the temporary directory).
    // `hide_env_values`: `--help` must not print a password that SHEDLOCK_URL holds.
    #[arg(long, env = "SHEDLOCK_URL", hide_env_values = true, value_name = "URL")]
    url: Option<String>,
    /// The lock's name.
    #[arg(long, value_name = "NAME", default_value = "shedlock-demo")]
    lock: String,
    /// How long connecting, and then each request to the backend, may take before it fails.
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TIMEOUT, value_parser = parse_timeout)]
    timeout: Duration,
    /// A PEM file of the CA that signed a rediss:// or etcds:// server's certificate.
    #[arg(long, value_name = "PEM_FILE")]
    tls_ca_file: Option<PathBuf>,
}

/// Below this, process start-up and timer jitter eat the margins around each tick.
const MIN_EVERY: Duration = Duration::from_millis(100);

fn parse_every(text: &str) -> Result<Duration, String> {
    let every = shedlock::parse_duration(text).map_err(|error| error.to_string())?;
    if every < MIN_EVERY || every.subsec_nanos() % 1_000_000 != 0 {
        return Err(format!(
            "a tick must be a whole number of milliseconds, at least {}ms",
            MIN_EVERY.as_millis()
        ));
    }
    Ok(every)
}

/// The two bounds every node's lock is taken with, from the tick length and the backend's
/// time precision (how much longer than asked the backend may hold a lock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockBounds {
    /// Below the tick, so a node that dies holding the lock blocks no later tick.
    pub at_most: Duration,
    /// Most of the tick, so a late node skips the tick another node ran; free again before
    /// the next tick.
    pub at_least: Duration,
}

impl LockBounds {
    /// The bounds for ticks `every` apart, or why the backend's precision is too coarse.
    pub fn for_ticks(every: Duration, precision: Duration) -> Result<Self, String> {
        let at_most = (every * 9 / 10).saturating_sub(precision);
        let at_least = (every * 3 / 4).saturating_sub(precision);
        // A quarter of the tick on each side of the held time is the margin for late timers.
        if at_least < every / 4 {
            let shortest = precision * 2;
            return Err(format!(
                "--every {every:?} is too short for this backend: it may hold a lock up to \
                 {precision:?} longer than asked (its time precision), so ticks must be at least \
                 {shortest:?} apart (--every {})",
                match shortest.subsec_millis() {
                    0 => format!("{}s", shortest.as_secs()),
                    _ => format!("{}ms", shortest.as_millis()),
                }
            ));
        }
        Ok(Self {
            at_most: round_to_millis(at_most),
            at_least: round_to_millis(at_least),
        })
    }
}

fn round_to_millis(duration: Duration) -> Duration {
    Duration::from_millis(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX))
}

/// The backend the nodes share, and what to tell the user about it.
struct Shared {
    url: String,
    shown: String,
    /// Told after the run: where the lock is kept and how to see it.
    afterwards: Option<String>,
    precision: Duration,
}

/// Runs the demo and prints its report.
pub fn run(args: DemoArgs) -> Result<(), Failure> {
    let options = ConnectOptions {
        timeout: args.timeout,
        tls_ca_file: args.tls_ca_file.clone(),
    };
    let shared = runtime()?.block_on(shared_backend(args.url.as_deref(), &options))?;
    let bounds = LockBounds::for_ticks(args.every, shared.precision).map_err(Failure::Error)?;

    println!(
        "shedlock demo: {} nodes (separate processes) run one job every {}, each tick under the \
         lock {:?} on {}",
        args.nodes,
        crate::times::span(args.every),
        args.lock,
        shared.shown
    );
    println!(
        "  lock_at_most_for {}: if a node dies holding the lock, it frees itself before the next \
         tick",
        crate::times::span(bounds.at_most)
    );
    println!(
        "  lock_at_least_for {}: a node whose timer fires late skips the tick another node ran; \
         free again before the next tick",
        crate::times::span(bounds.at_least)
    );
    if shared.url.to_ascii_lowercase().starts_with("memory:") {
        println!(
            "  memory:// is a store inside each process: every node has its own lock, so every \
             node will run every tick (a fleet needs a shared backend)"
        );
    }

    let mut fleet = Fleet::start(&args, &shared, bounds, &options)?;
    let first_tick = fleet.await_ready(args.every, args.timeout)?;
    let plan = Plan {
        first_tick,
        every: args.every,
        ticks: args.ticks,
        nodes: args.nodes,
    };
    println!("  first tick at {}\n", plan.label(0));
    let record = fleet.gather(&plan, args.timeout);
    let failed_nodes = fleet.finish(plan.end() + args.timeout);

    print_summary(&plan, &record);
    if let Some(afterwards) = &shared.afterwards {
        println!("{afterwards}");
    }
    if let Some(failure) = failed_nodes.first() {
        return Err(Failure::Error(failure.clone()));
    }
    let wrong = (0..plan.ticks)
        .filter(|&tick| record.runs(tick) != 1)
        .count();
    if wrong > 0 {
        return Err(Failure::Error(format!(
            "{wrong} of {} ticks did not run exactly once (see the table above)",
            plan.ticks
        )));
    }
    Ok(())
}

/// Connects to the URL given, or creates the default SQLite file, and reads the backend's
/// time precision; the nodes then connect on their own.
async fn shared_backend(url: Option<&str>, options: &ConnectOptions) -> Result<Shared, Failure> {
    let Some(url) = url else {
        return new_sqlite_file(options.timeout).await;
    };
    let provider = backend::connect(url, options).await?;
    Ok(Shared {
        url: url.to_owned(),
        shown: redact_url(url),
        afterwards: None,
        precision: provider.capabilities().time_precision,
    })
}

#[cfg(feature = "sqlite")]
async fn new_sqlite_file(timeout: Duration) -> Result<Shared, Failure> {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let directory = std::env::temp_dir().join(format!(
        "shedlock-demo-{}-{since_epoch}",
        std::process::id()
    ));
    std::fs::create_dir(&directory).map_err(|error| {
        Failure::from_error(
            &format!(
                "cannot create the demo's directory {}: ",
                directory.display()
            ),
            &error,
        )
    })?;
    let file = format!("sqlite://{}", directory.join("locks.db").display());
    // `mode=rwc`: the file is created by the first connection, this one.
    let url = format!("{file}?mode=rwc");
    let provider = shedlock::sqlite::SqliteLockProvider::builder()
        .create_table_with_fencing_if_missing()
        .connect_timeout(timeout)
        .operation_timeout(timeout)
        .connect(&url)
        .await
        .map_err(|error| Failure::from_error("", &error))?;
    Ok(Shared {
        precision: provider.capabilities().time_precision,
        url,
        shown: format!("{file} (a new SQLite file)"),
        afterwards: Some(format!(
            "the lock stays in that file; see it with: {} list --url {file}",
            this_command()
        )),
    })
}

/// This program as the user's shell runs it: `shedlock` where that name on the PATH is this
/// very program (installed), else its full path, as after `cargo run`, which leaves it in
/// `target/` and off the PATH.
#[cfg(feature = "sqlite")]
fn this_command() -> String {
    let Ok(this) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return "shedlock".to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .filter_map(|dir| std::fs::canonicalize(dir.join("shedlock")).ok())
            .next()
            .is_some_and(|found| found == this)
    });
    let path = this.display().to_string();
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._-+".contains(c);
    if on_path {
        "shedlock".to_owned()
    } else if path.chars().all(plain) {
        path
    } else {
        // Quoted for a POSIX shell, so a space in the path cannot split the command.
        format!("'{}'", path.replace('\'', r"'\''"))
    }
}

#[cfg(not(feature = "sqlite"))]
async fn new_sqlite_file(_timeout: Duration) -> Result<Shared, Failure> {
    Err(Failure::Error(
        "without --url the demo uses a new SQLite file, and this build of shedlock leaves SQLite \
         out: rebuild with `--features sqlite`, or pass --url"
            .to_owned(),
    ))
}

/// When the ticks fall, the same for every node.
struct Plan {
    first_tick: SystemTime,
    every: Duration,
    ticks: u32,
    nodes: u16,
}

impl Plan {
    fn at(&self, tick: u32) -> SystemTime {
        self.first_tick + self.every * tick
    }

    /// The tick's wall-clock time in the reader's zone: seconds, or milliseconds when ticks
    /// are closer than a second apart.
    fn label(&self, tick: u32) -> String {
        let time = DateTime::<Local>::from(self.at(tick));
        match self.every.subsec_millis() {
            0 => time.format("%H:%M:%S").to_string(),
            _ => time.format("%H:%M:%S%.3f").to_string(),
        }
    }

    fn end(&self) -> SystemTime {
        self.at(self.ticks)
    }

    fn node_name(node: u16) -> String {
        format!("node-{}", node + 1)
    }
}

/// What one node said about one tick.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Report {
    Ran,
    Skipped,
    /// Neither: the lock could not be taken, the job failed, the tick was missed.
    Other(String),
}

/// Every report, by tick and by node.
#[derive(Default)]
struct Record {
    ticks: BTreeMap<u32, BTreeMap<u16, Report>>,
}

impl Record {
    fn runs(&self, tick: u32) -> usize {
        self.ticks.get(&tick).map_or(0, |reports| {
            reports
                .values()
                .filter(|report| **report == Report::Ran)
                .count()
        })
    }

    fn nodes_that(&self, tick: u32, wanted: impl Fn(&Report) -> bool) -> Vec<String> {
        self.ticks
            .get(&tick)
            .into_iter()
            .flatten()
            .filter(|(_, report)| wanted(report))
            .map(|(&node, _)| Plan::node_name(node))
            .collect()
    }

    /// `tick 14:05:06  ran on node-2  (skipped: node-1, node-3)`, and what went wrong.
    fn line(&self, plan: &Plan, tick: u32) -> String {
        let ran = self.nodes_that(tick, |report| *report == Report::Ran);
        let skipped = self.nodes_that(tick, |report| *report == Report::Skipped);
        let mut line = format!("tick {}  ", plan.label(tick));
        match ran.len() {
            0 => line.push_str("ran on no node"),
            _ => line.push_str(&format!("ran on {}", ran.join(", "))),
        }
        line.push_str(&format!(
            "  (skipped: {})",
            match skipped.is_empty() {
                true => "none".to_owned(),
                false => skipped.join(", "),
            }
        ));
        let reports = self.ticks.get(&tick);
        for node in 0..plan.nodes {
            match reports.and_then(|reports| reports.get(&node)) {
                Some(Report::Other(what)) => {
                    line.push_str(&format!("  {}: {what}", Plan::node_name(node)));
                }
                None => line.push_str(&format!("  {}: no report", Plan::node_name(node))),
                Some(_) => {}
            }
        }
        if ran.len() > 1 {
            line.push_str(&format!("  <- {} runs, expected 1", ran.len()));
        }
        line
    }
}

/// What a node's process sends this one.
enum Event {
    Line(u16, String),
    Closed(u16),
}

/// The node processes, stopped when dropped.
struct Fleet {
    nodes: Vec<NodeProcess>,
    events: Receiver<Event>,
}

struct NodeProcess {
    child: Child,
    /// Open while this process lives: a node stops when it reads the end of its input.
    stdin: Option<ChildStdin>,
    stderr: Option<std::thread::JoinHandle<String>>,
    open: bool,
}

impl Fleet {
    fn start(
        args: &DemoArgs,
        shared: &Shared,
        bounds: LockBounds,
        options: &ConnectOptions,
    ) -> Result<Self, Failure> {
        let program = std::env::current_exe().map_err(|error| {
            Failure::from_error("cannot find this program to start the nodes: ", &error)
        })?;
        let (sender, events) = mpsc::channel();
        let mut fleet = Self {
            nodes: Vec::new(),
            events,
        };
        for node in 0..args.nodes {
            let mut command = Command::new(&program);
            command
                .arg("demo-node")
                .args(["--name", &Plan::node_name(node)])
                .args(["--lock", &args.lock])
                .args(["--every-ms", &args.every.as_millis().to_string()])
                .args(["--ticks", &args.ticks.to_string()])
                .args(["--at-most-ms", &bounds.at_most.as_millis().to_string()])
                .args(["--at-least-ms", &bounds.at_least.as_millis().to_string()])
                .args(["--timeout-ms", &options.timeout.as_millis().to_string()])
                .env("SHEDLOCK_URL", &shared.url)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            if let Some(path) = &options.tls_ca_file {
                command.arg("--tls-ca-file").arg(path);
            }
            let mut child = command.spawn().map_err(|error| {
                Failure::from_error(&format!("cannot start {}: ", Plan::node_name(node)), &error)
            })?;
            let stdout = child.stdout.take();
            let stderr = child.stderr.take();
            fleet.nodes.push(NodeProcess {
                stdin: child.stdin.take(),
                child,
                stderr: stderr.map(|mut stderr| {
                    std::thread::spawn(move || {
                        let mut text = String::new();
                        let _ = stderr.read_to_string(&mut text);
                        text
                    })
                }),
                open: true,
            });
            if let Some(stdout) = stdout {
                forward_lines(node, stdout, sender.clone());
            }
        }
        Ok(fleet)
    }

    /// Waits until every node is connected, then gives them all the first tick: the next
    /// multiple of the tick length on the wall clock, far enough ahead for all to hear of it.
    fn await_ready(&mut self, every: Duration, timeout: Duration) -> Result<SystemTime, Failure> {
        // Starting a process takes a moment beyond connecting.
        let allowed = timeout + Duration::from_secs(5);
        let deadline = Instant::now() + allowed;
        let total = self.nodes.len();
        let mut ready = vec![false; total];
        let progress = Progress::start(format!("starting {total} nodes"));
        while ready.iter().any(|ready| !ready) {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.events.recv_timeout(left) {
                Ok(Event::Line(node, line)) if line == "ready" => {
                    ready[usize::from(node)] = true;
                    let count = ready.iter().filter(|ready| **ready).count();
                    progress.set(format!("starting {total} nodes: {count} connected"));
                }
                Ok(Event::Line(..)) => {}
                Ok(Event::Closed(node)) => {
                    progress.finish();
                    return Err(Failure::Error(self.node_failure(node)));
                }
                Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                    progress.finish();
                    return Err(Failure::Error(format!(
                        "the nodes did not all connect within {allowed:?}"
                    )));
                }
            }
        }
        progress.finish();
        let every = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        let earliest = SystemTime::now() + Duration::from_millis(500);
        let since_epoch = earliest.duration_since(UNIX_EPOCH).unwrap_or_default();
        let since_epoch_ms = u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX);
        let first_ms = since_epoch_ms.div_ceil(every) * every;
        for node in &mut self.nodes {
            if let Some(stdin) = &mut node.stdin {
                // A node that cannot be told fails its ticks, which the table shows.
                let _ = writeln!(stdin, "start {first_ms}").and_then(|()| stdin.flush());
            }
        }
        Ok(UNIX_EPOCH + Duration::from_millis(first_ms))
    }

    /// Reads the nodes' reports until every node has closed its output or the last tick is
    /// long past, printing each tick's line once every node has reported it (or once it is
    /// overdue).
    fn gather(&mut self, plan: &Plan, timeout: Duration) -> Record {
        let mut record = Record::default();
        let mut next_line = 0_u32;
        // A node's report of a tick comes within a request's time of it; past that, a missing
        // report will not come.
        let overdue = |tick: u32| plan.at(tick) + plan.every + timeout;
        let give_up = Instant::now()
            + plan
                .end()
                .duration_since(SystemTime::now())
                .unwrap_or_default()
            + timeout
            + Duration::from_secs(5);
        loop {
            while next_line < plan.ticks {
                let reported = record.ticks.get(&next_line).map_or(0, BTreeMap::len);
                let waiting_for = self.nodes.iter().filter(|node| node.open).count();
                let complete = reported >= usize::from(plan.nodes) || waiting_for == 0;
                if !complete && SystemTime::now() < overdue(next_line) {
                    break;
                }
                println!("{}", record.line(plan, next_line));
                next_line += 1;
            }
            if next_line == plan.ticks && self.nodes.iter().all(|node| !node.open) {
                break;
            }
            let left = give_up.saturating_duration_since(Instant::now());
            if left.is_zero() {
                while next_line < plan.ticks {
                    println!("{}", record.line(plan, next_line));
                    next_line += 1;
                }
                break;
            }
            match self
                .events
                .recv_timeout(left.min(Duration::from_millis(200)))
            {
                Ok(Event::Line(node, line)) => {
                    if let Some((tick, report)) = parse_report(&line)
                        && tick < plan.ticks
                    {
                        record.ticks.entry(tick).or_default().insert(node, report);
                    }
                }
                Ok(Event::Closed(node)) => self.nodes[usize::from(node)].open = false,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    for node in &mut self.nodes {
                        node.open = false;
                    }
                }
            }
        }
        record
    }

    /// Waits for every node to exit (stopping those still running at `deadline`) and returns
    /// a line for each that failed.
    fn finish(&mut self, deadline: SystemTime) -> Vec<String> {
        let mut failures = Vec::new();
        for index in 0..self.nodes.len() {
            let exited = loop {
                match self.nodes[index].child.try_wait() {
                    Ok(Some(status)) => break Some(status),
                    Ok(None) if SystemTime::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    Ok(None) | Err(_) => break None,
                }
            };
            let node = u16::try_from(index).unwrap_or(u16::MAX);
            match exited {
                Some(status) if status.success() => {}
                Some(_) => failures.push(self.node_failure(node)),
                None => failures.push(format!(
                    "{} was still running after its last tick; stopped it",
                    Plan::node_name(node)
                )),
            }
        }
        failures
    }

    /// Why a node stopped: the last line it wrote on stderr (its own `shedlock: ...` error).
    fn node_failure(&mut self, node: u16) -> String {
        let process = &mut self.nodes[usize::from(node)];
        let _ = process.child.kill();
        let _ = process.child.wait();
        let said = process
            .stderr
            .take()
            .and_then(|reader| reader.join().ok())
            .unwrap_or_default();
        let last = said
            .lines()
            .rev()
            .find(|line| !line.trim().is_empty())
            .map(|line| line.trim_start_matches("shedlock: ").to_owned());
        format!(
            "{} stopped: {}",
            Plan::node_name(node),
            last.unwrap_or_else(|| "it exited without saying why".to_owned())
        )
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.stdin = None;
            if matches!(node.child.try_wait(), Ok(None)) {
                let _ = node.child.kill();
                let _ = node.child.wait();
            }
        }
    }
}

fn forward_lines(node: u16, stdout: impl Read + Send + 'static, events: Sender<Event>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if events.send(Event::Line(node, line)).is_err() {
                return;
            }
        }
        let _ = events.send(Event::Closed(node));
    });
}

/// `ran 3`, `skipped 3`, `other 3 lock failed: ...`, as [`node`] prints them.
fn parse_report(line: &str) -> Option<(u32, Report)> {
    let mut words = line.splitn(3, ' ');
    let kind = words.next()?;
    let tick = words.next()?.parse().ok()?;
    let report = match kind {
        "ran" => Report::Ran,
        "skipped" => Report::Skipped,
        "other" => Report::Other(words.next().unwrap_or("unknown").to_owned()),
        _ => return None,
    };
    Some((tick, report))
}

fn print_summary(plan: &Plan, record: &Record) {
    println!("\nruns per tick (each must be exactly 1):");
    println!("  {:<12}  RUNS  RAN ON", "TICK");
    for tick in 0..plan.ticks {
        let ran = record.nodes_that(tick, |report| *report == Report::Ran);
        println!(
            "  {:<12}  {:>4}  {}{}",
            plan.label(tick),
            ran.len(),
            match ran.is_empty() {
                true => "-".to_owned(),
                false => ran.join(", "),
            },
            match ran.len() {
                1 => "",
                _ => "  <- wrong",
            }
        );
    }
    println!("runs and skips per node:");
    println!(
        "  {:<8}  {:>4}  {:>7}  {:>5}",
        "NODE", "RAN", "SKIPPED", "OTHER"
    );
    for node in 0..plan.nodes {
        let count = |wanted: fn(&Report) -> bool| {
            record
                .ticks
                .values()
                .filter(|reports| reports.get(&node).is_some_and(wanted))
                .count()
        };
        println!(
            "  {:<8}  {:>4}  {:>7}  {:>5}",
            Plan::node_name(node),
            count(|report| *report == Report::Ran),
            count(|report| *report == Report::Skipped),
            count(|report| matches!(report, Report::Other(_))),
        );
    }
    let exactly_once = (0..plan.ticks)
        .filter(|&tick| record.runs(tick) == 1)
        .count();
    println!(
        "{exactly_once} of {} ticks ran exactly once across {} nodes",
        plan.ticks, plan.nodes
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_leave_a_quarter_tick_on_each_side() {
        let bounds =
            LockBounds::for_ticks(Duration::from_secs(1), Duration::from_millis(1)).unwrap();
        assert_eq!(bounds.at_most, Duration::from_millis(899));
        assert_eq!(bounds.at_least, Duration::from_millis(749));
    }

    #[test]
    fn a_coarse_backend_needs_longer_ticks() {
        // etcd: leases of whole seconds, 2 s at the least.
        let precision = Duration::from_secs(2);
        let error = LockBounds::for_ticks(Duration::from_secs(1), precision).unwrap_err();
        assert!(error.contains("(--every 4s)"), "{error}");
        let bounds = LockBounds::for_ticks(Duration::from_secs(4), precision).unwrap();
        assert_eq!(bounds.at_least, Duration::from_secs(1));
        assert!(bounds.at_most + precision < Duration::from_secs(4));
    }

    #[test]
    fn reports_parse_as_the_node_prints_them() {
        assert_eq!(parse_report("ran 3"), Some((3, Report::Ran)));
        assert_eq!(parse_report("skipped 0"), Some((0, Report::Skipped)));
        assert_eq!(
            parse_report("other 7 lock failed: no answer"),
            Some((7, Report::Other("lock failed: no answer".to_owned())))
        );
        assert_eq!(parse_report("ready"), None);
    }
}
