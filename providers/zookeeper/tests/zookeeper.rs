//! The ZooKeeper provider against a real ZooKeeper: ShedLock (Curator) interoperability, server
//! time from `mtime`, ownership by version, at-least, fencing, names, sessions, unreachable
//! servers and credential redaction.
//!
//! Needs `SHEDLOCK_TEST_ZOOKEEPER_URL` (e.g. `127.0.0.1:2181`; `ci/start-backends.sh` starts
//! one). Every test uses a root of its own, so tests run in parallel and repeatedly on one
//! server.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use shedlock_core::{Acquisition, ErrorKind, LockError, LockProvider, LockingTaskExecutor};
use shedlock_test_support::kv::errors::{assert_configuration_error, full_text};
use shedlock_test_support::kv::locks::{
    SECRET, acquire, acquires_of_an_unreachable_server_fail, assert_not_acquired, config,
    config_with_at_least,
};
use shedlock_test_support::settings;
use shedlock_zookeeper::{ZookeeperLockProvider, ZookeeperLockProviderBuilder, lock_name};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use zookeeper_client::{Acls, Client, CreateMode, Stat};

use shedlock_test_support::log_capture;

const MS: Duration = Duration::from_millis(1);

fn unique_root() -> String {
    format!("/shedlock-test-{}", uuid::Uuid::new_v4().simple())
}

fn builder(root: &str) -> ZookeeperLockProviderBuilder {
    ZookeeperLockProvider::builder().root(root)
}

async fn provider(root: &str) -> ZookeeperLockProvider {
    builder(root)
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap()
}

async fn raw() -> Client {
    Client::connect(&settings::ZOOKEEPER.value()).await.unwrap()
}

/// A node on a root of its own, a raw client, and the path of the node's lock `name`.
async fn node_and_raw_path(name: &str) -> (ZookeeperLockProvider, Client, String) {
    let provider = provider(&unique_root()).await;
    let path = provider.lock_path(name).unwrap();
    (provider, raw().await, path)
}

/// The node's data as text, and its stat.
async fn read(client: &Client, path: &str) -> (String, Stat) {
    let (data, stat) = client.get_data(path).await.unwrap();
    (String::from_utf8(data).unwrap(), stat)
}

/// Deletes the test root that `path` lies in (`/shedlock-test-<id>`) and everything under it.
async fn remove_test_root(path: &str) {
    let top = path.split('/').nth(1).unwrap();
    assert!(top.starts_with("shedlock-test-"), "{path}");
    let client = raw().await;
    let mut stack = vec![format!("/{top}")];
    let mut doomed = Vec::new();
    while let Some(node) = stack.pop() {
        for child in client.list_children(&node).await.unwrap() {
            stack.push(format!("{node}/{child}"));
        }
        doomed.push(node);
    }
    for node in doomed.iter().rev() {
        client.delete(node, None).await.unwrap();
    }
}

/// Milliseconds since the epoch of an ISO-8601 instant.
fn millis(iso: &str) -> i64 {
    DateTime::parse_from_rfc3339(iso)
        .unwrap()
        .timestamp_millis()
}

