//! Redis (`SHEDLOCK_TEST_REDIS_URL`) through the facade, beside a `SET` and a `GET` of that key
//! sent by the redis crate on a multiplexed connection of the bench's own, and beside a peer: the
//! `peer_rslock_cycle` bench is rslock's Redlock (one server, so a quorum of one) doing the same
//! acquire + release.

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use rslock::LockManager;
use shedlock_benches::floors::RedisDriver;
use shedlock_benches::{connect_node, groups, scenarios, server_url};

fn redis(c: &mut Criterion) {
    let url = server_url("SHEDLOCK_TEST_REDIS_URL");
    let runtime = groups::multi_thread_runtime();
    let driver = runtime
        .block_on(RedisDriver::connect(&url))
        .expect("the Redis server answers");
    let redlock = LockManager::new(vec![url.as_str()]);
    let name = format!("{}-rslock", scenarios::run_prefix());
    groups::register(
        c,
        &runtime,
        "redis",
        || connect_node(&url),
        &driver,
        |group| {
            group.bench_function("peer_rslock_cycle", |b| {
                b.to_async(&runtime).iter(|| async {
                    let lock = redlock
                        .lock(name.as_str(), Duration::from_secs(600))
                        .await
                        .expect("rslock takes a free lock");
                    redlock.unlock(&lock).await;
                })
            });
        },
    );
}

criterion_group!(benches, redis);
criterion_main!(benches);
