//! Three processes of the `scheduled_job` example share one real backend, as three replicas of a
//! service would: over more than 20 ticks each tick runs exactly once across the three, with
//! the job panicking on every third run of each process and every process running to the end.
//!
//! The backends come from `SHEDLOCK_TEST_<BACKEND>_URL` (set by `ci/test.sh`); SQLite uses a
//! file of its own. Each run uses lock names of its own, so runs never see each other's locks.

use shedlock_test_support::settings;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Each process's ticks; they start within a tick or two of each other, and at least
/// `MIN_SHARED_TICKS` of them must be ticks all three saw.
const TICKS: u64 = 23;
const MIN_SHARED_TICKS: usize = 20;
/// The example holds its lock for at least half a period, so half a period is the margin a late
/// process has on each side of a tick.
const PERIOD: Duration = Duration::from_millis(400);
/// etcd holds a lock up to 2 s longer than asked (its leases count whole seconds, 2 s at the
/// least), so its ticks are further apart, and fewer: they start together at this period.
const ETCD_PERIOD: Duration = Duration::from_secs(4);
const ETCD_TICKS: u64 = 21;
/// Beyond the ticks' own time: three connects, and a slow machine. A process still going after
/// that has hung.
const DEADLINE_MARGIN: Duration = Duration::from_secs(60);

/// How one backend's three processes run.
#[derive(Clone, Copy)]
struct Plan {
    period: Duration,
    ticks: u64,
    /// Whether every run must carry a fencing token.
    fencing: bool,
}

const PLAN: Plan = Plan {
    period: PERIOD,
    ticks: TICKS,
    fencing: false,
};

fn unique_lock(backend: &str) -> String {
    format!(
        "example-{backend}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Runs `future` on a runtime of its own, for the table set-up.
fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// One process: its node name, and what it printed once it exited.
struct Node {
    name: String,
    status: ExitStatus,
    stdout: Vec<String>,
    stderr: String,
}

/// A line of the example's output: `kind key=value ...`. A `message=` field, which may hold
/// spaces, ends the line and is not read.
struct Line {
    kind: String,
    fields: BTreeMap<String, String>,
}

impl Line {
    fn parse(text: &str) -> Self {
        let mut words = text.split_whitespace();
        let kind = words.next().unwrap_or_default().to_owned();
        let fields = words
            .take_while(|word| !word.starts_with("message="))
            .filter_map(|word| word.split_once('='))
            .map(|(key, value)| (key.to_owned(), value.to_owned()))
            .collect();
        Self { kind, fields }
    }

    fn field(&self, key: &str) -> &str {
        self.fields
            .get(key)
            .unwrap_or_else(|| panic!("a {} line without {key}=", self.kind))
    }
}

fn spawn(
    url: &str,
    lock: &str,
    node: &str,
    plan: Plan,
) -> (Child, JoinHandle<Vec<String>>, JoinHandle<String>) {
    let period = format!("{}ms", plan.period.as_millis());
    let mut child = Command::new(env!("CARGO_BIN_EXE_scheduled_job"))
        .args(["--url", url, "--node", node, "--lock", lock])
        .args(["--period", &period, "--ticks", &plan.ticks.to_string()])
        .arg("--panic-every-third")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the scheduled_job binary starts");
    let stdout = BufReader::new(child.stdout.take().unwrap());
    let stdout = std::thread::spawn(move || stdout.lines().map(Result::unwrap).collect());
    let mut stderr = child.stderr.take().unwrap();
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        stderr.read_to_string(&mut text).unwrap();
        text
    });
    (child, stdout, stderr)
}

