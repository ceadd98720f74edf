//! `shedlock bench` end to end: the built binary benches the embedded backends (no URL) and real
//! servers (`SHEDLOCK_TEST_POSTGRES_URL`, `SHEDLOCK_TEST_REDIS_URL`, set by ci/test.sh; a
//! backend whose feature is on and whose variable is missing fails its test, naming the
//! variable), and the table, the JSON and the SVG chart come out whole.
//!
//! No figure is asserted against a time: these are shared machines. What is asserted is that
//! every bench of every backend was measured, that the figures are consistent with each other
//! (p50 ≤ p99, a ratio wherever the bench has a floor), that the chart draws a line per backend
//! and bench it names, and that a password never shows.

mod command;

use std::path::PathBuf;

use command::{Ran, run, shedlock};
use serde_json::Value;

/// Every bench, in the order the command measures and prints them: each floor beside the
/// benches measured in turn with it.
const BENCHES: [&str; 9] = [
    "floor_write",
    "cycle",
    "first_acquire",
    "floor_read",
    "refused",
    "floor_contention_8",
    "floor_contention_32",
    "contention_8",
    "contention_32",
];

/// The benches that have a floor to be compared with, and so a ratio.
const WITH_A_FLOOR: [&str; 5] = [
    "cycle",
    "first_acquire",
    "refused",
    "contention_8",
    "contention_32",
];

/// A chart path of the test's own, removed when dropped.
struct ChartFile(PathBuf);

impl ChartFile {
    fn new() -> Self {
        Self(std::env::temp_dir().join(format!("shedlock-bench-{}.svg", uuid::Uuid::new_v4())))
    }

    fn arg(&self) -> &str {
        self.0.to_str().expect("a UTF-8 temporary path")
    }

    /// The chart, checked to be one whole SVG document with a line and a legend entry for each
    /// of `backends`' cycle and floor write.
    fn read_checked(&self, backends: &[&str]) -> String {
        let svg = std::fs::read_to_string(&self.0).expect("the chart was written");
        let trimmed = svg.trim();
        assert!(
            trimmed.starts_with("<svg") && trimmed.ends_with("</svg>"),
            "one SVG document:\n{svg}"
        );
        assert_eq!(svg.matches("<svg").count(), 1, "{svg}");
        for backend in backends {
            for bench in ["cycle", "floor_write"] {
                let legend = format!("{backend} {bench}");
                assert!(svg.contains(&legend), "{legend:?} in the legend:\n{svg}");
            }
        }
        // A line per backend and bench, each drawn from many points.
        let lines: Vec<&str> = svg
            .split("<polyline")
            .skip(1)
            .filter(|line| line.contains("points=\""))
            .collect();
        assert!(
            lines.len() >= 2 * backends.len(),
            "{} lines for {} backends:\n{svg}",
            lines.len(),
            backends.len()
        );
        svg
    }
}

impl Drop for ChartFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The run's JSON document, checked to hold every bench of each of `backends`, in order, with
/// consistent figures.
fn checked_json(ran: &Ran, backends: &[&str]) -> Value {
    assert_eq!(ran.code, Some(0), "{}", ran.shown());
    let document: Value = serde_json::from_str(&ran.stdout)
        .unwrap_or_else(|error| panic!("stdout is one JSON document ({error}):\n{}", ran.shown()));
    let measured: Vec<&str> = document["backends"]
        .as_array()
        .expect("a list of backends")
        .iter()
        .map(|backend| backend["backend"].as_str().expect("a backend name"))
        .collect();
    assert_eq!(measured, backends, "{}", ran.stdout);
    for backend in document["backends"].as_array().unwrap() {
        let benches = backend["benches"].as_array().expect("a list of benches");
        let names: Vec<&str> = benches
            .iter()
            .map(|b| b["bench"].as_str().unwrap())
            .collect();
        assert_eq!(names, BENCHES, "{}", ran.stdout);
        for bench in benches {
            let name = bench["bench"].as_str().unwrap();
            let p50 = bench["p50_us"].as_f64().expect("p50_us");
            let p99 = bench["p99_us"].as_f64().expect("p99_us");
            assert!(bench["samples"].as_u64().expect("samples") >= 1, "{bench}");
            assert!(0.0 < p50 && p50 <= p99, "{bench}");
            assert!(bench["ops_per_sec"].as_f64().expect("ops_per_sec") > 0.0);
            let ratio = &bench["ratio_to_floor"];
            if WITH_A_FLOOR.contains(&name) {
                assert!(ratio.as_f64().expect("a ratio") > 0.0, "{bench}");
                let floor = bench["floor"]["bench"].as_str().expect("the floor's name");
                let expected = match name {
                    "refused" => "floor_read",
                    "contention_8" => "floor_contention_8",
                    "contention_32" => "floor_contention_32",
                    _ => "floor_write",
                };
                assert_eq!(floor, expected, "{bench}");
            } else {
                assert!(ratio.is_null(), "a floor has no ratio: {bench}");
                assert!(bench["floor"].is_null(), "{bench}");
            }
        }
    }
    document
}

