//! The Redis provider against a real Redis: ShedLock interoperability, ownership, at-least,
//! fencing, names, unreachable servers, unknown outcomes and credential redaction.
//!
//! Needs `SHEDLOCK_TEST_REDIS_URL` (e.g. `redis://127.0.0.1:6379`; `ci/start-backends.sh`
//! starts one). Every test uses its own env segment, so tests run in parallel and repeatedly on
//! one server.

use std::error::Error as _;
use std::sync::Arc;
use std::time::Duration;

use redis::AsyncCommands;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use shedlock_conformance::EDGE_CASE_NAMES;
use shedlock_core::{
    Acquisition, ErrorKind, LockConfiguration, LockError, LockHandle, LockProvider,
    LockingTaskExecutor,
};
use shedlock_redis::{RedisLockProvider, RedisLockProviderBuilder};
use shedlock_test_support::kv::errors::{assert_configuration_error, full_text};
use shedlock_test_support::kv::locks::{
    SECRET, acquire, acquires_of_an_unreachable_server_fail, assert_answered_within,
    assert_not_acquired, config, config_with_at_least,
};
use shedlock_test_support::settings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use shedlock_test_support::log_capture;

const MS: Duration = Duration::from_millis(1);

/// An env segment no other test (or earlier run) uses.
fn unique_env() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

fn builder(env: &str) -> RedisLockProviderBuilder {
    RedisLockProvider::builder().env(env)
}

/// Connects `builder` to the test server.
async fn connect(builder: RedisLockProviderBuilder) -> RedisLockProvider {
    builder.connect(&settings::REDIS.value()).await.unwrap()
}

async fn provider(env: &str) -> RedisLockProvider {
    connect(builder(env)).await
}

async fn raw() -> ConnectionManager {
    redis::Client::open(settings::REDIS.value())
        .unwrap()
        .get_connection_manager()
        .await
        .unwrap()
}

/// A node on an env of its own, a raw connection, and the key of the node's lock `name`: to
/// watch what the node does to that key.
async fn node_and_raw_key(name: &str) -> (RedisLockProvider, ConnectionManager, String) {
    let provider = provider(&unique_env()).await;
    let key = provider.lock_key(name).unwrap();
    (provider, raw().await, key)
}

/// Lets node A's acquisition of `job` expire (it is held for 150 ms and refused to node B
/// meanwhile), then has node B take the lock for 10 s: the stale and the fresh handle.
async fn expire_and_take_over(
    node_a: &RedisLockProvider,
    node_b: &RedisLockProvider,
) -> (Box<dyn LockHandle>, Box<dyn LockHandle>) {
    let short = config("job", 150 * MS);
    let stale = acquire(node_a, &short).await;
    assert_not_acquired(node_b, &short).await;
    tokio::time::sleep(400 * MS).await;
    let fresh = acquire(node_b, &config("job", Duration::from_secs(10))).await;
    (stale, fresh)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_in_shedlocks_own_format_blocks_the_provider() {
    let env = unique_env();
    let provider = provider(&env).await;
    let key = format!("job-lock:{env}:report");
    assert_eq!(provider.lock_key("report").unwrap(), key);
    let mut conn = raw().await;
    // What Java ShedLock writes: SET key "ADDED:<iso>@<host>:<uuid>" NX PX <at most>.
    let java_value = format!(
        "ADDED:2026-11-29T10:15:30.123Z@java-host:{}",
        uuid::Uuid::new_v4()
    );
    let set: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg(&java_value)
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(set.as_deref(), Some("OK"));

    let config = config("report", Duration::from_secs(5));
    assert_not_acquired(&provider, &config).await;
    let still: String = conn.get(&key).await.unwrap();
    assert_eq!(
        still, java_value,
        "a refused acquire must not touch the key"
    );

    // When the Java node releases (ShedLock deletes the key), the lock is free for us.
    let _: () = conn.del(&key).await.unwrap();
    let handle = acquire(&provider, &config).await;
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_providers_key_blocks_a_plain_set_nx_and_has_shedlocks_layout() {
    let env = unique_env();
    let provider = connect(builder(&env).holder("rust-node")).await;
    let handle = acquire(&provider, &config("report", Duration::from_secs(10))).await;
    let key = format!("job-lock:{env}:report");
    let mut conn = raw().await;
    let set: Option<String> = redis::cmd("SET")
        .arg(&key)
        .arg("ADDED:2026-11-29T10:15:30.123Z@java-host")
        .arg("NX")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        set, None,
        "a Java node's SET NX must fail while we hold the lock"
    );

    let value: String = conn.get(&key).await.unwrap();
    let rest = value
        .strip_prefix("ADDED:")
        .expect("ShedLock's ADDED: prefix");
    let (added, holder_uuid) = rest.split_once('@').unwrap();
    chrono::DateTime::parse_from_rfc3339(added).expect("an ISO-8601 timestamp");
    let (holder, uuid) = holder_uuid.rsplit_once(':').unwrap();
    assert_eq!(holder, "rust-node");
    uuid::Uuid::parse_str(uuid).expect("a UUID per acquisition");
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        (9_000..=10_000).contains(&ttl),
        "TTL should be lock_at_most_for, got {ttl} ms"
    );

    assert!(handle.unlock().await.unwrap());
    let exists: bool = conn.exists(&key).await.unwrap();
    assert!(!exists, "release without lock_at_least_for deletes the key");
}

