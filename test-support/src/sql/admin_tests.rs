//! What every SQL provider's operator view ([`LockAdmin`]) must do, against the real database:
//! listing by prefix in pages, the fields and states of held, released and planted rows,
//! inspect, and a force-unlock that frees exactly the acquisition it names. Each provider's
//! admin tests call these on their own nodes; rows written as Java does are planted through
//! the kit's harness ([`PlantRecords`]).

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::TryStreamExt;
use shedlock_conformance::PlantedRecord;
use shedlock_core::{
    AcquisitionId, Clock, LockAdmin, LockError, LockInfo, LockProvider, LockState, Operation,
    PageRequest, SystemClock, TimeSource, list_all_locks, raw::SkewedClock,
};
use shedlock_sql::{SqlBackend, SqlLockProvider};
use sqlx::{Database, Executor, IntoArguments, Pool};

use super::conformance_harness::{DatabaseOf, PlantRecords};
use super::provider_tests::{config, lock, renamed_table_and_columns};
use super::test_database::{DbOf, HOLDER, TestDatabase, TestServer};

const MINUTE: Duration = Duration::from_secs(60);

/// Every lock whose name starts with `prefix`, through [`list_all_locks`] in pages of
/// `page_size`.
pub async fn list_all(admin: &dyn LockAdmin, prefix: &str, page_size: usize) -> Vec<LockInfo> {
    list_all_locks(admin, prefix, page_size)
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing {prefix:?}: {e}"))
}

fn names(locks: &[LockInfo]) -> Vec<String> {
    locks.iter().map(|lock| lock.name.clone()).collect()
}

/// Reads every page by hand: none holds more than `limit` locks, the listing ends, and what it
/// returns is what [`list_all_locks`] returns.
async fn pages(admin: &dyn LockAdmin, prefix: &str, limit: usize) -> (Vec<String>, usize) {
    let mut request = PageRequest::first(prefix).with_limit(limit);
    let mut listed = Vec::new();
    for page_count in 1..=1_000 {
        let page = admin.list_locks(&request).await.unwrap();
        assert!(
            page.locks.len() <= limit,
            "page {page_count} of {prefix:?} holds {} locks, more than {limit}",
            page.locks.len()
        );
        listed.extend(names(&page.locks));
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => return (listed, page_count),
        }
    }
    panic!("the listing of {prefix:?} did not end within 1,000 pages");
}

/// [`lists_a_prefix_literally_in_name_order`] on a new table with the fencing column.
pub async fn listing_pages_through_a_prefix_literally_in_name_order<D: TestDatabase>(database: &D) {
    let table = database.new_table("admin_list");
    let node = database.node(&table, true).await;
    lists_a_prefix_literally_in_name_order(&node, &node).await;
    database.drop_table(&table).await;
}

/// `%`, `_`, `\` and `!` (the provider's `LIKE` escape) in a prefix are literal, a sibling that
/// shares a shorter prefix or differs in case is left out, and pages of two list every name
/// once, in name order. The database orders names as Rust does here (binary or C collations).
/// Every name starts with `l.`, so other locks in the table do not matter, except to the empty
/// prefix, under which these names appear among the others in the same order.
pub async fn lists_a_prefix_literally_in_name_order(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
) {
    let held = [
        "job-1", "job-2", "job-3", "job-4", "job-5", "job-6", "job", "job_1", "jobs-1", "Job-7",
        "50%-off", "500-x", "a\\b-1", "ab-1", "a\\\\b-2", "hi!-1", "hi-1",
    ];
    let mut handles = Vec::new();
    for name in held {
        let name = format!("l.{name}");
        handles.push(lock(node, &name, MINUTE).await.expect("a new name is free"));
    }
    let probes: [(&str, &[&str]); 7] = [
        (
            "job-",
            &["job-1", "job-2", "job-3", "job-4", "job-5", "job-6"],
        ),
        ("job_", &["job_1"]),
        ("50%", &["50%-off"]),
        ("a\\b", &["a\\b-1"]),
        ("hi!", &["hi!-1"]),
        ("no-such-prefix", &[]),
        ("", &held),
    ];
    for (prefix, expected) in probes {
        let prefix = format!("l.{prefix}");
        let mut expected: Vec<String> = expected.iter().map(|name| format!("l.{name}")).collect();
        expected.sort();
        let listed = list_all(admin, &prefix, 2).await;
        assert_eq!(names(&listed), expected, "prefix {prefix:?}");
        let (by_hand, _) = pages(admin, &prefix, 2).await;
        assert_eq!(by_hand, expected, "prefix {prefix:?}, page by page");
    }
    let (_, page_count) = pages(admin, "l.job-", 2).await;
    assert!(
        (3..=4).contains(&page_count),
        "six names in pages of two: {page_count} pages"
    );
    let everything = names(&list_all(admin, "", 2).await);
    let mut sorted = everything.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(everything, sorted, "every name once, in name order");
    let ours: Vec<&String> = everything
        .iter()
        .filter(|name| name.starts_with("l."))
        .collect();
    assert_eq!(ours.len(), held.len(), "{everything:?}");
    for handle in handles {
        assert!(handle.unlock().await.unwrap());
    }
}

