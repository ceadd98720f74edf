//! What a lock operation costs on the wire, counted by a proxy between the provider and a real
//! server: counts, not timings, so they are stable. Each networked provider's round-trip tests
//! say how to reach its server and how to kill one of the provider's connections there.

use std::future::Future;
use std::time::Duration;

use shedlock_conformance::CountingProxy;
use shedlock_core::raw::DEFAULT_NAME_CACHE_CAPACITY;
use shedlock_core::{
    Acquisition, LockAdmin, LockConfiguration, LockHandle, LockProvider, PageRequest,
};
use shedlock_sql::{SqlBackend, SqlLockProvider};
use sqlx::{Database, Executor, IntoArguments};

use super::test_database::{DbOf, TestServer};

const MINUTE: Duration = Duration::from_secs(60);

/// A proxy to the server `url` names, and the same URL pointed at the proxy.
pub async fn proxy_for(url: &str) -> (CountingProxy, String) {
    let after_scheme = url.find("://").expect("a URL with a scheme") + 3;
    let authority_start = url[after_scheme..]
        .find('@')
        .map_or(after_scheme, |at| after_scheme + at + 1);
    let authority_end = url[authority_start..]
        .find(['/', '?'])
        .map_or(url.len(), |end| authority_start + end);
    let upstream = &url[authority_start..authority_end];
    let proxy = CountingProxy::start(upstream)
        .await
        .unwrap_or_else(|e| panic!("start a proxy to {upstream}: {e}"));
    let proxied = format!(
        "{}{}{}",
        &url[..authority_start],
        proxy.local_addr(),
        &url[authority_end..]
    );
    (proxy, proxied)
}

/// A provider connected to `url`, on `table`, which it creates with the fencing column if it is
/// missing.
pub async fn provider_at<B: SqlBackend>(url: String, table: &str) -> SqlLockProvider<B> {
    SqlLockProvider::<B>::builder()
        .table_name(table)
        .create_table_with_fencing_if_missing()
        .connect(url)
        .await
        .unwrap()
}

/// The round trips `operation` costs, and what it answered.
async fn counted<T>(proxy: &CountingProxy, operation: impl Future<Output = T>) -> (T, u64) {
    let before = proxy.round_trips();
    let answer = operation.await;
    (answer, proxy.round_trips() - before)
}

fn config(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, MINUTE, Duration::ZERO).unwrap()
}

async fn try_lock(
    proxy: &CountingProxy,
    node: &dyn LockProvider,
    name: &str,
) -> (Option<Box<dyn LockHandle>>, u64) {
    let (acquisition, round_trips) = counted(proxy, node.try_lock(&config(name))).await;
    let handle = match acquisition.unwrap() {
        Acquisition::Acquired(handle) => Some(handle),
        Acquisition::NotAcquired(_) => None,
    };
    (handle, round_trips)
}

async fn release(proxy: &CountingProxy, handle: Box<dyn LockHandle>) -> u64 {
    let (released, round_trips) = counted(proxy, handle.unlock()).await;
    assert!(released.unwrap(), "the holder releases its own lock");
    round_trips
}

/// Sends each statement once on the provider's connection, so the counts below are of the
/// statements alone, not of the driver preparing them on first use.
async fn warm_up<B: SqlBackend>(proxy: &CountingProxy, provider: &SqlLockProvider<B>) {
    let (inserted, _) = try_lock(proxy, provider, "warm-up").await;
    let inserted = inserted.expect("a new name is free");
    assert!(inserted.extend(MINUTE).await.unwrap());
    release(proxy, inserted).await;
    let (taken_over, _) = try_lock(proxy, provider, "warm-up").await;
    release(proxy, taken_over.expect("released, so free")).await;
}