#[cfg(all(feature = "memory", feature = "sqlite"))]
#[test]
fn with_no_url_it_benches_the_embedded_backends_into_a_table_and_a_chart() {
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--duration",
        "1400ms",
        "--chart",
        chart.arg(),
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.shown());

    let mut lines = ran.stdout.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["BACKEND", "BENCH", "P50", "P99", "OPS/S", "FLOOR", "RATIO"],
        "{}",
        ran.shown()
    );
    let rows: Vec<Vec<&str>> = lines
        .by_ref()
        .take_while(|line| !line.is_empty())
        .map(|line| line.split("  ").filter(|c| !c.is_empty()).collect())
        .collect();
    let expected: Vec<(&str, &str)> = ["memory", "sqlite"]
        .into_iter()
        .flat_map(|backend| BENCHES.map(|bench| (backend, bench)))
        .collect();
    let shown: Vec<(&str, &str)> = rows
        .iter()
        .map(|row| (row[0].trim(), row[1].trim()))
        .collect();
    assert_eq!(shown, expected, "{}", ran.shown());
    for row in &rows {
        let ratio = row.last().unwrap().trim();
        if WITH_A_FLOOR.contains(&row[1].trim()) {
            assert!(ratio.ends_with('x'), "a ratio in {row:?}");
        } else {
            assert_eq!(ratio, "-", "a floor has no ratio: {row:?}");
        }
    }
    let footer = lines.collect::<Vec<_>>().join("\n");
    assert!(footer.contains(chart.arg()), "the chart's path: {footer}");
    // The progress line went to stderr, not into the table.
    assert!(!ran.stdout.contains('['), "{}", ran.shown());

    chart.read_checked(&["memory", "sqlite"]);
}

#[cfg(all(feature = "memory", feature = "sqlite"))]
#[test]
fn json_holds_every_figure_of_every_backend() {
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--json",
        "--duration",
        "900ms",
        "--chart",
        chart.arg(),
    ]));
    let document = checked_json(&ran, &["memory", "sqlite"]);
    assert_eq!(document["chart"].as_str(), Some(chart.arg()));
    assert_eq!(document["measured_per_bench_ms"].as_f64(), Some(100.0));
    chart.read_checked(&["memory", "sqlite"]);
}

/// Makes ShedLock's table in the database `url` names, as the fleet's operator has: the bench
/// never creates a table on a server.
#[cfg(feature = "postgres")]
fn make_the_lock_table(url: &str) {
    tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(
            shedlock::AnyLockProvider::builder()
                .create_table_if_missing()
                .connect(url),
        )
        .expect("ShedLock's table is made");
}

#[cfg(all(feature = "postgres", feature = "redis"))]
#[test]
fn postgres_and_redis_are_benched_side_by_side_without_showing_a_password() {
    let postgres = shedlock_test_support::settings::POSTGRES.value();
    let redis = shedlock_test_support::settings::REDIS.value();
    // The CI server trusts every connection, so a password can be given and must never show.
    let postgres = postgres.replacen("://postgres@", "://postgres:hunter2-secret@", 1);
    assert!(postgres.contains("hunter2-secret"), "{postgres}");
    make_the_lock_table(&postgres);
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--url",
        &postgres,
        "--url",
        &redis,
        "--duration",
        "1400ms",
        "--json",
        "--chart",
        chart.arg(),
    ]));
    let document = checked_json(&ran, &["postgres", "redis"]);
    assert!(
        !ran.stdout.contains("hunter2") && !ran.stderr.contains("hunter2"),
        "{}",
        ran.shown()
    );
    let svg = chart.read_checked(&["postgres", "redis"]);
    assert!(!svg.contains("hunter2"));
    assert_eq!(
        document["backends"][0]["url"].as_str(),
        Some(shedlock::redact_url(&postgres).as_str())
    );
}

