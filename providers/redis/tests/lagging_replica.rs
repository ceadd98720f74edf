//! A replica that lags, promoted after its master dies: what asynchronous replication loses,
//! and what `wait_for_replicas` (Redis' `WAIT`) does about it.
//!
//! The test runs a master and a replica of its own (Debian's `redis-server`, on free ports of
//! 127.0.0.1, no persistence), the replica streaming through a proxy the test can stall. While
//! it is stalled the replica receives nothing, as across a congested or partitioned link; nodes
//! take locks on the master, which is then killed (SIGKILL) and the replica promoted
//! (`REPLICAOF NO ONE`), as a failover would. A process kill alone on loopback loses nothing:
//! the master hands every write to the replica's socket before it answers.

use std::process::Stdio;
use std::time::Duration;

use shedlock_conformance::CountingProxy;
use shedlock_conformance::faults::StallProxy;
use shedlock_core::{Acquisition, ErrorKind, LockConfiguration, LockHandle, LockProvider};
use shedlock_redis::RedisLockProvider;
use tokio::process::{Child, Command};
use tokio::time::Instant;

/// Locks taken while the replica receives nothing.
const LAGGED_LOCKS: usize = 3;

/// One `redis-server` of the test's own, killed when dropped.
struct Server {
    port: u16,
    process: Child,
    dir: std::path::PathBuf,
}

