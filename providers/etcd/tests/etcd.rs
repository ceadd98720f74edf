//! The etcd provider against a real etcd: ShedLock interoperability, ownership, at-least,
//! leases, fencing, names, unreachable servers and credential redaction.
//!
//! Needs `SHEDLOCK_TEST_ETCD_URL` (e.g. `http://127.0.0.1:2379`; `ci/start-backends.sh` starts
//! one). Every test uses its own env segment, so tests run in parallel and repeatedly on one
//! server.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, LeaseTimeToLiveOptions, PutOptions, Txn, TxnOp};
use shedlock_core::{Acquisition, ErrorKind, LockError, LockProvider, LockingTaskExecutor};
use shedlock_etcd::{EtcdLockProvider, EtcdLockProviderBuilder};
use shedlock_test_support::kv::errors::{assert_configuration_error, full_text};
use shedlock_test_support::kv::locks::{
    SECRET, acquire, acquires_of_an_unreachable_server_fail, assert_answered_within,
    assert_not_acquired, config, config_with_at_least,
};
use shedlock_test_support::settings;
use tokio::time::Instant;

use shedlock_test_support::log_capture;

const MS: Duration = Duration::from_millis(1);

fn unique_env() -> String {
    format!("test-{}", uuid::Uuid::new_v4().simple())
}

fn builder(env: &str) -> EtcdLockProviderBuilder {
    EtcdLockProvider::builder().env(env)
}

/// Connects `builder` to the test server.
async fn connect(builder: EtcdLockProviderBuilder) -> EtcdLockProvider {
    builder.connect(&settings::ETCD.value()).await.unwrap()
}

async fn provider(env: &str) -> EtcdLockProvider {
    connect(builder(env)).await
}

async fn raw() -> Client {
    Client::connect([settings::ETCD.value()], None)
        .await
        .unwrap()
}

/// A node on an env of its own, a raw client, and the key of the node's lock `name`: to watch
/// what the node does to that key.
async fn node_and_raw_key(name: &str) -> (EtcdLockProvider, Client, String) {
    let provider = provider(&unique_env()).await;
    let key = provider.lock_key(name).unwrap();
    (provider, raw().await, key)
}

/// The key's value, revision and lease, if it exists.
async fn read(client: &mut Client, key: &str) -> Option<(String, i64, i64)> {
    let response = client.get(key, None).await.unwrap();
    response.kvs().first().map(|kv| {
        (
            String::from_utf8(kv.value().to_vec()).unwrap(),
            kv.mod_revision(),
            kv.lease(),
        )
    })
}

/// The remaining TTL of `lease` in seconds, -1 once it is gone.
async fn lease_ttl(client: &mut Client, lease: i64) -> i64 {
    client.lease_time_to_live(lease, None).await.unwrap().ttl()
}

/// `lease` carries no key any more (the provider keeps such a lease for its next operation of
/// the same TTL instead of revoking it); `what` names the lease in the failure.
async fn assert_keyless(client: &mut Client, lease: i64, what: &str) {
    let keys = client
        .lease_time_to_live(lease, Some(LeaseTimeToLiveOptions::new().with_keys()))
        .await
        .unwrap()
        .keys()
        .len();
    assert_eq!(keys, 0, "{what} still carries a key");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_written_the_way_shedlock_does_blocks_the_provider() {
    let env = unique_env();
    let provider = provider(&env).await;
    let key = format!("shedlock:{env}:report");
    assert_eq!(provider.lock_key("report").unwrap(), key);
    let mut client = raw().await;
    // What Java ShedLock does: a lease, then "if version(key) == 0, put on the lease".
    let lease = client.lease_grant(10, None).await.unwrap().id();
    let java_value = "ADDED:2026-11-29T10:15:30.123Z@java-host";
    let put = client
        .txn(
            Txn::new()
                .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(
                    key.as_str(),
                    java_value,
                    Some(PutOptions::new().with_lease(lease)),
                )]),
        )
        .await
        .unwrap();
    assert!(put.succeeded());

    let config = config("report", Duration::from_secs(5));
    match provider.try_lock(&config).await.unwrap() {
        Acquisition::NotAcquired(Some(holder)) => {
            assert_eq!(holder.locked_by.as_deref(), Some("java-host"));
        }
        other => panic!("a ShedLock key must block us, got {other:?}"),
    }
    assert_eq!(read(&mut client, &key).await.unwrap().0, java_value);

    // The Java node releases by revoking its lease: the lock is free.
    client.lease_revoke(lease).await.unwrap();
    let handle = acquire(&provider, &config).await;
    assert!(handle.unlock().await.unwrap());
}

