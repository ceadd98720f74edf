//! Driving `ci/redis-failover.sh` from a test: its path, its `NAME=value` reports, and the
//! restore that must run when a test fails half-way. Included by the failover test targets.

use std::collections::HashMap;
use std::process::{Command, Stdio};

/// The path of `ci/redis-failover.sh`.
pub const FAILOVER_VAR: &str = "SHEDLOCK_TEST_REDIS_FAILOVER";

/// `SHEDLOCK_TEST_REDIS_FAILOVER`: a missing variable fails the test, never skips it.
pub fn failover_script() -> String {
    match std::env::var(FAILOVER_VAR) {
        Ok(path) if !path.trim().is_empty() => path.trim().to_owned(),
        _ => panic!(
            "{FAILOVER_VAR} is not set: this test needs the path of ci/redis-failover.sh, e.g. \
             {FAILOVER_VAR}=$PWD/ci/redis-failover.sh (ci/test.sh sets it)"
        ),
    }
}

/// The `NAME=value` lines of a script's stdout.
pub fn fields(lines: &str) -> HashMap<String, String> {
    lines
        .lines()
        .filter_map(|line| line.trim().split_once('='))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect()
}

/// Runs `ci/redis-failover.sh <args>` (its log goes to stderr), failing the test if it fails.
pub fn run_script(script: &str, args: &[&str]) -> HashMap<String, String> {
    let output = tokio::task::block_in_place(|| {
        Command::new(script)
            .args(args)
            .stdin(Stdio::null())
            .stderr(Stdio::inherit())
            .output()
    })
    .unwrap_or_else(|error| panic!("could not run {script}: {error}"));
    assert!(
        output.status.success(),
        "{script} {} failed: {}",
        args.join(" "),
        output.status
    );
    fields(&String::from_utf8_lossy(&output.stdout))
}

/// Runs the script's `restore` command if the test fails half-way: a master killed and not
/// restarted would fail the tests of the other targets that use the same servers.
pub struct RestoreOnPanic {
    pub script: String,
    pub restore: &'static str,
}

impl Drop for RestoreOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "the failover test failed; running {} {}",
                self.script, self.restore
            );
            let _ = Command::new(&self.script)
                .arg(self.restore)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .status();
        }
    }
}