/// Every operation is one round trip: the first acquire of a new name, an acquire of a known
/// free name, a refused acquire, release and extend; after a node restart (its name cache
/// empty, the row there) the first attempt on a name costs two, then one again.
/// On a new table with the fencing column, through a proxy.
pub async fn every_operation_is_one_round_trip<D: TestServer>(database: &D) {
    let table = database.new_table("round_trips");
    let (proxy, proxied) = &proxy_for(&database.url()).await;
    let provider = &provider_at::<D::Backend>(proxied.clone(), &table).await;
    warm_up(proxy, provider).await;
    let connections = proxy.connections();

    let (held, first) = try_lock(proxy, provider, "job").await;
    let held = held.expect("a new name is free");
    assert_eq!(first, 1, "first acquire of a new name");
    let (refused, round_trips) = try_lock(proxy, provider, "job").await;
    assert!(refused.is_none(), "held, so refused");
    assert_eq!(round_trips, 1, "refused acquire of a known name");
    let (extended, round_trips) = counted(proxy, held.extend(MINUTE)).await;
    assert!(extended.unwrap());
    assert_eq!(round_trips, 1, "extend");
    assert_eq!(release(proxy, held).await, 1, "release");
    let (taken, round_trips) = try_lock(proxy, provider, "job").await;
    assert_eq!(round_trips, 1, "acquire of a known free name");
    release(proxy, taken.expect("released, so free")).await;

    // A restarted node does not know the row exists: its insert is refused, then it takes the
    // row over. Two round trips, once per name for the node's life.
    provider.clear_name_cache();
    let (taken, round_trips) = try_lock(proxy, provider, "job").await;
    let taken = taken.expect("released, so free");
    assert_eq!(
        round_trips, 2,
        "first acquire of an existing name after a restart"
    );
    let restarted = provider.node();
    let (refused, round_trips) = try_lock(proxy, &restarted, "job").await;
    assert!(refused.is_none(), "held, so refused");
    assert_eq!(round_trips, 2, "first refused acquire after a restart");
    let (refused, round_trips) = try_lock(proxy, &restarted, "job").await;
    assert!(refused.is_none(), "held, so refused");
    assert_eq!(round_trips, 1, "then known again");
    assert_eq!(release(proxy, taken).await, 1, "release");

    assert_eq!(
        proxy.connections(),
        connections,
        "one connection served every operation, with no reconnect"
    );
    database.drop_table(&table).await;
}

/// A name locked on every run stays in the node's name cache (bounded, at
/// [`DEFAULT_NAME_CACHE_CAPACITY`] names) however many one-off names pass through it, as long
/// as fewer than that come between two of its runs: after 10% more one-off names than the cache
/// holds, locked 100 between each run of the job, every run of the job still costs one round
/// trip. The first one-off name, locked once and still held, was forgotten: its next attempt
/// costs two (the insert, refused, then the update, refused), which shows the cache is bounded
/// and was turned over. On a new table, through a proxy.
pub async fn a_name_locked_on_every_run_stays_known_among_many_one_off_names<D: TestServer>(
    database: &D,
) {
    const BETWEEN_RUNS: usize = 100;
    let table = database.new_table("hot_name");
    let (proxy, proxied) = &proxy_for(&database.url()).await;
    let provider = &provider_at::<D::Backend>(proxied.clone(), &table).await;
    warm_up(proxy, provider).await;
    let (held, first) = try_lock(proxy, provider, "every-run").await;
    assert_eq!(first, 1, "first acquire of a new name");
    release(proxy, held.expect("a new name is free")).await;

    let one_off_names = DEFAULT_NAME_CACHE_CAPACITY + DEFAULT_NAME_CACHE_CAPACITY / 10;
    for run in 1..=one_off_names / BETWEEN_RUNS {
        // One after another, so every statement runs on the one connection that has prepared
        // it. Each handle is dropped, which leaves its lock held until `lock_at_most_for`.
        for n in (run - 1) * BETWEEN_RUNS..run * BETWEEN_RUNS {
            let acquisition = provider.try_lock(&config(&format!("one-off-{n}"))).await;
            let handle = acquisition.unwrap().into_handle();
            assert!(handle.is_some(), "one-off-{n}, a new name, is free");
        }
        let (held, round_trips) = try_lock(proxy, provider, "every-run").await;
        assert_eq!(
            round_trips,
            1,
            "run {run} of the job, after {} one-off names: the name is still known",
            run * BETWEEN_RUNS
        );
        release(proxy, held.expect("released after each run, so free")).await;
    }

    let (refused, round_trips) = try_lock(proxy, provider, "one-off-0").await;
    assert!(refused.is_none(), "still held, so refused");
    assert_eq!(
        round_trips, 2,
        "the first one-off name, after {one_off_names} others: forgotten, so the insert is tried first"
    );
    database.drop_table(&table).await;
}

