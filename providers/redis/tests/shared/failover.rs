//! What the failover test targets share: driving `ci/redis-failover.sh` (its path, its
//! `NAME=value` reports, and the restore that must run when a test fails half-way), the test's
//! own connections to one server and its `INFO REPLICATION`, and the bounds a provider is held
//! to while a master is down.

use std::collections::HashMap;
use std::future::Future;
use std::process::{Command, Stdio};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use shedlock_core::LockError;
use tokio::time::Instant;

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

/// A connection of the test's own to one server.
pub async fn connection(address: &str) -> redis::RedisResult<MultiplexedConnection> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(1)))
        .set_response_timeout(Some(Duration::from_secs(2)));
    redis::Client::open(format!("redis://{address}"))?
        .get_multiplexed_async_connection_with_config(&config)
        .await
}

/// `INFO REPLICATION` of the server at `address`, as fields.
pub async fn replication(address: &str) -> redis::RedisResult<HashMap<String, String>> {
    let info: String = redis::cmd("INFO")
        .arg("REPLICATION")
        .query_async(&mut connection(address).await?)
        .await?;
    Ok(info
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect())
}

/// The bounds a provider is held to while a master is down.
#[derive(Debug, Clone, Copy)]
pub struct Recovery {
    /// Each operation's own bound.
    pub operation_timeout: Duration,
    /// What an operation may take beyond its timeout: the scheduling of a loaded machine.
    pub slack: Duration,
    /// From the kill until the replica is promoted and the provider answers again.
    pub limit: Duration,
}

impl Recovery {
    /// Repeats `operation` until it answers, each time within its timeout, failing the test
    /// once `limit` has passed since `killed`; the errors met on the way, with their time.
    pub async fn until_answered<T, F, Fut>(
        self,
        what: &str,
        killed: Instant,
        mut operation: F,
    ) -> (T, Vec<String>)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, LockError>>,
    {
        let Self {
            operation_timeout,
            slack,
            limit,
        } = self;
        let mut errors = Vec::new();
        loop {
            let started = Instant::now();
            let outcome = operation().await;
            let took = started.elapsed();
            assert!(
                took <= operation_timeout + slack,
                "{what} took {took:?}, beyond its timeout of {operation_timeout:?} ({outcome:?})",
                outcome = outcome.as_ref().err()
            );
            match outcome {
                Ok(answer) => return (answer, errors),
                Err(error) => {
                    assert!(
                        matches!(error, LockError::Backend { .. } | LockError::Timeout { .. }),
                        "{what}: {error:?}"
                    );
                    errors.push(format!("{:.1} s: {error}", killed.elapsed().as_secs_f64()));
                    assert!(
                        killed.elapsed() < limit,
                        "{what} still failed {limit:?} after the master's kill: {errors:#?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        }
    }

    /// How long after `killed` the replica says it is a master, failing the test once `limit`
    /// has passed.
    pub async fn until_promoted(self, replica: String, killed: Instant) -> Duration {
        loop {
            if let Ok(info) = replication(&replica).await
                && info.get("role").map(String::as_str) == Some("master")
            {
                return killed.elapsed();
            }
            assert!(
                killed.elapsed() < self.limit,
                "the replica {replica} was not promoted within {:?} of its master's kill",
                self.limit
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