fn iso(at: SystemTime) -> String {
    DateTime::<Utc>::from(at).to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Writes `data` into `path` as Curator would: create with parents, else overwrite.
async fn curator_write(client: &Client, path: &str, data: &str) {
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let parent = &path[..path.rfind('/').unwrap()];
    client.mkdir(parent, &options).await.unwrap();
    match client.create(path, data.as_bytes(), &options).await {
        Ok(_) => {}
        Err(zookeeper_client::Error::NodeExists) => {
            client.set_data(path, data.as_bytes(), None).await.unwrap();
        }
        Err(error) => panic!("{error}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_written_the_way_curator_does_is_honoured_then_taken_once_expired() {
    let root = unique_root();
    let provider = provider(&root).await;
    let path = format!("{root}/report");
    assert_eq!(provider.lock_path("report").unwrap(), path);
    let client = raw().await;
    // What ShedLock's Curator provider writes: the lock_until instant, nothing else.
    let held_until = SystemTime::now() + Duration::from_secs(3600);
    curator_write(&client, &path, &iso(held_until)).await;

    let config = config("report", Duration::from_secs(5));
    match provider.try_lock(&config).await.unwrap() {
        Acquisition::NotAcquired(Some(holder)) => {
            assert_eq!(holder.locked_by, None, "Curator stores no owner");
            let reported = holder.held_until.unwrap();
            assert_eq!(iso(reported), iso(held_until));
        }
        other => panic!("a Curator node must block us, got {other:?}"),
    }
    let (data, stat) = read(&client, &path).await;
    assert_eq!(data, iso(held_until), "a refused acquire writes nothing");

    // Java's release writes "now" (its clock): the lock is free.
    curator_write(
        &client,
        &path,
        &iso(SystemTime::now() - Duration::from_secs(1)),
    )
    .await;
    let handle = acquire(&provider, &config).await;
    let (data, taken) = read(&client, &path).await;
    assert_eq!(taken.version, stat.version + 2, "taken over by one write");
    assert_eq!(handle.fencing_token(), Some(taken.mzxid as u64));
    // Our data is Curator's format exactly: an instant, ms, `Z`, parseable by Java's Instant.
    assert_eq!(data.len(), "2026-11-29T10:15:30.123Z".len(), "{data}");
    assert!(data.ends_with('Z') && data.as_bytes()[19] == b'.', "{data}");
    let lock_until = millis(&data);
    let after_mtime = lock_until - taken.mtime;
    assert!(
        (4_950..=5_050).contains(&after_mtime),
        "lock_until is the server's mtime + lock_at_most_for, up to the clock's uncertainty: {after_mtime} ms"
    );
    assert!(handle.unlock().await.unwrap());
    remove_test_root(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_java_node_sees_our_lock_as_held_and_our_release_as_free() {
    let (provider, client, path) = node_and_raw_path("job").await;
    let handle = acquire(&provider, &config("job", Duration::from_secs(10))).await;
    // Curator's acquire: read lock_until, compare with its clock, write only if passed.
    let (data, _) = read(&client, &path).await;
    let java_now = Utc::now().timestamp_millis();
    assert!(
        millis(&data) > java_now + 9_000,
        "a Java node with a correct clock sees the lock held for about 10 s"
    );
    assert!(handle.unlock().await.unwrap());
    let (data, released) = read(&client, &path).await;
    assert!(
        millis(&data) <= released.mtime,
        "released with lock_at_least_for 0: lock_until is no later than the release: {data} vs mtime {}",
        released.mtime
    );
    remove_test_root(&path).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_holder_whose_node_was_written_since_cannot_release_or_extend_it() {
    let root = unique_root();
    let node_a = provider(&root).await;
    let node_b = provider(&root).await;
    let client = raw().await;
    let path = node_a.lock_path("job").unwrap();
    let plain = config("job", Duration::from_secs(10));
    for operation in ["unlock", "extend"] {
        let stale = acquire(&node_a, &plain).await;
        assert_not_acquired(&node_b, &plain).await;
        // A's lock is over (as if it expired) and B takes it.
        curator_write(
            &client,
            &path,
            &iso(SystemTime::now() - Duration::from_secs(1)),
        )
        .await;
        let fresh = acquire(&node_b, &plain).await;
        let before = read(&client, &path).await;
        let answer = if operation == "extend" {
            stale.extend(Duration::from_secs(60)).await.unwrap()
        } else {
            stale.unlock().await.unwrap()
        };
        assert!(!answer, "a stale {operation} must answer false");
        let after = read(&client, &path).await;
        assert_eq!(after.0, before.0, "the stale {operation} changed nothing");
        assert_eq!(after.1.version, before.1.version);
        assert!(!stale.unlock().await.unwrap());
        assert_not_acquired(&node_a, &plain).await;
        assert!(fresh.unlock().await.unwrap());
    }
    remove_test_root(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn release_keeps_the_lock_until_acquired_at_plus_lock_at_least_for() {
    let (provider, client, path) = node_and_raw_path("job").await;
    let handle = acquire(
        &provider,
        &config_with_at_least("job", Duration::from_secs(30), Duration::from_secs(5)),
    )
    .await;
    let (_, acquired) = read(&client, &path).await;
    tokio::time::sleep(100 * MS).await;
    assert!(handle.unlock().await.unwrap());
    let (data, released) = read(&client, &path).await;
    assert_eq!(
        millis(&data),
        acquired.mtime + 1 + 5_000,
        "acquired_at (the end of the acquiring write's millisecond) + 5 s"
    );
    assert_eq!(released.version, acquired.version + 1);
    assert_not_acquired(&provider, &config("job", Duration::from_secs(1))).await;
    assert!(!handle.unlock().await.unwrap(), "released once only");
    assert!(!handle.extend(Duration::from_secs(30)).await.unwrap());
    assert_eq!(read(&client, &path).await.1.version, released.version);
    remove_test_root(&path).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn extend_moves_lock_until_from_the_servers_now_and_an_expired_lock_stays_expired() {
    let (provider, client, path) = node_and_raw_path("job").await;
    let handle = acquire(&provider, &config("job", Duration::from_millis(300))).await;
    assert!(handle.extend(Duration::from_secs(20)).await.unwrap());
    let (data, extended) = read(&client, &path).await;
    let after_mtime = millis(&data) - extended.mtime;
    assert!(
        (19_950..=20_050).contains(&after_mtime),
        "the extend's own mtime + 20 s: {after_mtime} ms"
    );
    assert!(matches!(
        handle.extend(Duration::ZERO).await,
        Err(LockError::Configuration(_))
    ));
    assert!(handle.extend(Duration::from_millis(200)).await.unwrap());
    tokio::time::sleep(400 * MS).await;
    let before = read(&client, &path).await;
    assert!(
        !handle.extend(Duration::from_secs(20)).await.unwrap(),
        "an expired lock does not extend"
    );
    assert!(!handle.unlock().await.unwrap());
    assert_eq!(read(&client, &path).await, before, "nothing was written");
    acquire(&provider, &config("job", Duration::from_secs(1))).await;
    remove_test_root(&path).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_tokens_are_the_writes_mzxid_and_survive_the_node_being_recreated() {
    let (provider, client, path) = node_and_raw_path("job").await;
    let config = config("job", Duration::from_secs(10));
    let mut last = 0;
    for round in 0..6 {
        if round == 3 {
            // Deleted by hand: the version restarts at 0, the zxid does not.
            client.delete(&path, None).await.unwrap();
        }
        let handle = acquire(&provider, &config).await;
        let token = handle.fencing_token().unwrap();
        assert!(token > last, "token {token} should exceed {last}");
        assert_eq!(read(&client, &path).await.1.mzxid as u64, token);
        last = token;
        assert!(handle.unlock().await.unwrap());
    }
    remove_test_root(&path).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_with_unreadable_data_is_an_error_and_is_left_alone() {
    let (provider, client, path) = node_and_raw_path("job").await;
    // Bytes that are no text at all: described, not taken over.
    curator_write(&client, &path, "").await;
    client
        .set_data(&path, &[0xff, 0x00, 0xfe], None)
        .await
        .unwrap();
    let before = client.get_data(&path).await.unwrap();
    let error = provider
        .try_lock(&config("job", Duration::from_secs(5)))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&format!("node {path} holds \"\u{fffd}\\0\u{fffd}\""))
            && text.contains("nothing was written"),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::CorruptData, "{error}");
    assert_eq!(client.get_data(&path).await.unwrap(), before);
    for data in [
        "",
        "not a time",
        "1795000000123",
        r#"{"owner":"another app","until":"2030-01-01T00:00:00Z"}"#,
    ] {
        curator_write(&client, &path, data).await;
        let before = read(&client, &path).await;
        let error = provider
            .try_lock(&config("job", Duration::from_secs(5)))
            .await
            .unwrap_err();
        let text = error.to_string();
        assert!(
            text.contains(&path) && text.contains("ISO-8601"),
            "the error names the node and the rule: {text}"
        );
        assert_eq!(error.kind(), ErrorKind::CorruptData, "{error}");
        assert_eq!(read(&client, &path).await, before, "nothing was written");
    }
    remove_test_root(&path).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn names_get_one_node_each_directly_under_the_root() {
    let root = unique_root();
    let provider = provider(&root).await;
    let client = raw().await;
    for (name, node) in [
        ("a", "a"),
        ("a/b", "a%2Fb"),
        ("a%2Fb", "a%252Fb"),
        ("..", "%2E%2E"),
        ("../escape", "..%2Fescape"),
        ("tab\t", "tab%09"),
        ("nul\0", "nul%00"),
        ("line\nbreak", "line%0Abreak"),
        ("emoji😀", "emoji%F0%9F%98%80"),
        ("ünïcödé", "ünïcödé"),
    ] {
        let path = format!("{root}/{node}");
        assert_eq!(provider.lock_path(name).unwrap(), path);
        assert_eq!(lock_name(node).as_deref(), Some(name));
        let handle = acquire(&provider, &config(name, Duration::from_secs(5))).await;
        assert!(
            client.check_stat(&path).await.unwrap().is_some(),
            "{name:?}"
        );
        assert!(handle.unlock().await.unwrap());
    }
    let mut children = client.list_children(&root).await.unwrap();
    children.sort();
    assert_eq!(
        children.len(),
        10,
        "one node each, all children of the root: {children:?}"
    );

    for too_long in [
        "x".repeat(shedlock_zookeeper::MAX_NAME_CHARS + 1),
        "x".repeat(1 << 20),
    ] {
        let refused = provider
            .try_lock(&config(&too_long, Duration::from_secs(5)))
            .await;
        let Err(LockError::InvalidName { rule, .. }) = refused else {
            panic!("an over-long name is refused: {refused:?}");
        };
        assert_eq!(
            rule,
            format!(
                "it is {} characters long and the limit is {}",
                too_long.len(),
                shedlock_zookeeper::MAX_NAME_CHARS
            )
        );
    }
    assert_eq!(client.list_children(&root).await.unwrap().len(), 10);
    remove_test_root(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_root_deleted_behind_the_providers_back_is_created_again() {
    let root = format!("{}/nested/locks", unique_root());
    let provider = provider(&root).await;
    let client = raw().await;
    client.delete(&root, None).await.unwrap();
    let handle = acquire(&provider, &config("job", Duration::from_secs(5))).await;
    assert!(
        client
            .check_stat(&format!("{root}/job"))
            .await
            .unwrap()
            .is_some()
    );
    assert!(handle.unlock().await.unwrap());
    remove_test_root(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_settings_are_refused_with_what_is_wrong() {
    for (builder, what) in [
        (
            ZookeeperLockProvider::builder().root("shedlock"),
            "root path",
        ),
        (ZookeeperLockProvider::builder().root("/"), "root path"),
        (
            ZookeeperLockProvider::builder().root("/a/../b"),
            "root path",
        ),
        (
            ZookeeperLockProvider::builder().operation_timeout(Duration::ZERO),
            "operation timeout",
        ),
        (
            ZookeeperLockProvider::builder().max_clock_uncertainty(Duration::ZERO),
            "max clock uncertainty",
        ),
    ] {
        let error = builder
            .connect(&settings::ZOOKEEPER.value())
            .await
            .unwrap_err();
        assert!(error.to_string().contains(what), "{error}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
    for connect_string in ["", "a:2181,,b:2181", "u:p@"] {
        let error = ZookeeperLockProvider::builder()
            .connect_lazy(connect_string)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("connect string"), "{error}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
    // A chroot that is no ZooKeeper path is refused by its rule before anything connects,
    // never reported as an unreachable server; the password stays hidden.
    for (chroot, rule) in [
        ("/../x", "it must not contain an empty, '.' or '..' segment"),
        ("/a//b", "it must not contain an empty, '.' or '..' segment"),
        (
            "/a/./b",
            "it must not contain an empty, '.' or '..' segment",
        ),
        ("/a/", "it must not end with '/'"),
        ("/a\u{1}", "it must not contain control characters"),
    ] {
        let connect_string = format!("app:{SECRET}@{}{chroot}", settings::ZOOKEEPER.value());
        let error = ZookeeperLockProvider::builder()
            .connect_lazy(&connect_string)
            .await
            .unwrap_err();
        let text = full_text(&error);
        assert!(
            text.contains(&format!(
                "its chroot {chroot:?} is not a ZooKeeper path: {rule}"
            )),
            "{text}"
        );
        assert!(
            text.contains("invalid connect string \"app:***@") && !text.contains(SECRET),
            "{text}"
        );
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
    // A chroot of the root alone, or of a plain path, is one.
    for chroot in ["/", "/apps/locks"] {
        let connect_string = format!("{}{chroot}", settings::ZOOKEEPER.value());
        ZookeeperLockProvider::builder()
            .connect_lazy(&connect_string)
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_root_holding_another_applications_data_is_refused_and_left_as_it_is() {
    let root = unique_root();
    let client = raw().await;
    let data = r#"{"feature-flags":{"beta":true}}"#;
    curator_write(&client, &format!("{root}/config"), "").await;
    client
        .set_data(&format!("{root}/config"), data.as_bytes(), None)
        .await
        .unwrap();
    let config_root = format!("{root}/config");
    let before = read(&client, &config_root).await;

    let error = builder(&config_root)
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Backend {
                operation: shedlock_core::Operation::Connect,
                source: None,
                ..
            }
        ),
        "{error:?}"
    );
    // The root setting names another application's node: the deployment must change.
    assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    let text = error.to_string();
    for part in [
        &format!("the root node {config_root} at "),
        &format!("holds {data:?} (31 bytes)"),
        "nothing was written",
        "ZookeeperLockProviderBuilder::root",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    assert_eq!(
        read(&client, &config_root).await,
        before,
        "the data is kept"
    );

    // A lazy provider finds it at its first operation, and creates no lock node there.
    let lazy = builder(&config_root)
        .connect_lazy(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    let error = lazy
        .try_lock(&config("job", Duration::from_secs(5)))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("ShedLock's root holds no data"),
        "{error}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    assert_eq!(
        read(&client, &config_root).await,
        before,
        "the data is kept"
    );
    assert!(client.list_children(&config_root).await.unwrap().is_empty());

    // Emptied, it is a root like any other.
    client.set_data(&config_root, &[], None).await.unwrap();
    let provider = builder(&config_root)
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    let handle = acquire(&provider, &config("job", Duration::from_secs(5))).await;
    assert!(handle.unlock().await.unwrap());
    remove_test_root(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_a_clear_error_within_the_timeouts() {
    let started = Instant::now();
    let error = ZookeeperLockProvider::builder()
        .connect_timeout(Duration::from_secs(1))
        .connect("127.0.0.1:1")
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
    assert!(error.retryable(), "{error}");

    let lazy = ZookeeperLockProvider::builder()
        .connect_timeout(Duration::from_secs(1))
        .connect_lazy("127.0.0.1:1")
        .await
        .unwrap();
    for error in acquires_of_an_unreachable_server_fail(&lazy).await {
        // No session could be opened, so no request of the acquire was sent.
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");
        assert!(error.to_string().contains("must not run"), "{error}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_never_appear_in_errors_or_debug_output() {
    // In the connect string, against a closed port.
    let error = ZookeeperLockProvider::builder()
        .connect_timeout(Duration::from_millis(500))
        .connect(&format!("zookeeper://app:{SECRET}@127.0.0.1:1"))
        .await
        .unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("app:***@127.0.0.1:1"), "{text}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");

    // Through the builder.
    let with_auth = builder(&unique_root()).digest_auth("app", SECRET);
    let debug = format!("{with_auth:?}");
    assert!(!debug.contains(SECRET) && debug.contains("***"), "{debug}");

    // Against the real server, which accepts any digest identity: locks work, and neither the
    // provider nor its handles show the password.
    let root = unique_root();
    let url = format!("app:{SECRET}@{}", settings::ZOOKEEPER.value());
    let provider = builder(&root).connect(&url).await.unwrap();
    let debug = format!("{provider:?}");
    assert!(
        !debug.contains(SECRET) && debug.contains("app:***@"),
        "{debug}"
    );
    let handle = acquire(&provider, &config("job", Duration::from_secs(5))).await;
    assert!(!format!("{handle:?}").contains(SECRET));
    assert!(handle.unlock().await.unwrap());
    remove_test_root(&root).await;
}

/// What the logs say, at every level and from every crate (the ZooKeeper client's included),
/// while a connect with digest credentials fails, lock operations fail in the executor, and a
/// session authenticated with them takes and frees a lock: never the password.
#[tokio::test(flavor = "current_thread")]
async fn credentials_never_appear_in_the_logs() {
    let capture = log_capture::LogCapture::default();
    let _installed = capture.install();
    let quick = || {
        ZookeeperLockProvider::builder()
            .connect_timeout(Duration::from_millis(500))
            .operation_timeout(Duration::from_millis(500))
    };
    let unreachable = format!("zk://app:{SECRET}@127.0.0.1:1");
    assert!(quick().connect(&unreachable).await.is_err());
    let outcome = LockingTaskExecutor::new(quick().connect_lazy(&unreachable).await.unwrap())
        .execute(&config("job", Duration::from_secs(5)), async {})
        .await;
    assert!(outcome.is_err(), "{outcome:?}");

    let root = unique_root();
    let provider = builder(&root)
        .connect(&format!("app:{SECRET}@{}", settings::ZOOKEEPER.value()))
        .await
        .unwrap();
    let outcome = LockingTaskExecutor::new(provider)
        .execute(&config("job", Duration::from_secs(5)), async {})
        .await;
    assert!(outcome.is_ok(), "{outcome:?}");
    remove_test_root(&root).await;

    let logs = capture.text();
    assert!(
        logs.contains("not run") && logs.contains("app:***@127.0.0.1:1"),
        "the failure was logged: {logs}"
    );
    assert!(!logs.contains(SECRET), "{logs}");
}

/// A TCP proxy that can drop every connection and refuse new ones for a while: a network
/// partition between one node and ZooKeeper.
struct Partition {
    address: SocketAddr,
    cut: Arc<AtomicBool>,
    connections: Arc<std::sync::Mutex<Vec<JoinHandle<()>>>>,
}

impl Partition {
    async fn start(upstream: String) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let connections = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (refusing, tracked) = (cut.clone(), connections.clone());
        tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                if refusing.load(Ordering::SeqCst) {
                    continue;
                }
                let upstream = upstream.clone();
                let forwarding = tokio::spawn(async move {
                    if let Ok(mut server) = TcpStream::connect(&upstream).await {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
                tracked.lock().unwrap().push(forwarding);
            }
        });
        Self {
            address,
            cut,
            connections,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn heal(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_taken_in_an_expired_session_is_still_extended_and_released_by_its_version() {
    let root = unique_root();
    let partition = Partition::start(settings::ZOOKEEPER.value()).await;
    // ZooKeeper's shortest session with its default tick (2 s) is 4 s.
    let node_a = builder(&root)
        .session_timeout(Duration::from_secs(4))
        .connect(&partition.address.to_string())
        .await
        .unwrap();
    let node_b = provider(&root).await;
    let config = config("job", Duration::from_secs(60));
    let handle = acquire(&node_a, &config).await;
    assert!(handle.extend(Duration::from_secs(60)).await.unwrap());

    partition.cut();
    // Past the session timeout, ZooKeeper ends A's session; the lock node, persistent, stays.
    tokio::time::sleep(Duration::from_secs(7)).await;
    partition.heal();
    assert_not_acquired(&node_b, &config).await;

    // A new session serves the node's next operations, and the version still proves that the
    // node holds this acquisition: nobody took it, and it has not expired, so it is still held
    // and extend says so (answering `false` would stop a task whose lock was never lost).
    let extended = tokio::time::timeout(
        Duration::from_secs(15),
        handle.extend(Duration::from_secs(60)),
    )
    .await
    .expect("extend answers in bounded time");
    assert!(
        extended.unwrap(),
        "the lock is still this acquisition's: extend answers true in the new session"
    );
    assert_not_acquired(&node_b, &config).await;
    assert!(handle.unlock().await.unwrap());
    let fresh = acquire(&node_b, &config).await;
    assert!(fresh.unlock().await.unwrap());
    let again = acquire(&node_a, &config).await;
    assert!(again.extend(Duration::from_secs(10)).await.unwrap());
    assert!(again.unlock().await.unwrap());
    remove_test_root(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_whose_clock_knowledge_is_too_uncertain_learns_it_again_before_judging() {
    // A limit below any real round trip: every operation first writes the root, up to three
    // times, and still decides correctly with the interval it has.
    let root = unique_root();
    let strict = builder(&root)
        .max_clock_uncertainty(Duration::from_micros(1))
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    let client = raw().await;
    let before = client.check_stat(&root).await.unwrap().unwrap().version;
    let config = config("job", Duration::from_millis(300));
    let handle = acquire(&strict, &config).await;
    let after = client.check_stat(&root).await.unwrap().unwrap().version;
    assert_eq!(after - before, 3, "three root writes before the acquire");
    assert_not_acquired(&strict, &config).await;
    drop(handle);
    tokio::time::sleep(400 * MS).await;
    let handle = acquire(&strict, &config).await;
    assert!(handle.unlock().await.unwrap());
    remove_test_root(&root).await;
}

/// A TCP proxy that holds every chunk the client sends for a settable delay: a slow network
/// between one node and ZooKeeper.
struct SlowLink {
    address: SocketAddr,
    delay_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl SlowLink {
    async fn start(upstream: String) -> Self {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let delay_ms = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let delays = delay_ms.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(&upstream).await.unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let delays = delays.clone();
                tokio::spawn(async move {
                    let mut buffer = vec![0u8; 64 * 1024];
                    while let Ok(read) = client_read.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        let delay = delays.load(Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { address, delay_ms }
    }

    fn delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_extend_that_lands_after_the_lock_expired_is_undone_and_answers_false() {
    let root = unique_root();
    let link = SlowLink::start(settings::ZOOKEEPER.value()).await;
    let node_a = builder(&root)
        .connect(&link.address.to_string())
        .await
        .unwrap();
    let node_b = provider(&root).await;
    let client = raw().await;
    let path = node_a.lock_path("job").unwrap();
    let short = config("job", Duration::from_millis(300));
    let handle = acquire(&node_a, &short).await;
    let (held_until, _) = read(&client, &path).await;
    tokio::time::sleep(100 * MS).await;
    // Sent while the lock is surely held, the extend reaches ZooKeeper after it expired.
    link.delay(Duration::from_millis(500));
    let extended = handle.extend(Duration::from_secs(20)).await.unwrap();
    link.delay(Duration::ZERO);
    assert!(!extended, "the extend landed after the lock expired");
    let (data, restored) = read(&client, &path).await;
    assert_eq!(data, held_until, "the expired lock_until was written back");
    assert!(
        millis(&data) <= restored.mtime,
        "so the lock reads as expired"
    );
    assert!(!handle.unlock().await.unwrap(), "the acquisition is over");
    let fresh = acquire(&node_b, &short).await;
    assert!(fresh.unlock().await.unwrap());
    remove_test_root(&root).await;
}

#[tokio::test]
async fn urls_of_other_backends_are_refused_by_their_scheme_before_connecting() {
    for (url, scheme) in [
        (format!("redis://:{SECRET}@127.0.0.1:6379"), "redis"),
        (format!("etcd://root:{SECRET}@127.0.0.1:2379"), "etcd"),
    ] {
        let error = ZookeeperLockProvider::connect(&url).await.unwrap_err();
        assert_configuration_error(
            &error,
            &format!("the connect string's scheme is \"{scheme}\""),
            SECRET,
        );
        assert_configuration_error(&error, "optionally after zk:// or zookeeper://", SECRET);
    }
    // The connect string, bare or after either ZooKeeper scheme, still connects.
    for prefix in ["", "zk://", "zookeeper://"] {
        let connect_string = format!("{prefix}{}", settings::ZOOKEEPER.value());
        let provider = tokio::time::timeout(
            Duration::from_secs(30),
            builder(&unique_root()).connect(&connect_string),
        )
        .await
        .expect("connecting took over 30 s");
        assert!(provider.is_ok(), "{connect_string}: {provider:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_duration_past_what_shedlocks_data_can_carry_is_refused_and_nothing_is_written() {
    let (node, client, path) = node_and_raw_path("forever").await;
    let thousand_years = shedlock_zookeeper::MAX_LOCK_DURATION;
    let too_long = [
        config("forever", thousand_years + Duration::from_secs(1)),
        config("forever", Duration::from_secs(10_u64.pow(13))),
        config_with_at_least(
            "forever",
            Duration::MAX,
            Duration::from_secs(10_u64.pow(13)),
        ),
    ];
    for config in &too_long {
        let error = match node.try_lock(config).await {
            Err(error) => {
                assert_eq!(error.kind(), ErrorKind::InvalidRequest, "{error}");
                error.to_string()
            }
            Ok(acquisition) => panic!("{config:?}: {}", acquisition.is_acquired()),
        };
        assert!(
            error.contains("longer than a lock this provider writes")
                && error.contains("before sending anything"),
            "{error}"
        );
        assert!(
            client.check_stat(&path).await.unwrap().is_none(),
            "no node was made for {config:?}"
        );
    }

    // A thousand years is accepted and written as ShedLock writes it; extending past it is
    // refused and the lock keeps its expiry.
    let handle = acquire(&node, &config("forever", thousand_years)).await;
    let (data, _) = read(&client, &path).await;
    let until = DateTime::parse_from_rfc3339(&data).unwrap();
    assert!(
        until.timestamp() > Utc::now().timestamp() + 999 * 365 * 86_400,
        "{data}"
    );
    let error = handle
        .extend(Duration::from_secs(10_u64.pow(13)))
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("before sending anything"), "{error}");
    assert_eq!(read(&client, &path).await.0, data);
    assert!(handle.unlock().await.unwrap());
    remove_test_root(&path).await;
}

/// A root whose ACL lets in only the identity that created it: a provider without that
/// identity, or with another one, is refused for its credentials at connect, and the owner's
/// credentials take and free a lock there.
#[tokio::test(flavor = "multi_thread")]
async fn a_root_whose_acl_keeps_this_user_out_is_refused_for_its_credentials() {
    let root = unique_root();
    let guarded = format!("{root}/guarded");
    let owner = Client::connector()
        .with_auth("digest", b"owner:owner-pw")
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    owner
        .mkdir(&root, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await
        .unwrap();
    owner
        .create(
            &guarded,
            b"",
            &CreateMode::Persistent.with_acls(Acls::creator_all()),
        )
        .await
        .unwrap();

    for (who, builder) in [
        ("no credentials", builder(&guarded)),
        (
            "another user",
            builder(&guarded).digest_auth("intruder", SECRET),
        ),
    ] {
        let error = builder
            .connect(&settings::ZOOKEEPER.value())
            .await
            .unwrap_err();
        assert_eq!(
            error.kind(),
            ErrorKind::CredentialsRefused,
            "{who}: {}",
            full_text(&error)
        );
        assert!(!error.retryable(), "{who}: {error}");
        assert!(!full_text(&error).contains(SECRET), "{who}: {error:?}");
    }

    let provider = builder(&guarded)
        .digest_auth("owner", "owner-pw")
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    let handle = acquire(&provider, &config("job", Duration::from_secs(5))).await;
    assert!(handle.unlock().await.unwrap());

    // Only the owner can list the guarded root to empty it.
    for child in owner.list_children(&guarded).await.unwrap() {
        owner
            .delete(&format!("{guarded}/{child}"), None)
            .await
            .unwrap();
    }
    owner.delete(&guarded, None).await.unwrap();
    remove_test_root(&root).await;
}

/// A new deployment: 16 nodes connect at the same instant under a root that does not exist
/// yet, two levels deep, and all try the same new name at once. Creating the root and its
/// parent races between them: all must start, and exactly one acquires.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_create_the_root_at_once() {
    use shedlock_conformance::{FIRST_USE_NODES, check_first_use};
    for round in 0..10 {
        let root = format!("{}/locks", unique_root());
        let verdict = check_first_use(FIRST_USE_NODES, |_| {
            let root = root.clone();
            async move { builder(&root).connect(&settings::ZOOKEEPER.value()).await }
        })
        .await;
        verdict.unwrap_or_else(|failure| panic!("round {round}: {failure}"));
        let client = raw().await;
        assert!(
            client.check_stat(&root).await.unwrap().is_some(),
            "round {round}: {root}"
        );
    }
}