/// A transaction that is changing an expired lock's row (another node taking it over, a Java
/// ShedLock node, an operator's session) holds that row's lock until it commits. A node that
/// tries the lock meanwhile is told "not acquired" at once, naming nobody (that change is not
/// committed), instead of queueing behind it: in a burst every loser would otherwise wait for
/// the one before it. Once that transaction is gone, the lock is there to take. The operation
/// timeout (and so the server's lock wait) is 30 s, and the answer must come within 5 s: an
/// acquire that queued for the row would take the 30 s.
pub async fn an_acquire_never_waits_for_another_transaction_holding_the_row<D: TestServer>(
    database: &D,
) where
    for<'c> &'c mut <DbOf<D> as Database>::Connection: Executor<'c, Database = DbOf<D>>,
    <DbOf<D> as Database>::Arguments: IntoArguments<DbOf<D>>,
{
    let table = database.new_table("row_lock");
    let provider = SqlLockProvider::<D::Backend>::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .operation_timeout(Duration::from_secs(30))
        .connect(database.url())
        .await
        .unwrap();
    let Acquisition::Acquired(first) = provider.try_lock(&config("job")).await.unwrap() else {
        panic!("a new name is free");
    };
    assert!(first.unlock().await.unwrap());

    let other = database.pool().await;
    let mut transaction = other.begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "UPDATE {table} SET locked_by = 'someone-else#1' WHERE name = 'job'"
    )))
    .execute(&mut *transaction)
    .await
    .unwrap();

    let answer = tokio::time::timeout(Duration::from_secs(5), provider.try_lock(&config("job")))
        .await
        .expect("the acquire queued for the row another transaction holds");
    match answer {
        Ok(Acquisition::NotAcquired(holder)) => assert!(holder.is_none(), "{holder:?}"),
        Ok(Acquisition::Acquired(_)) => panic!("acquired a row another transaction is changing"),
        Err(error) => panic!("the acquire failed instead of answering: {error}"),
    }

    transaction.rollback().await.unwrap();
    match provider.try_lock(&config("job")).await.unwrap() {
        Acquisition::Acquired(handle) => assert!(handle.unlock().await.unwrap()),
        Acquisition::NotAcquired(holder) => {
            panic!("the free lock was refused once the transaction ended: {holder:?}")
        }
    }
    database.drop_table(&table).await;
}

