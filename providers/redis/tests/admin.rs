//! The operator's view (`LockAdmin`) against a real Redis (`SHEDLOCK_TEST_REDIS_URL`) and a
//! Redis Cluster (`SHEDLOCK_TEST_REDIS_CLUSTER_URL`): listing by prefix
//! across pages, the fields and states shown, inspect, force-unlock as a compare-and-free, a
//! value written as Java ShedLock writes it, paging over 1,000 keys, and the round trips each
//! costs. Every test uses an env segment of its own, so runs never see each other's keys.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use shedlock_conformance::CountingProxy;
use shedlock_core::{
    Acquisition, AcquisitionId, ErrorKind, LockAdmin, LockError, LockHandle, LockInfo,
    LockProvider, LockState, Operation, PageCursor, PageRequest,
};
use shedlock_redis::RedisLockProvider;
use shedlock_test_support::kv::admin::{inspect, pages};
use shedlock_test_support::kv::locks::{config, config_with_at_least};
use shedlock_test_support::settings;

fn unique_env(what: &str) -> String {
    format!("admin-{what}-{}", uuid::Uuid::new_v4().simple())
}

async fn provider(url: &str, env: &str, holder: &str, fencing: bool) -> RedisLockProvider {
    RedisLockProvider::builder()
        .env(env)
        .holder(holder)
        .fencing(fencing)
        .connect(url)
        .await
        .unwrap()
}

async fn raw(url: &str) -> MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

#[track_caller]
fn acquired(acquisition: Result<Acquisition, LockError>) -> Box<dyn LockHandle> {
    match acquisition.unwrap() {
        Acquisition::Acquired(handle) => handle,
        Acquisition::NotAcquired(holder) => panic!("not acquired: held by {holder:?}"),
    }
}

async fn take(provider: &RedisLockProvider, name: &str, at_least: Duration) -> Box<dyn LockHandle> {
    acquired(
        provider
            .try_lock(&config_with_at_least(
                name,
                Duration::from_secs(30),
                at_least,
            ))
            .await,
    )
}

async fn is_free(provider: &RedisLockProvider, name: &str) -> bool {
    match provider
        .try_lock(&config(name, Duration::from_secs(30)))
        .await
        .unwrap()
    {
        Acquisition::Acquired(handle) => {
            assert!(handle.unlock().await.unwrap());
            true
        }
        Acquisition::NotAcquired(_) => false,
    }
}

/// The names of a listing, each asserted to appear once, sorted.
async fn listed_names(admin: &dyn LockAdmin, prefix: &str, limit: usize) -> Vec<String> {
    let locks: Vec<LockInfo> = pages(admin, prefix, limit)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut names: Vec<String> = locks.into_iter().map(|lock| lock.name).collect();
    let distinct: HashSet<&String> = names.iter().collect();
    assert_eq!(
        distinct.len(),
        names.len(),
        "a name listed twice: {names:?}"
    );
    names.sort();
    names
}

/// Whether `a` and `b` are at most `margin` apart, either way.
fn near(a: SystemTime, b: SystemTime, margin: Duration) -> bool {
    let apart = a
        .duration_since(b)
        .unwrap_or_else(|earlier| earlier.duration());
    apart <= margin
}

/// A provider and a connection on database `db` of the test server, which only the calling
/// test writes (and it deletes what it wrote).
async fn on_database_of_its_own(
    db: i64,
    env: &str,
) -> (
    RedisLockProvider<MultiplexedConnection>,
    MultiplexedConnection,
) {
    let info = redis::IntoConnectionInfo::into_connection_info(settings::REDIS.value()).unwrap();
    let settings = info.redis_settings().clone().set_db(db);
    let client = redis::Client::open(info.set_redis_settings(settings)).unwrap();
    let node = RedisLockProvider::builder()
        .env(env)
        .build(client.get_multiplexed_async_connection().await.unwrap())
        .unwrap();
    (
        node,
        client.get_multiplexed_async_connection().await.unwrap(),
    )
}

/// Writes a lock for each of `names` as Java ShedLock would, held for `ttl` by `host`.
async fn plant_locks<C: ConnectionLike + Clone + Send + Sync + 'static>(
    node: &RedisLockProvider<C>,
    connection: &mut MultiplexedConnection,
    names: &[String],
    host: &str,
    ttl: Duration,
) {
    let mut pipeline = redis::pipe();
    for name in names {
        pipeline
            .cmd("SET")
            .arg(node.lock_key(name).unwrap())
            .arg(format!("ADDED:2024-01-01T00:00:00.000Z@{host}:{name}"))
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .ignore();
    }
    pipeline.query_async::<()>(connection).await.unwrap();
}