/// [`shows_held_released_and_at_least_states`] on a new table with the fencing column.
pub async fn held_released_and_at_least_locks_show_their_state<D: TestDatabase>(database: &D) {
    let table = database.new_table("admin_states");
    let node = database.node(&table, true).await;
    shows_held_released_and_at_least_states(&node, &node, HOLDER).await;
    database.drop_table(&table).await;
}

/// A held lock shows its holder, times, remaining time and fencing token; a released one is
/// free; one released within its `lock_at_least_for` is still held. `holder` is the node's
/// holder name.
pub async fn shows_held_released_and_at_least_states(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
    holder: &str,
) {
    let before = SystemTime::now();
    let held = lock(node, "state-held", MINUTE).await.unwrap();
    let info = admin
        .inspect_lock("state-held")
        .await
        .unwrap()
        .expect("a row");
    assert_eq!(info.name, "state-held");
    assert_eq!(info.state, LockState::Held, "{info:?}");
    assert_eq!(info.locked_by.as_deref(), Some(holder), "{info:?}");
    let locked_at = info.locked_at.unwrap();
    let off = locked_at
        .duration_since(before)
        .unwrap_or_else(|e| e.duration());
    assert!(
        off < Duration::from_secs(5),
        "locked_at is now (UTC): {off:?} off"
    );
    let held_for = info.held_until.unwrap().duration_since(locked_at).unwrap();
    assert!(
        held_for.abs_diff(MINUTE) <= Duration::from_millis(2),
        "held_until - locked_at = {held_for:?}"
    );
    let remaining = info.remaining.unwrap();
    assert!(
        remaining <= MINUTE && remaining > MINUTE - Duration::from_secs(5),
        "{remaining:?}"
    );
    assert_eq!(info.fencing_token, held.fencing_token());

    let released = lock(node, "state-released", MINUTE).await.unwrap();
    assert!(released.unlock().await.unwrap());
    let info = admin.inspect_lock("state-released").await.unwrap().unwrap();
    assert_eq!(info.state, LockState::Free, "{info:?}");
    assert_eq!(info.remaining, None);

    let at_least = node
        .try_lock(&config("state-at-least", MINUTE, Duration::from_secs(30)))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert!(at_least.unlock().await.unwrap());
    let info = admin.inspect_lock("state-at-least").await.unwrap().unwrap();
    assert_eq!(
        info.state,
        LockState::Held,
        "within lock_at_least_for: {info:?}"
    );
    let remaining = info.remaining.unwrap();
    assert!(
        remaining <= Duration::from_secs(30) && remaining > Duration::from_secs(25),
        "{remaining:?}"
    );

    let listed = list_all(admin, "state-", 2).await;
    let states: Vec<(String, LockState)> = listed
        .iter()
        .map(|lock| (lock.name.clone(), lock.state))
        .collect();
    assert_eq!(
        states,
        [
            ("state-at-least".to_owned(), LockState::Held),
            ("state-held".to_owned(), LockState::Held),
            ("state-released".to_owned(), LockState::Free),
        ]
    );
    assert!(held.unlock().await.unwrap());
}

/// The fields that do not change between two reads (`remaining` does).
fn stable(info: &LockInfo) -> impl PartialEq + std::fmt::Debug {
    (
        info.name.clone(),
        info.state,
        info.locked_by.clone(),
        info.locked_at,
        info.held_until,
        info.fencing_token,
        info.acquisition.clone(),
    )
}

