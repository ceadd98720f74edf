//! What each lock operation costs on the wire against a real ZooKeeper
//! (`SHEDLOCK_TEST_ZOOKEEPER_URL`): requests, counted exactly, and TCP round trips through the
//! kit's `CountingProxy`.
//!
//! The path is provider -> request counter (this file) -> `CountingProxy` -> ZooKeeper. The
//! client also sends a ping (xid -2) whenever its connection has been quiet for a while, and a
//! ping is a round trip of its own that no lock operation asked for. So the counter reads
//! ZooKeeper's framing (a 4-byte length, then `xid` and `type`; the first frame of a connection
//! is the session handshake, which has neither) and counts requests and pings apart: the
//! exact assertion is on requests, and round trips must equal the requests plus the pings that
//! crossed meanwhile (fewer only if a ping shared a read with a request).

use shedlock_test_support::settings;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use shedlock_conformance::CountingProxy;
use shedlock_core::{Acquisition, LockConfiguration, LockError, LockHandle, LockProvider};
use shedlock_zookeeper::ZookeeperLockProvider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What one operation cost.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    /// Requests the client sent (pings and the session handshake not counted).
    requests: u64,
    /// TCP round trips, pings included.
    round_trips: u64,
    /// Pings sent meanwhile.
    pings: u64,
    /// Session handshakes meanwhile (one per connection), a round trip each.
    handshakes: u64,
    /// Connections opened meanwhile.
    connections: u64,
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    pings: AtomicU64,
    handshakes: AtomicU64,
}

/// Counts ZooKeeper requests crossing a connection, in front of a [`CountingProxy`].
struct Wire {
    counts: Arc<Counts>,
    proxy: CountingProxy,
    connect_string: String,
    root: String,
}