/// Deletes the lock keys of `names`.
async fn delete_locks<C: ConnectionLike + Clone + Send + Sync + 'static>(
    node: &RedisLockProvider<C>,
    connection: &mut MultiplexedConnection,
    names: &[String],
) {
    let mut pipeline = redis::pipe();
    for name in names {
        pipeline.del(node.lock_key(name).unwrap()).ignore();
    }
    pipeline.query_async::<()>(connection).await.unwrap();
}

#[tokio::test]
async fn a_listing_shows_exactly_the_names_under_a_prefix_whose_glob_characters_are_literal() {
    let url = settings::REDIS.value();
    let env = unique_env("prefix");
    let node = provider(&url, &env, "admin-test", false).await;
    // Each glob metacharacter of SCAN MATCH, and a name that the prefix would match as a glob.
    let prefix = r"jobs*?[ab]\-";
    let inside: Vec<String> = (1..=5).map(|i| format!("{prefix}{i}")).collect();
    let outside = [
        r"jobs*?[ab]\".to_owned(),
        r"jobs*?[ab]\x1".to_owned(),
        "jobsXYZa-1".to_owned(),
        r"jobs*?a\-1".to_owned(),
        "other".to_owned(),
    ];
    let mut handles = Vec::new();
    for name in inside.iter().chain(&outside) {
        handles.push(take(&node, name, Duration::ZERO).await);
    }

    assert_eq!(listed_names(&node, prefix, 2).await, inside);
    assert_eq!(listed_names(&node, "", 2).await.len(), 10);
    assert_eq!(
        listed_names(&node, "nothing-", 2).await,
        Vec::<String>::new()
    );
    for handle in handles {
        assert!(handle.unlock().await.unwrap());
    }
    assert_eq!(listed_names(&node, "", 3).await, Vec::<String>::new());
}

#[tokio::test]
async fn held_released_and_kept_locks_show_their_state_holder_and_times() {
    let url = settings::REDIS.value();
    let env = unique_env("states");
    let node = provider(&url, &env, "admin-test", true).await;
    let held = take(&node, "held", Duration::ZERO).await;
    let released = take(&node, "released", Duration::ZERO).await;
    assert!(released.unlock().await.unwrap());
    let kept = take(&node, "kept", Duration::from_secs(20)).await;
    assert!(kept.unlock().await.unwrap());
    let now = SystemTime::now();

    let locks: Vec<LockInfo> = pages(&node, "", 2).await.into_iter().flatten().collect();
    let mut names: Vec<&str> = locks.iter().map(|lock| lock.name.as_str()).collect();
    names.sort();
    // Redis deletes a released key: the released lock is not listed.
    assert_eq!(names, ["held", "kept"]);
    let lock = locks.iter().find(|lock| lock.name == "held").unwrap();
    assert_eq!(lock.state, LockState::Held);
    assert_eq!(lock.locked_by.as_deref(), Some("admin-test"), "{lock:?}");
    assert!(
        near(lock.locked_at.unwrap(), now, Duration::from_secs(5)),
        "{lock:?}"
    );
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining <= Duration::from_secs(30) && remaining > Duration::from_secs(25),
        "{lock:?}"
    );
    assert!(near(
        lock.held_until.unwrap(),
        now + Duration::from_secs(30),
        Duration::from_secs(5)
    ));
    assert_eq!(lock.fencing_token, held.fencing_token());
    assert!(lock.fencing_token.is_some());
    // Released with lock_at_least_for still in force: held for the rest of it.
    let lock = locks.iter().find(|lock| lock.name == "kept").unwrap();
    assert_eq!(lock.state, LockState::Held);
    assert!(
        lock.remaining.unwrap() <= Duration::from_secs(20),
        "{lock:?}"
    );

    // Inspect shows what the listing showed.
    let inspected = inspect(&node, "held").await;
    let listed = locks.iter().find(|lock| lock.name == "held").unwrap();
    assert_eq!(inspected.acquisition, listed.acquisition);
    assert_eq!(inspected.locked_by, listed.locked_by);
    assert_eq!(inspected.locked_at, listed.locked_at);
    assert_eq!(inspected.fencing_token, listed.fencing_token);
    assert_eq!(inspected.state, LockState::Held);
    assert!(node.inspect_lock("never-used").await.unwrap().is_none());
    assert!(node.inspect_lock("released").await.unwrap().is_none());
    // A name this provider refuses is refused the same way here.
    let error = node.inspect_lock("a{b}").await.unwrap_err();
    assert!(matches!(error, LockError::InvalidName { .. }), "{error}");
    assert!(held.unlock().await.unwrap());
}

