//! The operator's view (`LockAdmin`) against a real etcd (`SHEDLOCK_TEST_ETCD_URL`): listing by
//! prefix across pages, what a listed lock shows, inspect, force-unlock as a compare-and-free,
//! keys Java ShedLock wrote, and a listing of 1,000 names.
//!
//! Every test uses its own env segment, so runs never see each other's keys, and deletes its
//! keys at the end (they would also vanish with their leases).

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Client, DeleteOptions, PutOptions, Txn, TxnOp};
use futures_util::TryStreamExt;
use shedlock_core::{
    Acquisition, AcquisitionId, ConfigurationError, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockInfo, LockProvider, LockState, Operation, PageRequest, list_all_locks,
};
use shedlock_etcd::EtcdLockProvider;

const SECOND: Duration = Duration::from_secs(1);

fn etcd_url() -> String {
    std::env::var("SHEDLOCK_TEST_ETCD_URL").unwrap_or_else(|_| {
        panic!(
            "SHEDLOCK_TEST_ETCD_URL is not set: point it at an etcd server, e.g. \
             SHEDLOCK_TEST_ETCD_URL=http://127.0.0.1:2379 (ci/start-backends.sh starts one)"
        )
    })
}

fn unique_env() -> String {
    format!("admin-{}", uuid::Uuid::new_v4().simple())
}

/// A node of its own (its own client, as another process would have) on `env`.
async fn node(env: &str, holder: &str) -> EtcdLockProvider {
    EtcdLockProvider::builder()
        .env(env)
        .holder(holder)
        .connect(&etcd_url())
        .await
        .unwrap()
}

async fn raw() -> Client {
    Client::connect([etcd_url()], None).await.unwrap()
}

/// Deletes every key of `env`.
async fn cleanup(env: &str) {
    raw()
        .await
        .delete(
            format!("shedlock:{env}:"),
            Some(DeleteOptions::new().with_prefix()),
        )
        .await
        .unwrap();
}

fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

async fn acquire(node: &EtcdLockProvider, config: &LockConfiguration) -> Box<dyn LockHandle> {
    match node.try_lock(config).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("expected to acquire {:?}, got {other:?}", config.name()),
    }
}

async fn assert_refused(node: &EtcdLockProvider, name: &str) {
    let outcome = node
        .try_lock(&config(name, 10 * SECOND, Duration::ZERO))
        .await
        .unwrap();
    assert!(!outcome.is_acquired(), "{name:?} should still be held");
}

async fn list(admin: &dyn LockAdmin, prefix: &str, page_size: usize) -> Vec<LockInfo> {
    list_all_locks(admin, prefix, page_size)
        .try_collect()
        .await
        .unwrap()
}

fn names(locks: &[LockInfo]) -> Vec<&str> {
    locks.iter().map(|lock| lock.name.as_str()).collect()
}