/// The operator's view costs one round trip per call too: inspect, each page of a listing
/// (the first and the ones after a cursor) and force-unlock, whether it frees the lock or not.
/// On a new table with the fencing column, through a proxy.
pub async fn every_admin_call_is_one_round_trip<D: TestServer>(database: &D) {
    let table = database.new_table("admin_round_trips");
    let (proxy, proxied) = &proxy_for(&database.url()).await;
    let provider = &provider_at::<D::Backend>(proxied.clone(), &table).await;
    let mut handles = Vec::new();
    for name in ["admin-1", "admin-2", "admin-3"] {
        let (handle, _) = try_lock(proxy, provider, name).await;
        handles.push(handle.expect("a new name is free"));
    }
    // Each statement once first: the driver prepares a statement on its first use.
    let first_page = PageRequest::first("admin-").with_limit(2);
    let warm = provider.inspect_lock("admin-1").await.unwrap().unwrap();
    let page = provider.list_locks(&first_page).await.unwrap();
    let next_page = PageRequest {
        after: page.next,
        ..first_page.clone()
    };
    provider.list_locks(&next_page).await.unwrap();
    assert!(
        provider
            .force_unlock("admin-1", &warm.acquisition)
            .await
            .unwrap()
    );
    let connections = proxy.connections();

    let (seen, round_trips) = counted(proxy, provider.inspect_lock("admin-2")).await;
    let seen = seen.unwrap().expect("admin-2 is held");
    assert_eq!(round_trips, 1, "inspect");
    let (page, round_trips) = counted(proxy, provider.list_locks(&first_page)).await;
    let page = page.unwrap();
    assert_eq!(page.locks.len(), 2);
    assert!(page.next.is_some(), "a third name follows");
    assert_eq!(round_trips, 1, "the first page");
    let next_page = PageRequest {
        after: page.next,
        ..first_page
    };
    let (page, round_trips) = counted(proxy, provider.list_locks(&next_page)).await;
    let page = page.unwrap();
    assert_eq!(page.locks.len(), 1);
    assert!(page.next.is_none(), "the last page");
    assert_eq!(round_trips, 1, "a page after a cursor");
    let (freed, round_trips) =
        counted(proxy, provider.force_unlock("admin-2", &seen.acquisition)).await;
    assert!(freed.unwrap());
    assert_eq!(round_trips, 1, "force-unlock");
    let (freed, round_trips) =
        counted(proxy, provider.force_unlock("admin-2", &seen.acquisition)).await;
    assert!(!freed.unwrap(), "already free");
    assert_eq!(round_trips, 1, "a force-unlock that frees nothing");

    assert_eq!(
        proxy.connections(),
        connections,
        "one connection served every call, with no reconnect"
    );
    for handle in handles {
        handle.unlock().await.unwrap();
    }
    database.drop_table(&table).await;
}

/// The idle-check interval of these tests: short, so a test sees several checks.
const IDLE_CHECK: Duration = Duration::from_millis(300);

/// A provider through `proxy` on `table` that checks idle connections every [`IDLE_CHECK`],
/// with one connection, so a statement and a check never run side by side (one waits for the
/// other) and every count below is of that one connection's traffic.
async fn checked_provider<B: SqlBackend>(url: String, table: &str) -> SqlLockProvider<B> {
    SqlLockProvider::<B>::builder()
        .table_name(table)
        .create_table_with_fencing_if_missing()
        .idle_check_interval(IDLE_CHECK)
        .max_connections(1)
        .connect(url)
        .await
        .unwrap()
}

/// An idle connection is pinged in the background about once per check interval (the median
/// time between pings is within a quarter of an interval below it and half an interval above
/// it), so the first acquire after the connection sat idle is one round trip on the same
/// connection: the caller never pays for a new session.
pub async fn an_idle_connection_is_kept_ready_off_the_callers_path<D: TestServer>(database: &D) {
    let table = database.new_table("idle_checks");
    let (proxy, proxied) = &proxy_for(&database.url()).await;
    let provider = &checked_provider::<D::Backend>(proxied.clone(), &table).await;
    warm_up(proxy, provider).await;
    let connections = proxy.connections();
    let mut seen = proxy.round_trips();
    let idle = tokio::time::Instant::now();
    let mut pinged_at = Vec::new();
    while idle.elapsed() < IDLE_CHECK * 10 {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let round_trips = proxy.round_trips();
        if round_trips > seen {
            pinged_at.push(idle.elapsed());
            seen = round_trips;
        }
    }
    let mut gaps: Vec<Duration> = pinged_at.windows(2).map(|w| w[1] - w[0]).collect();
    gaps.sort();
    assert!(
        gaps.len() >= 4,
        "the idle connection was pinged about every {IDLE_CHECK:?}: pings at {pinged_at:?}"
    );
    let median = gaps[gaps.len() / 2];
    assert!(
        IDLE_CHECK * 3 / 4 <= median && median <= IDLE_CHECK * 3 / 2,
        "pinged about every {IDLE_CHECK:?}, not every {median:?}: pings at {pinged_at:?}"
    );
    let (held, round_trips) = try_lock(proxy, provider, "job").await;
    assert_eq!(round_trips, 1, "the first acquire after the idle time");
    release(proxy, held.expect("a new name is free")).await;
    assert_eq!(
        proxy.connections(),
        connections,
        "the idle connection served the acquire; none was opened"
    );
    database.drop_table(&table).await;
}

