//! What every SQL provider's tests need: the server from the environment, table names of
//! their own so tests run in parallel and again on a persistent database, and short ways to
//! run SQL and take locks; the checks every provider's tests run on their own nodes, with the
//! SQL that differs per database given through [`StoredRows`], [`JavaShedLock`] and
//! [`NewStorage`]; and whole tests on a [`TestDatabase`] or [`TestServer`], which each
//! provider's tests declare with [`sql_provider_tests!`](crate::sql_provider_tests).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shedlock_core::{
    Acquisition, Clock, ErrorKind, LockAdmin, LockConfiguration, LockError, LockHandle,
    LockProvider, LockState, Operation, SystemClock, TimeSource, raw::SkewedClock,
};
use shedlock_sql::{Column, SqlBackend, SqlLockProvider, SqlLockProviderBuilder};
use sqlx::pool::PoolOptions;
use sqlx::{Database, Executor, IntoArguments, Pool};

use super::test_database::{DbOf, HOLDER, TestDatabase, TestServer};

/// A pool of our own for setup and inspection SQL.
pub async fn pool<DB: Database>(url: &str) -> Pool<DB> {
    PoolOptions::<DB>::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to the test server: {e}"))
}

/// A table name no other test or run uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Runs SQL built by the test itself.
pub async fn exec<DB: Database>(pool: &Pool<DB>, sql: &str)
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A lock configuration, unwrapped.
pub fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

/// Tries to lock and returns the handle, or `None` when someone else holds it.
pub async fn lock(
    provider: &dyn LockProvider,
    name: &str,
    at_most: Duration,
) -> Option<Box<dyn LockHandle>> {
    match provider
        .try_lock(&config(name, at_most, Duration::ZERO))
        .await
        .unwrap()
    {
        Acquisition::Acquired(handle) => Some(handle),
        Acquisition::NotAcquired(_) => None,
    }
}

/// How long a test lock is held when the test does not wait for it to expire.
const MINUTE: Duration = Duration::from_secs(60);

/// Races `nodes` for the first acquire of five new names: each round, exactly one wins.
pub async fn exactly_one_racing_node_acquires(nodes: &[Arc<dyn LockProvider>]) {
    for round in 0..5 {
        let name = format!("race-{round}");
        let tasks: Vec<_> = nodes
            .iter()
            .map(|node| {
                let (node, name) = (node.clone(), name.clone());
                tokio::spawn(async move { lock(&*node, &name, MINUTE).await })
            })
            .collect();
        let mut acquired = 0;
        for task in tasks {
            if task.await.unwrap().is_some() {
                acquired += 1;
            }
        }
        assert_eq!(
            acquired,
            1,
            "round {round}: exactly one of {} nodes",
            nodes.len()
        );
    }
}

/// Eight nodes of one provider race for the first acquire of five new names: each round,
/// exactly one wins.
pub async fn racing_first_acquires_of_a_new_name_let_exactly_one_in<D: TestDatabase>(database: &D) {
    let table = database.new_table("race");
    let first = database.node(&table, false).await;
    let nodes: Vec<Arc<dyn LockProvider>> = (0..8).map(|_| Arc::new(first.node()) as _).collect();
    exactly_one_racing_node_acquires(&nodes).await;
    database.drop_table(&table).await;
}

/// A release keeps the lock until `lock_at_least_for` has passed, and an extend moves
/// `lock_until` forward, as another node of the provider sees it.
pub async fn release_keeps_the_lock_until_at_least_and_extend_moves_it<D: TestDatabase>(
    database: &D,
) {
    let table = database.new_table("times");
    let node_a = database.node(&table, false).await;
    let node_b = &node_a.node();
    let held = node_a
        .try_lock(&config("at-least", MINUTE, Duration::from_millis(600)))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let released_at = Instant::now();
    assert!(held.unlock().await.unwrap());
    assert!(
        lock(node_b, "at-least", MINUTE).await.is_none(),
        "still within at-least"
    );
    tokio::time::sleep(
        Duration::from_millis(600).saturating_sub(released_at.elapsed())
            + Duration::from_millis(150),
    )
    .await;
    let b = lock(node_b, "at-least", Duration::from_millis(300))
        .await
        .expect("free once at-least has passed");

    // Extend: B holds for 300 ms, extends to 1 min, so A still cannot take it after 500 ms.
    assert!(b.extend(MINUTE).await.unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        lock(&node_a, "at-least", MINUTE).await.is_none(),
        "extended"
    );
    assert!(b.unlock().await.unwrap());
    database.drop_table(&table).await;
}

/// A node's lock expires and another node of the provider, with the same holder name, takes it:
/// see [`an_expired_holder_cannot_touch_the_next_holders_lock`].
pub async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock<D: TestDatabase>(
    database: &D,
) {
    let table = database.new_table("stale");
    let node_a = database.node(&table, false).await;
    let node_b = node_a.node().with_holder(HOLDER);
    an_expired_holder_cannot_touch_the_next_holders_lock(&node_a, &node_b).await;
    database.drop_table(&table).await;
}