/// Starts the three processes at once and waits for them, killing them all at the deadline.
fn run_three(url: &str, lock: &str, plan: Plan) -> Vec<Node> {
    let deadline = plan.period * u32::try_from(plan.ticks).unwrap() + DEADLINE_MARGIN;
    let started = Instant::now();
    let mut running: Vec<_> = ["a", "b", "c"]
        .into_iter()
        .map(|node| (node, spawn(url, lock, node, plan)))
        .collect();
    let mut statuses: Vec<Option<ExitStatus>> = vec![None; running.len()];
    while statuses.iter().any(Option::is_none) {
        if started.elapsed() > deadline {
            for (_, (child, _, _)) in &mut running {
                let _ = child.kill();
            }
            let mut report = String::new();
            for (node, (mut child, stdout, stderr)) in running {
                let _ = child.wait();
                report += &format!(
                    "--- node {node} stdout:\n{}\n--- stderr:\n{}\n",
                    stdout.join().unwrap().join("\n"),
                    stderr.join().unwrap()
                );
            }
            panic!("the processes were still running after {deadline:?}:\n{report}");
        }
        for ((_, (child, _, _)), status) in running.iter_mut().zip(&mut statuses) {
            if status.is_none() {
                *status = child.try_wait().unwrap();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    running
        .into_iter()
        .zip(statuses)
        .map(|((node, (_, stdout, stderr)), status)| Node {
            name: node.to_owned(),
            status: status.unwrap(),
            stdout: stdout.join().unwrap(),
            stderr: stderr.join().unwrap(),
        })
        .collect()
}

/// Every check of one backend's run; on failure, all three outputs are shown.
fn check(backend: &str, nodes: &[Node], plan: Plan) {
    let shown = || {
        nodes
            .iter()
            .map(|node| {
                format!(
                    "--- {backend} node {} ({}) stdout:\n{}\n--- stderr:\n{}",
                    node.name,
                    node.status,
                    node.stdout.join("\n"),
                    node.stderr
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    // tick -> nodes that ran it; node -> the ticks it saw.
    let mut ran: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut tokens: BTreeMap<String, String> = BTreeMap::new();
    let mut seen: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let mut panicked_after_running_on = 0;
    for node in nodes {
        assert!(
            node.status.success(),
            "node {} failed:\n{}",
            node.name,
            shown()
        );
        let lines: Vec<Line> = node.stdout.iter().map(|line| Line::parse(line)).collect();
        let kinds: Vec<&str> = lines.iter().map(|line| line.kind.as_str()).collect();
        assert_eq!(kinds.first(), Some(&"started"), "{}", shown());
        assert_eq!(
            kinds.last(),
            Some(&"done"),
            "node {} did not run to its end:\n{}",
            node.name,
            shown()
        );
        let ticks = seen.entry(&node.name).or_default();
        let (mut runs, mut panics, mut skips) = (0, 0, 0);
        let mut ran_here: BTreeSet<String> = BTreeSet::new();
        for line in &lines[1..lines.len() - 1] {
            match line.kind.as_str() {
                "ran" => {
                    let tick = line.field("tick").to_owned();
                    assert_eq!(line.field("node"), node.name, "{}", shown());
                    ran.entry(tick.clone()).or_default().push(node.name.clone());
                    tokens.insert(tick.clone(), line.field("token").to_owned());
                    ran_here.insert(tick.clone());
                    runs += 1;
                    if panics > 0 {
                        // A run after a panic of this process: the panic did not stop it.
                        panicked_after_running_on += 1;
                    }
                }
                "panicked" => {
                    let tick = line.field("tick");
                    assert!(
                        ran_here.contains(tick),
                        "node {} panicked at tick {tick}, which it did not run:\n{}",
                        node.name,
                        shown()
                    );
                    panics += 1;
                    continue;
                }
                "skipped" => skips += 1,
                other => panic!(
                    "node {}: a tick neither ran nor skipped ({other}) on a healthy backend:\n{}",
                    node.name,
                    shown()
                ),
            }
            assert!(
                ticks.insert(line.field("tick").to_owned()),
                "node {} reported tick {} twice:\n{}",
                node.name,
                line.field("tick"),
                shown()
            );
        }
        assert_eq!(
            ticks.len() as u64,
            plan.ticks,
            "node {}:\n{}",
            node.name,
            shown()
        );
        assert_eq!(
            panics,
            runs / 3,
            "node {}: a panic on every third run:\n{}",
            node.name,
            shown()
        );
        let done = lines.last().unwrap();
        let counted = (
            done.field("ran"),
            done.field("skipped"),
            done.field("panicked"),
        );
        let printed = (runs.to_string(), skips.to_string(), panics.to_string());
        assert_eq!(
            counted,
            (printed.0.as_str(), printed.1.as_str(), printed.2.as_str()),
            "node {}: its last line counts what it printed:\n{}",
            node.name,
            shown()
        );
    }

    let all: BTreeSet<&String> = seen.values().flatten().collect();
    let shared = seen
        .values()
        .fold(None::<BTreeSet<String>>, |shared, ticks| {
            Some(match shared {
                None => ticks.clone(),
                Some(shared) => shared.intersection(ticks).cloned().collect(),
            })
        })
        .unwrap_or_default();
    assert!(
        shared.len() >= MIN_SHARED_TICKS,
        "only {} ticks were seen by all three processes:\n{}",
        shared.len(),
        shown()
    );
    for tick in &all {
        let runners = ran.get(*tick).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            runners.len(),
            1,
            "tick {tick} ran on {runners:?}, not on exactly one node:\n{}",
            shown()
        );
    }
    assert_eq!(
        ran.len(),
        all.len(),
        "every tick that ran was seen:\n{}",
        shown()
    );
    assert!(
        panicked_after_running_on > 0,
        "no process ran the job again after a panic:\n{}",
        shown()
    );

    // Fencing tokens grow with the ticks, whichever process ran them (ticks of one format sort
    // as text in time order).
    let numbers: Vec<u64> = tokens
        .values()
        .filter_map(|token| token.parse().ok())
        .collect();
    if plan.fencing {
        assert_eq!(
            numbers.len(),
            tokens.len(),
            "a tick without a fencing token:\n{}",
            shown()
        );
    }
    if !numbers.is_empty() {
        assert_eq!(
            numbers.len(),
            tokens.len(),
            "fencing on some ticks only:\n{}",
            shown()
        );
        assert!(
            numbers.windows(2).all(|pair| pair[0] < pair[1]),
            "fencing tokens do not grow with the ticks: {numbers:?}\n{}",
            shown()
        );
    }
}

#[test]
fn postgres_runs_each_tick_once_across_three_processes() {
    let url = settings::POSTGRES.value();
    block_on(async {
        // ShedLock's table as a migration would create it; an existing one is left alone.
        shedlock_postgres::PostgresLockProvider::builder()
            .create_table_if_missing()
            .connect(&url)
            .await
            .expect("PostgreSQL is reachable and has or gets ShedLock's table");
    });
    check(
        "postgres",
        &run_three(&url, &unique_lock("postgres"), PLAN),
        PLAN,
    );
}

#[test]
fn mariadb_runs_each_tick_once_across_three_processes() {
    let url = settings::MYSQL.value();
    block_on(async {
        shedlock_mysql::MySqlLockProvider::builder()
            .create_table_if_missing()
            .connect(&url)
            .await
            .expect("MariaDB is reachable and has or gets ShedLock's table");
    });
    check(
        "mariadb",
        &run_three(&url, &unique_lock("mariadb"), PLAN),
        PLAN,
    );
}

#[test]
fn sqlite_runs_each_tick_once_across_three_processes() {
    let lock = unique_lock("sqlite");
    let path = std::env::temp_dir().join(format!("shedlock-{lock}.db"));
    let url = format!("sqlite://{}?mode=rwc", path.display());
    block_on(async {
        // A new file: with the fencing column, so the tokens are checked too.
        shedlock_sqlite::SqliteLockProvider::builder()
            .create_table_with_fencing_if_missing()
            .connect(&url)
            .await
            .expect("the SQLite file is created with ShedLock's table");
    });
    let plan = Plan {
        fencing: true,
        ..PLAN
    };
    let nodes = run_three(&url, &lock, plan);
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    check("sqlite", &nodes, plan);
}

#[test]
fn redis_runs_each_tick_once_across_three_processes() {
    let url = settings::REDIS.value();
    check("redis", &run_three(&url, &unique_lock("redis"), PLAN), PLAN);
}

#[test]
fn etcd_runs_each_tick_once_across_three_processes() {
    let url = settings::ETCD.value();
    // The tests name etcd by its endpoint, http://host:2379; shedlock::connect by etcd://.
    let endpoints = url.strip_prefix("http://").unwrap_or_else(|| {
        panic!("SHEDLOCK_TEST_ETCD_URL is not an http:// endpoint, which etcd:// stands for")
    });
    let plan = Plan {
        period: ETCD_PERIOD,
        ticks: ETCD_TICKS,
        // Each acquire's revision.
        fencing: true,
    };
    let url = format!("etcd://{endpoints}");
    check("etcd", &run_three(&url, &unique_lock("etcd"), plan), plan);
}