/// `--after-idle` adds before_idle and after_idle last, each a round of one cycle on each of 32
/// nodes, the second after that long idle and set beside the first; the seven benches before
/// them are as without it.
#[cfg(feature = "postgres")]
#[test]
fn after_idle_is_measured_last_on_32_nodes_beside_the_same_round_before_it() {
    let postgres = shedlock_test_support::settings::POSTGRES.value();
    make_the_lock_table(&postgres);
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--url",
        &postgres,
        "--duration",
        "700ms",
        "--after-idle",
        "300ms",
        "--json",
        "--chart",
        chart.arg(),
    ]));
    assert_eq!(ran.code, Some(0), "{}", ran.shown());
    let document: Value = serde_json::from_str(&ran.stdout).expect("one JSON document");
    let benches = document["backends"][0]["benches"]
        .as_array()
        .expect("a list of benches");
    let names: Vec<&str> = benches
        .iter()
        .map(|b| b["bench"].as_str().unwrap())
        .collect();
    let mut expected = BENCHES.to_vec();
    expected.extend(["before_idle", "after_idle"]);
    assert_eq!(names, expected, "{}", ran.stdout);
    let (before_idle, after_idle) = (&benches[BENCHES.len()], &benches[BENCHES.len() + 1]);
    assert_eq!(before_idle["samples"].as_u64(), Some(32), "{before_idle}");
    assert_eq!(after_idle["samples"].as_u64(), Some(32), "{after_idle}");
    let floor = &after_idle["floor"];
    assert_eq!(floor["bench"].as_str(), Some("before_idle"), "{after_idle}");
    assert_eq!(floor["times"].as_u64(), Some(1), "{after_idle}");
    assert!(after_idle["ratio_to_floor"].as_f64().expect("a ratio") > 0.0);
}

#[test]
fn a_url_of_no_known_backend_is_a_one_line_error() {
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--url",
        "ftp://user:pw-secret@host/x",
        "--chart",
        chart.arg(),
    ]));
    let line = ran.one_line_error(1);
    assert!(line.contains("ftp://"), "{line}");
    assert!(!ran.stderr.contains("pw-secret"), "{}", ran.shown());
    assert!(
        !chart.0.exists(),
        "no chart for a run that measured nothing"
    );
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_server_fails_in_one_line_within_the_timeout() {
    // A port nothing listens on: bound, then closed.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("postgres://postgres:pw-secret@127.0.0.1:{port}/test");
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--url",
        &url,
        "--timeout",
        "2s",
        "--chart",
        chart.arg(),
    ]));
    // 6: the server could not be reached, so trying again later may work.
    ran.one_line_error(6);
    assert!(!ran.stderr.contains("pw-secret"), "{}", ran.shown());
    assert!(ran.took.as_secs() < 30, "{}", ran.shown());
    assert!(!chart.0.exists());
}

#[test]
fn a_bad_duration_is_a_usage_error() {
    let ran = run(&mut shedlock(&["bench", "--duration", "10"]));
    assert_eq!(ran.code, Some(2), "{}", ran.shown());
    assert!(ran.stderr.contains("--duration"), "{}", ran.shown());
}

#[cfg(feature = "sqlite")]
#[test]
fn a_database_without_the_lock_table_is_refused_and_left_as_it_was() {
    let database = std::env::temp_dir().join(format!("shedlock-bench-{}.db", uuid::Uuid::new_v4()));
    let url = format!("sqlite://{}?mode=rwc", database.display());
    let chart = ChartFile::new();
    let ran = run(&mut shedlock(&[
        "bench",
        "--url",
        &url,
        "--chart",
        chart.arg(),
    ]));
    let line = ran.one_line_error(1).to_owned();
    let tables = std::fs::read(&database).unwrap_or_default();
    let _ = std::fs::remove_file(&database);
    assert!(line.contains("CREATE TABLE"), "says how to make it: {line}");
    // An SQLite file names each of its tables in its schema page: none was made.
    assert!(
        !String::from_utf8_lossy(&tables).contains("CREATE TABLE"),
        "the bench made a table"
    );
    assert!(!chart.0.exists());

    // Asked to, it makes the table and benches.
    let ran = run(&mut shedlock(&[
        "bench",
        "--url",
        &url,
        "--create-table",
        "--duration",
        "700ms",
        "--json",
        "--chart",
        chart.arg(),
    ]));
    let tables = std::fs::read(&database).unwrap_or_default();
    let _ = std::fs::remove_file(&database);
    checked_json(&ran, &["sqlite"]);
    assert!(String::from_utf8_lossy(&tables).contains("CREATE TABLE"));
}