#[tokio::test]
async fn force_unlock_frees_exactly_the_acquisition_it_names() {
    let url = settings::REDIS.value();
    let env = unique_env("force");
    let a = provider(&url, &env, "node-a", true).await;
    let b = provider(&url, &env, "node-b", true).await;
    let operator = provider(&url, &env, "operator", true).await;
    let held = take(&a, "x", Duration::from_secs(30)).await;
    let seen = inspect(&operator, "x").await;
    assert!(operator.force_unlock("x", &seen.acquisition).await.unwrap());
    // Free at once, lock_at_least_for notwithstanding; the fencing counter is kept.
    let taken = take(&b, "x", Duration::ZERO).await;
    assert_eq!(
        taken.fencing_token(),
        held.fencing_token().map(|token| token + 1)
    );
    assert!(!held.unlock().await.unwrap());
    assert!(
        !is_free(&a, "x").await,
        "node A's late release freed node B's lock"
    );
    assert!(!operator.force_unlock("x", &seen.acquisition).await.unwrap());
    assert!(
        !is_free(&a, "x").await,
        "a stale force-unlock freed node B's lock"
    );
    let now_seen = inspect(&operator, "x").await;
    assert_ne!(now_seen.acquisition, seen.acquisition);
    assert_eq!(now_seen.locked_by.as_deref(), Some("node-b"));
    assert!(taken.unlock().await.unwrap());

    // Released, or expired: nothing to free.
    assert!(
        !operator
            .force_unlock("x", &now_seen.acquisition)
            .await
            .unwrap()
    );
    let short = acquired(
        a.try_lock(&config("short", Duration::from_millis(200)))
            .await,
    );
    let short_seen = inspect(&operator, "short").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !operator
            .force_unlock("short", &short_seen.acquisition)
            .await
            .unwrap()
    );
    assert!(!short.unlock().await.unwrap());
    assert!(
        !operator
            .force_unlock("never-used", &seen.acquisition)
            .await
            .unwrap()
    );
    let error = operator
        .force_unlock("a{b}", &seen.acquisition)
        .await
        .unwrap_err();
    assert!(matches!(error, LockError::InvalidName { .. }), "{error}");
}

#[tokio::test]
async fn a_value_java_shedlock_wrote_is_listed_and_can_be_force_unlocked_once() {
    let url = settings::REDIS.value();
    let env = unique_env("java");
    let node = provider(&url, &env, "admin-test", false).await;
    let key = node.lock_key("java-job").unwrap();
    let mut connection = raw(&url).await;
    // Java ShedLock's RedisLockProvider: `ADDED:<ISO instant>@<hostname>`, TTL lock_at_most_for.
    let plant = |added: &'static str| {
        let mut connection = connection.clone();
        let key = key.clone();
        async move {
            redis::cmd("SET")
                .arg(&key)
                .arg(format!("ADDED:{added}@java-host"))
                .arg("PX")
                .arg(30_000)
                .query_async::<()>(&mut connection)
                .await
                .unwrap();
        }
    };
    plant("2024-05-06T07:08:09.123Z").await;
    let now = SystemTime::now();
    let locks: Vec<LockInfo> = pages(&node, "", 10).await.into_iter().flatten().collect();
    assert_eq!(locks.len(), 1, "{locks:?}");
    let lock = &locks[0];
    assert_eq!(lock.name, "java-job");
    assert_eq!(lock.state, LockState::Held);
    assert_eq!(lock.locked_by.as_deref(), Some("java-host"));
    assert_eq!(
        lock.locked_at,
        Some(SystemTime::UNIX_EPOCH + Duration::from_millis(1_714_979_289_123))
    );
    assert!(near(
        lock.held_until.unwrap(),
        now + Duration::from_secs(30),
        Duration::from_secs(5)
    ));
    assert_eq!(
        lock.acquisition,
        AcquisitionId::new("ADDED:2024-05-06T07:08:09.123Z@java-host")
    );
    assert!(
        node.force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    assert!(node.inspect_lock("java-job").await.unwrap().is_none());

    // The same host again, at another time: the first acquisition's id is stale.
    plant("2024-05-06T07:08:09.123Z").await;
    let first = inspect(&node, "java-job").await;
    plant("2024-05-06T07:09:00.000Z").await;
    assert!(
        !node
            .force_unlock("java-job", &first.acquisition)
            .await
            .unwrap()
    );
    let second = inspect(&node, "java-job").await;
    assert_eq!(second.locked_by.as_deref(), Some("java-host"));
    assert!(
        node.force_unlock("java-job", &second.acquisition)
            .await
            .unwrap()
    );
    let _: () = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut connection)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_thousand_locks_are_listed_a_hundred_at_a_time_each_once() {
    let url = settings::REDIS.value();
    let env = unique_env("scale");
    let node = provider(&url, &env, "admin-test", false).await;
    let mut connection = raw(&url).await;
    let names: Vec<String> = (0..1_000).map(|i| format!("bulk-{i:04}")).collect();
    plant_locks(
        &node,
        &mut connection,
        &names,
        "bulk-host",
        Duration::from_secs(60),
    )
    .await;

    let started = std::time::Instant::now();
    let pages = pages(&node, "bulk-", 100).await;
    let elapsed = started.elapsed();
    let mut listed: Vec<String> = pages
        .iter()
        .flatten()
        .map(|lock| lock.name.clone())
        .collect();
    let distinct: HashSet<&String> = listed.iter().collect();
    assert_eq!(distinct.len(), listed.len(), "a name listed twice");
    listed.sort();
    assert_eq!(listed, names);
    assert!(pages.len() >= 10, "{} pages", pages.len());
    assert!(elapsed < Duration::from_secs(10), "{elapsed:?}");
    delete_locks(&node, &mut connection, &names).await;
}

