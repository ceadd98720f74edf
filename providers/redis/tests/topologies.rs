//! The provider through `redis+cluster://` and `redis+sentinel://` URLs, against the Redis
//! Cluster and Sentinel setup of `ci/start-redis-topologies.sh`
//! (`SHEDLOCK_TEST_REDIS_CLUSTER_URL`, `SHEDLOCK_TEST_REDIS_SENTINEL_URL`): where the keys
//! land, fencing across a cluster's slots, the database and master name of a sentinel URL, and
//! malformed URLs and passwords. `tests/sentinel_failover.rs` moves the sentinels' master.

#[path = "shared/topologies.rs"]
mod topologies;

use std::collections::{BTreeSet, HashMap};
use std::error::Error as _;
use std::time::Duration;

use redis::AsyncCommands;
use shedlock_core::{
    Acquisition, ErrorKind, LockConfiguration, LockError, LockHandle, LockProvider,
};
use shedlock_redis::{RedisLockProvider, RedisLockProviderBuilder};
use shedlock_test_support::settings;
use tokio::time::Instant;
use topologies::{cluster_admin, master_admin};

const SECRET: &str = "t0p0l0gy-s3cret";

fn builder() -> RedisLockProviderBuilder {
    RedisLockProvider::builder().env(format!("topology-{}", uuid::Uuid::new_v4().simple()))
}

fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap()
}

async fn acquire(provider: &impl LockProvider, name: &str) -> Box<dyn LockHandle> {
    match provider.try_lock(&config(name)).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("expected to acquire {name:?}, got {other:?}"),
    }
}

/// The error's whole text: Display, Debug, and every source's Display.
fn full_text(error: &LockError) -> String {
    let mut text = format!("{error} | {error:?}");
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(" | {cause}"));
        source = cause.source();
    }
    text
}

/// `url` with `user:SECRET@` in front of its hosts.
fn with_password(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    format!("{scheme}://{user}:{SECRET}@{rest}")
}

/// Which master (`host:port`) serves each slot, from `CLUSTER SLOTS`.
async fn slot_owners(
    admin: &mut redis::cluster_async::ClusterConnection,
) -> Vec<(u16, u16, String)> {
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(admin)
        .await
        .unwrap();
    ranges
        .into_iter()
        .map(|range| {
            let redis::Value::Array(fields) = range else {
                panic!("CLUSTER SLOTS answered {range:?}");
            };
            let first: u16 = redis::from_redis_value(fields[0].clone()).unwrap();
            let last: u16 = redis::from_redis_value(fields[1].clone()).unwrap();
            let (host, port): (String, u16) = match &fields[2] {
                redis::Value::Array(master) => (
                    redis::from_redis_value(master[0].clone()).unwrap(),
                    redis::from_redis_value(master[1].clone()).unwrap(),
                ),
                other => panic!("CLUSTER SLOTS named the master as {other:?}"),
            };
            (first, last, format!("{host}:{port}"))
        })
        .collect()
}