/// Puts `value` on a lease of `ttl` seconds under `key`, as Java ShedLock does; returns the
/// key's create revision.
async fn plant(client: &mut Client, key: &str, value: &str, ttl: i64) -> i64 {
    let lease = client.lease_grant(ttl, None).await.unwrap().id();
    client
        .put(key, value, Some(PutOptions::new().with_lease(lease)))
        .await
        .unwrap();
    client.get(key, None).await.unwrap().kvs()[0].create_revision()
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_by_prefix_reads_small_pages_in_name_order_and_matches_literally() {
    let env = unique_env();
    let a = node(&env, "node-a").await;
    let long = 30 * SECOND;
    let inside = [
        "jobs/",
        "jobs/a",
        "jobs/b:with:colons",
        "jobs/c d é",
        "jobs/e",
        "jobs/f",
        "jobs/f\u{10ffff}",
    ];
    // Share all or part of the prefix without starting with it.
    let outside = ["jobs", "jobs.", "jobs0", "job", "jobt/a"];
    let literal_inside = ["p%_.*[a", "p%_.*[b"];
    let lookalikes = ["pab.*[a", "p%_xy[a", "p%_.*"];
    let mut handles = Vec::new();
    for name in inside
        .iter()
        .chain(&outside)
        .chain(&literal_inside)
        .chain(&lookalikes)
    {
        handles.push(acquire(&a, &config(name, long, Duration::ZERO)).await);
    }

    let operator = node(&env, "operator").await;
    let listed = list(&operator, "jobs/", 2).await;
    let mut expected = inside.to_vec();
    expected.sort_unstable();
    assert_eq!(names(&listed), expected, "every name once, in name order");
    assert!(listed.iter().all(|lock| lock.state == LockState::Held));

    // Pages hold at most the limit, and the last one says it is the last.
    let mut request = PageRequest::first("jobs/").with_limit(2);
    let mut pages = Vec::new();
    loop {
        let page = operator.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= 2, "{page:?}");
        pages.push(names(&page.locks).len());
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(pages, [2, 2, 2, 1]);

    // Pattern characters of a prefix are characters.
    let listed = list(&operator, "p%_.*[", 2).await;
    assert_eq!(names(&listed), literal_inside);
    // An empty prefix is every lock of the env.
    assert_eq!(
        list(&operator, "", 3).await.len(),
        inside.len() + outside.len() + literal_inside.len() + lookalikes.len()
    );
    assert!(list(&operator, "nothing-here", 2).await.is_empty());

    // A cursor this provider never returned is refused, naming what it expects.
    let error = operator
        .list_locks(&PageRequest {
            after: Some(shedlock_core::PageCursor::new("not hex")),
            ..PageRequest::first("jobs/")
        })
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("page cursor \"not hex\""),
        "{error}"
    );
    assert!(
        matches!(
            error,
            LockError::InvalidRequest {
                operation: Operation::List,
                ..
            }
        ),
        "{error:?}"
    );
    cleanup(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_lock_shows_holder_times_fencing_token_and_etcds_remaining_ttl() {
    let env = unique_env();
    let a = node(&env, "node-a").await;
    let operator = node(&env, "operator").await;
    let before = SystemTime::now();
    let held = acquire(&a, &config("held", 10 * SECOND, Duration::ZERO)).await;
    let after = SystemTime::now();
    let released = acquire(&a, &config("released", 10 * SECOND, Duration::ZERO)).await;
    assert!(released.unlock().await.unwrap());
    let kept = acquire(&a, &config("kept", 10 * SECOND, 6 * SECOND)).await;
    assert!(kept.unlock().await.unwrap());

    let listed = list(&operator, "", 2).await;
    // Release deleted the key: etcd keeps no record of a free lock.
    assert_eq!(names(&listed), ["held", "kept"]);
    let lock = &listed[0];
    assert_eq!(lock.state, LockState::Held);
    let locked_by = lock.locked_by.as_deref().unwrap();
    let uuid = locked_by.strip_prefix("node-a:").unwrap();
    assert!(uuid::Uuid::parse_str(uuid).is_ok(), "{locked_by}");
    // The value's time is written by the acquiring node in milliseconds.
    let locked_at = lock.locked_at.unwrap();
    assert!(locked_at + Duration::from_millis(1) >= before && locked_at <= after);
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining > 8 * SECOND && remaining <= 10 * SECOND,
        "{remaining:?} of a 10 s lease just granted"
    );
    let held_until = lock.held_until.unwrap();
    let expected_until = SystemTime::now() + remaining;
    assert!(
        held_until <= expected_until && held_until + SECOND > expected_until,
        "{held_until:?} vs {expected_until:?}"
    );
    assert_eq!(lock.fencing_token, held.fencing_token());
    let token = held.fencing_token().unwrap();
    assert!(
        lock.acquisition
            .as_str()
            .starts_with(&format!("{token}/ADDED:"))
    );

    // Released within lock_at_least_for: held on a lease of the rest.
    let kept_lock = &listed[1];
    assert_eq!(kept_lock.state, LockState::Held);
    let remaining = kept_lock.remaining.unwrap();
    assert!(
        remaining > 4 * SECOND && remaining <= 6 * SECOND,
        "{remaining:?}"
    );
    assert_eq!(kept_lock.fencing_token, kept.fencing_token());

    // Inspect shows what the listing showed.
    let inspected = operator.inspect_lock("held").await.unwrap().unwrap();
    assert_eq!(
        (
            &inspected.acquisition,
            &inspected.locked_by,
            inspected.locked_at,
            inspected.fencing_token,
            inspected.state
        ),
        (
            &lock.acquisition,
            &lock.locked_by,
            lock.locked_at,
            lock.fencing_token,
            lock.state
        )
    );
    assert!(operator.inspect_lock("released").await.unwrap().is_none());
    assert!(operator.inspect_lock("never-used").await.unwrap().is_none());
    // The name the provider refuses for locks is refused here too.
    assert!(matches!(
        operator.inspect_lock("").await,
        Err(LockError::Configuration(ConfigurationError::EmptyName))
    ));

    // Extend moves the key to a longer lease; the acquisition id does not change.
    assert!(held.extend(20 * SECOND).await.unwrap());
    let extended = operator.inspect_lock("held").await.unwrap().unwrap();
    assert_eq!(extended.acquisition, lock.acquisition);
    assert!(extended.remaining.unwrap() > 18 * SECOND);
    cleanup(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn force_unlock_frees_exactly_the_acquisition_it_names() {
    let env = unique_env();
    let a = node(&env, "node-a").await;
    let b = node(&env, "node-b").await;
    let c = node(&env, "node-c").await;
    let operator = node(&env, "operator").await;
    // lock_at_least_for as long as the lock: only a force-unlock frees it early.
    let x = config("x", 30 * SECOND, 30 * SECOND);
    let held = acquire(&a, &x).await;
    let seen = operator.inspect_lock("x").await.unwrap().unwrap();
    assert!(operator.force_unlock("x", &seen.acquisition).await.unwrap());
    assert!(operator.inspect_lock("x").await.unwrap().is_none());

    let taken = acquire(&b, &x).await;
    assert!(taken.fencing_token() > held.fencing_token());
    assert!(!held.unlock().await.unwrap(), "A's acquisition was freed");
    assert!(!held.extend(30 * SECOND).await.unwrap());
    assert_refused(&c, "x").await;
    assert!(
        !operator.force_unlock("x", &seen.acquisition).await.unwrap(),
        "a stale id frees nothing"
    );
    assert_refused(&c, "x").await;
    let now_seen = operator.inspect_lock("x").await.unwrap().unwrap();
    assert_ne!(now_seen.acquisition, seen.acquisition);
    assert!(now_seen.locked_by.unwrap().starts_with("node-b:"));

    // An id stays valid across an extend of its acquisition.
    let y = acquire(&a, &config("y", 10 * SECOND, Duration::ZERO)).await;
    let seen_y = operator.inspect_lock("y").await.unwrap().unwrap();
    assert!(y.extend(20 * SECOND).await.unwrap());
    assert!(
        operator
            .force_unlock("y", &seen_y.acquisition)
            .await
            .unwrap()
    );
    acquire(&c, &config("y", 10 * SECOND, Duration::ZERO)).await;

    // Released, expired, never used: nothing to free.
    let free = acquire(&a, &config("free", 10 * SECOND, Duration::ZERO)).await;
    let seen_free = operator.inspect_lock("free").await.unwrap().unwrap();
    assert!(free.unlock().await.unwrap());
    assert!(
        !operator
            .force_unlock("free", &seen_free.acquisition)
            .await
            .unwrap()
    );
    let _short = acquire(&a, &config("short", SECOND, Duration::ZERO)).await;
    let seen_short = operator.inspect_lock("short").await.unwrap().unwrap();
    let expiry = Instant::now() + 10 * SECOND;
    while operator.inspect_lock("short").await.unwrap().is_some() {
        assert!(Instant::now() < expiry, "the 1 s lock never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !operator
            .force_unlock("short", &seen_short.acquisition)
            .await
            .unwrap()
    );
    assert!(
        !operator
            .force_unlock("never-used", &seen.acquisition)
            .await
            .unwrap()
    );

    // An id this provider did not write is refused, and the lock is left alone.
    let error = operator
        .force_unlock("x", &AcquisitionId::new("7@123/host"))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("is not one the etcd provider produced"),
        "{error}"
    );
    assert!(
        matches!(
            error,
            LockError::InvalidRequest {
                operation: Operation::ForceUnlock,
                ..
            }
        ),
        "{error:?}"
    );
    assert_refused(&c, "x").await;
    assert!(taken.unlock().await.unwrap());
    cleanup(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_key_java_shedlock_wrote_is_listed_and_freed_by_its_create_revision_and_value() {
    let env = unique_env();
    let operator = node(&env, "operator").await;
    let mut client = raw().await;
    let key = format!("shedlock:{env}:java-job");
    let value = "ADDED:2024-05-06T07:08:09.123Z@java-host";
    let revision = plant(&mut client, &key, value, 30).await;

    let listed = list(&operator, "java", 10).await;
    assert_eq!(names(&listed), ["java-job"]);
    let lock = &listed[0];
    assert_eq!(lock.state, LockState::Held);
    assert_eq!(lock.locked_by.as_deref(), Some("java-host"));
    assert_eq!(
        lock.locked_at,
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_714_979_289_123))
    );
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining > 28 * SECOND && remaining <= 30 * SECOND,
        "{remaining:?}"
    );
    let until = lock.held_until.unwrap();
    let expected = SystemTime::now() + 30 * SECOND;
    assert!(
        until <= expected && until + 3 * SECOND > expected,
        "{until:?}"
    );
    assert_eq!(lock.fencing_token, u64::try_from(revision).ok());
    assert_eq!(lock.acquisition.as_str(), format!("{revision}/{value}"));

    assert!(
        operator
            .force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    assert!(
        client
            .get(key.as_str(), None)
            .await
            .unwrap()
            .kvs()
            .is_empty()
    );

    // The same host again, at another time: the old id is stale.
    plant(
        &mut client,
        &key,
        "ADDED:2024-05-06T07:09:00.000Z@java-host",
        30,
    )
    .await;
    assert!(
        !operator
            .force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    // The very same value written anew is another acquisition too: its key was created again.
    client.delete(key.as_str(), None).await.unwrap();
    plant(&mut client, &key, value, 30).await;
    assert!(
        !operator
            .force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    assert_eq!(
        client.get(key.as_str(), None).await.unwrap().kvs()[0].value(),
        value.as_bytes(),
        "a stale force-unlock deleted nothing"
    );
    let fresh = operator.inspect_lock("java-job").await.unwrap().unwrap();
    assert!(
        operator
            .force_unlock("java-job", &fresh.acquisition)
            .await
            .unwrap()
    );
    cleanup(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_locks_list_exactly_once_a_hundred_per_page() {
    let env = unique_env();
    let mut client = raw().await;
    let lease = client.lease_grant(60, None).await.unwrap().id();
    let names: Vec<String> = (0..1000).map(|i| format!("bulk-{i:04}")).collect();
    // etcd allows 128 operations per transaction by default.
    for chunk in names.chunks(100) {
        let puts: Vec<TxnOp> = chunk
            .iter()
            .map(|name| {
                TxnOp::put(
                    format!("shedlock:{env}:{name}"),
                    "ADDED:2024-05-06T07:08:09.123Z@bulk",
                    Some(PutOptions::new().with_lease(lease)),
                )
            })
            .collect();
        client.txn(Txn::new().and_then(puts)).await.unwrap();
    }
    let operator = node(&env, "operator").await;
    let started = Instant::now();
    let mut request = PageRequest::first("bulk-").with_limit(100);
    let mut listed = Vec::new();
    let mut pages = 0;
    loop {
        let page = operator.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= 100);
        pages += 1;
        listed.extend(page.locks.into_iter().map(|lock| lock.name));
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => break,
        }
    }
    let took = started.elapsed();
    assert_eq!(listed, names, "all 1,000, once each, in name order");
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), 1000);
    assert_eq!(pages, 10);
    assert!(took < 10 * SECOND, "took {took:?}");
    client.lease_revoke(lease).await.unwrap();
    cleanup(&env).await;
}