/// A connection that dies while idle (a firewall dropping the flow, a server restart) is found
/// by the background check and replaced there: the next acquire works at its first attempt, on
/// the replacement, where it first prepares its statement.
pub async fn a_connection_lost_while_idle_is_replaced_off_the_callers_path<D: TestServer>(
    database: &D,
) {
    let table = database.new_table("idle_lost");
    let (proxy, proxied) = &proxy_for(&database.url()).await;
    let provider = &checked_provider::<D::Backend>(proxied.clone(), &table).await;
    warm_up(proxy, provider).await;
    let connections = proxy.connections();
    proxy.cut_open_connections();
    tokio::time::sleep(IDLE_CHECK * 6).await;
    assert_eq!(
        proxy.connections(),
        connections + 1,
        "the check found the connection dead and opened one replacement"
    );
    let (held, round_trips) = try_lock(proxy, provider, "job").await;
    assert_eq!(
        round_trips, 2,
        "the first acquire after the loss: the replacement prepares the statement, then runs it"
    );
    release(proxy, held.expect("a new name is free")).await;
    assert_eq!(proxy.connections(), connections + 1, "no other connection");
    database.drop_table(&table).await;
}

/// An idle-check interval of zero, or longer than half the four minutes after which an idle
/// connection is closed, is refused by `connect` and `connect_lazy` with an error naming the
/// setting, its value and the rule, before any connection is opened; 120 s is accepted.
pub async fn idle_check_intervals_out_of_range_are_refused<D: TestServer>(database: &D) {
    let (proxy, proxied) = &proxy_for(&database.url()).await;
    for (interval, rule) in [
        (
            Duration::ZERO,
            "invalid idle_check_interval \"0s\": it must be greater than zero",
        ),
        (
            Duration::from_secs(121),
            "invalid idle_check_interval \"121s\": it must be at most 120s, so every idle \
             connection is checked before it has been idle for 240s",
        ),
    ] {
        let builder = || SqlLockProvider::<D::Backend>::builder().idle_check_interval(interval);
        for error in [
            builder().connect(proxied.clone()).await.unwrap_err(),
            builder().connect_lazy(proxied.clone()).await.unwrap_err(),
        ] {
            assert!(error.to_string().contains(rule), "{error}");
            assert_eq!(error.kind(), shedlock_core::ErrorKind::Configuration);
        }
    }
    assert_eq!(proxy.connections(), 0, "nothing connected");
    SqlLockProvider::<D::Backend>::builder()
        .idle_check_interval(Duration::from_secs(120))
        .connect_lazy(proxied.clone())
        .await
        .expect("120 s, the longest interval, is accepted");
}

/// A connection killed on the server fails the next operation (an error, so the task does not
/// run), and the operation after it works on a fresh connection.
pub async fn a_killed_connection_fails_one_operation_then_the_next_reconnects<B: SqlBackend>(
    provider: &SqlLockProvider<B>,
    kill_connections: impl Future<Output = u64>,
) {
    let warm = provider.try_lock(&config("job")).await.unwrap();
    let warm = warm.into_handle().expect("a new name is free");
    assert!(warm.unlock().await.unwrap());
    assert!(
        kill_connections.await > 0,
        "the provider's connection was found"
    );
    let error = provider
        .try_lock(&config("job"))
        .await
        .expect_err("the killed connection fails the statement, and the acquire fails closed");
    assert!(
        error.to_string().contains("acquire of lock \"job\" failed"),
        "{error}"
    );
    let again = provider
        .try_lock(&config("job"))
        .await
        .expect("the next acquire connects afresh");
    let again = again.into_handle().expect("free, so taken");
    assert!(again.unlock().await.unwrap());
}