/// Inspect agrees with the listing, answers `None` for a name never used, and refuses a name
/// the lock operations refuse (longer than `max_name_chars`, or one the database cannot
/// store), as they do.
pub async fn inspect_matches_the_listing_and_refuses_names_locks_refuse<D: TestDatabase>(
    database: &D,
) {
    let table = database.new_table("admin_inspect");
    let node = &database.node(&table, true).await;
    let admin = node;
    let held = lock(node, "seen", MINUTE).await.unwrap();
    let inspected = admin.inspect_lock("seen").await.unwrap().unwrap();
    let listed = list_all(admin, "seen", 10).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(stable(&inspected), stable(&listed[0]));
    assert_eq!(admin.inspect_lock("never-used").await.unwrap(), None);

    let max = node
        .capabilities()
        .max_name_chars
        .expect("a declared column length");
    let too_long = "n".repeat(max + 1);
    let error = admin.inspect_lock(&too_long).await.unwrap_err();
    assert!(
        matches!(&error, LockError::InvalidName { name, .. } if *name == too_long),
        "{error:?}"
    );
    assert_eq!(admin.inspect_lock(&"n".repeat(max)).await.unwrap(), None);
    for name in D::UNSTORABLE_NAMES {
        let refused = admin.inspect_lock(name).await;
        assert!(
            matches!(refused, Err(LockError::InvalidName { .. })),
            "{name:?}: {refused:?}"
        );
    }
    assert!(held.unlock().await.unwrap());
    database.drop_table(&table).await;
}

/// [`force_unlock_frees_exactly_the_acquisition_it_names`] on a new table with the fencing
/// column: node A creates it, B and C are nodes of their own on it.
pub async fn force_unlock_frees_exactly_the_acquisition_it_names_with_fencing<D: TestDatabase>(
    database: &D,
) {
    let table = database.new_table("admin_force");
    let (a, b, c) = (
        database.node(&table, true).await,
        database.node_on_existing(&table, "node-b").await,
        database.node_on_existing(&table, "node-c").await,
    );
    assert!(a.has_fencing());
    force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &a).await;
    database.drop_table(&table).await;
}

/// On a table without the fencing column whose `columns` a test declares (times of another
/// type), made here, and three nodes of their own on it:
/// [`force_unlock_frees_exactly_the_acquisition_it_names`], whose id holds `locked_at` as the
/// column keeps it, and [`shows_held_released_and_at_least_states`]. `purpose` names the table.
pub async fn force_unlock_on_a_table_without_fencing<D: TestDatabase>(
    database: &D,
    purpose: &str,
    columns: &str,
) {
    let table = database.new_table(purpose);
    database
        .exec(&format!("CREATE TABLE {table} ({columns})"))
        .await;
    let (a, b, c) = (
        database.node_on_existing(&table, HOLDER).await,
        database.node_on_existing(&table, "node-b").await,
        database.node_on_existing(&table, "node-c").await,
    );
    assert!(!a.has_fencing());
    force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &b).await;
    shows_held_released_and_at_least_states(&a, &c, HOLDER).await;
    database.drop_table(&table).await;
}

/// On a [`renamed_table_and_columns`] table with the fencing column, three nodes of their own:
/// [`force_unlock_frees_exactly_the_acquisition_it_names`] and
/// [`lists_a_prefix_literally_in_name_order`].
pub async fn the_configured_table_and_column_names_are_used<D: TestDatabase>(database: &D) {
    let table = database.new_table("admin_renamed");
    let renamed = |holder: &str| {
        renamed_table_and_columns(SqlLockProvider::<D::Backend>::builder(), &table).holder(holder)
    };
    let a = renamed(HOLDER)
        .create_table_with_fencing_if_missing()
        .connect(database.url())
        .await
        .unwrap();
    let b = renamed("node-b").connect(database.url()).await.unwrap();
    let c = renamed("node-c").connect(database.url()).await.unwrap();
    force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &c).await;
    lists_a_prefix_literally_in_name_order(&a, &b).await;
    database.drop_table(&table).await;
}