/// `node_a`'s lock expires and `node_b` takes it: `node_a`'s stale handle can neither extend
/// nor release `node_b`'s lock. Give both nodes the same holder name: ShedLock would confuse
/// the two, the per-acquisition id must not.
pub async fn an_expired_holder_cannot_touch_the_next_holders_lock(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
) {
    let stale = lock(node_a, "job", Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    let current = lock(node_b, "job", MINUTE)
        .await
        .expect("expired, so B takes it");
    assert!(
        !stale.extend(MINUTE).await.unwrap(),
        "stale extend must not touch B's lock"
    );
    assert!(
        !stale.unlock().await.unwrap(),
        "stale release must not touch B's lock"
    );
    assert!(
        lock(node_a, "job", MINUTE).await.is_none(),
        "B still holds it"
    );
    assert!(current.unlock().await.unwrap());
}

/// A lock row read back by a test, in numbers every database can give.
pub struct StoredRow {
    /// `lock_until - locked_at`, in milliseconds.
    pub held_ms: f64,
    /// Who holds it: the holder name, `#`, the acquisition's id.
    pub locked_by: String,
    /// `locked_at` minus the database's UTC now, in seconds: near 0 for a row just written in
    /// UTC, about +3600 for one written by a node whose clock is an hour ahead.
    pub locked_at_from_now: f64,
}

/// Reads one lock table's rows back; the SQL differs per database.
#[async_trait::async_trait]
pub trait StoredRows: Sync {
    /// The row of lock `name`, if there is one.
    async fn row(&self, name: &str) -> Option<StoredRow>;
    /// How many rows the table has.
    async fn count(&self) -> i64;
}

/// The first acquire writes the row (held for at-most from a UTC `locked_at`, the holder in
/// `locked_by`), a held lock is refused without touching the row, a release frees it once,
/// and the next holder reuses the row. `node_a`'s holder is `rust-node`, `node_b`'s
/// `other-node`; both are on the table `rows` reads, which has no fencing column.
pub async fn acquire_writes_the_row_excludes_others_and_releases(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
    rows: &dyn StoredRows,
) {
    let held = lock(node_a, "job", MINUTE).await.expect("first acquire");
    let row = rows.row("job").await.expect("row written");
    assert!(
        (row.held_ms - 60_000.0).abs() < 1.0,
        "lock_until - locked_at = {} ms",
        row.held_ms
    );
    assert!(row.locked_by.starts_with("rust-node#"), "{}", row.locked_by);
    assert!(
        row.locked_at_from_now.abs() < 5.0,
        "locked_at is UTC, {}s from now",
        row.locked_at_from_now
    );
    assert!(held.fencing_token().is_none());

    // Held: the acquire leaves the row alone and reports "not acquired", every time.
    for _ in 0..3 {
        assert!(lock(node_b, "job", MINUTE).await.is_none(), "held by A");
    }
    assert!(
        lock(node_a, "job", MINUTE).await.is_none(),
        "not re-entrant at this level"
    );
    let still = rows.row("job").await.unwrap().locked_by;
    assert_eq!(still, row.locked_by, "the refused acquires changed nothing");
    assert!(held.unlock().await.unwrap(), "released");
    assert!(
        !held.unlock().await.unwrap(),
        "a second release changes nothing"
    );
    let again = lock(node_b, "job", MINUTE)
        .await
        .expect("free after release");
    let locked_by = rows.row("job").await.unwrap().locked_by;
    assert!(locked_by.starts_with("other-node#"), "{locked_by}");
    assert!(again.unlock().await.unwrap());
    assert_eq!(rows.count().await, 1, "rows are kept, never duplicated");
}

/// [`acquire_writes_the_row_excludes_others_and_releases`] on a new table, node B another node
/// of node A's provider.
pub async fn one_statement_acquire_creates_the_row_excludes_others_and_releases<D: TestDatabase>(
    database: &D,
) {
    let table = database.new_table("basic");
    let node_a = database.node(&table, false).await;
    let node_b = node_a.node().with_holder("other-node");
    let rows = database.rows(&table).await;
    acquire_writes_the_row_excludes_others_and_releases(&node_a, &node_b, &*rows).await;
    database.drop_table(&table).await;
}

/// On a table whose name column is `VARCHAR(10)`: the limit comes from the catalog, not a
/// constant; a longer name is refused before anything is written; ten multi-byte characters
/// fit, as the limit counts characters. `rows` reads that table.
async fn a_narrow_name_column_refuses_longer_names_before_writing(
    provider: &dyn LockProvider,
    rows: &dyn StoredRows,
) {
    assert_eq!(provider.capabilities().max_name_chars, Some(10));
    let error = provider
        .try_lock(&config("abcdefghijk", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    match &error {
        LockError::InvalidName { name, rule, .. } => {
            assert_eq!(name, "abcdefghijk");
            assert!(
                rule.contains("11 characters") && rule.contains("limit is 10"),
                "{rule}"
            );
        }
        other => panic!("expected InvalidName, got {other:?}"),
    }
    assert!(
        lock(provider, "ääääääääää", MINUTE).await.is_some(),
        "10 characters"
    );
    assert_eq!(rows.count().await, 1, "only the accepted name was written");
}

/// On a table made with `narrow_columns`, whose name column is `VARCHAR(10)`,
/// [`a_narrow_name_column_refuses_longer_names_before_writing`], and the names the database
/// cannot store are refused as names; on ShedLock's own table,
/// [`shedlocks_name_column_takes_64_characters`].
pub async fn names_longer_than_the_column_are_refused_before_anything_is_written<
    D: TestDatabase,
>(
    database: &D,
    narrow_columns: &str,
) {
    let narrow = database.new_table("len");
    database
        .exec(&format!("CREATE TABLE {narrow} ({narrow_columns})"))
        .await;
    let provider = SqlLockProvider::<D::Backend>::builder()
        .table_name(&narrow)
        .build(database.pool().await)
        .await
        .unwrap();
    a_narrow_name_column_refuses_longer_names_before_writing(
        &provider,
        &*database.rows(&narrow).await,
    )
    .await;
    for name in D::UNSTORABLE_NAMES {
        let refused = provider
            .try_lock(&config(name, MINUTE, Duration::ZERO))
            .await;
        assert!(
            matches!(refused, Err(LockError::InvalidName { .. })),
            "{name:?}: {refused:?}"
        );
    }

    let shedlocks = database.new_table("len64");
    let shedlock = database.node(&shedlocks, false).await;
    shedlocks_name_column_takes_64_characters(&shedlock, &*database.rows(&shedlocks).await).await;
    database.drop_table(&narrow).await;
    database.drop_table(&shedlocks).await;
}

/// Each table made with the columns of a case (a column of the wrong type, no key on the name)
/// is refused by the provider's checks, with an error that says each of the case's words.
pub async fn tables_of_the_wrong_shape_are_refused<D: TestDatabase>(
    database: &D,
    cases: &[(&str, &[&str])],
) {
    for (columns, expected) in cases {
        let table = database.new_table("wrong");
        database
            .exec(&format!("CREATE TABLE {table} ({columns})"))
            .await;
        let error = SqlLockProvider::<D::Backend>::builder()
            .table_name(&table)
            .build(database.pool().await)
            .await
            .unwrap_err()
            .to_string();
        for expected in *expected {
            assert!(error.contains(expected), "{columns}: {error}");
        }
        database.drop_table(&table).await;
    }
}

/// On ShedLock's own table (`name VARCHAR(64)`): 64 characters fit, 65 are refused and not
/// written. `rows` reads that table.
async fn shedlocks_name_column_takes_64_characters(
    provider: &dyn LockProvider,
    rows: &dyn StoredRows,
) {
    assert_eq!(provider.capabilities().max_name_chars, Some(64));
    assert!(lock(provider, &"n".repeat(64), MINUTE).await.is_some());
    assert!(matches!(
        provider
            .try_lock(&config(&"n".repeat(65), MINUTE, Duration::ZERO))
            .await,
        Err(LockError::InvalidName { .. })
    ));
    assert_eq!(rows.count().await, 1, "only the accepted name was written");
}

/// With the fencing column: four acquisitions alternating between two nodes get the tokens
/// 1, 2, 3 and 4 (each above the last), and the other node is refused while one holds it.
pub async fn fencing_tokens_count_acquisitions(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
) {
    assert!(node_a.capabilities().fencing);
    for expected in 1..=4u64 {
        let (holder, other) = if expected % 2 == 1 {
            (node_a, node_b)
        } else {
            (node_b, node_a)
        };
        let handle = lock(holder, "fenced", MINUTE).await.unwrap();
        assert_eq!(
            handle.fencing_token(),
            Some(expected),
            "tokens count acquisitions"
        );
        assert!(lock(other, "fenced", MINUTE).await.is_none(), "held");
        assert!(handle.unlock().await.unwrap());
    }
}

/// Without the fencing column the provider declares no fencing and hands out no token.
pub async fn no_fencing_tokens_without_the_column(plain: &dyn LockProvider) {
    assert!(!plain.capabilities().fencing);
    let handle = lock(plain, "x", MINUTE).await.unwrap();
    assert!(handle.fencing_token().is_none());
    assert!(handle.unlock().await.unwrap());
}

/// `fencing_column()` is checked where the catalog is read and trusted where it is not: on a
/// table made without the column, `connect` refuses it as a configuration error naming the
/// table and the column, and a provider that reads nothing (`connect_lazy`) hands out tokens
/// only when told the column is there. Makes two tables at `url`; gives their names, the one
/// with the column first, for the caller to drop.
pub async fn the_fencing_column_is_checked_by_connect_and_trusted_by_connect_lazy<B: SqlBackend>(
    url: &str,
) -> [String; 2] {
    let (with, without) = (unique("fence_decl"), unique("nofence_decl"));
    let fenced = SqlLockProvider::<B>::builder()
        .table_name(&with)
        .create_table_with_fencing_if_missing()
        .fencing_column()
        .connect(url)
        .await
        .unwrap();
    assert!(fenced.has_fencing());
    let plain = SqlLockProvider::<B>::builder()
        .table_name(&without)
        .create_table_if_missing()
        .connect(url)
        .await
        .unwrap();
    assert!(!plain.has_fencing());
    let error = SqlLockProvider::<B>::builder()
        .table_name(&without)
        .fencing_column()
        .connect(url)
        .await
        .expect_err("a table without the fencing column was accepted as having it");
    assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    let message = error.to_string();
    assert!(
        message.contains(&format!("{without} has no fencing column fencing_token")),
        "{message}"
    );
    for (table, declared) in [(&with, true), (&without, false)] {
        let builder = SqlLockProvider::<B>::builder().table_name(table);
        let builder = if declared {
            builder.fencing_column()
        } else {
            builder
        };
        let lazy = builder.connect_lazy(url).await.unwrap();
        assert_eq!(lazy.has_fencing(), declared, "{table}");
        let handle = lock(&lazy, "lazy", MINUTE).await.unwrap();
        assert_eq!(handle.fencing_token().is_some(), declared, "{table}");
        assert!(handle.unlock().await.unwrap());
    }
    [with, without]
}

/// Renames ShedLock's table to `table` and its columns to `lock_name`, `held_until`,
/// `taken_at`, `owner` and `fence`, the same way for every database.
pub fn renamed_table_and_columns<B: SqlBackend>(
    builder: SqlLockProviderBuilder<B>,
    table: &str,
) -> SqlLockProviderBuilder<B> {
    builder
        .table_name(table)
        .column_name(Column::Name, "lock_name")
        .column_name(Column::LockUntil, "held_until")
        .column_name(Column::LockedAt, "taken_at")
        .column_name(Column::LockedBy, "owner")
        .column_name(Column::FencingToken, "fence")
}

/// Two columns given one name (`locked_at` renamed to `lock_until`): the build is refused,
/// naming both columns and the rule, before anything is created (the caller checks its table).
pub async fn a_column_name_given_twice_is_refused_before_anything_is_written<B: SqlBackend>(
    builder: SqlLockProviderBuilder<B>,
    url: &str,
) {
    let error = builder
        .column_name(Column::LockedAt, "lock_until")
        .create_table_if_missing()
        .connect(url)
        .await
        .expect_err("a table whose locked_at and lock_until are one column was accepted");
    let message = error.to_string();
    assert!(
        message.contains(
            "column locked_at (also the name given to column lock_until) \"lock_until\" is not \
             accepted: each column of the lock table needs a name of its own"
        ),
        "{message}"
    );
}

/// Two nodes on a [`renamed_table_and_columns`] table exclude each other, and count fencing
/// tokens in the renamed column when the table has it (`fencing`).
pub async fn renamed_table_and_columns_lock_as_shedlocks_do(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
    fencing: bool,
) {
    let handle = lock(node_a, "job", MINUTE).await.unwrap();
    assert_eq!(handle.fencing_token(), fencing.then_some(1));
    assert!(lock(node_b, "job", MINUTE).await.is_none());
    assert!(handle.unlock().await.unwrap());
    let next = lock(node_b, "job", MINUTE).await.unwrap();
    assert_eq!(next.fencing_token(), fencing.then_some(2));
    assert!(next.unlock().await.unwrap());
}

/// Server time: a node whose clock is an hour ahead still sees `server_time`'s lock as held.
/// Client time: the node's clock is what is written and compared, so a node an hour ahead
/// takes a held lock (the documented skew risk) and writes its own clock into `locked_at`.
pub async fn server_time_ignores_node_clocks_and_client_time_uses_them<D: TestDatabase>(
    database: &D,
) {
    let table = database.new_table("clock");
    let server_time = &database.node(&table, false).await;
    let client_time = &SqlLockProvider::<D::Backend>::builder()
        .table_name(&table)
        .time_source(TimeSource::Client)
        .connect(database.url())
        .await
        .unwrap();
    let rows = database.rows(&table).await;
    let ahead: Arc<dyn Clock> = Arc::new(SkewedClock::ahead(
        Arc::new(SystemClock),
        Duration::from_secs(3600),
    ));

    assert_eq!(server_time.capabilities().time_source, TimeSource::Server);
    let skewed = server_time.node().with_clock(ahead.clone());
    let held = lock(server_time, "server", MINUTE).await.unwrap();
    assert!(
        lock(&skewed, "server", MINUTE).await.is_none(),
        "skew must not matter"
    );
    assert!(held.unlock().await.unwrap());

    assert_eq!(client_time.capabilities().time_source, TimeSource::Client);
    let client_skewed = client_time.node().with_clock(ahead);
    let held = lock(client_time, "client", MINUTE).await.unwrap();
    let age = rows.row("client").await.unwrap().locked_at_from_now;
    assert!(
        age.abs() < 5.0,
        "locked_at is the node's UTC time, {age}s from the database's"
    );
    assert!(
        lock(&client_skewed, "client", MINUTE).await.is_some(),
        "an hour ahead, the client-time node believes the lock expired: the documented skew risk"
    );
    assert!(
        !held.unlock().await.unwrap(),
        "taken over, so not ours to release"
    );
    let ahead_by = rows.row("client").await.unwrap().locked_at_from_now;
    assert!(
        (ahead_by - 3600.0).abs() < 5.0,
        "the skewed node wrote its own clock: {ahead_by}s ahead"
    );
    database.drop_table(&table).await;
}

/// The provider takes connections of its own from the pool it was given: a lock taken while
/// the caller has a transaction open on that pool survives the caller's rollback.
pub async fn lock_statements_run_outside_the_callers_transaction<D: TestDatabase>(database: &D)
where
    for<'c> &'c mut <DbOf<D> as Database>::Connection: Executor<'c, Database = DbOf<D>>,
    <DbOf<D> as Database>::Arguments: IntoArguments<DbOf<D>>,
{
    let table = database.new_table("tx");
    let provider = &SqlLockProvider::<D::Backend>::builder()
        .table_name(&table)
        .create_table_if_missing()
        .build(database.pool().await)
        .await
        .unwrap();
    let pool = provider.pool().expect("the provider was given a pool");
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let held = lock(provider, "job", MINUTE).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(
        lock(&provider.node(), "job", MINUTE).await.is_none(),
        "the lock survived the rollback"
    );
    assert!(held.unlock().await.unwrap());
    database.drop_table(&table).await;
}

/// A table that does not exist is a configuration error that names it and shows the DDL that
/// creates it, and the builder option that would.
pub async fn a_missing_table_is_an_error_that_shows_how_to_create_it<D: TestServer>(database: &D) {
    let table = database.new_table("missing");
    let error = SqlLockProvider::<D::Backend>::builder()
        .table_name(&table)
        .connect(database.url())
        .await
        .unwrap_err();
    assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    let error = error.to_string();
    assert!(
        error.contains(&format!("{table} does not exist")),
        "{error}"
    );
    let quote = D::QUOTE;
    assert!(
        error.contains(&format!("CREATE TABLE IF NOT EXISTS {quote}{table}{quote}")),
        "{error}"
    );
    assert!(error.contains("create_table_if_missing"), "{error}");
}

/// [`a_column_name_given_twice_is_refused_before_anything_is_written`], and no table of the
/// name given was created.
pub async fn a_column_name_given_twice_is_refused_and_no_table_created<D: TestServer>(
    database: &D,
) {
    let table = unique("twice");
    a_column_name_given_twice_is_refused_before_anything_is_written(
        SqlLockProvider::<D::Backend>::builder().table_name(&table),
        &database.url(),
    )
    .await;
    assert!(
        !database.has_table(&table).await,
        "table {table} was created"
    );
}

/// A statement the database refuses (its table was dropped under the provider) fails the
/// acquire, every time, never a silent "not acquired"; the error names the operation and the
/// lock, and the server's words are its cause, said once.
pub async fn errors_on_a_dropped_table_name_the_statement_and_the_acquire_fails_closed<
    D: TestServer,
>(
    database: &D,
) {
    let table = database.new_table("dropped");
    let provider = database.node(&table, false).await;
    database.drop_table(&table).await;
    let error = provider
        .try_lock(&config("job", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("acquire of lock \"job\" failed"), "{text}");
    assert!(
        text.contains("the database refused the statement"),
        "{text}"
    );
    // The server's words are the cause, said once: in `source()`, not again in the message.
    let chain: Vec<String> =
        std::iter::successors(Some(&error as &(dyn std::error::Error + 'static)), |&e| {
            e.source()
        })
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        chain
            .iter()
            .filter(|message| message.contains(D::NO_SUCH_TABLE))
            .count(),
        1,
        "{chain:?}"
    );
    assert!(
        provider
            .try_lock(&config("job", MINUTE, Duration::ZERO))
            .await
            .is_err(),
        "still an error, never a silent NotAcquired"
    );
}

/// A server that refuses the connection, or never answers, is an error within the connect
/// timeout, which shows the URL without its password.
pub async fn an_unreachable_server_is_an_error_within_the_connect_timeout_without_the_password<
    D: TestServer,
>(
    _: &D,
) {
    let [scheme, _] = D::SCHEMES;
    let started = Instant::now();
    let error = SqlLockProvider::<D::Backend>::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect(format!("{scheme}://app:hunter2@127.0.0.1:1/test"))
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
    let text = format!("{error} / {error:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("app:***@127.0.0.1:1"), "{text}");
    assert!(text.contains("cannot connect"), "{text}");

    // A non-routable address never answers: the timeout, not the OS, ends the wait.
    let started = Instant::now();
    let error = SqlLockProvider::<D::Backend>::builder()
        .connect_timeout(Duration::from_secs(1))
        .connect(format!(
            "{scheme}://app:hunter2@10.255.255.1:{}/test",
            D::PORT
        ))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!format!("{error} {error:?}").contains("hunter2"));
}

/// A URL of Redis, of the other SQL server, or with no scheme is refused by its scheme, naming
/// the schemes the provider accepts and never the password; the server's other scheme
/// (`postgresql`, `mariadb`) connects.
pub async fn urls_of_other_backends_are_refused_by_their_scheme_before_connecting<D: TestServer>(
    database: &D,
) {
    let [own, other_name] = D::SCHEMES;
    let other_server = if own == "mysql" { "postgres" } else { "mysql" };
    let port = D::PORT;
    for (url, refused) in [
        (
            "redis://:hunter2@127.0.0.1:6379".to_owned(),
            "the URL's scheme is \"redis\"".to_owned(),
        ),
        (
            format!("{other_server}://app:hunter2@127.0.0.1:{port}/test"),
            format!("the URL's scheme is \"{other_server}\""),
        ),
        (
            format!("app:hunter2@127.0.0.1:{port}/test"),
            "the URL has no scheme".to_owned(),
        ),
    ] {
        let error = SqlLockProvider::<D::Backend>::connect(url.clone())
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(message.contains(&refused), "{url}: {message}");
        assert!(
            message.contains(&format!("accepts {own}://... or {other_name}://...")),
            "{message}"
        );
        assert!(
            !format!("{message} {error:?}").contains("hunter2"),
            "{message}"
        );
    }
    let url = database
        .url()
        .replacen(&format!("{own}://"), &format!("{other_name}://"), 1);
    let provider = tokio::time::timeout(
        Duration::from_secs(30),
        SqlLockProvider::<D::Backend>::builder()
            .create_table_if_missing()
            .connect(url),
    )
    .await
    .expect("connecting took over 30 s");
    provider.unwrap();
}

/// The holder name Java's statements write into `locked_by`.
pub const JAVA_HOST: &str = "java-host";

/// Java ShedLock's statements for one database, as SHEDLOCK-FACTS.md records them, run as
/// plain SQL on one table by the host [`JAVA_HOST`].
#[async_trait::async_trait]
pub trait JavaShedLock: Sync {
    /// JdbcTemplateLockProvider with usingDbTime(): true when it took the lock.
    async fn server_time_lock(&self, name: &str, at_most: Duration) -> bool;
    /// Its server-time unlock, which checks only the host name: how many rows it changed.
    async fn server_time_unlock(&self, name: &str, at_least: Duration) -> u64;
    /// JdbcLockProvider (client time, a JVM in UTC): insert, then the conditional update;
    /// true when it took the lock.
    async fn jdbc_lock(&self, name: &str, at_most: Duration) -> bool;
}

/// Rows written by Java ShedLock's SQL and by `rust` (on the same table as `java`, in server
/// time) honour each other: held locks, releases, at-least and expiry, both ways.
pub async fn rows_written_by_java_shedlock_and_by_rust_honour_each_other(
    rust: &dyn LockProvider,
    java: &dyn JavaShedLock,
) {
    // Java holds the lock (server time): Rust must skip.
    assert!(java.server_time_lock("job", MINUTE).await);
    assert!(
        lock(rust, "job", MINUTE).await.is_none(),
        "Java's lock is honoured"
    );
    // Java releases: Rust takes it.
    assert_eq!(java.server_time_unlock("job", Duration::ZERO).await, 1);
    let rust_held = lock(rust, "job", MINUTE)
        .await
        .expect("free after Java's release");
    // Rust holds it: Java's acquire changes nothing, and Java's unlock (host name only) does
    // not match Rust's per-acquisition owner.
    assert!(
        !java.server_time_lock("job", MINUTE).await,
        "Rust's lock is honoured"
    );
    assert!(
        !java.jdbc_lock("job", MINUTE).await,
        "also by the client-time JDBC provider"
    );
    assert_eq!(
        java.server_time_unlock("job", Duration::ZERO).await,
        0,
        "Java's host-name unlock does not match Rust's owner"
    );
    assert!(rust_held.unlock().await.unwrap());
    // Rust releases with at-least 400 ms: Java must wait for it too.
    let with_at_least = rust
        .try_lock(&config("job2", MINUTE, Duration::from_millis(400)))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert!(with_at_least.unlock().await.unwrap());
    assert!(
        !java.server_time_lock("job2", MINUTE).await,
        "within Rust's at-least"
    );
    tokio::time::sleep(Duration::from_millis(550)).await;
    assert!(
        java.server_time_lock("job2", MINUTE).await,
        "after Rust's at-least"
    );
    assert!(
        java.server_time_lock("job", Duration::from_millis(300))
            .await,
        "free after Rust's release"
    );

    // Java's lock expires by itself: Rust takes it once lock_until has passed, not before.
    assert!(lock(rust, "job", MINUTE).await.is_none());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let taken = lock(rust, "job", MINUTE)
        .await
        .expect("Java's lock expired");
    assert!(taken.unlock().await.unwrap());

    // The client-time JDBC provider's rows (JVM in UTC) are honoured the same way.
    assert!(java.jdbc_lock("jdbc", MINUTE).await, "insert path");
    assert!(lock(rust, "jdbc", MINUTE).await.is_none());
}

/// How far column `lock_until` of a test's table reaches, as the provider's errors say it.
pub struct LockUntilLimit<'a> {
    /// The latest instant it keeps, as time since the Unix epoch.
    pub latest: Duration,
    /// How the errors show that instant: `2038-01-19 03:14:07.999 UTC`.
    pub shown: &'a str,
    /// How the errors name the column and its type: `column lock_until (timestamp(3))`.
    pub column: &'a str,
}

impl LockUntilLimit<'_> {
    /// The `lock_at_most_for` that ends a lock taken now `offset` before the limit.
    fn ending_before(&self, offset: Duration) -> Duration {
        self.latest - since_epoch() - offset
    }

    /// The `lock_at_most_for` that ends a lock taken now `offset` after the limit.
    fn ending_after(&self, offset: Duration) -> Duration {
        self.latest - since_epoch() + offset
    }

    /// Asserts that `error` is the refusal of a `lock_at_most_for` ending past this limit,
    /// for `operation`, said before anything was sent (no client error behind it).
    fn assert_refused(&self, error: &LockError, operation: Operation, past_any_instant: bool) {
        let text = error.to_string();
        assert!(
            matches!(error, LockError::InvalidRequest { operation: op, .. } if *op == operation),
            "{operation}: {error:?}"
        );
        let end = if past_any_instant {
            "would end the lock past "
        } else {
            "would end the lock at "
        };
        for expected in [
            "lock_at_most_for of ",
            end,
            &format!(
                "{}, the latest instant the provider can keep in {}: use a shorter \
                 lock_at_most_for",
                self.shown, self.column
            ),
        ] {
            assert!(text.contains(expected), "{expected:?} missing from {text}");
        }
    }
}

const DAY: Duration = Duration::from_secs(86_400);

fn since_epoch() -> Duration {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
}

/// A `lock_at_most_for` or extend that would end the lock a day past what column `lock_until`
/// can keep (`limit`), or at `Duration::MAX`, is refused with an error naming the limit, before
/// anything is written: no row for a new name, the row of a known name and a held lock
/// unchanged. A lock ending a day inside the limit is taken, extended, read back by `admin`
/// and released, also with `lock_at_least_for` as long as it. `node` (server time, holder
/// `rust-node`), `admin` and `rows` are on one table without a fencing column;
/// `client_time_ahead`, on the same table, is a client-time node whose clock is two days
/// ahead, so a lock ending a day inside the limit by the real clock ends a day past it by its
/// own, and is refused.
async fn locks_ending_past_the_lock_until_columns_limit_are_refused_before_writing(
    node: &dyn LockProvider,
    client_time_ahead: Option<&dyn LockProvider>,
    admin: &dyn LockAdmin,
    rows: &dyn StoredRows,
    limit: &LockUntilLimit<'_>,
) {
    let past = |name| config(name, limit.ending_after(DAY), Duration::ZERO);
    let refused_acquire = |name: &'static str, configuration: LockConfiguration| async move {
        node.try_lock(&configuration)
            .await
            .map(|_| ())
            .expect_err(&format!("{name}: acquired past the limit"))
    };

    // A new name: the insert is never sent, so there is no row; nor the second time, when the
    // name is not known either.
    for _ in 0..2 {
        let error = refused_acquire("new", past("new")).await;
        limit.assert_refused(&error, Operation::Acquire, false);
        assert!(rows.row("new").await.is_none(), "nothing was written");
        let error = refused_acquire("new", config("new", Duration::MAX, Duration::ZERO)).await;
        limit.assert_refused(&error, Operation::Acquire, true);
        assert!(rows.row("new").await.is_none(), "nothing was written");
    }

    // A held lock: an extend past the limit, or by Duration::MAX, leaves it as it was.
    let held = lock(node, "held", MINUTE).await.expect("a minute is fine");
    let before = rows.row("held").await.expect("row written");
    let error = held
        .extend(limit.ending_after(DAY))
        .await
        .expect_err("extended past the limit");
    limit.assert_refused(&error, Operation::Extend, false);
    let error = held
        .extend(Duration::MAX)
        .await
        .expect_err("extended by Duration::MAX");
    limit.assert_refused(&error, Operation::Extend, true);
    let after = rows.row("held").await.expect("row kept");
    assert_eq!(after.locked_by, before.locked_by, "the holder is unchanged");
    assert!(
        (after.held_ms - 60_000.0).abs() < 1.0,
        "lock_until is unchanged: held {} ms",
        after.held_ms
    );
    assert!(
        lock(node, "held", MINUTE).await.is_none(),
        "still held by the same acquisition"
    );
    assert!(held.unlock().await.unwrap(), "and released by it");

    // A known name, free: the take-over is not sent either, and the row stays as released.
    let released = rows.row("held").await.unwrap();
    let error = refused_acquire("held", past("held")).await;
    limit.assert_refused(&error, Operation::Acquire, false);
    let unchanged = rows.row("held").await.unwrap();
    assert_eq!(unchanged.locked_by, released.locked_by);
    assert_eq!(unchanged.held_ms, released.held_ms);

    // A day inside the limit: taken, read back, extended, and released; with
    // lock_at_least_for as long, the release keeps it until then, as it must.
    let inside = limit.ending_before(DAY);
    let long = node
        .try_lock(&config("long", inside, Duration::ZERO))
        .await
        .unwrap()
        .into_handle()
        .expect("a lock a day inside the limit");
    let held_ms = rows.row("long").await.unwrap().held_ms;
    assert!(
        (held_ms - inside.as_secs_f64() * 1000.0).abs() < 10.0,
        "held {held_ms} ms, asked {inside:?}"
    );
    let info = admin
        .inspect_lock("long")
        .await
        .unwrap()
        .expect("the lock reads back");
    assert_eq!(info.state, LockState::Held);
    let held_until = info.held_until.expect("with its lock_until");
    let expected = SystemTime::UNIX_EPOCH + limit.latest - DAY;
    let off = held_until
        .duration_since(expected)
        .unwrap_or_else(|early| early.duration());
    assert!(
        off < MINUTE,
        "{held_until:?} is a day before the limit, {expected:?}"
    );
    // Held so long, it still reads as held to an acquire that finds the row.
    assert!(lock(node, "long", MINUTE).await.is_none(), "held");
    assert!(
        long.extend(limit.ending_before(DAY)).await.unwrap(),
        "extended to a day inside the limit"
    );
    assert!(long.unlock().await.unwrap());
    // A column coarser than the server's clock rounds the release's "now" to its precision,
    // up as often as down (PostgreSQL's TIMESTAMPTZ(3)), which the declared precision allows.
    tokio::time::sleep(node.capabilities().time_precision).await;
    assert!(lock(node, "long", MINUTE).await.is_some(), "released");

    let at_least = limit.ending_before(DAY);
    let kept = node
        .try_lock(&config("kept", at_least, at_least))
        .await
        .unwrap()
        .into_handle()
        .expect("a lock a day inside the limit");
    assert!(kept.unlock().await.unwrap(), "released");
    assert!(
        lock(node, "kept", MINUTE).await.is_none(),
        "kept until lock_at_least_for has passed"
    );
    let held_ms = rows.row("kept").await.unwrap().held_ms;
    assert!(
        (held_ms - at_least.as_secs_f64() * 1000.0).abs() < 10.0,
        "released to locked_at + lock_at_least_for: held {held_ms} ms, asked {at_least:?}"
    );

    // Client time: the node's own clock decides where the lock would end.
    if let Some(ahead) = client_time_ahead {
        assert_eq!(ahead.capabilities().time_source, TimeSource::Client);
        let error = ahead
            .try_lock(&config("ahead", limit.ending_before(DAY), Duration::ZERO))
            .await
            .map(|_| ())
            .expect_err("a day inside by the real clock, a day past by the node's");
        limit.assert_refused(&error, Operation::Acquire, false);
        assert!(rows.row("ahead").await.is_none(), "nothing was written");
        let ahead_held = lock(ahead, "ahead", MINUTE)
            .await
            .expect("a minute is fine");
        let error = ahead_held
            .extend(limit.ending_before(DAY))
            .await
            .expect_err("extended past the limit by the node's clock");
        limit.assert_refused(&error, Operation::Extend, false);
        assert!(ahead_held.unlock().await.unwrap());
    }
}

/// [`locks_ending_past_the_lock_until_columns_limit_are_refused_before_writing`] on three nodes,
/// each with a client-time node two days ahead on its table, and `limits` the limit each must
/// keep to: the first on a table the provider makes, the second on that table without
/// connecting (so trusting the table to be the one it makes), the third on a table made here
/// whose times are of type `hand_made_times`.
pub async fn locks_ending_past_the_lock_until_columns_limit_are_refused_on_every_table<
    D: TestDatabase,
>(
    database: &D,
    hand_made_times: &str,
    limits: [LockUntilLimit<'_>; 3],
) {
    let made = database.new_table("limit_made");
    let by_hand = database.new_table("limit_by_hand");
    database
        .exec(&format!(
            "CREATE TABLE {by_hand} (name VARCHAR(64) PRIMARY KEY, \
             lock_until {hand_made_times} NOT NULL, locked_at {hand_made_times} NOT NULL, \
             locked_by VARCHAR(255) NOT NULL)"
        ))
        .await;
    let checked = database.node(&made, false).await;
    let unchecked = database
        .builder(&made, HOLDER)
        .connect_lazy(database.url())
        .await
        .unwrap();
    let hand_made = database.node_on_existing(&by_hand, HOLDER).await;
    let [made_limit, unchecked_limit, hand_made_limit] = limits;
    for (table, provider, limit) in [
        (&made, checked, made_limit),
        (&made, unchecked, unchecked_limit),
        (&by_hand, hand_made, hand_made_limit),
    ] {
        database.exec(&format!("DELETE FROM {table}")).await;
        let ahead = SqlLockProvider::<D::Backend>::builder()
            .table_name(table)
            .time_source(TimeSource::Client)
            .clock(Arc::new(SkewedClock::ahead(Arc::new(SystemClock), 2 * DAY)))
            .connect(database.url())
            .await
            .unwrap();
        locks_ending_past_the_lock_until_columns_limit_are_refused_before_writing(
            &provider,
            Some(&ahead),
            &provider,
            &*database.rows(table).await,
            &limit,
        )
        .await;
    }
    database.drop_table(&made).await;
    database.drop_table(&by_hand).await;
}

/// New storage for one round of [`sixteen_nodes_create_the_table`]: made before the round,
/// read and removed after it.
// The futures are awaited where they are made, never sent to another task: no `Send` bound.
pub trait NewStorage {
    /// Makes new, empty storage (a schema, a database, a file) and gives the URL that reaches
    /// it with the default table name.
    fn make(&self) -> impl Future<Output = String>;
    /// How many columns the table `shedlock` has there.
    fn columns(&self, url: &str) -> impl Future<Output = i64>;
    /// Removes it.
    fn remove(&self, url: &str) -> impl Future<Output = ()>;
}

/// A new deployment, ten times: 16 replicas start at the same instant on new storage that has
/// no lock table yet, each told to create it (every other round with the fencing column). All
/// must start, share the table's locks, and leave the table the round asked for.
pub async fn sixteen_nodes_create_the_table<B: SqlBackend + 'static>(storage: impl NewStorage) {
    use shedlock_conformance::{FIRST_USE_NODES, check_first_use};
    for round in 0..10 {
        let url = storage.make().await;
        let fencing = round % 2 == 1;
        let verdict = check_first_use(FIRST_USE_NODES, |index| {
            let builder = SqlLockProvider::<B>::builder().holder(format!("node-{index}"));
            let builder = if fencing {
                builder.create_table_with_fencing_if_missing()
            } else {
                builder.create_table_if_missing()
            };
            builder.connect(url.clone())
        })
        .await;
        let columns = storage.columns(&url).await;
        storage.remove(&url).await;
        verdict.unwrap_or_else(|failure| panic!("round {round} (fencing {fencing}): {failure}"));
        assert_eq!(columns, if fencing { 5 } else { 4 }, "round {round}");
    }
}
