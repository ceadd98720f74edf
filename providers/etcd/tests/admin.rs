//! The operator's view (`LockAdmin`) against a real etcd (`SHEDLOCK_TEST_ETCD_URL`): listing by
//! prefix across pages, what a listed lock shows, inspect, force-unlock as a compare-and-free,
//! keys Java ShedLock wrote, and a listing of 1,000 names.
//!
//! Every test uses its own env segment, so runs never see each other's keys, and deletes its
//! keys at the end (they would also vanish with their leases).

use std::time::{Duration, Instant, SystemTime};

use etcd_client::{Client, DeleteOptions, PutOptions, Txn, TxnOp};
use shedlock_core::{ConfigurationError, LockAdmin, LockError, LockState};
use shedlock_etcd::EtcdLockProvider;
use shedlock_test_support::kv::admin::{
    PrefixListing, assert_a_released_id_frees_nothing,
    assert_a_thousand_listed_in_pages_of_a_hundred, assert_an_id_outlives_an_extend,
    assert_foreign_acquisition_refused, assert_foreign_cursor_refused, assert_refused, hold_all,
    inspect, list, names,
};
use shedlock_test_support::kv::locks::{acquire, config, config_with_at_least};
use shedlock_test_support::settings;

const SECOND: Duration = Duration::from_secs(1);

fn unique_env() -> String {
    format!("admin-{}", uuid::Uuid::new_v4().simple())
}

/// A node of its own (its own client, as another process would have) on `env`.
async fn node(env: &str, holder: &str) -> EtcdLockProvider {
    EtcdLockProvider::builder()
        .env(env)
        .holder(holder)
        .connect(&settings::ETCD.value())
        .await
        .unwrap()
}

async fn raw() -> Client {
    Client::connect([settings::ETCD.value()], None)
        .await
        .unwrap()
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
    let listing = PrefixListing {
        inside: [
            "jobs/",
            "jobs/a",
            "jobs/b:with:colons",
            "jobs/c d é",
            "jobs/e",
            "jobs/f",
            "jobs/f\u{10ffff}",
        ],
        outside: &["jobs", "jobs.", "jobs0", "job", "jobt/a"],
        literal_prefix: "p%_.*[",
        literal_inside: &["p%_.*[a", "p%_.*[b"],
        lookalikes: &["pab.*[a", "p%_xy[a", "p%_.*"],
    };
    let _handles = hold_all(&a, listing.all()).await;

    let operator = node(&env, "operator").await;
    listing.assert_listed(&operator).await;
    assert_foreign_cursor_refused(&operator, "not hex").await;
    cleanup(&env).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_lock_shows_holder_times_fencing_token_and_etcds_remaining_ttl() {
    let env = unique_env();
    let a = node(&env, "node-a").await;
    let operator = node(&env, "operator").await;
    let before = SystemTime::now();
    let held = acquire(&a, &config("held", 10 * SECOND)).await;
    let after = SystemTime::now();
    let released = acquire(&a, &config("released", 10 * SECOND)).await;
    assert!(released.unlock().await.unwrap());
    let kept = acquire(&a, &config_with_at_least("kept", 10 * SECOND, 6 * SECOND)).await;
    assert!(kept.unlock().await.unwrap());

    let listed = list(&operator, "", 2).await;
    // Release deleted the key: etcd keeps no record of a free lock.
    assert_eq!(names(&listed), ["held", "kept"]);
    let lock = &listed[0];
    assert_eq!(lock.state, LockState::Held);
    // The holder's name; the value's uuid is left out (it is in the acquisition).
    assert_eq!(lock.locked_by.as_deref(), Some("node-a"));
    let uuid = lock.acquisition.as_str().rsplit_once(':').unwrap().1;
    assert!(
        uuid::Uuid::parse_str(uuid).is_ok(),
        "{:?}",
        lock.acquisition
    );
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
    let inspected = inspect(&operator, "held").await;
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
    let extended = inspect(&operator, "held").await;
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
    let x = config_with_at_least("x", 30 * SECOND, 30 * SECOND);
    let held = acquire(&a, &x).await;
    let seen = inspect(&operator, "x").await;
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
    let now_seen = inspect(&operator, "x").await;
    assert_ne!(now_seen.acquisition, seen.acquisition);
    assert_eq!(now_seen.locked_by.as_deref(), Some("node-b"));

    assert_an_id_outlives_an_extend(&a, &operator, &c).await;

    // Released, expired, never used: nothing to free.
    assert_a_released_id_frees_nothing(&a, &operator).await;
    let _short = acquire(&a, &config("short", SECOND)).await;
    let seen_short = inspect(&operator, "short").await;
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
    assert_foreign_acquisition_refused(&operator, "x", "etcd").await;
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
    let fresh = inspect(&operator, "java-job").await;
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
    assert_a_thousand_listed_in_pages_of_a_hundred(&operator, "bulk-", &names).await;
    client.lease_revoke(lease).await.unwrap();
    cleanup(&env).await;
}