/// Node A holds a lock; the acquisition an operator read frees it at once for node B, and
/// only it: A's handle can neither release nor extend B's lock, the old id no longer frees
/// anything, nor does one of a free or expired lock or of a name never used. A malformed id is
/// an error that names the expected shape, and changes nothing. The nodes are separate provider
/// instances on the same table.
pub async fn force_unlock_frees_exactly_the_acquisition_it_names(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
    node_c: &dyn LockProvider,
    admin: &dyn LockAdmin,
) {
    let fencing = node_a.capabilities().fencing;
    let a = lock(node_a, "stuck", MINUTE).await.unwrap();
    let seen = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_eq!(seen.state, LockState::Held);

    let parts = seen.acquisition.as_str().split('/').count();
    assert_eq!(parts, if fencing { 3 } else { 2 }, "{}", seen.acquisition);
    for malformed in [
        "garbage".to_owned(),
        format!("{}/x", seen.acquisition),
        seen.acquisition.as_str().replacen('/', "/%zz", 1),
    ] {
        let error = admin
            .force_unlock("stuck", &AcquisitionId::new(malformed.clone()))
            .await
            .unwrap_err();
        match &error {
            // Refused before anything was sent: the caller's mistake, not the backend's.
            LockError::InvalidRequest {
                operation: Operation::ForceUnlock,
                name,
                message,
                ..
            } => {
                assert_eq!(name, "stuck");
                assert!(message.contains("<locked_by>/<locked_at>"), "{message}");
                assert!(message.contains("nothing was changed"), "{message}");
            }
            other => panic!("{malformed}: expected InvalidRequest of ForceUnlock, got {other:?}"),
        }
    }
    let unchanged = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_eq!(
        stable(&unchanged),
        stable(&seen),
        "malformed ids changed nothing"
    );

    assert!(
        admin
            .force_unlock("stuck", &seen.acquisition)
            .await
            .unwrap()
    );
    let freed = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_eq!(freed.state, LockState::Free, "{freed:?}");
    assert_eq!(
        freed.locked_by, seen.locked_by,
        "the row stays, naming the last holder"
    );

    let b = lock(node_b, "stuck", MINUTE)
        .await
        .expect("free for another node at once");
    assert_eq!(
        b.fencing_token(),
        a.fencing_token().map(|token| token + 1),
        "the fencing counter kept counting"
    );
    assert!(
        !a.extend(MINUTE).await.unwrap(),
        "A's extend must not touch B's lock"
    );
    assert!(
        !a.unlock().await.unwrap(),
        "A's release must not touch B's lock"
    );
    assert!(
        lock(node_c, "stuck", MINUTE).await.is_none(),
        "B still holds it"
    );
    assert!(
        !admin
            .force_unlock("stuck", &seen.acquisition)
            .await
            .unwrap(),
        "the old acquisition no longer holds it"
    );
    assert!(
        lock(node_c, "stuck", MINUTE).await.is_none(),
        "B still holds it"
    );

    let b_seen = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_ne!(b_seen.acquisition, seen.acquisition);
    assert!(b.unlock().await.unwrap());
    assert!(
        !admin
            .force_unlock("stuck", &b_seen.acquisition)
            .await
            .unwrap(),
        "a free lock is not freed again"
    );

    let short = lock(node_a, "short", Duration::from_millis(300))
        .await
        .unwrap();
    let short_seen = admin.inspect_lock("short").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        admin.inspect_lock("short").await.unwrap().unwrap().state,
        LockState::Free,
        "expired"
    );
    assert!(
        !admin
            .force_unlock("short", &short_seen.acquisition)
            .await
            .unwrap()
    );
    assert!(!short.unlock().await.unwrap());
    assert!(
        !admin
            .force_unlock("never-used", &seen.acquisition)
            .await
            .unwrap()
    );
}

/// A row written as Java ShedLock writes it (the host name in `locked_by`) lists with that
/// holder and its `lock_until`, and its id frees it; the same host's next acquisition (another
/// `locked_at`) makes the old id stale. On new tables with and without the fencing column.
pub async fn a_java_row_lists_and_is_freed_by_its_own_acquisition_only<D: TestDatabase>(
    database: &D,
) {
    let pool = database.pool().await;
    for fencing in [true, false] {
        let table = database.new_table("admin_java");
        let node = database.node(&table, fencing).await;
        a_java_row_lists_and_is_freed_by_its_own_acquisition_only_on::<D::Kit>(
            &node, &node, &pool, &table,
        )
        .await;
        database.drop_table(&table).await;
    }
}