async fn key_slot(admin: &mut redis::cluster_async::ClusterConnection, key: &str) -> u16 {
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(key)
        .query_async(admin)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn fenced_locks_of_many_names_work_on_every_master_of_a_cluster() {
    let url = settings::REDIS_CLUSTER.value();
    // Two nodes on one env, as two processes of one service.
    let settings = builder().fencing(true);
    let node_a = settings.clone().connect(&url).await.unwrap();
    let node_b = settings.connect(&url).await.unwrap();
    let mut admin = cluster_admin(&url).await.unwrap();
    let owners = slot_owners(&mut admin).await;
    assert_eq!(
        owners
            .iter()
            .map(|(_, _, master)| master)
            .collect::<BTreeSet<_>>()
            .len(),
        3,
        "the test cluster has 3 masters: {owners:?}"
    );

    let names: Vec<String> = (0..48).map(|index| format!("report-{index}")).collect();
    let mut slots = BTreeSet::new();
    let mut masters_used: HashMap<String, usize> = HashMap::new();
    for name in &names {
        let key = node_a.lock_key(name).unwrap();
        let counter = node_a.fencing_key(name).unwrap();
        let slot = key_slot(&mut admin, &key).await;
        assert_eq!(
            key_slot(&mut admin, &counter).await,
            slot,
            "the counter {counter} must share the slot of {key}"
        );
        slots.insert(slot);
        let master = owners
            .iter()
            .find(|(first, last, _)| (*first..=*last).contains(&slot))
            .map(|(_, _, master)| master.clone())
            .unwrap();
        *masters_used.entry(master).or_default() += 1;

        let first = acquire(&node_a, name).await;
        let first_token = first.fencing_token().expect("fencing is on");
        let refused = node_b.try_lock(&config(name)).await.unwrap();
        assert!(!refused.is_acquired(), "{name} is held by node A");
        assert!(
            first.extend(Duration::from_secs(60)).await.unwrap(),
            "{name} extended"
        );
        assert!(first.unlock().await.unwrap(), "{name} released");
        let second = acquire(&node_b, name).await;
        let second_token = second.fencing_token().unwrap();
        assert!(
            second_token > first_token,
            "{name}: token {second_token} after {first_token}"
        );
        let stored: u64 = admin.get(&counter).await.unwrap();
        assert_eq!(stored, second_token, "{counter} holds the last token");
        let value: String = admin.get(&key).await.unwrap();
        assert!(value.starts_with("ADDED:"), "{key} = {value}");
        assert!(second.unlock().await.unwrap());
        let exists: bool = admin.exists(&key).await.unwrap();
        assert!(!exists, "{key} deleted on release");
        let _: () = admin.del(&counter).await.unwrap();
    }
    assert!(
        slots.len() >= 40,
        "48 names fell into {} slots only",
        slots.len()
    );
    assert_eq!(
        masters_used.len(),
        3,
        "the names' keys should land on every master: {masters_used:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lazy_cluster_provider_connects_on_first_use() {
    let provider = builder()
        .connect_lazy(&settings::REDIS_CLUSTER.value())
        .await
        .unwrap();
    let handle = acquire(&provider, "lazy").await;
    assert!(
        !provider
            .try_lock(&config("lazy"))
            .await
            .unwrap()
            .is_acquired()
    );
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_cluster_or_sentinel_is_a_clear_error_within_the_timeout() {
    for (url, target) in [
        (
            "redis+cluster://127.0.0.1:1,127.0.0.1:2",
            "the Redis Cluster",
        ),
        (
            "redis+sentinel://127.0.0.1:1,127.0.0.1:2/shedlock",
            "the Redis master named by the sentinels",
        ),
    ] {
        let started = Instant::now();
        let error = builder()
            .operation_timeout(Duration::from_secs(1))
            .connect(url)
            .await
            .unwrap_err();
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{url}: took {:?}",
            started.elapsed()
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!("{target} at {url}")),
            "{url}: {text}"
        );
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{url}: {text}");

        let lazy = builder()
            .operation_timeout(Duration::from_secs(1))
            .connect_lazy(url)
            .await
            .unwrap();
        for _ in 0..2 {
            let started = Instant::now();
            let error = lazy.try_lock(&config("job")).await.unwrap_err();
            assert!(
                started.elapsed() < Duration::from_secs(3),
                "{url}: took {:?}",
                started.elapsed()
            );
            assert!(
                matches!(error, LockError::Backend { .. } | LockError::Timeout { .. }),
                "{url}: {error:?}"
            );
            // Unreachable, or, as a cluster client may have sent a command before its
            // connection was refused, an unknown outcome: either way worth trying again.
            assert!(error.retryable(), "{url}: {error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sentinel_url_locks_on_the_master_and_in_its_database() {
    let url = settings::REDIS_SENTINEL.value();
    // The same master, database 3: the key must be there and not in database 0.
    let in_db_3 = format!("{}/3", url.trim_end_matches('/'));
    let settings = builder();
    let provider = settings.clone().connect(&in_db_3).await.unwrap();
    let other = settings.connect(&in_db_3).await.unwrap();
    let handle = acquire(&provider, "nightly").await;
    assert!(
        !other
            .try_lock(&config("nightly"))
            .await
            .unwrap()
            .is_acquired()
    );

    let key = provider.lock_key("nightly").unwrap();
    let mut db0 = master_admin(&url).await.unwrap();
    let exists: bool = db0.exists(&key).await.unwrap();
    assert!(!exists, "{key} must not be in database 0");
    let master = topologies::current_master(&url).await.unwrap();
    let mut db3 = redis::Client::open(format!("redis://{master}/3"))
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let value: String = db3.get(&key).await.unwrap();
    assert!(value.starts_with("ADDED:"), "{key} = {value}");
    assert!(handle.unlock().await.unwrap());
    let exists: bool = db3.exists(&key).await.unwrap();
    assert!(!exists, "{key} deleted on release");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_master_name_the_sentinels_do_not_know_is_named_as_such() {
    let url = settings::REDIS_SENTINEL.value();
    let sentinels = url.split_once("://").unwrap().1.split('/').next().unwrap();
    let unknown = format!("redis+sentinel://{sentinels}/no-such-master");
    let started = Instant::now();
    let error = builder()
        .operation_timeout(Duration::from_secs(2))
        .connect(&unknown)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    let text = error.to_string();
    assert!(
        text.contains("the sentinels name no reachable master of that name"),
        "{text}"
    );
    // The sentinels answer the same for a master that is down mid-failover: trying again may
    // work, so it is not reported as a configuration that must change.
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
    assert!(text.contains("/no-such-master"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn malformed_urls_are_refused_naming_the_rule_and_never_the_password() {
    for (url, rule) in [
        (
            format!("redis+cluster://u:{SECRET}@"),
            "invalid Redis Cluster URL redis+cluster://u:***@: it names no host",
        ),
        (
            format!("redis+cluster://u:{SECRET}@a:7000,,b:7001"),
            "host 2 of 3 in the host list is empty",
        ),
        (
            format!("redis+cluster://u:{SECRET}@a:70000"),
            "host 1 of 1 in the host list has an invalid port",
        ),
        (
            format!("redis+cluster://u:{SECRET}@a:7000/2"),
            "a Redis Cluster has database 0 only",
        ),
        (
            format!("redis+sentinel://u:{SECRET}@a:26379"),
            "invalid Redis Sentinel URL redis+sentinel://u:***@a:26379: it names no master",
        ),
        (
            format!("redis+sentinel://u:{SECRET}@a:26379,b:x/m"),
            "host 2 of 2 in the host list has an invalid port",
        ),
        (
            format!("redis+sentinel://u:{SECRET}@a/m/db"),
            "the database \"db\" is not a number",
        ),
        (
            format!("redis+sentinel://a/m?sentinel_password={SECRET}&pool=3"),
            "unknown query parameter \"pool\"",
        ),
        // An unescaped '/' in the password: the host list then starts inside it.
        (
            format!("rediss+cluster://u:{SECRET}/x@a:7000"),
            "host 1 of 1 in the host list",
        ),
    ] {
        let started = Instant::now();
        let error = builder().connect(&url).await.unwrap_err();
        assert!(
            started.elapsed() < Duration::from_millis(500),
            "{rule}: nothing is connected"
        );
        let text = full_text(&error);
        assert!(text.contains(rule), "{rule}: {text}");
        assert!(!text.contains(SECRET), "{text}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{rule}: {text}");
        let lazy = builder().connect_lazy(&url).await.unwrap_err();
        assert_eq!(
            lazy.kind(),
            ErrorKind::Configuration,
            "{rule} (lazy): {lazy}"
        );
        assert!(
            full_text(&lazy).contains(rule),
            "{rule} (lazy): {}",
            full_text(&lazy)
        );
    }
    let error = builder()
        .connect(&format!("redis+shard://u:{SECRET}@a:7000"))
        .await
        .unwrap_err();
    let text = full_text(&error);
    assert!(
        text.contains("the URL's scheme is \"redis+shard\""),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
    assert!(
        text.contains("redis+cluster://..., rediss+cluster://..."),
        "{text}"
    );
    assert!(
        text.contains("redis+sentinel://..., rediss+sentinel://..."),
        "{text}"
    );
    assert!(!text.contains(SECRET), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn passwords_of_cluster_and_sentinel_urls_never_show() {
    // The test servers ask for no password, so each of these is refused after connecting.
    let sentinel = settings::REDIS_SENTINEL.value();
    let sentinel_with_its_own = format!(
        "{}?sentinel_username=watcher&sentinel_password={SECRET}",
        sentinel.trim_end_matches('/')
    );
    for url in [
        with_password(&settings::REDIS_CLUSTER.value(), "nobody"),
        with_password(&sentinel, "nobody"),
        sentinel_with_its_own,
    ] {
        let outcome = builder()
            .operation_timeout(Duration::from_secs(2))
            .connect(&url)
            .await;
        let error = outcome.expect_err("the servers have no such user");
        let text = full_text(&error);
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains("***"), "{text}");
        assert!(
            error.to_string().contains("it refused the credentials"),
            "a refused password is named as such, not as an unreachable server: {error}"
        );
        assert_eq!(
            error.kind(),
            ErrorKind::CredentialsRefused,
            "{url}: {error}"
        );

        let lazy = builder()
            .operation_timeout(Duration::from_secs(2))
            .connect_lazy(&url)
            .await
            .unwrap();
        let debug = format!("{lazy:?}");
        assert!(!debug.contains(SECRET) && debug.contains("***"), "{debug}");
        let error = lazy.try_lock(&config("job")).await.unwrap_err();
        let text = full_text(&error);
        assert!(!text.contains(SECRET), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_url_of_the_wrong_topology_says_what_the_server_is_not() {
    // The plain test server is neither in cluster mode nor a sentinel.
    let server = settings::REDIS.value();
    let address = server
        .split_once("://")
        .unwrap()
        .1
        .trim_end_matches('/')
        .to_owned();
    for (url, hint) in [
        (
            format!("redis+cluster://{address}"),
            "the server is not in cluster mode: use a redis:// URL",
        ),
        (
            format!("redis+sentinel://{address}/shedlock"),
            "a listed host answered but is not a sentinel",
        ),
    ] {
        let error = builder()
            .operation_timeout(Duration::from_secs(2))
            .connect(&url)
            .await
            .unwrap_err();
        assert!(error.to_string().contains(hint), "{url}: {error}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{url}: {error}");
    }
}

/// A `redis://` URL at a replica, or at a sentinel, is refused at connect, naming what it is and
/// what to give instead: a replica refuses every write, so it used to be accepted and then fail
/// every tick.
#[tokio::test(flavor = "multi_thread")]
async fn a_replica_or_a_sentinel_is_refused_at_connect() {
    let url = settings::REDIS_SENTINEL.value();
    let master = topologies::current_master(&url).await.unwrap();
    let mut admin = master_admin(&url).await.unwrap();
    // ["master", offset, [[ip, port, offset], ...]]
    let (_, _, replicas): (String, i64, Vec<(String, String, String)>) =
        redis::cmd("ROLE").query_async(&mut admin).await.unwrap();
    let (ip, port, _) = replicas
        .first()
        .expect("the sentinels' master has a replica");
    let replica = format!("redis://{ip}:{port}");
    let error = builder().connect(&replica).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "Redis at {replica} is a replica of {master}, and a replica takes no writes: give \
             the master's address, or a redis+sentinel:// URL to follow the master across \
             failovers"
        )),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");

    let sentinel = format!("redis://{}", topologies::hosts(&url)[0]);
    let error = builder().connect(&sentinel).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!(
            "Redis at {sentinel} is a sentinel, which holds no keys"
        )),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");

    builder()
        .connect(&format!("redis://{master}"))
        .await
        .expect("the master itself is taken");

    // A master demoted under a connection the application gave: every write is refused
    // (READONLY), which is said as such, and known to have written nothing.
    let on_replica = redis::Client::open(replica.as_str())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap();
    let provider = builder().build(on_replica).unwrap();
    let error = provider.try_lock(&config("on-replica")).await.unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("refused the write: it is a read-only replica now"),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
}
