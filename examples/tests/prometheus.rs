//! The `prometheus` example as Prometheus meets it: started as a process, scraped over HTTP, its
//! text holding each job's outcomes and the locks' counters, with their help lines.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the example when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` with HTTP/1.0, as a scraper sends it; the answer's status line and body.
fn get(address: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

/// The value of the sample whose name and labels are exactly `series` (`name{a="b"}`).
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .filter_map(|line| line.rsplit_once(' '))
        .find(|(name, _)| *name == series)
        .map(|(_, value)| value.parse().unwrap())
}

#[test]
fn prometheus_scrapes_each_jobs_outcomes_and_the_lock_counters() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_prometheus"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let _running = Running(child);
    let mut first = String::new();
    BufReader::new(stdout).read_line(&mut first).unwrap();
    let address = first
        .trim()
        .strip_prefix("serving http://")
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the first line names the address: {first:?}"))
        .to_owned();

    // Both jobs tick every second and `import` fails every other run: wait for a failure.
    let deadline = Instant::now() + Duration::from_secs(20);
    let text = loop {
        let (status, text) = get(&address, "/metrics");
        assert_eq!(status, "HTTP/1.0 200 OK");
        if sample(
            &text,
            r#"shedlock_job_runs_total{job="import",outcome="failed"}"#,
        )
        .is_some()
        {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "no failed import in 20 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };

    let executed = |job: &str| {
        sample(
            &text,
            &format!(r#"shedlock_job_runs_total{{job="{job}",outcome="executed"}}"#),
        )
        .unwrap_or(0.0)
    };
    assert!(executed("import") >= 1.0, "{text}");
    assert!(executed("heartbeat") >= 1.0, "{text}");
    // One node on its own store: every tick took its lock, none was skipped or failed.
    let acquired = sample(&text, r#"shedlock_locks_acquired_total{lock="heartbeat"}"#).unwrap();
    assert!(acquired >= executed("heartbeat"), "{text}");
    assert!(!text.contains("shedlock_locks_skipped_total"), "{text}");
    assert!(!text.contains("shedlock_lock_failures_total"), "{text}");
    assert!(
        text.contains("# HELP shedlock_locks_acquired_total Locks taken: runs started"),
        "{text}"
    );
    assert!(
        text.contains(
            r#"shedlock_acquire_seconds{lock="heartbeat",outcome="acquired",quantile="0.5"}"#
        ),
        "{text}"
    );

    // The lock view beside it.
    let (status, locks) = get(&address, "/locks");
    assert_eq!(status, "HTTP/1.0 200 OK");
    assert!(locks.contains(r#""name":"heartbeat""#), "{locks}");
}