/// `SCAN`'s `COUNT` is a hint: one hash bucket can hold more matching keys than a page. In a
/// database of its own holding 300 keys (512 buckets), some bucket holds two, so pages of one
/// lock must cut a batch and go on inside it; every key is still listed once, one per page.
#[tokio::test]
async fn a_batch_larger_than_a_page_is_cut_and_the_next_page_goes_on_inside_it() {
    let (node, mut connection) = on_database_of_its_own(13, &unique_env("cut")).await;
    let names: Vec<String> = (0..300).map(|i| format!("cut-{i:03}")).collect();
    plant_locks(
        &node,
        &mut connection,
        &names,
        "cut-host",
        Duration::from_secs(60),
    )
    .await;

    let mut request = PageRequest::first("cut-").with_limit(1);
    let mut listed = Vec::new();
    let mut cut_batches = 0;
    loop {
        let page = node.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= 1, "a page of {}", page.locks.len());
        listed.extend(page.locks.into_iter().map(|lock| lock.name));
        let Some(cursor) = page.next else { break };
        cut_batches += usize::from(cursor.as_str().contains('/'));
        request.after = Some(cursor);
        assert!(listed.len() <= 2 * names.len(), "the listing does not end");
    }
    let distinct: HashSet<&String> = listed.iter().collect();
    assert_eq!(distinct.len(), listed.len(), "a name listed twice");
    listed.sort();
    assert_eq!(listed, names);
    assert!(
        cut_batches > 0,
        "no bucket held two keys: the cut was not exercised"
    );
    delete_locks(&node, &mut connection, &names).await;
}