/// The checks of [`a_java_row_lists_and_is_freed_by_its_own_acquisition_only`] on `table`, whose
/// rows `K` writes through `pool` as Java does.
async fn a_java_row_lists_and_is_freed_by_its_own_acquisition_only_on<K: PlantRecords>(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
    pool: &Pool<DatabaseOf<K>>,
    table: &str,
) {
    let now = SystemTime::now();
    let first = PlantedRecord {
        name: "java-job".to_owned(),
        lock_until: now + Duration::from_secs(3600),
        locked_at: now - Duration::from_secs(2),
        locked_by: "java-host".to_owned(),
    };
    K::write_record(pool, table, &first).await.unwrap();
    let listed = list_all(admin, "java-", 10).await;
    assert_eq!(names(&listed), ["java-job"]);
    let seen = &listed[0];
    assert_eq!(seen.state, LockState::Held);
    assert_eq!(seen.locked_by.as_deref(), Some("java-host"));
    assert_eq!(
        seen.fencing_token, None,
        "no Rust acquisition wrote a token"
    );
    let until = seen.held_until.unwrap();
    assert!(
        until
            .duration_since(first.lock_until)
            .unwrap_or_else(|e| e.duration())
            <= Duration::from_millis(1),
        "held_until {until:?} is the planted lock_until {:?}",
        first.lock_until
    );
    assert!(
        lock(node, "java-job", MINUTE).await.is_none(),
        "Java holds it"
    );

    let second = PlantedRecord {
        locked_at: now - Duration::from_secs(1),
        ..first.clone()
    };
    K::write_record(pool, table, &second).await.unwrap();
    assert!(
        !admin
            .force_unlock("java-job", &seen.acquisition)
            .await
            .unwrap(),
        "the same host's next acquisition is another acquisition"
    );
    assert!(lock(node, "java-job", MINUTE).await.is_none(), "still held");
    let current = admin.inspect_lock("java-job").await.unwrap().unwrap();
    assert_ne!(current.acquisition, seen.acquisition);
    assert!(
        admin
            .force_unlock("java-job", &current.acquisition)
            .await
            .unwrap()
    );
    let taken = lock(node, "java-job", MINUTE).await.expect("freed");
    assert!(taken.unlock().await.unwrap());
}

/// 1,000 names written as another program would (held for an hour by `bulk-host`), next to a
/// lock the node holds, list in pages of 100: ten pages, each name once, in order, quickly.
pub async fn a_thousand_names_list_in_ten_pages_of_a_hundred<D: TestDatabase>(database: &D) {
    let table = database.new_table("admin_scale");
    let node = database.node(&table, true).await;
    let expected: Vec<String> = (1..=1000).map(|n| format!("bulk-{n:04}")).collect();
    let (now, in_an_hour) = (D::NOW, D::IN_AN_HOUR);
    let rows: Vec<String> = expected
        .iter()
        .map(|name| format!("('{name}', {in_an_hour}, {now}, 'bulk-host')"))
        .collect();
    database
        .exec(&format!(
            "INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES {}",
            rows.join(", ")
        ))
        .await;
    assert!(lock(&node, "other", MINUTE).await.is_some());

    let started = Instant::now();
    let (listed, page_count) = pages(&node, "bulk-", 100).await;
    assert_eq!(page_count, 10);
    assert_eq!(listed, expected);
    assert_eq!(names(&list_all(&node, "bulk-", 100).await), expected);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    database.drop_table(&table).await;
}

/// A client-time node judges locks by its own clock, as its lock statements do: a lock it holds
/// for a minute is held with about a minute left, yet free to a node an hour ahead, whose
/// force-unlock then finds nothing held; the node's own force-unlock frees it.
pub async fn client_time_admin_judges_by_the_nodes_clock<D: TestDatabase>(database: &D) {
    let table = database.new_table("admin_client");
    database.node(&table, true).await;
    let node = &SqlLockProvider::<D::Backend>::builder()
        .table_name(&table)
        .time_source(TimeSource::Client)
        .connect(database.url())
        .await
        .unwrap();
    let held = lock(node, "client", MINUTE).await.unwrap();
    let seen = node.inspect_lock("client").await.unwrap().unwrap();
    assert_eq!(seen.state, LockState::Held);
    let remaining = seen.remaining.unwrap();
    assert!(remaining > MINUTE - Duration::from_secs(5), "{remaining:?}");
    let ahead: Arc<dyn Clock> = Arc::new(SkewedClock::ahead(
        Arc::new(SystemClock),
        Duration::from_secs(3600),
    ));
    let skewed = node.node().with_clock(ahead);
    let judged = skewed.inspect_lock("client").await.unwrap().unwrap();
    assert_eq!(judged.state, LockState::Free, "an hour ahead: {judged:?}");
    assert!(
        !skewed
            .force_unlock("client", &seen.acquisition)
            .await
            .unwrap()
    );
    assert!(
        node.force_unlock("client", &seen.acquisition)
            .await
            .unwrap()
    );
    assert!(!held.unlock().await.unwrap());
    database.drop_table(&table).await;
}