impl Server {
    /// Starts `redis-server` on a free port, replicating from `master` when given, and waits
    /// until it answers.
    async fn start(master: Option<std::net::SocketAddr>) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "shedlock-lagging-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut command = Command::new("redis-server");
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args([
                "--repl-diskless-sync",
                "yes",
                "--repl-diskless-sync-delay",
                "0",
            ])
            .arg("--dir")
            .arg(&dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(master) = master {
            command.args([
                "--replicaof",
                &master.ip().to_string(),
                &master.port().to_string(),
            ]);
        }
        let process = command.spawn().unwrap_or_else(|error| {
            panic!("cannot start redis-server (ci/start-backends.sh installs it): {error}")
        });
        let server = Self { port, process, dir };
        server
            .wait_until("answers PING", |info| !info.is_empty())
            .await;
        server
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    async fn command(&self, args: &[&str]) -> redis::RedisResult<redis::Value> {
        let client = redis::Client::open(self.url())?;
        let mut connection = client.get_multiplexed_async_connection().await?;
        let mut command = redis::cmd(args[0]);
        for arg in &args[1..] {
            command.arg(*arg);
        }
        command.query_async(&mut connection).await
    }

    /// `INFO REPLICATION`, or "" while the server does not answer.
    async fn replication(&self) -> String {
        match self.command(&["INFO", "REPLICATION"]).await {
            Ok(value) => redis::from_redis_value(value).unwrap_or_default(),
            Err(_) => String::new(),
        }
    }

    async fn wait_until(&self, what: &str, done: impl Fn(&str) -> bool) {
        let started = Instant::now();
        loop {
            let info = self.replication().await;
            if done(&info) {
                return;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "redis-server on port {} still not {what} after 20 s: {info}",
                self.port
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn kill(&mut self) {
        self.process.kill().await.unwrap();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.process.start_kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A master, and a replica in sync with it through a stall proxy.
struct Pair {
    master: Server,
    replica: Server,
    link: StallProxy,
}

impl Pair {
    async fn start() -> Self {
        let master = Server::start(None).await;
        let link = StallProxy::start(&format!("127.0.0.1:{}", master.port))
            .await
            .unwrap();
        let replica = Server::start(Some(link.local_addr())).await;
        replica
            .wait_until("in sync with its master", |info| {
                info.contains("master_link_status:up")
            })
            .await;
        master
            .wait_until("serving its replica", |info| {
                info.contains("connected_slaves:1") && info.contains("state=online")
            })
            .await;
        // Online is not yet acknowledging: wait until a write comes back acknowledged.
        let started = Instant::now();
        loop {
            // A WAIT shorter than the client's own response timeout (500 ms).
            let client = redis::Client::open(master.url()).unwrap();
            let mut connection = client.get_multiplexed_async_connection().await.unwrap();
            let acknowledged: redis::RedisResult<((), u32)> = redis::pipe()
                .cmd("SET")
                .arg("ready")
                .arg(1)
                .cmd("WAIT")
                .arg(1)
                .arg(300)
                .query_async(&mut connection)
                .await;
            if matches!(acknowledged, Ok(((), 1))) {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "the replica acknowledged no write within 20 s"
            );
        }
        Self {
            master,
            replica,
            link,
        }
    }

    /// Kills the master and promotes the replica, before the stalled link can deliver
    /// anything: what the replica has now is what the promoted master has.
    async fn fail_over(mut self) -> Server {
        self.master.kill().await;
        self.replica
            .command(&["REPLICAOF", "NO", "ONE"])
            .await
            .unwrap();
        self.replica
            .wait_until("a master", |info| info.contains("role:master"))
            .await;
        drop(self.link);
        self.replica
    }
}

async fn provider(url: &str, env: &str) -> RedisLockProvider {
    RedisLockProvider::builder()
        .env(env)
        .operation_timeout(Duration::from_secs(2))
        .connect(url)
        .await
        .unwrap()
}

fn lock(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

fn names(run: &str) -> Vec<String> {
    (0..LAGGED_LOCKS)
        .map(|index| format!("lagged-{run}-{index}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lagging_replica_loses_the_locks_of_its_lag_unless_acquires_wait_for_it() {
    let env = format!("lag-{}", uuid::Uuid::new_v4().simple());
    let names = names("async");

    // Asynchronous replication: the master answers at once, and the lag is lost.
    let pair = Pair::start().await;
    let node = provider(&pair.master.url(), &env).await;
    pair.link.pause();
    let mut held = Vec::new();
    for name in &names {
        match node.try_lock(&lock(name)).await.unwrap() {
            Acquisition::Acquired(handle) => held.push(handle),
            other => panic!("{name}: nobody holds it, yet {other:?}"),
        }
    }
    let promoted = pair.fail_over().await;
    let other = provider(&promoted.url(), &env).await;
    let mut lost = 0;
    for name in &names {
        if other.try_lock(&lock(name)).await.unwrap().is_acquired() {
            lost += 1;
        }
    }
    assert_eq!(
        lost, LAGGED_LOCKS,
        "every lock taken while the replica received nothing is lost in the promotion"
    );
    drop((held, promoted));

    // Waiting for one replica: no acquire in the lag answers "acquired".
    let names = self::names("wait");
    let pair = Pair::start().await;
    let wait = Duration::from_secs(1);
    let node = RedisLockProvider::builder()
        .env(&env)
        .operation_timeout(Duration::from_secs(3))
        .wait_for_replicas(1, wait)
        .connect(&pair.master.url())
        .await
        .unwrap();
    // Before the lag, the replica acknowledges: the lock is taken, and survives the promotion.
    let kept = match node.try_lock(&lock("kept")).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("kept: nobody holds it, yet {other:?}"),
    };
    assert!(kept.extend(Duration::from_secs(90)).await.unwrap());
    pair.link.pause();
    let mut answers = Vec::new();
    for name in &names {
        let sent = Instant::now();
        let answer = node.try_lock(&lock(name)).await;
        answers.push((name, sent.elapsed(), answer));
    }
    let extended = kept.extend(Duration::from_secs(120)).await;
    let promoted = pair.fail_over().await;
    let other = provider(&promoted.url(), &env).await;
    for (name, took, answer) in &answers {
        match answer {
            Err(error) => {
                let message = error.to_string();
                assert!(
                    message.contains("only 0 of the 1 replicas")
                        && message.contains("must not run"),
                    "{name}: {message}"
                );
                // Written, but whether the write survives a failover is unknown.
                assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{name}: {message}");
                assert!(
                    *took >= wait && *took < Duration::from_secs(3),
                    "{name}: answered after {took:?}, not after the {wait:?} wait"
                );
            }
            Ok(acquisition) => panic!(
                "{name}: the acquire answered {acquisition:?} ({took:?}) though the replica \
                 received nothing: a task would run under a lock the promotion loses"
            ),
        }
        assert!(
            other.try_lock(&lock(name)).await.unwrap().is_acquired(),
            "{name}: a lock nobody was told they hold is free after the promotion"
        );
    }
    let error = extended.expect_err("an extend the replica did not acknowledge is an error");
    assert!(error.to_string().contains("previous expiry"), "{error}");
    assert_eq!(error.kind(), ErrorKind::OutcomeUnknown, "{error}");
    assert!(
        !other.try_lock(&lock("kept")).await.unwrap().is_acquired(),
        "a lock the replica acknowledged is still held after the promotion"
    );
    eprintln!(
        "redis lagging replica: {lost} of {LAGGED_LOCKS} locks taken in the lag were lost with \
         asynchronous replication; with wait_for_replicas(1, {wait:?}) every acquire in the lag \
         answered an error (after {:?} at most) and the lock acknowledged before the lag survived",
        answers
            .iter()
            .map(|(_, took, _)| *took)
            .max()
            .unwrap_or_default()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn waiting_for_replicas_costs_no_round_trip_more() {
    let pair = Pair::start().await;
    let proxy = CountingProxy::start(&format!("127.0.0.1:{}", pair.master.port))
        .await
        .unwrap();
    let node = RedisLockProvider::builder()
        .env(format!("lag-{}", uuid::Uuid::new_v4().simple()))
        .wait_for_replicas(1, Duration::from_secs(1))
        .connect(&format!("redis://{}", proxy.local_addr()))
        .await
        .unwrap();
    // Warm-up: each script once, so NOSCRIPT is out of the count.
    let warm: Box<dyn LockHandle> = node
        .try_lock(&lock("warm"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert!(warm.extend(Duration::from_secs(10)).await.unwrap());
    assert!(warm.unlock().await.unwrap());

    let before = proxy.round_trips();
    let handle = node
        .try_lock(&lock("counted"))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert_eq!(proxy.round_trips() - before, 1, "acquire with WAIT");
    let before = proxy.round_trips();
    assert!(handle.extend(Duration::from_secs(10)).await.unwrap());
    assert_eq!(proxy.round_trips() - before, 1, "extend with WAIT");
    let before = proxy.round_trips();
    assert!(handle.unlock().await.unwrap());
    assert_eq!(proxy.round_trips() - before, 1, "release");
}

#[tokio::test]
async fn wait_for_replicas_refuses_what_cannot_work() {
    let refused = |builder: shedlock_redis::RedisLockProviderBuilder, url: &'static str| async move {
        let error = builder
            .connect(url)
            .await
            .expect_err("refused before connecting");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
        error.to_string()
    };
    let builder = || RedisLockProvider::builder().operation_timeout(Duration::from_secs(2));
    let message = refused(
        builder().wait_for_replicas(0, Duration::from_millis(100)),
        "redis://127.0.0.1:1",
    )
    .await;
    assert!(message.contains("at least 1"), "{message}");
    for timeout in [
        Duration::ZERO,
        Duration::from_secs(2),
        Duration::from_secs(3),
    ] {
        let message = refused(
            builder().wait_for_replicas(1, timeout),
            "redis://127.0.0.1:1",
        )
        .await;
        assert!(
            message.contains("replica wait timeout")
                && message.contains("shorter than the operation timeout"),
            "{timeout:?}: {message}"
        );
    }
    let message = refused(
        builder().wait_for_replicas(1, Duration::from_millis(100)),
        "redis+cluster://127.0.0.1:1",
    )
    .await;
    assert!(
        message.contains("wait_for_replicas is not available with a redis+cluster:// URL"),
        "{message}"
    );
}