/// A keyspace that shrinks between two pages of a cut batch, as it does when other
/// applications' keys expire or other locks are released during a listing: the cut batch's
/// cursor then covers the buckets that Redis merged into one, keys no page took yet among
/// them, which may sort anywhere. Each is still listed. In a database of its own, 1,500 locks
/// sit beside 14,000 other keys (16,384 buckets, where pages of one lock cut the batches of
/// buckets holding two); at each of the first 20 cuts the other keys are deleted, so Redis
/// shrinks the table to 2,048 buckets before the next page, and are written again after it.
/// (Killed the "leave out every key up to the last one taken" rule that came before: the keys
/// of the merged buckets that sorted before it were never listed.)
#[tokio::test]
async fn a_cut_batch_is_finished_after_the_keyspace_shrinks_under_the_listing() {
    const OTHER_KEYS: usize = 14_000;
    const SHRINKS: usize = 20;
    let env = unique_env("shrink");
    let (node, mut connection) = on_database_of_its_own(12, &env).await;
    let names: Vec<String> = (0..1_500).map(|i| format!("shrink-{i:04}")).collect();
    plant_locks(
        &node,
        &mut connection,
        &names,
        "shrink-host",
        Duration::from_secs(120),
    )
    .await;
    let other = |i: usize| format!("other-{env}:{i}");
    let write_others = |mut connection: redis::aio::MultiplexedConnection| async move {
        let mut pipeline = redis::pipe();
        for i in 0..OTHER_KEYS {
            pipeline
                .cmd("SET")
                .arg(other(i))
                .arg("x")
                .arg("PX")
                .arg(120_000)
                .ignore();
        }
        pipeline.query_async::<()>(&mut connection).await.unwrap();
    };
    let delete_others = |mut connection: redis::aio::MultiplexedConnection| async move {
        let mut pipeline = redis::pipe();
        for i in 0..OTHER_KEYS {
            pipeline.del(other(i)).ignore();
        }
        pipeline.query_async::<()>(&mut connection).await.unwrap();
    };
    write_others(connection.clone()).await;

    let mut request = PageRequest::first("shrink-").with_limit(1);
    let mut listed = Vec::new();
    let mut shrinks = 0;
    loop {
        let page = node.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= 1, "a page of {}", page.locks.len());
        listed.extend(page.locks.into_iter().map(|lock| lock.name));
        let Some(cursor) = page.next else { break };
        let cut = cursor.as_str().contains('/');
        request.after = Some(cursor);
        if cut && shrinks < SHRINKS {
            shrinks += 1;
            delete_others(connection.clone()).await;
            // Redis resizes its tables in its periodic task (10 times a second by default).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let page = node.list_locks(&request).await.unwrap();
            listed.extend(page.locks.into_iter().map(|lock| lock.name));
            write_others(connection.clone()).await;
            let Some(cursor) = page.next else { break };
            request.after = Some(cursor);
        }
        assert!(listed.len() <= 2 * names.len(), "the listing does not end");
    }
    delete_others(connection.clone()).await;
    delete_locks(&node, &mut connection, &names).await;

    // Keys may come twice (SCAN's own guarantee when the keyspace is resized), never not at all.
    let listed: HashSet<String> = listed.into_iter().collect();
    let missed: Vec<&String> = names
        .iter()
        .filter(|name| !listed.contains(*name))
        .collect();
    assert!(
        missed.is_empty(),
        "{} of {} held locks never listed: {missed:?}",
        missed.len(),
        names.len()
    );
    assert!(
        shrinks > 0,
        "no bucket held two keys: the cut was not exercised"
    );
}

#[tokio::test]
async fn a_cursor_this_provider_did_not_make_is_refused() {
    let node = provider(
        &settings::REDIS.value(),
        &unique_env("cursor"),
        "admin-test",
        false,
    )
    .await;
    for cursor in ["abc", "1:", "99999:0"] {
        let request = PageRequest {
            prefix: String::new(),
            after: Some(PageCursor::new(cursor)),
            limit: 10,
        };
        let error = node.list_locks(&request).await.unwrap_err();
        assert!(
            matches!(
                error,
                LockError::InvalidRequest {
                    operation: Operation::List,
                    ..
                }
            ),
            "{error}"
        );
        assert!(error.to_string().contains("cursor"), "{error}");
    }
}

#[tokio::test]
async fn a_key_of_another_type_is_named_by_inspect_and_never_freed() {
    let url = settings::REDIS.value();
    let env = unique_env("type");
    let node = provider(&url, &env, "admin-test", true).await;
    let held = take(&node, "held", Duration::ZERO).await;
    let mut conn = raw(&url).await;
    let key = node.lock_key("hashed").unwrap();
    redis::cmd("HSET")
        .arg(&key)
        .arg("owner")
        .arg("another app")
        .query_async::<()>(&mut conn)
        .await
        .unwrap();

    let error = node.inspect_lock("hashed").await.unwrap_err();
    assert!(
        matches!(
            error,
            LockError::Backend {
                operation: Operation::Inspect,
                source: None,
                ..
            }
        ),
        "{error:?}"
    );
    assert_eq!(error.kind(), ErrorKind::CorruptData, "{error}");
    let text = error.to_string();
    for part in [
        &format!("{key:?}"),
        "holds a Redis hash, not a ShedLock lock (a string)",
        "nothing was changed",
    ] {
        assert!(text.contains(part), "{part:?} in {text}");
    }
    // No acquisition id can name it: one that is no ShedLock value is refused before anything
    // is sent, one that is answers false, and the hash is left.
    for id in ["owner", "", "another app"] {
        let error = node
            .force_unlock("hashed", &AcquisitionId::new(id))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::InvalidRequest {
                    operation: Operation::ForceUnlock,
                    ..
                }
            ),
            "{id:?}: {error:?}"
        );
        assert!(
            error
                .to_string()
                .contains(&format!("{id:?} is not a ShedLock lock value")),
            "{error}"
        );
    }
    assert!(
        !node
            .force_unlock(
                "hashed",
                &AcquisitionId::new("ADDED:2024-05-06T07:08:09.123Z@java-host")
            )
            .await
            .unwrap()
    );
    let owner: Option<String> = redis::cmd("HGET")
        .arg(&key)
        .arg("owner")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(owner.as_deref(), Some("another app"));
    // A listing shows locks: the held one, not the hash.
    assert_eq!(listed_names(&node, "", 10).await, ["held"]);
    assert!(held.unlock().await.unwrap());

    // No lock has the empty name: refused as a lock configuration refuses it.
    for refused in [
        node.inspect_lock("").await.map(|_| ()),
        node.force_unlock("", &AcquisitionId::new("x"))
            .await
            .map(|_| ()),
    ] {
        assert!(
            matches!(
                refused,
                Err(LockError::Configuration(
                    shedlock_core::ConfigurationError::EmptyName
                ))
            ),
            "{refused:?}"
        );
    }
}

