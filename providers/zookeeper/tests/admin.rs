//! The operator's view (`LockAdmin`) against a real ZooKeeper (`SHEDLOCK_TEST_ZOOKEEPER_URL`):
//! listing by prefix across pages in name order, what a listed lock shows, inspect,
//! force-unlock as a compare-and-set by node version, nodes Java ShedLock (Curator) wrote, and
//! a listing of 1,000 names.
//!
//! Every test uses a root of its own, so runs never see each other's nodes, and deletes it at
//! the end.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use shedlock_core::{
    AcquisitionId, ConfigurationError, ErrorKind, LockAdmin, LockError, LockProvider, LockState,
    Operation, PageRequest,
};
use shedlock_test_support::kv::admin::{
    PrefixListing, assert_a_thousand_listed_in_pages_of_a_hundred,
    assert_foreign_acquisition_refused, assert_foreign_cursor_refused, assert_refused, hold_all,
    inspect, list, names,
};
use shedlock_test_support::kv::locks::{acquire, config, config_with_at_least};
use shedlock_test_support::settings;
use shedlock_zookeeper::ZookeeperLockProvider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use zookeeper_client::{Acls, Client, CreateMode, Stat};

const SECOND: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

fn unique_root() -> String {
    format!("/shedlock-admin-{}", uuid::Uuid::new_v4().simple())
}

/// A node of its own (its own session, as another process would have) on `root`.
async fn node(root: &str) -> ZookeeperLockProvider {
    ZookeeperLockProvider::builder()
        .root(root)
        .connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap()
}

async fn raw() -> Client {
    Client::connect(&settings::ZOOKEEPER.value()).await.unwrap()
}

