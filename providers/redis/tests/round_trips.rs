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
        let url = settings::REDIS.value();
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
    assert!(
        held.locked_by
            .as_deref()
            .unwrap()
            .starts_with(&format!("{holder_name}:")),
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