/// The key's raw value, revision and lease, if it exists: any bytes, text or not.
async fn read_raw(client: &mut Client, key: &str) -> Option<(Vec<u8>, i64, i64)> {
    let response = client.get(key, None).await.unwrap();
    response
        .kvs()
        .first()
        .map(|kv| (kv.value().to_vec(), kv.mod_revision(), kv.lease()))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_another_application_wrote_is_refused_by_name_and_left_as_it_is() {
    let env = unique_env();
    let provider = provider(&env).await;
    let mut client = raw().await;
    let lease = client.lease_grant(60, None).await.unwrap().id();
    for (name, value, shown, leased) in [
        ("text", b"garbage".to_vec(), "\"garbage\"", false),
        ("empty", Vec::new(), "\"\"", false),
        (
            "bytes",
            vec![0xff, 0x00, 0xfe],
            "\"\u{fffd}\\0\u{fffd}\"",
            false,
        ),
        (
            "json",
            br#"{"owner":"another app"}"#.to_vec(),
            r#""{\"owner\":\"another app\"}""#,
            true,
        ),
    ] {
        let key = provider.lock_key(name).unwrap();
        let options = leased.then(|| PutOptions::new().with_lease(lease));
        client.put(key.as_str(), value, options).await.unwrap();
        let before = read_raw(&mut client, &key).await;
        let error = provider
            .try_lock(&config(name, Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::Backend {
                    operation: shedlock_core::Operation::Acquire,
                    source: None,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::CorruptData, "{error}");
        let text = error.to_string();
        for part in [
            &format!("the key {key:?} at "),
            &format!("holds {shown}, which is not a ShedLock lock value"),
            "nothing was written and the lock was not taken",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
        assert_eq!(
            read_raw(&mut client, &key).await,
            before,
            "{name} untouched"
        );
    }

    // A holder whose key was since overwritten by another application: not its lock, so
    // extend and release answer false and leave the key.
    let handle = acquire(&provider, &config("taken", Duration::from_secs(5))).await;
    let key = provider.lock_key("taken").unwrap();
    client.put(key.as_str(), "another app", None).await.unwrap();
    let before = read_raw(&mut client, &key).await;
    assert!(!handle.extend(Duration::from_secs(30)).await.unwrap());
    assert!(!handle.unlock().await.unwrap());
    assert_eq!(read_raw(&mut client, &key).await, before);
    client.lease_revoke(lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn durations_past_an_etcd_lease_are_refused_before_anything_is_written() {
    let (provider, mut client, key) = node_and_raw_key("job").await;
    // etcd's longest lease, about 285 years.
    let longest = Duration::from_secs(9_000_000_000);
    for too_long in [longest + Duration::from_nanos(1), Duration::MAX] {
        let error = provider
            .try_lock(&config("job", too_long))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::InvalidRequest {
                    operation: shedlock_core::Operation::Acquire,
                    ..
                }
            ),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!(
                "{too_long:?} is longer than an etcd lease can be (at most 9000000000 s)"
            )),
            "{text}"
        );
        assert!(read(&mut client, &key).await.is_none());
    }
    let handle = acquire(&provider, &config("job", Duration::from_secs(30))).await;
    let before = read(&mut client, &key).await;
    let error = handle.extend(Duration::MAX).await.unwrap_err();
    assert!(
        error.to_string().contains("before sending anything"),
        "{error}"
    );
    assert_eq!(
        read(&mut client, &key).await,
        before,
        "the key kept its lease"
    );
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn the_providers_key_blocks_shedlocks_acquire_and_has_its_layout() {
    let env = unique_env();
    let provider = connect(builder(&env).holder("rust-node")).await;
    let handle = acquire(&provider, &config("report", Duration::from_secs(10))).await;
    let key = format!("shedlock:{env}:report");
    let mut client = raw().await;
    let java = client
        .txn(
            Txn::new()
                .when([Compare::version(key.as_str(), CompareOp::Equal, 0)])
                .and_then([TxnOp::put(key.as_str(), "ADDED:x@java-host", None)]),
        )
        .await
        .unwrap();
    assert!(
        !java.succeeded(),
        "ShedLock's acquire must fail while we hold the lock"
    );

    let (value, revision, lease) = read(&mut client, &key).await.unwrap();
    let rest = value.strip_prefix("ADDED:").unwrap();
    let (added, holder_uuid) = rest.split_once('@').unwrap();
    chrono::DateTime::parse_from_rfc3339(added).unwrap();
    let (holder, uuid) = holder_uuid.rsplit_once(':').unwrap();
    assert_eq!(holder, "rust-node");
    uuid::Uuid::parse_str(uuid).unwrap();
    assert_eq!(handle.fencing_token(), Some(revision as u64));
    let ttl = lease_ttl(&mut client, lease).await;
    assert!(
        (9..=10).contains(&ttl),
        "the key's lease is lock_at_most_for: {ttl} s"
    );

    assert!(handle.unlock().await.unwrap());
    assert!(
        read(&mut client, &key).await.is_none(),
        "release deletes the key"
    );
    // The lease is left without a key, and the next acquire of that TTL puts its key on it
    // rather than granting another: no revoke per cycle, and no keyless leases piling up.
    assert_keyless(&mut client, lease, "the lease").await;
    acquire(&provider, &config("report", Duration::from_secs(10))).await;
    assert_eq!(read(&mut client, &key).await.unwrap().2, lease);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_key_is_gone_cannot_release_or_extend_the_next_holders_lock() {
    let env = unique_env();
    let node_a = provider(&env).await;
    let node_b = provider(&env).await;
    let mut client = raw().await;
    let key = node_a.lock_key("job").unwrap();
    let plain = config("job", Duration::from_secs(10));
    let with_at_least =
        config_with_at_least("job", Duration::from_secs(10), Duration::from_secs(5));
    // Each stale operation in turn: release (delete), release within at-least (move to a new
    // lease), extend (move to a new lease).
    for (operation, stale_config) in [
        ("unlock", &plain),
        ("unlock within at-least", &with_at_least),
        ("extend", &plain),
    ] {
        let stale = acquire(&node_a, stale_config).await;
        assert_not_acquired(&node_b, &plain).await;
        // A's lock goes away (as if its lease expired) and B takes it.
        client.delete(key.as_str(), None).await.unwrap();
        let fresh = acquire(&node_b, &plain).await;
        let before = read(&mut client, &key).await.unwrap();
        let answer = if operation == "extend" {
            stale.extend(Duration::from_secs(60)).await.unwrap()
        } else {
            stale.unlock().await.unwrap()
        };
        assert!(!answer, "a stale {operation} must answer false");
        assert_eq!(
            read(&mut client, &key).await.unwrap(),
            before,
            "the stale {operation} changed nothing"
        );
        assert!(!stale.unlock().await.unwrap());
        assert_not_acquired(&node_a, &plain).await;
        assert!(fresh.unlock().await.unwrap());
    }
    acquire(&node_a, &plain).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_expires_at_lock_at_most_for_on_the_servers_lease() {
    let env = unique_env();
    let node_a = provider(&env).await;
    let node_b = provider(&env).await;
    let short = config("job", Duration::from_secs(1));
    let started = Instant::now();
    let stale = acquire(&node_a, &short).await;
    assert_not_acquired(&node_b, &short).await;
    // etcd raises leases below its minimum TTL (2 s by default) and checks expiry twice a
    // second, so allow up to 5 s.
    let fresh = loop {
        if let Acquisition::Acquired(handle) = node_b.try_lock(&short).await.unwrap() {
            break handle;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the lock never expired"
        );
        tokio::time::sleep(100 * MS).await;
    };
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "expired too early"
    );
    assert!(!stale.unlock().await.unwrap());
    assert!(fresh.unlock().await.unwrap());
}

#[tokio::test(flavor = "multi_thread")]
async fn release_keeps_the_key_for_the_rest_of_lock_at_least_for() {
    let (provider, mut client, key) = node_and_raw_key("job").await;
    let handle = acquire(
        &provider,
        &config_with_at_least("job", Duration::from_secs(30), Duration::from_secs(5)),
    )
    .await;
    let (value, _, first_lease) = read(&mut client, &key).await.unwrap();
    tokio::time::sleep(300 * MS).await;
    assert!(handle.unlock().await.unwrap());
    let (kept_value, _, lease) = read(&mut client, &key)
        .await
        .expect("the key stays for the rest of lock_at_least_for");
    assert_eq!(kept_value, value);
    assert_ne!(
        lease, first_lease,
        "moved onto a lease of the remaining time"
    );
    let ttl = lease_ttl(&mut client, lease).await;
    assert!(
        (4..=5).contains(&ttl),
        "5 s of at-least minus 0.3 s, rounded up to whole seconds: got {ttl} s"
    );
    assert_not_acquired(&provider, &config("job", Duration::from_secs(1))).await;
    assert!(!handle.unlock().await.unwrap(), "released once only");
    assert!(!handle.extend(Duration::from_secs(30)).await.unwrap());
    assert_eq!(read(&mut client, &key).await.unwrap().2, lease);
}

/// The leases etcd holds now that were granted with `ttl` seconds.
async fn leases_of_ttl(client: &mut Client, ttl: i64) -> Vec<i64> {
    let ids: Vec<i64> = client
        .leases()
        .await
        .unwrap()
        .leases()
        .iter()
        .map(|lease| lease.id())
        .collect();
    let mut granted = Vec::new();
    for id in ids {
        let lease = client.lease_time_to_live(id, None).await.unwrap();
        if lease.granted_ttl() == ttl && lease.ttl() > 0 {
            granted.push(id);
        }
    }
    granted
}

/// The lease a handle has made ready for a release within `lock_at_least_for` carries no key
/// until that release. A handle dropped without one (a process shutting down mid-task) gives
/// it back as a spare, and the next acquisition's release uses it: no keyless lease is left to
/// run out its TTL unused.
#[tokio::test(flavor = "multi_thread")]
async fn a_handle_dropped_unreleased_gives_back_the_lease_made_for_its_release() {
    let (provider, mut client, _) = node_and_raw_key("dropped").await;
    // A TTL no other test of this file uses, to find the lease made.
    let config =
        |name| config_with_at_least(name, Duration::from_secs(60), Duration::from_secs(23));
    let before = leases_of_ttl(&mut client, 23).await;
    let dropped = acquire(&provider, &config("dropped")).await;
    let started = Instant::now();
    let made = loop {
        let new: Vec<i64> = leases_of_ttl(&mut client, 23)
            .await
            .into_iter()
            .filter(|lease| !before.contains(lease))
            .collect();
        match new[..] {
            [made] => break made,
            [] => assert!(
                started.elapsed() < Duration::from_secs(5),
                "no lease was made for the release"
            ),
            _ => panic!("more than one lease made for one release: {new:?}"),
        }
        tokio::time::sleep(20 * MS).await;
    };
    drop(dropped);

    let next = acquire(&provider, &config("next")).await;
    tokio::time::sleep(500 * MS).await;
    assert!(next.unlock().await.unwrap());
    let key = provider.lock_key("next").unwrap();
    let (_, _, lease) = read(&mut client, &key).await.unwrap();
    assert_eq!(
        lease, made,
        "the next release moved the key onto the lease the dropped handle gave back"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn extend_moves_the_key_onto_a_longer_lease_while_held() {
    let (provider, mut client, key) = node_and_raw_key("job").await;
    let handle = acquire(&provider, &config("job", Duration::from_secs(3))).await;
    let (value, _, old_lease) = read(&mut client, &key).await.unwrap();
    assert!(handle.extend(Duration::from_millis(29_500)).await.unwrap());
    let (same_value, _, lease) = read(&mut client, &key).await.unwrap();
    assert_eq!(same_value, value);
    let ttl = lease_ttl(&mut client, lease).await;
    assert!(
        (29..=30).contains(&ttl),
        "29.5 s rounds up to 30 s: got {ttl} s"
    );
    assert_keyless(&mut client, old_lease, "the old lease").await;
    assert!(matches!(
        handle.extend(Duration::ZERO).await,
        Err(LockError::Configuration(_))
    ));
    assert!(handle.unlock().await.unwrap());
    assert!(!handle.extend(Duration::from_secs(5)).await.unwrap());
    assert!(read(&mut client, &key).await.is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_tokens_are_the_put_revisions_and_strictly_increase() {
    let (provider, mut client, key) = node_and_raw_key("job").await;
    assert!(provider.capabilities().fencing);
    // The declared precision is the shortest lease this server grants (etcd raises a 1 s
    // request to its minimum TTL, 2 s by default).
    let granted = client.lease_grant(1, None).await.unwrap();
    client.lease_revoke(granted.id()).await.unwrap();
    assert_eq!(
        provider.capabilities().time_precision,
        Duration::from_secs(granted.ttl().max(1) as u64)
    );
    let config = config("job", Duration::from_secs(10));
    let mut last = 0;
    for _ in 0..5 {
        let handle = acquire(&provider, &config).await;
        let token = handle.fencing_token().unwrap();
        assert!(token > last, "token {token} should exceed {last}");
        assert_eq!(read(&mut client, &key).await.unwrap().1 as u64, token);
        last = token;
        assert!(handle.unlock().await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn names_keep_their_own_keys_and_bad_settings_are_refused() {
    let env = unique_env();
    let provider = provider(&env).await;
    let mut client = raw().await;
    for name in [
        "a",
        "a:b",
        "a:b:c",
        ":",
        "x/y",
        "with space",
        "ünïcödé",
        "{tag}",
    ] {
        let handle = acquire(&provider, &config(name, Duration::from_secs(5))).await;
        let key = format!("shedlock:{env}:{name}");
        assert!(
            read(&mut client, &key).await.is_some(),
            "{name:?} has its own key"
        );
        assert!(handle.unlock().await.unwrap());
    }
    let a = acquire(&provider, &config("a", Duration::from_secs(5))).await;
    let ab = acquire(&provider, &config("a:b", Duration::from_secs(5))).await;
    assert!(a.unlock().await.unwrap() && ab.unlock().await.unwrap());

    // Keys are bytes: NUL, line breaks and dots are part of the name, each its own key, held
    // at once beside the name without them; the longest name too.
    let longest = "锁".repeat(shedlock_etcd::MAX_NAME_CHARS);
    let mut held = Vec::new();
    for name in ["ab", "a\0b", "a\nb", "a\u{1b}[2Jb", "..", "/", &longest] {
        held.push(acquire(&provider, &config(name, Duration::from_secs(5))).await);
        let key = format!("shedlock:{env}:{name}");
        assert!(read(&mut client, &key).await.is_some());
    }
    for handle in held {
        assert!(handle.unlock().await.unwrap());
    }
    // Longer names are refused by their length before anything is sent: a 1 MiB name would
    // not fit etcd's request limit, which said only that the acquire failed.
    for too_long in [format!("{longest}x"), "x".repeat(1 << 20)] {
        let refused = provider
            .try_lock(&config(&too_long, Duration::from_secs(5)))
            .await;
        let Err(LockError::InvalidName {
            provider: "etcd",
            rule,
            ..
        }) = refused
        else {
            panic!("an over-long name is refused: {refused:?}");
        };
        assert_eq!(
            rule,
            format!(
                "it is {} characters long and the limit is 4096",
                too_long.chars().count()
            )
        );
        assert!(provider.lock_key(&too_long).is_err());
    }
    let listed = client
        .get(
            format!("shedlock:{env}:"),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .unwrap();
    assert!(listed.kvs().is_empty(), "every lock released, none written");

    for (builder, what) in [
        (EtcdLockProvider::builder().env("a:b"), "env"),
        (EtcdLockProvider::builder().env(""), "env"),
        (
            EtcdLockProvider::builder().key_prefix("shed:lock"),
            "key prefix",
        ),
        (
            EtcdLockProvider::builder().operation_timeout(Duration::ZERO),
            "operation timeout",
        ),
    ] {
        let error = builder.connect(&settings::ETCD.value()).await.unwrap_err();
        assert!(error.to_string().contains(what), "{error}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_a_clear_error_within_the_timeout() {
    let started = Instant::now();
    let error = EtcdLockProvider::builder()
        .operation_timeout(Duration::from_secs(1))
        .connect("http://127.0.0.1:1")
        .await
        .unwrap_err();
    assert_answered_within(started, Duration::from_secs(3));
    assert!(error.to_string().contains("http://127.0.0.1:1"), "{error}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");

    let lazy = EtcdLockProvider::builder()
        .operation_timeout(Duration::from_secs(1))
        .connect_lazy("http://127.0.0.1:1")
        .await
        .unwrap();
    for error in acquires_of_an_unreachable_server_fail(&lazy).await {
        // A refused connection sent nothing (a timeout would leave the outcome unknown).
        if matches!(error, LockError::Backend { .. }) {
            assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_never_appear_in_errors_or_debug_output() {
    // In the URL, against a closed port: no token request can succeed.
    let url = format!("http://root:{SECRET}@127.0.0.1:1");
    let error = EtcdLockProvider::builder()
        .operation_timeout(Duration::from_millis(500))
        .connect(&url)
        .await
        .unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("root:***@127.0.0.1:1"), "{text}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");

    // Through the builder: its Debug output hides the password.
    let builder = EtcdLockProvider::builder().credentials("root", SECRET);
    let debug = format!("{builder:?}");
    assert!(!debug.contains(SECRET) && debug.contains("***"), "{debug}");

    // Against the real server, which has authentication off and refuses the attempt.
    let result = builder
        .operation_timeout(Duration::from_secs(2))
        .connect(&settings::ETCD.value())
        .await;
    match result {
        Err(error) => {
            let text = full_text(&error);
            assert!(!text.contains(SECRET), "{text}");
            // Credentials for a cluster with authentication off: the settings must change.
            if text.contains("authentication is not enabled") {
                assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
            }
        }
        Ok(provider) => {
            let debug = format!("{provider:?}");
            assert!(!debug.contains(SECRET), "{debug}");
        }
    }
}

/// What the logs say, at every level and from every crate (the gRPC stack's included), while
/// connects with a password fail and lock operations fail in the executor: never the password.
#[tokio::test(flavor = "current_thread")]
async fn credentials_never_appear_in_the_logs() {
    let capture = log_capture::LogCapture::default();
    let _installed = capture.install();
    let quick = || EtcdLockProvider::builder().operation_timeout(Duration::from_millis(500));
    // A closed port, and the real server, which has authentication off and refuses the
    // attempt to authenticate.
    let with_password =
        settings::ETCD
            .value()
            .replacen("http://", &format!("http://root:{SECRET}@"), 1);
    for url in [format!("http://root:{SECRET}@127.0.0.1:1"), with_password] {
        assert!(quick().connect(&url).await.is_err(), "{url}");
        assert!(quick().connect_lazy(&url).await.is_err(), "{url}");
    }
    assert!(
        quick()
            .credentials("root", SECRET)
            .connect(&settings::ETCD.value())
            .await
            .is_err()
    );
    // Lock operations that fail, logged by the executor with their whole error chain.
    let lazy = quick().connect_lazy("http://127.0.0.1:1").await.unwrap();
    let outcome = LockingTaskExecutor::new(lazy)
        .execute(&config("job", Duration::from_secs(5)), async {})
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    let logs = capture.text();
    assert!(logs.contains("not run"), "the failure was logged: {logs}");
    assert!(!logs.contains(SECRET), "{logs}");
}

#[tokio::test]
async fn endpoints_of_other_backends_and_a_mix_of_tls_and_plain_are_refused_before_connecting() {
    for (url, expected) in [
        (
            format!("redis://:{SECRET}@127.0.0.1:6379"),
            "the endpoint's scheme is \"redis\", which is not etcd's",
        ),
        (
            format!("http://127.0.0.1:2379,postgres://app:{SECRET}@db/x"),
            "the endpoint's scheme is \"postgres\"",
        ),
        (
            format!("http://127.0.0.1:2379,https://root:{SECRET}@127.0.0.1:2379"),
            "some endpoints are https:// and some are not: a client reaches all of them over TLS, \
             or none",
        ),
    ] {
        let error = EtcdLockProvider::connect(&url).await.unwrap_err();
        assert_configuration_error(&error, expected, SECRET);
    }
    // An endpoint without a scheme is plain HTTP, as before.
    let bare = settings::ETCD
        .value()
        .trim_start_matches("http://")
        .to_owned();
    let provider = tokio::time::timeout(Duration::from_secs(30), EtcdLockProvider::connect(&bare))
        .await
        .expect("connecting took over 30 s");
    assert!(provider.is_ok(), "{bare}: {provider:?}");
}

/// A new deployment: 16 nodes, each with its own client, connect at the same instant on an env
/// nothing has used (each measuring the server's shortest lease), and all try the same new name
/// at once: all must start, exactly one acquires, and tokens go on increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_start_at_once_on_a_new_env() {
    use shedlock_conformance::{FIRST_USE_NODES, check_first_use};
    for round in 0..10 {
        let env = unique_env();
        let verdict = check_first_use(FIRST_USE_NODES, |index| {
            let env = env.clone();
            async move {
                builder(&env)
                    .holder(format!("node-{index}"))
                    .connect(&settings::ETCD.value())
                    .await
            }
        })
        .await;
        verdict.unwrap_or_else(|failure| panic!("round {round}: {failure}"));
    }
}