#[tokio::test]
async fn inspect_force_unlock_and_a_page_are_one_round_trip_each() {
    let url = settings::REDIS.value();
    let upstream = url.trim_start_matches("redis://").trim_end_matches('/');
    let proxy = CountingProxy::start(upstream).await.unwrap();
    let env = unique_env("wire");
    let node = provider(
        &format!("redis://{}", proxy.local_addr()),
        &env,
        "admin-test",
        true,
    )
    .await;
    // Warm-up: every script loaded once (a first EVALSHA answered NOSCRIPT costs more).
    let warm = take(&node, "warm", Duration::ZERO).await;
    let seen = inspect(&node, "warm").await;
    node.list_locks(&PageRequest::first("")).await.unwrap();
    assert!(node.force_unlock("warm", &seen.acquisition).await.unwrap());
    drop(warm);

    let handle = take(&node, "counted", Duration::ZERO).await;
    let before = proxy.round_trips();
    let seen = inspect(&node, "counted").await;
    assert_eq!(proxy.round_trips() - before, 1, "inspect");
    let before = proxy.round_trips();
    let page = node.list_locks(&PageRequest::first("")).await.unwrap();
    assert_eq!(proxy.round_trips() - before, 1, "one page");
    assert_eq!(page.locks.len(), 1);
    let before = proxy.round_trips();
    assert!(
        node.force_unlock("counted", &seen.acquisition)
            .await
            .unwrap()
    );
    assert_eq!(proxy.round_trips() - before, 1, "force_unlock");
    assert!(!handle.unlock().await.unwrap());
}

#[tokio::test]
async fn on_a_cluster_every_master_is_listed_and_force_unlock_works() {
    let url = settings::REDIS_CLUSTER.value();
    let env = unique_env("cluster");
    let a = provider(&url, &env, "node-a", true).await;
    let b = provider(&url, &env, "node-b", true).await;
    // Enough names that every master holds some.
    let names: Vec<String> = (0..40).map(|i| format!("spread-{i:02}")).collect();
    let mut handles = Vec::new();
    for name in &names {
        handles.push(take(&a, name, Duration::ZERO).await);
    }
    let elsewhere = take(&a, "elsewhere", Duration::ZERO).await;
    assert_eq!(listed_names(&b, "spread-", 3).await, names);
    let pages = pages(&b, "spread-", 100).await;
    assert!(
        pages
            .iter()
            .flatten()
            .all(|lock| lock.state == LockState::Held && lock.fencing_token.is_some())
    );

    let seen = b.inspect_lock(&names[0]).await.unwrap().unwrap();
    assert_eq!(seen.locked_by.as_deref(), Some("node-a"));
    assert!(b.force_unlock(&names[0], &seen.acquisition).await.unwrap());
    let taken = take(&b, &names[0], Duration::ZERO).await;
    assert!(!handles[0].unlock().await.unwrap());
    assert!(!b.force_unlock(&names[0], &seen.acquisition).await.unwrap());
    assert!(taken.unlock().await.unwrap());
    assert!(elsewhere.unlock().await.unwrap());
    for handle in &handles[1..] {
        assert!(handle.unlock().await.unwrap());
    }
}