/// Deletes `root` and every node under it.
async fn cleanup(root: &str) {
    let client = raw().await;
    let mut stack = vec![root.to_owned()];
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

/// Java's `Instant.toString()`: milliseconds only when they are not zero.
fn java_instant(at: SystemTime) -> String {
    DateTime::<Utc>::from(at).to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// What ShedLock's Curator provider leaves: a persistent node holding `lock_until`, created
/// or overwritten without any version check. Returns its stat.
async fn curator_write(client: &Client, path: &str, data: &str) -> Stat {
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match client.create(path, data.as_bytes(), &options).await {
        Ok((stat, _)) => stat,
        Err(zookeeper_client::Error::NodeExists) => {
            client.set_data(path, data.as_bytes(), None).await.unwrap()
        }
        Err(error) => panic!("cannot write {path}: {error}"),
    }
}

/// The node's data as an instant, and its stat.
async fn read(client: &Client, path: &str) -> (SystemTime, Stat) {
    let (data, stat) = client.get_data(path).await.unwrap();
    let text = String::from_utf8(data).unwrap();
    let at = DateTime::parse_from_rfc3339(&text).unwrap();
    (SystemTime::from(at), stat)
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_by_prefix_reads_small_pages_in_name_order_and_matches_literally() {
    let root = unique_root();
    let a = node(&root).await;
    // Escaped in their node names ("/", "%", a tab, a character beyond U+FFFF), so name order
    // differs from node-name order: "jobs/\t" is "jobs%2F%09", after "jobs%2F!".
    let listing = PrefixListing {
        inside: [
            "jobs/",
            "jobs/\t",
            "jobs/!",
            "jobs/100%",
            "jobs/b:with:colons",
            "jobs/c d é",
            "jobs/f\u{1f600}",
        ],
        outside: &["jobs", "jobs.", "jobs0", "job", "jobt/a"],
        literal_prefix: "p%_.*[",
        literal_inside: &["p%_.*[a", "p%_.*[b"],
        lookalikes: &["pab.*[a", "p%_xy[a", "p%_.*"],
    };
    hold_all(&a, listing.all()).await;
    // Children under the root that are no escape this provider writes: passed over.
    let client = raw().await;
    for foreign in ["jobs%2Fzz%", "jobs%2f", "jobs%2Fx%zz"] {
        curator_write(
            &client,
            &format!("{root}/{foreign}"),
            "2099-01-01T00:00:00Z",
        )
        .await;
    }

    let operator = node(&root).await;
    listing.assert_listed(&operator).await;
    assert_foreign_cursor_refused(&operator, "%zz").await;
    cleanup(&root).await;

    // A lazily built provider on a new root: its first operation creates the root (learning
    // the server's clock there), which holds no locks.
    let empty = ZookeeperLockProvider::builder()
        .root(format!("{root}-never-created"))
        .connect_lazy(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    let locks = list(&empty, "", 10).await;
    assert!(locks.is_empty(), "{locks:?}");
    cleanup(&format!("{root}-never-created")).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_lock_shows_its_lock_until_the_servers_remaining_time_and_its_token() {
    let root = unique_root();
    let a = node(&root).await;
    let operator = node(&root).await;
    let client = raw().await;
    let precision = a.capabilities().time_precision;
    let held = acquire(&a, &config("held", 10 * SECOND)).await;
    let released = acquire(&a, &config("released", 10 * SECOND)).await;
    assert!(released.unlock().await.unwrap());
    let kept = acquire(&a, &config_with_at_least("kept", 10 * SECOND, 6 * SECOND)).await;
    assert!(kept.unlock().await.unwrap());

    let listed = list(&operator, "", 2).await;
    // Nodes are kept: a released lock is listed, free.
    assert_eq!(names(&listed), ["held", "kept", "released"]);
    let lock = &listed[0];
    assert_eq!(lock.state, LockState::Held);
    // Curator's node holds lock_until only: no holder, no acquisition time.
    assert_eq!((&lock.locked_by, lock.locked_at), (&None, None));
    let (stored_until, stat) = read(&client, &a.lock_path("held").unwrap()).await;
    assert_eq!(lock.held_until, Some(stored_until), "lock_until as stored");
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining > 8 * SECOND && remaining <= 10 * SECOND + precision,
        "{remaining:?} of a 10 s lock just taken (the clock estimate may add {precision:?})"
    );
    assert_eq!(lock.fencing_token, held.fencing_token());
    assert_eq!(
        lock.acquisition.as_str(),
        format!("{}:{}", stat.mzxid, stat.version)
    );

    // Released within lock_at_least_for: held for the rest of it.
    let kept_lock = &listed[1];
    assert_eq!(kept_lock.state, LockState::Held);
    let remaining = kept_lock.remaining.unwrap();
    assert!(
        remaining > 4 * SECOND && remaining <= 6 * SECOND + precision,
        "{remaining:?}"
    );
    let released_lock = &listed[2];
    assert_eq!(
        (released_lock.state, released_lock.remaining),
        (LockState::Free, None)
    );

    // Inspect shows what the listing showed.
    let inspected = inspect(&operator, "held").await;
    assert_eq!(
        (
            &inspected.acquisition,
            inspected.held_until,
            inspected.fencing_token,
            inspected.state
        ),
        (
            &lock.acquisition,
            lock.held_until,
            lock.fencing_token,
            lock.state
        )
    );
    assert_eq!(inspect(&operator, "released").await.state, LockState::Free);
    assert!(operator.inspect_lock("never-used").await.unwrap().is_none());
    // The names the provider refuses for locks are refused here too, the same way.
    assert!(matches!(
        operator.inspect_lock("").await,
        Err(LockError::Configuration(ConfigurationError::EmptyName))
    ));
    let too_long = "x".repeat(shedlock_zookeeper::MAX_NAME_CHARS + 1);
    let refused = a.try_lock(&config(&too_long, SECOND)).await.unwrap_err();
    let error = operator.inspect_lock(&too_long).await.unwrap_err();
    assert!(matches!(error, LockError::InvalidName { .. }), "{error}");
    assert_eq!(error.to_string(), refused.to_string());
    assert!(held.unlock().await.unwrap());
    cleanup(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn force_unlock_frees_exactly_the_acquisition_it_names() {
    let root = unique_root();
    let a = node(&root).await;
    let b = node(&root).await;
    let c = node(&root).await;
    let operator = node(&root).await;
    let client = raw().await;
    let path = a.lock_path("x").unwrap();
    // lock_at_least_for as long as the lock: only a force-unlock frees it early.
    let x = config_with_at_least("x", 30 * SECOND, 30 * SECOND);
    let held = acquire(&a, &x).await;
    let seen = inspect(&operator, "x").await;
    assert!(operator.force_unlock("x", &seen.acquisition).await.unwrap());
    // The node is kept, holding a lock_until that has passed.
    let (until, _) = read(&client, &path).await;
    assert!(until <= SystemTime::now() + SECOND, "{until:?}");
    assert_eq!(inspect(&operator, "x").await.state, LockState::Free);

    let taken = acquire(&b, &x).await;
    assert!(taken.fencing_token() > held.fencing_token());
    assert!(!held.unlock().await.unwrap(), "A's acquisition was freed");
    assert!(!held.extend(30 * SECOND).await.unwrap());
    assert_refused(&c, "x").await;
    let (_, before) = read(&client, &path).await;
    assert!(
        !operator.force_unlock("x", &seen.acquisition).await.unwrap(),
        "a stale id frees nothing"
    );
    let (_, after) = read(&client, &path).await;
    assert_eq!(after, before, "a refused force-unlock writes nothing");
    assert_refused(&c, "x").await;
    let now_seen = inspect(&operator, "x").await;
    assert_ne!(now_seen.acquisition, seen.acquisition);
    assert_eq!(now_seen.state, LockState::Held);
    assert_eq!(now_seen.fencing_token, taken.fencing_token());

    // Any write of the node, its holder's extend included, makes an id stale: inspect again.
    let y = acquire(&a, &config("y", 10 * SECOND)).await;
    let seen_y = inspect(&operator, "y").await;
    assert!(y.extend(20 * SECOND).await.unwrap());
    assert!(
        !operator
            .force_unlock("y", &seen_y.acquisition)
            .await
            .unwrap()
    );
    assert_refused(&c, "y").await;
    let seen_y = inspect(&operator, "y").await;
    assert!(
        operator
            .force_unlock("y", &seen_y.acquisition)
            .await
            .unwrap()
    );
    acquire(&c, &config("y", 10 * SECOND)).await;
    assert!(!y.extend(20 * SECOND).await.unwrap());

    // Released, expired, never used: nothing to free, nothing written.
    let free = acquire(&a, &config("free", 10 * SECOND)).await;
    let seen_free = inspect(&operator, "free").await;
    assert!(free.unlock().await.unwrap());
    let seen_free_now = inspect(&operator, "free").await;
    for id in [&seen_free.acquisition, &seen_free_now.acquisition] {
        assert!(!operator.force_unlock("free", id).await.unwrap());
    }
    let _short = acquire(&a, &config("short", 300 * MS)).await;
    let expiry = Instant::now() + 10 * SECOND;
    let expired = loop {
        let seen = inspect(&operator, "short").await;
        if seen.state == LockState::Free {
            break seen;
        }
        assert!(Instant::now() < expiry, "the 300 ms lock never expired");
        tokio::time::sleep(50 * MS).await;
    };
    let short_path = a.lock_path("short").unwrap();
    let (_, before) = read(&client, &short_path).await;
    assert!(
        !operator
            .force_unlock("short", &expired.acquisition)
            .await
            .unwrap()
    );
    assert_eq!(read(&client, &short_path).await.1, before);
    assert!(
        !operator
            .force_unlock("never-used", &seen.acquisition)
            .await
            .unwrap()
    );
    assert!(operator.inspect_lock("never-used").await.unwrap().is_none());

    // An id this provider did not produce is refused, and the lock is left alone.
    assert_foreign_acquisition_refused(&operator, "x", "zookeeper").await;
    assert_refused(&c, "x").await;
    assert!(taken.unlock().await.unwrap());
    cleanup(&root).await;
}

/// A TCP proxy in front of ZooKeeper that holds the client's `setData` requests for a settable
/// delay and passes everything else at once: a write that is slow to reach the server after
/// a read that was not.
struct SlowWrites {
    address: SocketAddr,
    delay_ms: Arc<AtomicU64>,
}

impl SlowWrites {
    /// ZooKeeper's opcode for `setData`.
    const SET_DATA: i32 = 5;

    async fn start() -> Self {
        let upstream = settings::ZOOKEEPER.value();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let delay_ms = Arc::new(AtomicU64::new(0));
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
                        if Self::holds_set_data(&buffer[..read]) {
                            let delay = delays.load(Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(delay)).await;
                        }
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { address, delay_ms }
    }

    /// Whether the frames of `chunk` (4-byte length, xid, opcode, ...) include a `setData`.
    fn holds_set_data(mut chunk: &[u8]) -> bool {
        while chunk.len() >= 12 {
            let length = u32::from_be_bytes(chunk[..4].try_into().unwrap()) as usize;
            if i32::from_be_bytes(chunk[8..12].try_into().unwrap()) == Self::SET_DATA {
                return true;
            }
            chunk = chunk.get(4 + length..).unwrap_or_default();
        }
        false
    }

    fn delay(&self, delay: Duration) {
        self.delay_ms
            .store(u64::try_from(delay.as_millis()).unwrap(), Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_force_unlock_that_lands_after_the_lock_ran_out_answers_false_and_lengthens_nothing() {
    let root = unique_root();
    let link = SlowWrites::start().await;
    // The clock limit is raised so that no root write (a setData too) precedes the read.
    let operator = ZookeeperLockProvider::builder()
        .root(&root)
        .max_clock_uncertainty(SECOND)
        .connect(&link.address.to_string())
        .await
        .unwrap();
    let a = node(&root).await;
    let b = node(&root).await;
    let client = raw().await;
    let path = a.lock_path("job").unwrap();
    let _held = acquire(&a, &config("job", 300 * MS)).await;
    let (held_until, _) = read(&client, &path).await;
    let seen = inspect(&operator, "job").await;
    assert_eq!(seen.state, LockState::Held);
    // Read while the lock is surely held; the write reaches ZooKeeper after it ran out.
    link.delay(500 * MS);
    let freed = operator
        .force_unlock("job", &seen.acquisition)
        .await
        .unwrap();
    link.delay(Duration::ZERO);
    assert!(!freed, "the lock had run out before the write landed");
    let (written, stat) = read(&client, &path).await;
    assert!(
        written <= held_until,
        "{written:?} is later than {held_until:?}"
    );
    assert!(
        SystemTime::UNIX_EPOCH + Duration::from_millis(stat.mtime.try_into().unwrap())
            >= held_until,
        "the write landed after the lock ran out"
    );
    let taken = acquire(&b, &config("job", 10 * SECOND)).await;
    assert!(taken.unlock().await.unwrap());
    cleanup(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_java_shedlock_wrote_is_listed_with_its_lock_until_and_freed_by_its_version() {
    let root = unique_root();
    let operator = node(&root).await;
    let rust = node(&root).await;
    let client = raw().await;
    let path = operator.lock_path("java-job").unwrap();
    // Java's Instant.toString(), whole seconds: no fraction at all.
    let until = SystemTime::UNIX_EPOCH
        + Duration::from_secs(
            (SystemTime::now() + 30 * SECOND)
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap()
                .as_secs(),
        );
    let stat = curator_write(&client, &path, &java_instant(until)).await;

    let listed = list(&operator, "java", 10).await;
    assert_eq!(names(&listed), ["java-job"]);
    let lock = &listed[0];
    assert_eq!(lock.state, LockState::Held);
    assert_eq!(lock.locked_by, None, "Curator's node names no holder");
    assert_eq!(lock.held_until, Some(until));
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining > 27 * SECOND && remaining <= 31 * SECOND,
        "{remaining:?}"
    );
    assert_eq!(lock.fencing_token, u64::try_from(stat.mzxid).ok());
    assert_eq!(
        lock.acquisition.as_str(),
        format!("{}:{}", stat.mzxid, stat.version)
    );
    assert_refused(&rust, "java-job").await;
    assert!(
        operator
            .force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    let (freed_until, _) = read(&client, &path).await;
    assert!(freed_until < until && freed_until <= SystemTime::now() + SECOND);
    let taken = acquire(&rust, &config("java-job", 10 * SECOND)).await;
    assert!(taken.unlock().await.unwrap());

    // Java takes it again (Curator writes without a version check): the old id is stale.
    let seen = curator_write(&client, &path, &java_instant(until)).await;
    let old = &lock.acquisition;
    assert!(!operator.force_unlock("java-job", old).await.unwrap());
    let again = inspect(&operator, "java-job").await;
    assert_eq!(
        again.acquisition.as_str(),
        format!("{}:{}", seen.mzxid, seen.version)
    );
    assert_eq!(again.held_until, Some(until));
    let replanted = curator_write(&client, &path, &java_instant(until + SECOND)).await;
    assert!(
        !operator
            .force_unlock("java-job", &again.acquisition)
            .await
            .unwrap()
    );
    assert_eq!(read(&client, &path).await.1, replanted, "nothing written");
    assert_refused(&rust, "java-job").await;

    // A lock_until Java wrote that has passed: free.
    curator_write(&client, &path, "2020-01-02T03:04:05.678Z").await;
    let lock = inspect(&operator, "java-job").await;
    assert_eq!(
        (lock.state, lock.remaining, lock.held_until),
        (
            LockState::Free,
            None,
            Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_577_934_245_678))
        )
    );
    cleanup(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_without_a_lock_until_is_listed_as_held_and_force_unlock_gives_it_one() {
    let root = unique_root();
    let operator = node(&root).await;
    let client = raw().await;
    // Curator's parent for a Java lock named "parent/child": empty data.
    let path = operator.lock_path("parent").unwrap();
    let stat = curator_write(&client, &path, "").await;
    curator_write(&client, &format!("{path}/child"), "2099-01-01T00:00:00Z").await;

    let listed = list(&operator, "", 10).await;
    assert_eq!(names(&listed), ["parent"]);
    let lock = &listed[0];
    assert_eq!(
        (lock.state, lock.held_until, lock.remaining),
        (LockState::Held, None, None),
        "acquire refuses it and Java treats it as held for ever"
    );
    assert!(operator.try_lock(&config("parent", SECOND)).await.is_err());
    assert_eq!(
        lock.acquisition.as_str(),
        format!("{}:{}", stat.mzxid, stat.version)
    );
    assert!(
        operator
            .force_unlock("parent", &lock.acquisition)
            .await
            .unwrap()
    );
    let (until, _) = read(&client, &path).await;
    assert!(until <= SystemTime::now() + SECOND);
    acquire(&operator, &config("parent", SECOND)).await;
    cleanup(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_names_list_exactly_once_in_pages_of_a_hundred() {
    let root = unique_root();
    let operator = node(&root).await;
    let client = raw().await;
    let names_written: Vec<String> = (0..1_000).map(|i| format!("bulk/{i:04}")).collect();
    // Written directly, in one transaction: acquiring them one by one is not what is tested.
    let until = DateTime::<Utc>::from(SystemTime::now() + 60 * SECOND)
        .to_rfc3339_opts(SecondsFormat::Millis, true);
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let mut writer = client.new_multi_writer();
    for name in &names_written {
        writer
            .add_create(
                &operator.lock_path(name).unwrap(),
                until.as_bytes(),
                &options,
            )
            .unwrap();
    }
    writer.commit().await.unwrap();

    let listed =
        assert_a_thousand_listed_in_pages_of_a_hundred(&operator, "bulk/", &names_written).await;
    let stored_until = SystemTime::from(DateTime::parse_from_rfc3339(&until).unwrap());
    assert!(
        listed
            .iter()
            .all(|lock| lock.state == LockState::Held && lock.held_until == Some(stored_until))
    );
    cleanup(&root).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_fails_each_admin_operation_in_bounded_time_without_credentials() {
    let secret = "sup3rs3cret-pw";
    let node = ZookeeperLockProvider::builder()
        .connect_timeout(SECOND)
        .operation_timeout(SECOND)
        .connect_lazy(&format!("admin:{secret}@127.0.0.1:1"))
        .await
        .unwrap();
    let started = Instant::now();
    let errors = [
        (
            Operation::List,
            node.list_locks(&PageRequest::first("")).await.unwrap_err(),
        ),
        (
            Operation::Inspect,
            node.inspect_lock("job").await.unwrap_err(),
        ),
        (
            Operation::ForceUnlock,
            node.force_unlock("job", &AcquisitionId::new("5:1"))
                .await
                .unwrap_err(),
        ),
    ];
    assert!(
        started.elapsed() < 3 * 3 * SECOND,
        "{:?}",
        started.elapsed()
    );
    for (operation, error) in errors {
        let text = format!("{error} {error:?}");
        assert!(text.contains(&operation.to_string()), "{text}");
        assert!(!text.contains(secret), "{text}");
        assert!(text.contains("127.0.0.1:1"), "{text}");
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
    }
}