/// What a key holds, as `TYPE` and its whole content, to show that nothing touched it.
async fn snapshot(conn: &mut ConnectionManager, key: &str) -> (String, Vec<String>, i64) {
    let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await.unwrap();
    let content: Vec<String> = match kind.as_str() {
        "hash" => conn.hgetall(key).await.unwrap(),
        "list" => conn.lrange(key, 0, -1).await.unwrap(),
        "string" => vec![conn.get(key).await.unwrap()],
        other => panic!("unexpected type {other}"),
    };
    let ttl: i64 = conn.pttl(key).await.unwrap();
    (kind, content, ttl)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_of_another_type_is_refused_by_name_and_left_as_it_is() {
    let env = unique_env();
    let plain = provider(&env).await;
    let fenced = connect(builder(&env).fencing(true)).await;
    let mut conn = raw().await;
    for (name, kind) in [("hashed", "hash"), ("listed", "list")] {
        let key = plain.lock_key(name).unwrap();
        if kind == "hash" {
            let _: () = conn.hset(&key, "owner", "another app").await.unwrap();
        } else {
            let _: () = conn.rpush(&key, "another app").await.unwrap();
        }
        let before = snapshot(&mut conn, &key).await;
        for node in [&plain, &fenced] {
            let error = node
                .try_lock(&config(name, Duration::from_secs(5)))
                .await
                .unwrap_err();
            let LockError::Backend {
                operation: shedlock_core::Operation::Acquire,
                source: None,
                ..
            } = &error
            else {
                panic!("a refusal with no unknown outcome behind it: {error:?}");
            };
            assert_eq!(error.kind(), ErrorKind::CorruptData, "{error}");
            let text = error.to_string();
            for part in [
                &format!("{key:?}"),
                &format!("holds a Redis {kind}, not a ShedLock lock (a string)"),
                "nothing was written and the lock was not taken",
            ] {
                assert!(text.contains(part), "{part:?} in {text}");
            }
            assert!(!text.contains("unknown"), "the outcome is known: {text}");
        }
        // Some time for a cleanup in the background, which a known refusal must not start.
        tokio::time::sleep(100 * MS).await;
        assert_eq!(snapshot(&mut conn, &key).await, before, "{key} untouched");
        let counter: bool = conn
            .exists(fenced.fencing_key(name).unwrap())
            .await
            .unwrap();
        assert!(!counter, "no fencing counter was created for {name}");
    }

    // A holder whose key another application has since replaced: not its lock any more, so
    // extend and release answer false and change nothing.
    for kind in ["hash", "list"] {
        let handle = acquire(&plain, &config(kind, Duration::from_secs(5))).await;
        let key = plain.lock_key(kind).unwrap();
        let _: () = conn.del(&key).await.unwrap();
        if kind == "hash" {
            let _: () = conn.hset(&key, "owner", "another app").await.unwrap();
        } else {
            let _: () = conn.rpush(&key, "another app").await.unwrap();
        }
        let before = snapshot(&mut conn, &key).await;
        assert!(!handle.extend(Duration::from_secs(30)).await.unwrap());
        assert!(!handle.unlock().await.unwrap());
        assert_eq!(snapshot(&mut conn, &key).await, before, "{key} untouched");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_fencing_counter_that_is_no_counter_refuses_the_lock_before_writing() {
    let env = unique_env();
    let fenced = connect(builder(&env).fencing(true)).await;
    let mut conn = raw().await;
    for (name, planted, shown) in [
        (
            "word",
            Some("seven"),
            "holds \"seven\", not a decimal counter",
        ),
        (
            "negative",
            Some("-3"),
            "holds \"-3\", not a decimal counter",
        ),
        ("hashed", None, "holds a Redis hash, not a decimal counter"),
    ] {
        let counter = fenced.fencing_key(name).unwrap();
        match planted {
            Some(value) => conn.set::<_, _, ()>(&counter, value).await.unwrap(),
            None => conn.hset::<_, _, _, ()>(&counter, "n", 7).await.unwrap(),
        }
        let before = snapshot(&mut conn, &counter).await;
        let error = fenced
            .try_lock(&config(name, Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert_eq!(error.kind(), ErrorKind::CorruptData, "{error}");
        let text = error.to_string();
        for part in [
            &format!("the fencing counter {counter:?}"),
            shown,
            "nothing was written and the lock was not taken",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        let lock: bool = conn.exists(fenced.lock_key(name).unwrap()).await.unwrap();
        assert!(!lock, "the lock key of {name} was never set");
        assert_eq!(snapshot(&mut conn, &counter).await, before);
    }
    // A counter in order is used as it is.
    let counter = fenced.fencing_key("counted").unwrap();
    let _: () = conn.set(&counter, "41").await.unwrap();
    let handle = acquire(&fenced, &config("counted", Duration::from_secs(5))).await;
    assert_eq!(handle.fencing_token(), Some(42));
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn durations_past_a_redis_ttl_are_refused_before_anything_is_written() {
    let (provider, mut conn, key) = node_and_raw_key("job").await;
    // 2^53 ms, about 285 years: the longest TTL the scripts' Lua numbers carry exactly.
    let longest = Duration::from_millis(1 << 53);
    for too_long in [longest + Duration::from_nanos(1), Duration::MAX] {
        let error = provider
            .try_lock(&config("job", too_long))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::Backend {
                    operation: shedlock_core::Operation::Acquire,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::Limit, "{error}");
        let text = error.to_string();
        assert!(
            text.contains(&format!("{too_long:?} is longer than a Redis TTL"))
                && text.contains("(at most 9007199254740992 ms); nothing was written"),
            "{text}"
        );
        let exists: bool = conn.exists(&key).await.unwrap();
        assert!(!exists, "nothing was written for {too_long:?}");
    }

    let handle = acquire(&provider, &config("job", longest)).await;
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(ttl > (1 << 53) - 10_000, "held for 2^53 ms: {ttl}");
    let error = handle
        .extend(longest + Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("nothing was written"), "{error}");
    assert_eq!(error.kind(), ErrorKind::Limit, "{error}");
    let after: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        after <= ttl,
        "the refused extend left the TTL: {ttl} then {after}"
    );
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock() {
    let env = unique_env();
    let node_a = provider(&env).await;
    let node_b = provider(&env).await;
    let short = config("job", 150 * MS);
    // A stale release (the release script's own owner check)...
    let (stale, fresh) = expire_and_take_over(&node_a, &node_b).await;
    assert!(!stale.unlock().await.unwrap());
    assert_not_acquired(&node_a, &short).await;
    assert!(fresh.unlock().await.unwrap());

    // ...and a stale extend (the extend script's), on a second stale acquisition.
    let (stale, fresh) = expire_and_take_over(&node_a, &node_b).await;
    assert!(!stale.extend(Duration::from_secs(30)).await.unwrap());
    assert!(!stale.unlock().await.unwrap());

    let mut conn = raw().await;
    let key = node_b.lock_key("job").unwrap();
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        (9_000..=10_000).contains(&ttl),
        "the stale extend must not change the new holder's TTL, got {ttl} ms"
    );
    assert_not_acquired(&node_a, &short).await;
    assert!(fresh.unlock().await.unwrap());
    acquire(&node_a, &short).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn two_processes_on_one_host_do_not_share_ownership() {
    // Same holder name, as two processes on one host would have: ownership is per acquisition.
    let env = unique_env();
    let node_a = connect(builder(&env).holder("same-host")).await;
    let node_b = connect(builder(&env).holder("same-host")).await;
    let (stale, fresh) = expire_and_take_over(&node_a, &node_b).await;
    assert!(!stale.unlock().await.unwrap());
    assert_not_acquired(&node_a, &config("job", Duration::from_secs(1))).await;
    assert!(fresh.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn release_keeps_the_key_for_the_rest_of_lock_at_least_for() {
    let (provider, mut conn, key) = node_and_raw_key("job").await;
    let handle = acquire(
        &provider,
        &config_with_at_least("job", Duration::from_secs(10), Duration::from_secs(2)),
    )
    .await;
    let held = Instant::now();
    tokio::time::sleep(500 * MS).await;
    assert!(handle.unlock().await.unwrap());
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    let bound = 2_000 - 500;
    assert!(
        (bound - 700..=bound + 1).contains(&ttl),
        "the key should live for the rest of lock_at_least_for (about {bound} ms), got {ttl} ms"
    );
    assert_not_acquired(&provider, &config("job", Duration::from_secs(1))).await;
    // A second release of the same acquisition changes nothing.
    assert!(!handle.unlock().await.unwrap());
    let again: i64 = conn.pttl(&key).await.unwrap();
    assert!(again <= ttl);
    assert!(held.elapsed() < Duration::from_secs(2));
}

#[tokio::test(flavor = "multi_thread")]
async fn at_least_is_counted_from_the_acquisition_across_extends() {
    let (provider, mut conn, key) = node_and_raw_key("job").await;
    let handle = acquire(
        &provider,
        &config_with_at_least("job", Duration::from_secs(10), Duration::from_secs(3)),
    )
    .await;
    tokio::time::sleep(500 * MS).await;
    assert!(handle.extend(Duration::from_secs(20)).await.unwrap());
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        (19_000..=20_000).contains(&ttl),
        "extended TTL, got {ttl} ms"
    );
    tokio::time::sleep(500 * MS).await;
    assert!(handle.unlock().await.unwrap());
    // 3 s of at-least, at least 1 s of it gone (measured by Redis).
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    assert!(
        (1_000..=2_001).contains(&ttl),
        "the rest of lock_at_least_for after an extend should be about 2000 ms, got {ttl} ms"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn extend_moves_the_expiry_and_only_while_held() {
    let (provider, mut conn, key) = node_and_raw_key("job").await;
    let handle = acquire(&provider, &config("job", 300 * MS)).await;
    assert!(handle.extend(Duration::from_secs(5)).await.unwrap());
    let ttl: i64 = conn.pttl(&key).await.unwrap();
    assert!((4_000..=5_000).contains(&ttl), "got {ttl} ms");
    tokio::time::sleep(500 * MS).await;
    assert_not_acquired(&provider, &config("job", Duration::from_secs(1))).await;
    assert!(matches!(
        handle.extend(Duration::ZERO).await,
        Err(LockError::Configuration(_))
    ));
    assert!(handle.unlock().await.unwrap());
    assert!(
        !handle.extend(Duration::from_secs(5)).await.unwrap(),
        "a released lock cannot be extended"
    );
    let exists: bool = conn.exists(&key).await.unwrap();
    assert!(
        !exists,
        "the extend after release must not recreate or keep the key"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_tokens_strictly_increase_and_survive_release() {
    let env = unique_env();
    let fenced = connect(builder(&env).fencing(true)).await;
    assert!(fenced.capabilities().fencing);
    let plain = provider(&env).await;
    assert!(!plain.capabilities().fencing);
    let config = config("job", Duration::from_secs(5));
    let mut last = 0;
    for _ in 0..5 {
        let handle = acquire(&fenced, &config).await;
        let token = handle.fencing_token().expect("a fencing token");
        assert!(token > last, "token {token} should exceed {last}");
        last = token;
        // While it is held, neither a fenced nor a plain node gets it, and no token is used up.
        assert_not_acquired(&fenced, &config).await;
        assert_not_acquired(&plain, &config).await;
        assert!(handle.unlock().await.unwrap());
    }
    assert_eq!(
        last, 5,
        "one token per acquisition, none for refused attempts"
    );
    let mut conn = raw().await;
    let counter: u64 = conn.get(fenced.fencing_key("job").unwrap()).await.unwrap();
    assert_eq!(counter, 5);
    // A plain node's acquisition has no token and leaves the counter alone.
    let handle = acquire(&plain, &config).await;
    assert_eq!(handle.fencing_token(), None);
    assert!(handle.unlock().await.unwrap());
    assert_eq!(acquire(&fenced, &config).await.fencing_token(), Some(6));
}

/// CRC16/XMODEM, the hash Redis Cluster takes modulo 16384 to pick a key's slot.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of `key`, hash tags included, as Redis Cluster computes it.
fn slot(key: &str) -> u16 {
    let hashed = match key.find('{') {
        Some(open) => match key[open + 1..].find('}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16(hashed.as_bytes()) % 16384
}

#[tokio::test(flavor = "multi_thread")]
async fn the_fencing_counter_shares_the_lock_keys_cluster_slot() {
    assert_eq!(crc16(b"123456789"), 0x31C3, "CRC16/XMODEM check value");
    assert_eq!(slot("foo"), 12182, "Redis' documented slot of `foo`");
    let provider = builder("prod")
        .fencing(true)
        .connect_lazy(&settings::REDIS.value())
        .await
        .unwrap();
    for name in ["report", "a:b", "x/y", "ünïcödé", "with space", "", "42"] {
        if name.is_empty() {
            continue;
        }
        let key = provider.lock_key(name).unwrap();
        let counter = provider.fencing_key(name).unwrap();
        assert_ne!(key, counter);
        assert_eq!(slot(&key), slot(&counter), "{key} and {counter}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn names_are_checked_before_anything_is_written() {
    let env = unique_env();
    let fenced = connect(builder(&env).fencing(true)).await;
    let mut conn = raw().await;
    for name in ["a{b}", "{tag}", "close}"] {
        let error = fenced
            .try_lock(&config(name, Duration::from_secs(5)))
            .await
            .unwrap_err();
        match &error {
            LockError::InvalidName {
                provider,
                name: refused,
                rule,
            } => {
                assert_eq!(*provider, "redis");
                assert_eq!(refused, name);
                assert!(rule.contains("fencing") && rule.contains('{'), "{rule}");
            }
            other => panic!("expected InvalidName for {name:?}, got {other:?}"),
        }
        let exists: bool = conn.exists(format!("job-lock:{env}:{name}")).await.unwrap();
        assert!(!exists, "nothing may be written for a refused name");
    }
    // Without fencing the same names are one plain key each, and accepted, as are all the
    // conformance kit's edge-case names (braces included).
    let plain = provider(&env).await;
    let names = ["a{b}", "a:b", "a", "a:b:c", ":", "with space", "ünïcödé"];
    for name in names.into_iter().chain(EDGE_CASE_NAMES.iter().copied()) {
        let handle = acquire(&plain, &config(name, Duration::from_secs(5))).await;
        let value: String = conn.get(format!("job-lock:{env}:{name}")).await.unwrap();
        assert!(
            value.starts_with("ADDED:"),
            "{name:?} is stored under its own key"
        );
        // Names that share a prefix with it stay distinct locks.
        assert!(handle.unlock().await.unwrap());
    }
    let a = acquire(&plain, &config("a", Duration::from_secs(5))).await;
    let ab = acquire(&plain, &config("a:b", Duration::from_secs(5))).await;
    assert!(a.unlock().await.unwrap() && ab.unlock().await.unwrap());

    // Keys are binary-safe: NUL, line breaks and escape sequences are bytes of the key, and a
    // 1 MiB name is one key of its own, all held at once next to the name without them.
    let mib = "x".repeat(1 << 20);
    let names = [
        "ab",
        "a\0b",
        "a\nb",
        "a\r\nb",
        "a\u{1b}[2Jb",
        "..",
        "/",
        &mib,
    ];
    let mut held = Vec::new();
    for name in names {
        held.push(acquire(&plain, &config(name, Duration::from_secs(5))).await);
        let value: String = conn.get(format!("job-lock:{env}:{name}")).await.unwrap();
        assert!(
            value.starts_with("ADDED:"),
            "{:?}",
            &name[..name.len().min(10)]
        );
    }
    for handle in held {
        assert!(handle.unlock().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn env_and_prefix_that_would_make_keys_ambiguous_are_refused() {
    let url = settings::REDIS.value();
    for (builder, what) in [
        (RedisLockProvider::builder().env("a:b"), "env"),
        (RedisLockProvider::builder().env(""), "env"),
        (
            RedisLockProvider::builder().key_prefix("job:lock"),
            "key prefix",
        ),
        (RedisLockProvider::builder().fencing(true).env("{x}"), "env"),
        (
            RedisLockProvider::builder().operation_timeout(Duration::ZERO),
            "operation timeout",
        ),
    ] {
        let error = builder.connect(&url).await.unwrap_err();
        let text = error.to_string();
        assert!(text.contains(what), "{text}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
    let error = RedisLockProvider::builder()
        .env("a:b")
        .connect(&url)
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("must not contain ':'"),
        "{error}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_a_clear_error_within_the_timeout() {
    let started = Instant::now();
    let error = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(1))
        .connect("redis://127.0.0.1:1")
        .await
        .unwrap_err();
    assert_answered_within(started, Duration::from_secs(3));
    let text = error.to_string();
    assert!(text.contains("redis://127.0.0.1:1"), "{text}");
    assert!(matches!(
        error,
        LockError::Backend {
            operation: shedlock_core::Operation::Connect,
            ..
        }
    ));
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");

    // A provider that connects lazily answers every acquire with an error, never "not acquired".
    let lazy = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(1))
        .connect_lazy("redis://127.0.0.1:1")
        .await
        .unwrap();
    for error in acquires_of_an_unreachable_server_fail(&lazy).await {
        // The reconnect was refused, so the acquire was never sent.
        if let LockError::Backend { .. } = error {
            assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_never_appear_in_errors_or_debug_output() {
    let unreachable = format!("redis://admin:{SECRET}@127.0.0.1:1/0");
    let error = RedisLockProvider::builder()
        .operation_timeout(Duration::from_millis(500))
        .connect(&unreachable)
        .await
        .unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("admin:***@127.0.0.1:1"), "{text}");

    let lazy = RedisLockProvider::builder()
        .operation_timeout(Duration::from_millis(500))
        .connect_lazy(&unreachable)
        .await
        .unwrap();
    let debug = format!("{lazy:?}");
    assert!(!debug.contains(SECRET) && debug.contains("***"), "{debug}");
    let error = lazy
        .try_lock(&config("job", Duration::from_secs(1)))
        .await
        .unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");

    // A password the real server refuses (it has none configured): the error stays clean.
    let base = settings::REDIS.value();
    let with_password = base.replacen("redis://", &format!("redis://:{SECRET}@"), 1);
    let result = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(2))
        .connect(&with_password)
        .await;
    if let Err(error) = result {
        let text = full_text(&error);
        assert!(!text.contains(SECRET), "{text}");
    }

    // Not a URL at all: hidden whole.
    let error = RedisLockProvider::builder()
        .connect(&format!("{SECRET}@nowhere"))
        .await
        .unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");
}

/// What the logs say while connects and lock operations fail, with a password in the URL: the
/// provider's own events, the executor's (which carry the whole error chain) and the Redis
/// client's. Everything runs on this thread, so the background cleanup's events are seen too.
#[tokio::test(flavor = "current_thread")]
async fn credentials_never_appear_in_the_logs() {
    let capture = log_capture::LogCapture::default();
    let _installed = capture.install();
    let unreachable = format!("redis://admin:{SECRET}@127.0.0.1:1/0");
    let with_password =
        settings::REDIS
            .value()
            .replacen("redis://", &format!("redis://admin:{SECRET}@"), 1);
    for url in [&unreachable, &with_password] {
        let builder = RedisLockProvider::builder().operation_timeout(Duration::from_millis(500));
        let _ = builder.clone().connect(url).await;
        let executor = LockingTaskExecutor::new(builder.connect_lazy(url).await.unwrap());
        let outcome = executor
            .execute(&config("job", Duration::from_secs(5)), async {})
            .await;
        assert!(
            outcome.is_err(),
            "{url}: the task does not run: {outcome:?}"
        );
    }
    // The cleanup after each failed acquire runs in the background: let it finish.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let logs = capture.text();
    assert!(
        logs.contains("not run") && logs.contains("admin:***@127.0.0.1:1"),
        "the failures were logged: {logs}"
    );
    assert!(!logs.contains(SECRET), "{logs}");
}

/// A TCP proxy in front of Redis that can hold back what the client sends, as a network that
/// stalls does: requests sit in the proxy, unanswered, until it is resumed.
async fn stalling_proxy(upstream: String) -> (String, watch::Sender<bool>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (pass, _) = watch::channel(true);
    let gate = pass.clone();
    tokio::spawn(async move {
        loop {
            let Ok((client, _)) = listener.accept().await else {
                return;
            };
            let server = TcpStream::connect(&upstream).await.unwrap();
            let (mut client_read, mut client_write) = client.into_split();
            let (mut server_read, mut server_write) = server.into_split();
            let mut open = gate.subscribe();
            tokio::spawn(async move {
                let mut buffer = vec![0; 64 * 1024];
                loop {
                    let Ok(read) = client_read.read(&mut buffer).await else {
                        return;
                    };
                    if read == 0 {
                        return;
                    }
                    if open.wait_for(|open| *open).await.is_err() {
                        return;
                    }
                    if server_write.write_all(&buffer[..read]).await.is_err() {
                        return;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
            });
        }
    });
    (format!("redis://{address}"), pass)
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unanswered_acquire_is_an_error_and_its_key_is_cleaned_up() {
    let upstream = settings::REDIS
        .value()
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (proxy_url, gate) = stalling_proxy(upstream).await;
    // No response timeout in the connection itself: only the provider's timeout applies, so
    // the connection survives the stall and the cleanup is queued behind the stalled SET.
    let manager = redis::Client::open(proxy_url)
        .unwrap()
        .get_connection_manager_with_config(
            ConnectionManagerConfig::new().set_response_timeout(None),
        )
        .await
        .unwrap();
    let env = unique_env();
    let provider = builder(&env)
        .operation_timeout(300 * MS)
        .build(manager)
        .unwrap();
    let config = config("job", Duration::from_secs(30));
    // Warm up: the cleanup script is loaded, the connection is up.
    acquire(&provider, &config).await.unlock().await.unwrap();

    gate.send_replace(false);
    let started = Instant::now();
    let outcome = provider.try_lock(&config).await;
    let waited = started.elapsed();
    match outcome {
        Err(LockError::Timeout { name, after, .. }) => {
            assert_eq!(name, "job");
            assert_eq!(after, 300 * MS);
        }
        other => panic!("an unanswered acquire must be a timeout error, got {other:?}"),
    }
    assert!(
        waited < Duration::from_secs(1),
        "bounded by the timeout: {waited:?}"
    );
    let other_node = connect(builder(&env)).await;
    let key = other_node.lock_key("job").unwrap();
    let mut conn = raw().await;
    let exists: bool = conn.exists(&key).await.unwrap();
    assert!(!exists, "the stalled SET has not reached Redis yet");

    // The network recovers: the stalled SET lands, and the cleanup queued behind it removes it.
    gate.send_replace(true);
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        tokio::time::sleep(50 * MS).await;
        let exists: bool = conn.exists(&key).await.unwrap();
        if !exists {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the key of the unanswered acquire was never cleaned up"
        );
    }
    let handle = acquire(&other_node, &config).await;
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn concurrent_nodes_never_hold_one_lock_at_once() {
    let env = unique_env();
    let nodes: Vec<Arc<RedisLockProvider>> = {
        let mut nodes = Vec::new();
        for _ in 0..4 {
            nodes.push(Arc::new(provider(&env).await));
        }
        nodes
    };
    let inside = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for node in nodes {
        let (inside, runs) = (inside.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            let config = config("shared", Duration::from_secs(5));
            for _ in 0..50 {
                if let Acquisition::Acquired(handle) = node.try_lock(&config).await.unwrap() {
                    let before = inside.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    assert_eq!(before, 0, "two nodes held the lock at once");
                    runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    assert!(handle.unlock().await.unwrap());
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert!(runs.load(std::sync::atomic::Ordering::SeqCst) > 0);
}

#[tokio::test]
async fn urls_of_other_backends_are_refused_by_their_scheme_before_connecting() {
    for (url, refused) in [
        (
            format!("postgres://app:{SECRET}@127.0.0.1:5432/test"),
            "the URL's scheme is \"postgres\"",
        ),
        (
            format!("mongodb://app:{SECRET}@127.0.0.1:27017"),
            "the URL's scheme is \"mongodb\"",
        ),
        ("127.0.0.1:6379".to_owned(), "not a URL"),
    ] {
        let error = RedisLockProvider::connect(&url).await.unwrap_err();
        assert_configuration_error(&error, refused, SECRET);
        assert_configuration_error(&error, "accepts redis://..., rediss://...", SECRET);
    }
    // What the redis crate itself refuses is named too, without the password.
    let error = RedisLockProvider::connect(&format!("redis://:{SECRET}@127.0.0.1:6379/notadb"))
        .await
        .unwrap_err();
    let message = error.to_string();
    assert!(message.contains("Invalid database number"), "{message}");
    assert_eq!(error.kind(), ErrorKind::Configuration, "{message}");
    assert!(!message.contains(SECRET), "{message}");
}

/// A database number the server does not have is named as the cause, not as a server that
/// may be down.
#[tokio::test(flavor = "multi_thread")]
async fn a_database_number_the_server_lacks_is_named() {
    let url = settings::REDIS.value();
    let (_, rest) = url.split_once("://").unwrap();
    let host = rest.split('/').next().unwrap().to_owned();
    let error = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(2))
        .connect(&format!("redis://{host}/99999"))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("the server has no database of the number the URL's path gives"),
        "{text}"
    );
    assert!(!text.contains("reachable"), "{text}");
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
}

/// A private `redis-server` that asks for a password, on a free loopback port; stopped when
/// dropped.
struct PasswordServer {
    process: std::process::Child,
    port: u16,
}

impl PasswordServer {
    async fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let process = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--requirepass", SECRET, "--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server (Debian's redis-server package, which ci/start-backends.sh installs) must be on the PATH");
        let started = Instant::now();
        while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the private redis-server on port {port} did not start"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Self { process, port }
    }
}

impl Drop for PasswordServer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// A server that asks for a password, given a URL without one: the connect is refused as
/// credentials (nothing is left to fail later as an unknown outcome at each acquire); with the
/// password it works.
#[tokio::test(flavor = "multi_thread")]
async fn a_server_that_wants_a_password_refuses_the_connect_without_one() {
    let server = PasswordServer::start().await;
    let error = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(2))
        .connect(&format!("redis://127.0.0.1:{}", server.port))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("it refused the credentials"), "{text}");
    assert!(!text.contains("reachable"), "{text}");
    assert_eq!(error.kind(), ErrorKind::CredentialsRefused, "{text}");
    let provider =
        RedisLockProvider::connect(&format!("redis://:{SECRET}@127.0.0.1:{}", server.port))
            .await
            .unwrap();
    let config =
        LockConfiguration::new("password", Duration::from_secs(30), Duration::ZERO).unwrap();
    let handle = provider
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert!(handle.unlock().await.unwrap());
}

/// A wrong user name or password is named as such, once, not reported as a server that may be
/// down: the operator must fix the URL, not the network.
#[tokio::test(flavor = "multi_thread")]
async fn refused_credentials_are_reported_as_such() {
    let base = settings::REDIS.value();
    let wrong_user = base.replacen(
        "redis://",
        &format!("redis://nobody-{}:{SECRET}@", unique_env()),
        1,
    );
    let started = Instant::now();
    let error = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(2))
        .connect(&wrong_user)
        .await
        .unwrap_err();
    assert_answered_within(started, Duration::from_secs(4));
    let text = error.to_string();
    assert!(text.contains("refused the credentials"), "{text}");
    assert!(!text.contains("reachable"), "{text}");
    assert_eq!(error.kind(), ErrorKind::CredentialsRefused, "{text}");
    assert!(!error.retryable(), "{text}");
    let full = full_text(&error);
    assert!(!full.contains(SECRET), "{full}");
    // The server's own words appear once, in the source, not again in the message.
    let mut messages = vec![error.to_string()];
    let mut source = error.source();
    while let Some(cause) = source {
        messages.push(cause.to_string());
        source = cause.source();
    }
    for (outer, message) in messages.iter().enumerate() {
        for inner in &messages[outer + 1..] {
            assert!(
                !message.contains(inner.as_str()),
                "{inner:?} repeated in {message:?}"
            );
        }
    }
}

/// A new deployment: 16 nodes connect at the same instant on an env nothing has used, with
/// fencing (whose counter the first acquire creates) every other round, and all try the same
/// new name at once: all must start, exactly one acquires, and tokens go on increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_start_at_once_on_a_new_env() {
    use shedlock_conformance::{FIRST_USE_NODES, check_first_use};
    for round in 0..10 {
        let env = unique_env();
        let fencing = round % 2 == 1;
        let verdict = check_first_use(FIRST_USE_NODES, |index| {
            let env = env.clone();
            async move {
                builder(&env)
                    .fencing(fencing)
                    .holder(format!("node-{index}"))
                    .connect(&settings::REDIS.value())
                    .await
            }
        })
        .await;
        verdict.unwrap_or_else(|failure| panic!("round {round} (fencing {fencing}): {failure}"));
    }
}

/// `host:port` of a one-server URL.
fn server_of(url: &str) -> String {
    let (_, rest) = url.split_once("://").unwrap();
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split(['/', '?']).next().unwrap().to_owned()
}

/// A `rediss://` URL for a Redis without TLS is said to be one, at once: its TLS handshake
/// never ends (Redis takes the handshake for a command and waits for the rest), so it used to
/// be "did not answer within 5s: is it running and reachable?", after the whole timeout.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread")]
async fn a_tls_url_for_a_plain_redis_says_so_at_once() {
    let plain = server_of(&settings::REDIS.value());
    let started = Instant::now();
    let error = RedisLockProvider::builder()
        .operation_timeout(Duration::from_secs(5))
        .connect(&format!("rediss://{plain}"))
        .await
        .unwrap_err();
    assert_answered_within(started, Duration::from_secs(2));
    let text = error.to_string();
    assert!(
        text.contains(&format!("could not connect to Redis at rediss://{plain}"))
            && text.contains(
                "it answers in plain Redis, without TLS: use a redis:// URL for it (rediss:// \
                 asks for TLS), or turn TLS on in the server"
            ),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
}

/// A `redis://` URL at a server of another kind (the PostgreSQL and MySQL servers the tests
/// use) says something else answers there, not "is it running and reachable?": it is running,
/// and reachable.
#[tokio::test(flavor = "multi_thread")]
async fn a_url_at_a_server_of_another_kind_says_so() {
    for other in [settings::POSTGRES.value(), settings::MYSQL.value()] {
        let other = server_of(&other);
        let error = RedisLockProvider::builder()
            .operation_timeout(Duration::from_secs(2))
            .connect(&format!("redis://{other}"))
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(
                "something accepts connections there but does not answer as Redis does: check \
                 the port"
            ),
            "{other}: {text}"
        );
        assert!(!text.contains("reachable"), "{other}: {text}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{other}: {text}");
    }
}

/// A user whose ACL leaves out ROLE (an admin command), which connect asks to tell a replica
/// from a master, still connects and locks: what the server is stays unknown, not refused.
#[tokio::test(flavor = "multi_thread")]
async fn a_user_denied_role_still_connects_and_locks() {
    let user = format!("no-role-{}", unique_env());
    let mut admin = raw().await;
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(&user)
        .arg(["on", &format!(">{SECRET}"), "~*", "+@all", "-role"].as_slice())
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    let url = settings::REDIS
        .value()
        .replacen("redis://", &format!("redis://{user}:{SECRET}@"), 1);
    let connected = builder(&unique_env()).connect(&url).await;
    let locked = async {
        let provider = connected?;
        let config = LockConfiguration::new("no-role", Duration::from_secs(30), Duration::ZERO)?;
        let handle = provider.try_lock(&config).await?.into_handle();
        Ok::<_, LockError>(match handle {
            Some(handle) => handle.unlock().await?,
            None => false,
        })
    }
    .await;
    // Deleting the user closes its connections: only once the lock was taken and released.
    redis::cmd("ACL")
        .arg("DELUSER")
        .arg(&user)
        .query_async::<()>(&mut admin)
        .await
        .unwrap();
    assert!(locked.unwrap(), "taken and released");
}