impl Wire {
    async fn start() -> Self {
        let proxy = CountingProxy::start(&settings::ZOOKEEPER.value())
            .await
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let connect_string = listener.local_addr().unwrap().to_string();
        let counts = Arc::new(Counts::default());
        let counted = counts.clone();
        let target = proxy.local_addr();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let server = TcpStream::connect(target).await.unwrap();
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                let counted = counted.clone();
                tokio::spawn(async move {
                    let mut frames = FrameReader::default();
                    let mut buffer = vec![0u8; 64 * 1024];
                    while let Ok(read) = client_read.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        // Counted before forwarding, so an answered request is always counted.
                        frames.count(&buffer[..read], &counted);
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self {
            counts,
            proxy,
            connect_string,
            root: format!("/shedlock-wire-{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// A provider on this run's root. The clock's uncertainty limit is raised so that a slow
    /// answer on a busy test machine does not add a root write to the count (a write to learn
    /// the clock again is what an operation pays when its interval is too wide; the
    /// `zookeeper` tests cover that).
    fn builder(&self) -> shedlock_zookeeper::ZookeeperLockProviderBuilder {
        ZookeeperLockProvider::builder()
            .root(&self.root)
            .max_clock_uncertainty(Duration::from_secs(1))
    }

    async fn provider(&self) -> ZookeeperLockProvider {
        self.builder().connect(&self.connect_string).await.unwrap()
    }

    fn snapshot(&self) -> Cost {
        Cost {
            requests: self.counts.requests.load(Ordering::SeqCst),
            round_trips: self.proxy.round_trips(),
            pings: self.counts.pings.load(Ordering::SeqCst),
            handshakes: self.counts.handshakes.load(Ordering::SeqCst),
            connections: self.proxy.connections(),
        }
    }

    /// Runs `operation` and returns its result and what it cost.
    async fn measure<T>(&self, operation: impl Future<Output = T>) -> (T, Cost) {
        let before = self.snapshot();
        let result = operation.await;
        let after = self.snapshot();
        let cost = Cost {
            requests: after.requests - before.requests,
            round_trips: after.round_trips - before.round_trips,
            pings: after.pings - before.pings,
            handshakes: after.handshakes - before.handshakes,
            connections: after.connections - before.connections,
        };
        let asked = cost.requests + cost.handshakes;
        assert!(
            (asked..=asked + cost.pings).contains(&cost.round_trips),
            "every request and handshake is one round trip, and so is every ping: {cost:?}"
        );
        (result, cost)
    }
}

/// Splits the client's byte stream into ZooKeeper frames across reads.
#[derive(Default)]
struct FrameReader {
    pending: Vec<u8>,
    handshake_seen: bool,
}

impl FrameReader {
    const PING_XID: i32 = -2;

    fn count(&mut self, bytes: &[u8], counts: &Counts) {
        self.pending.extend_from_slice(bytes);
        while self.pending.len() >= 4 {
            let length = i32::from_be_bytes(self.pending[..4].try_into().unwrap());
            let length = usize::try_from(length).unwrap();
            if self.pending.len() < 4 + length {
                break;
            }
            let frame: Vec<u8> = self.pending.drain(..4 + length).collect();
            if !self.handshake_seen {
                self.handshake_seen = true;
                counts.handshakes.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            let xid = i32::from_be_bytes(frame[4..8].try_into().unwrap());
            if xid == Self::PING_XID {
                counts.pings.fetch_add(1, Ordering::SeqCst);
            } else {
                counts.requests.fetch_add(1, Ordering::SeqCst);
            }
        }
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

#[track_caller]
fn assert_requests(cost: &Cost, expected: u64, what: &str) {
    assert_eq!(cost.requests, expected, "{what}: {cost:?}");
    assert_eq!(cost.connections, 0, "{what} opened a connection: {cost:?}");
    assert_eq!(cost.handshakes, 0, "{what} opened a session: {cost:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_operation_is_its_minimum_of_requests() {
    let wire = Wire::start().await;

    // Connecting opens a session, reads the root once (it must hold no other application's
    // data) and learns the server's clock: one write to the root, plus the root's creation (a
    // create per missing level) the first time.
    let (holder, cost) = wire.measure(wire.provider()).await;
    assert_eq!(cost.connections, 1);
    assert_eq!(
        cost.requests, 3,
        "connect to a missing root: root read (no node), create root, root write: {cost:?}"
    );
    let (contender, cost) = wire.measure(wire.provider()).await;
    assert_eq!(cost.connections, 1);
    assert_eq!(
        cost.requests, 2,
        "connect when the root exists: a read of the root, one write to learn the clock: \
         {cost:?}"
    );

    let (handle, cost) = wire
        .measure(holder.try_lock(&config("job", Duration::ZERO)))
        .await;
    assert_requests(&cost, 2, "acquire of a new name: read (no node) + create");
    let handle = acquired(handle);

    let (refused, cost) = wire
        .measure(contender.try_lock(&config("job", Duration::ZERO)))
        .await;
    assert!(matches!(refused.unwrap(), Acquisition::NotAcquired(_)));
    assert_requests(&cost, 1, "refused acquire: one read");

    let (extended, cost) = wire.measure(handle.extend(Duration::from_secs(10))).await;
    assert!(extended.unwrap());
    assert_requests(&cost, 1, "extend: one compare-and-set write");

    let (released, cost) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_requests(&cost, 1, "release: one compare-and-set write");

    let (handle, cost) = wire
        .measure(contender.try_lock(&config("job", Duration::from_secs(5))))
        .await;
    assert_requests(
        &cost,
        2,
        "acquire of a free known name: read + compare-and-set write",
    );
    let handle = acquired(handle);

    let (released, cost) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_requests(
        &cost,
        1,
        "release within lock_at_least_for: one compare-and-set write",
    );

    let (released, cost) = wire.measure(handle.unlock()).await;
    assert!(!released.unwrap());
    assert_requests(&cost, 0, "a second release: nothing sent");

    // A lock that ran out without a release is taken over only once the server's own clock
    // says so: a write to the root, whose stamp decides, before the compare-and-set.
    let expiring =
        LockConfiguration::new("expired", Duration::from_millis(300), Duration::ZERO).unwrap();
    let held = acquired(holder.try_lock(&expiring).await);
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (taken, cost) = wire.measure(contender.try_lock(&expiring)).await;
    assert_requests(
        &cost,
        3,
        "take-over of an expired lock: read + root write (the server's stamp) + compare-and-set",
    );
    assert!(acquired(taken).unlock().await.unwrap());
    assert!(
        !held.unlock().await.unwrap(),
        "taken over, so not released by its old holder"
    );

    // A provider built lazily learns the server's clock on its first operation.
    let lazy = wire
        .builder()
        .connect_lazy(&wire.connect_string)
        .await
        .unwrap();
    let (handle, cost) = wire
        .measure(lazy.try_lock(&config("lazy", Duration::ZERO)))
        .await;
    assert_eq!(cost.connections, 1, "{cost:?}");
    assert_eq!(
        cost.requests, 4,
        "first acquire of a lazy provider: root read + root write + read + create: {cost:?}"
    );
    assert!(acquired(handle).unlock().await.unwrap());

    cleanup(&wire.root).await;
}

/// A provider that released a lock itself, leaving it free, takes it again with its
/// compare-and-set alone; if anyone wrote the node since, that write is refused and the node is
/// read, one request more, once.
#[tokio::test(flavor = "multi_thread")]
async fn an_acquire_after_this_providers_own_release_writes_without_reading() {
    let wire = Wire::start().await;
    let node = wire.provider().await;
    let other = wire.provider().await;
    let job = config("job", Duration::ZERO);

    let (handle, cost) = wire.measure(node.try_lock(&job)).await;
    assert_requests(&cost, 2, "acquire of a new name: read (no node) + create");
    let handle = acquired(handle);
    let token = handle.fencing_token().unwrap();
    assert!(handle.unlock().await.unwrap());

    for round in 0..3 {
        let (handle, cost) = wire.measure(node.try_lock(&job)).await;
        assert_requests(
            &cost,
            1,
            &format!("round {round}: acquire after its own release: one compare-and-set"),
        );
        let handle = acquired(handle);
        assert!(handle.fencing_token().unwrap() > token);
        let (refused, cost) = wire.measure(other.try_lock(&job)).await;
        assert!(
            matches!(refused.unwrap(), Acquisition::NotAcquired(_)),
            "round {round}: the lock taken by the fast path is held"
        );
        assert_requests(&cost, 1, "the other node's refused acquire: one read");
        assert!(handle.unlock().await.unwrap());
    }

    // Another node took and released the lock since: the remembered version is stale, so the
    // compare-and-set is refused, and the node is read and written.
    acquired(other.try_lock(&job).await).unlock().await.unwrap();
    let (handle, cost) = wire.measure(node.try_lock(&job)).await;
    assert_requests(
        &cost,
        3,
        "stale version: refused compare-and-set + read + compare-and-set",
    );
    assert!(acquired(handle).unlock().await.unwrap());

    // Another node holds it: the stale write is refused, the read finds it held; the next
    // attempt reads only.
    let held = acquired(other.try_lock(&job).await);
    let (refused, cost) = wire.measure(node.try_lock(&job)).await;
    assert!(matches!(refused.unwrap(), Acquisition::NotAcquired(_)));
    assert_requests(&cost, 2, "held by another: refused compare-and-set + read");
    let (refused, cost) = wire.measure(node.try_lock(&job)).await;
    assert!(matches!(refused.unwrap(), Acquisition::NotAcquired(_)));
    assert_requests(&cost, 1, "the version is forgotten once tried: one read");
    assert!(held.unlock().await.unwrap());

    // A release within lock_at_least_for leaves the lock held: nothing is remembered.
    let at_least = config("at-least", Duration::from_secs(5));
    assert!(
        acquired(node.try_lock(&at_least).await)
            .unlock()
            .await
            .unwrap()
    );
    let (refused, cost) = wire.measure(node.try_lock(&at_least)).await;
    assert!(matches!(refused.unwrap(), Acquisition::NotAcquired(_)));
    assert_requests(&cost, 1, "held for lock_at_least_for: one read");

    // clear_name_cache forgets, as a restarted node would.
    acquired(node.try_lock(&job).await).unlock().await.unwrap();
    node.clear_name_cache();
    let (handle, cost) = wire.measure(node.try_lock(&job)).await;
    assert_requests(&cost, 2, "after clear_name_cache: read + compare-and-set");
    assert!(acquired(handle).unlock().await.unwrap());

    cleanup(&wire.root).await;
}

/// The operator's view: a page of any size is two requests (the root's children, then one
/// multi-read of the page's nodes), inspect one read, force-unlock a read and a
/// compare-and-set write.
#[tokio::test(flavor = "multi_thread")]
async fn admin_operations_cost_a_fixed_number_of_requests() {
    use shedlock_core::{LockAdmin, PageRequest};

    let wire = Wire::start().await;
    let holder = wire.provider().await;
    let operator = wire.provider().await;
    let mut handles = Vec::new();
    for name in ["a", "b", "c", "d", "e"] {
        handles.push(acquired(
            holder.try_lock(&config(name, Duration::ZERO)).await,
        ));
    }

    let first = PageRequest::first("").with_limit(3);
    let (page, cost) = wire.measure(operator.list_locks(&first)).await;
    let page = page.unwrap();
    assert_eq!(page.locks.len(), 3);
    assert_requests(&cost, 2, "a page of 3: children + one multi-read");
    let rest = PageRequest {
        after: page.next,
        ..first
    };
    let (page, cost) = wire.measure(operator.list_locks(&rest)).await;
    let page = page.unwrap();
    assert_eq!((page.locks.len(), page.next), (2, None));
    assert_requests(&cost, 2, "the last page: children + one multi-read");

    let (inspected, cost) = wire.measure(operator.inspect_lock("a")).await;
    let acquisition = inspected.unwrap().unwrap().acquisition;
    assert_requests(&cost, 1, "inspect: one read");
    let (never, cost) = wire.measure(operator.inspect_lock("never-used")).await;
    assert!(never.unwrap().is_none());
    assert_requests(&cost, 1, "inspect of a name never used: one read (no node)");

    let (freed, cost) = wire.measure(operator.force_unlock("a", &acquisition)).await;
    assert!(freed.unwrap());
    assert_requests(&cost, 2, "force-unlock: read + compare-and-set write");
    let (freed, cost) = wire.measure(operator.force_unlock("a", &acquisition)).await;
    assert!(!freed.unwrap());
    assert_requests(&cost, 1, "a stale force-unlock: the read only");

    for handle in &handles[1..] {
        assert!(handle.unlock().await.unwrap());
    }
    cleanup(&wire.root).await;
}

async fn cleanup(root: &str) {
    let admin = zookeeper_client::Client::connect(&settings::ZOOKEEPER.value())
        .await
        .unwrap();
    for child in admin.list_children(root).await.unwrap() {
        admin
            .delete(&format!("{root}/{child}"), None)
            .await
            .unwrap();
    }
    admin.delete(root, None).await.unwrap();
}