/// `node` holds a lock, and its table goes (`drop_table`): then listing, inspecting and
/// force-unlocking each fail as a [`LockError::Backend`] of their own operation that says the
/// database refused the statement, and never shows `secret`, the password of the node's URL.
pub async fn admin_calls_on_a_dropped_table_fail_naming_their_operation<B: SqlBackend>(
    node: &SqlLockProvider<B>,
    drop_table: impl Future<Output = ()>,
    secret: Option<&str>,
) {
    let held = lock(node, "job", MINUTE).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    drop_table.await;
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
            node.force_unlock("job", &seen.acquisition)
                .await
                .unwrap_err(),
        ),
    ];
    for (expected, error) in errors {
        match &error {
            LockError::Backend {
                operation, message, ..
            } => {
                assert_eq!(*operation, expected);
                assert_eq!(message, "the database refused the statement");
            }
            other => panic!("{expected}: {other:?}"),
        }
        if let Some(secret) = secret {
            let shown = format!("{error} / {error:?}");
            assert!(!shown.contains(secret), "{shown}");
        }
    }
    drop(held);
}

/// [`a_force_unlock_that_waits_gives_up`] on a new table with the fencing column, the row
/// blocked by a transaction of another session that selects it `FOR UPDATE`, and left to the
/// server for [`TestServer::ROW_LOCK_WAIT_OUTLIVES`] once given up.
pub async fn a_force_unlock_that_waits_gives_up_within_the_operation_timeout<D: TestServer>(
    database: &D,
) where
    for<'c> &'c mut <DbOf<D> as Database>::Connection: Executor<'c, Database = DbOf<D>>,
    <DbOf<D> as Database>::Arguments: IntoArguments<DbOf<D>>,
{
    let table = database.new_table("admin_timeout");
    let node = SqlLockProvider::<D::Backend>::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .operation_timeout(Duration::from_millis(800))
        .connect(database.url())
        .await
        .unwrap();
    let other = database.pool().await;
    a_force_unlock_that_waits_gives_up(
        &node,
        async || {
            let mut transaction = other.begin().await.unwrap();
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT 1 FROM {table} WHERE name = 'job' FOR UPDATE"
            )))
            .execute(&mut *transaction)
            .await
            .unwrap();
            transaction
        },
        async |transaction| transaction.rollback().await.unwrap(),
        D::ROW_LOCK_WAIT_OUTLIVES,
    )
    .await;
    database.drop_table(&table).await;
}

/// `node` (whose operation timeout is 800 ms) holds a lock, and another session blocks its row
/// (`block`, undone by `unblock`): a force-unlock that waits for it gives up within the
/// operation timeout, as a lock operation does. Once `lingers` has passed, the time a
/// statement the client stopped waiting for may still wait on the server, and the row is free
/// again, the failed call has changed nothing and the next one frees the lock.
pub async fn a_force_unlock_that_waits_gives_up<B: SqlBackend, Blocked>(
    node: &SqlLockProvider<B>,
    block: impl AsyncFnOnce() -> Blocked,
    unblock: impl AsyncFnOnce(Blocked),
    lingers: Duration,
) {
    let held = lock(node, "job", MINUTE).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    let blocked = block().await;

    let started = Instant::now();
    let error = node
        .force_unlock("job", &seen.acquisition)
        .await
        .unwrap_err();
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(3), "{waited:?}");
    match &error {
        LockError::Backend { operation, .. } | LockError::Timeout { operation, .. } => {
            assert_eq!(*operation, Operation::ForceUnlock, "{error}");
        }
        other => panic!("{other:?}"),
    }
    tokio::time::sleep(lingers).await;
    unblock(blocked).await;
    assert_eq!(
        node.inspect_lock("job").await.unwrap().unwrap().state,
        LockState::Held,
        "the failed force-unlock changed nothing"
    );
    assert!(node.force_unlock("job", &seen.acquisition).await.unwrap());
    assert!(!held.unlock().await.unwrap());
}
