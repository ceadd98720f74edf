//! What each lock operation costs on the wire against a real Redis (`SHEDLOCK_TEST_REDIS_URL`),
//! counted by the kit's `CountingProxy`: one round trip each, with fencing off and on.
//!
//! Every script is sent as `EVALSHA`; a server that has not seen a script yet answers
//! `NOSCRIPT`, and the client loads it and retries, which costs more once per script per server
//! (not per connection or operation). The warm-up runs every operation once, so what is counted
//! after it is the steady state.

use shedlock_test_support::settings;
use std::future::Future;
use std::time::Duration;

use shedlock_conformance::CountingProxy;
use shedlock_core::{Acquisition, LockConfiguration, LockError, LockHandle, LockProvider};
use shedlock_redis::RedisLockProvider;

/// A proxy to the test server and the providers behind it, all on one env of their own.
struct Wire {
    proxy: CountingProxy,
    env: String,
}

impl Wire {
    async fn start() -> Self {
        Self::start_at(&settings::REDIS.value()).await
    }

    /// The same, in front of the server at `url`.
    async fn start_at(url: &str) -> Self {
        let upstream = url.trim_start_matches("redis://").trim_end_matches('/');
        Self {
            proxy: CountingProxy::start(upstream).await.unwrap(),
            env: format!("wire-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// A provider through the proxy, warmed up: connected, and every operation (so every
    /// script) run once.
    async fn provider(&self, fencing: bool) -> RedisLockProvider {
        let provider = RedisLockProvider::builder()
            .env(&self.env)
            .fencing(fencing)
            .connect(&format!("redis://{}", self.proxy.local_addr()))
            .await
            .unwrap();
        let warm_up = acquired(provider.try_lock(&config("warm-up", Duration::ZERO)).await);
        assert!(warm_up.extend(Duration::from_secs(10)).await.unwrap());
        assert!(warm_up.unlock().await.unwrap());
        provider
    }

    /// Runs `operation` and returns its result and the round trips it cost, asserting that it
    /// opened no connection.
    async fn measure<T>(&self, operation: impl Future<Output = T>) -> (T, u64) {
        let (round_trips, connections) = (self.proxy.round_trips(), self.proxy.connections());
        let result = operation.await;
        assert_eq!(self.proxy.connections(), connections, "no new connection");
        (result, self.proxy.round_trips() - round_trips)
    }
}

fn config(name: &str, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(10), at_least).unwrap()
}

#[track_caller]
fn acquired(acquisition: Result<Acquisition, LockError>) -> Box<dyn LockHandle> {
    match acquisition.unwrap() {
        Acquisition::Acquired(handle) => handle,
        Acquisition::NotAcquired(holder) => panic!("not acquired: held by {holder:?}"),
    }
}

async fn every_operation_is_one_round_trip(fencing: bool) {
    let wire = Wire::start().await;
    let holder = wire.provider(fencing).await;
    let contender = wire.provider(fencing).await;
    let job = config("job", Duration::ZERO);

    let (handle, round_trips) = wire.measure(holder.try_lock(&job)).await;
    assert_eq!(round_trips, 1, "acquire of a new name (fencing {fencing})");
    let handle = acquired(handle);
    let asked = std::time::SystemTime::now();
    let (refused, round_trips) = wire.measure(contender.try_lock(&job)).await;
    assert_eq!(round_trips, 1, "refused acquire (fencing {fencing})");
    // The same round trip says who holds the lock and until when (10 s from the acquire).
    let Acquisition::NotAcquired(Some(held)) = refused.unwrap() else {
        panic!("refused without naming the holder (fencing {fencing})");
    };
    let holder_name = shedlock_core::raw::default_holder();
    assert_eq!(
        held.locked_by.as_deref(),
        Some(holder_name.as_str()),
        "{held:?}"
    );
    let left = held.held_until.unwrap().duration_since(asked).unwrap();
    assert!(
        left > Duration::from_secs(9) && left <= Duration::from_secs(11),
        "{left:?}"
    );
    let (extended, round_trips) = wire.measure(handle.extend(Duration::from_secs(20))).await;
    assert!(extended.unwrap());
    assert_eq!(round_trips, 1, "extend (fencing {fencing})");
    let (released, round_trips) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_eq!(round_trips, 1, "release (fencing {fencing})");

    let (handle, round_trips) = wire.measure(holder.try_lock(&job)).await;
    assert_eq!(
        round_trips, 1,
        "acquire of a free known name (fencing {fencing})"
    );
    assert!(acquired(handle).unlock().await.unwrap());

    let handle = acquired(
        holder
            .try_lock(&config("kept", Duration::from_secs(5)))
            .await,
    );
    let (released, round_trips) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_eq!(
        round_trips, 1,
        "release within lock_at_least_for (fencing {fencing})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_is_one_round_trip_by_default() {
    every_operation_is_one_round_trip(false).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_is_one_round_trip_with_fencing() {
    every_operation_is_one_round_trip(true).await;
}

/// The commands Redis ran on this wire's keys while `operation` ran, as `MONITOR` shows them
/// (`"SET" "<key>" ...`), one per line.
async fn commands_during<T>(wire: &Wire, operation: impl Future<Output = T>) -> (T, Vec<String>) {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

    let url = settings::REDIS.value();
    let address = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut monitor = BufReader::new(tokio::net::TcpStream::connect(address).await.unwrap());
    monitor.get_mut().write_all(b"MONITOR\r\n").await.unwrap();
    let mut line = String::new();
    monitor.read_line(&mut line).await.unwrap();
    assert_eq!(line.trim_end(), "+OK");
    let result = operation.await;
    // A marker from another connection: once MONITOR shows it, it has shown everything before.
    let marker = format!("{}-done", wire.env);
    let client = redis::Client::open(url.as_str()).unwrap();
    let mut connection = client.get_multiplexed_async_connection().await.unwrap();
    let _: String = redis::cmd("ECHO")
        .arg(&marker)
        .query_async(&mut connection)
        .await
        .unwrap();
    let mut seen = Vec::new();
    loop {
        line.clear();
        monitor.read_line(&mut line).await.unwrap();
        if line.contains(&marker) {
            break;
        }
        if line.contains(&wire.env) {
            // `+<time> [<db> <client>] "CMD" "arg"...`: keep the command and its arguments.
            seen.push(line.split_once("] ").unwrap().1.trim_end().to_owned());
        }
    }
    (result, seen)
}

/// Without fencing, an acquire is ShedLock's `SET NX PX` with `GET` and a `PTTL`, pipelined:
/// no script runs on the server, taken or refused. With fencing, the script runs, since the
/// counter must move in the same step as the `SET`.
#[tokio::test(flavor = "multi_thread")]
async fn an_acquire_without_fencing_is_two_plain_commands() {
    let wire = Wire::start().await;
    let holder = wire.provider(false).await;
    let contender = wire.provider(false).await;
    let job = config("plain", Duration::ZERO);
    let ((handle, refused), commands) = commands_during(&wire, async {
        let handle = acquired(holder.try_lock(&job).await);
        (handle, contender.try_lock(&job).await.unwrap())
    })
    .await;
    assert!(!refused.is_acquired());
    let verbs: Vec<&str> = commands
        .iter()
        .map(|command| command.split(' ').next().unwrap())
        .collect();
    assert_eq!(
        verbs,
        ["\"SET\"", "\"PTTL\"", "\"SET\"", "\"PTTL\""],
        "{commands:#?}"
    );
    assert!(
        commands[0].ends_with("\"NX\" \"PX\" \"10000\" \"GET\""),
        "{commands:#?}"
    );
    assert!(handle.unlock().await.unwrap());

    let fenced = wire.provider(true).await;
    let (taken, commands) =
        commands_during(&wire, fenced.try_lock(&config("fenced", Duration::ZERO))).await;
    assert!(acquired(taken).unlock().await.unwrap());
    assert!(commands[0].starts_with("\"EVALSHA\""), "{commands:#?}");
}

/// Redis 6.2 refuses `SET ... NX ... GET` (a syntax error, nothing written): the provider's
/// first acquire falls back to the script, and every later one goes straight to it, one round
/// trip each, taken or refused, with the holder named.
#[tokio::test(flavor = "multi_thread")]
async fn before_redis_7_an_acquire_falls_back_to_the_script_once() {
    let wire = Wire::start_at(&settings::REDIS_6.value()).await;
    let holder = RedisLockProvider::builder()
        .env(&wire.env)
        .connect(&format!("redis://{}", wire.proxy.local_addr()))
        .await
        .unwrap();
    let (first, round_trips) = wire
        .measure(holder.try_lock(&config("first", Duration::ZERO)))
        .await;
    assert!(acquired(first).unlock().await.unwrap());
    assert!(
        round_trips >= 2,
        "the refused pipeline, then the script: {round_trips}"
    );

    let contender = wire.provider(false).await;
    let job = config("job", Duration::ZERO);
    let (handle, round_trips) = wire.measure(holder.try_lock(&job)).await;
    let handle = acquired(handle);
    assert_eq!(round_trips, 1, "acquire after the fallback");
    let (refused, round_trips) = wire.measure(contender.try_lock(&job)).await;
    assert_eq!(round_trips, 1, "refused acquire after the fallback");
    let Acquisition::NotAcquired(Some(held)) = refused.unwrap() else {
        panic!("refused without naming the holder");
    };
    assert!(held.held_until.is_some(), "{held:?}");
    let (released, round_trips) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_eq!(round_trips, 1, "release");
    let (again, round_trips) = wire.measure(contender.try_lock(&job)).await;
    assert!(acquired(again).unlock().await.unwrap());
    assert_eq!(round_trips, 1, "the released lock, taken by the other node");
}
