//! The operator's view ([`LockAdmin`]) of the PostgreSQL provider against a real server: listing,
//! inspecting and force-unlocking on `TIMESTAMP` and `TIMESTAMPTZ` tables, with and without the
//! fencing column, renamed, in client time, and rows Java ShedLock wrote.

use std::time::{Duration, Instant};

use shedlock_core::{LockAdmin, LockError, Operation, PageRequest, TimeSource};
use shedlock_postgres::PostgresLockProvider;
use shedlock_test_support::sql::admin_tests;
use shedlock_test_support::sql::provider_tests::{self as shared, exec, lock, unique};

use crate::planted_records::PostgresKit;

const HOLDER: &str = "rust-node";

fn url() -> String {
    shared::url_from_env(
        "SHEDLOCK_TEST_POSTGRES_URL",
        "a PostgreSQL server",
        "postgres://postgres@127.0.0.1:5432/test",
    )
}

async fn pool() -> sqlx::PgPool {
    shared::pool(&url()).await
}

/// A node with its own connections on `table`, created with the fencing column if missing.
async fn node(table: &str) -> PostgresLockProvider {
    PostgresLockProvider::builder()
        .table_name(table)
        .create_table_with_fencing_if_missing()
        .holder(HOLDER)
        .connect(url())
        .await
        .unwrap()
}

/// A node on `table` as it is, without creating it.
async fn node_on_existing(table: &str, holder: &str) -> PostgresLockProvider {
    PostgresLockProvider::builder()
        .table_name(table)
        .holder(holder)
        .connect(url())
        .await
        .unwrap()
}

async fn drop_table(table: &str) {
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn listing_pages_through_a_prefix_literally_in_name_order() {
    let table = unique("pg_admin_list");
    let node = node(&table).await;
    admin_tests::listing_pages_through_a_prefix_literally_in_name_order(&node, &node).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn held_released_and_at_least_locks_show_their_state() {
    let table = unique("pg_admin_states");
    let node = node(&table).await;
    admin_tests::held_released_and_at_least_locks_show_their_state(&node, &node, HOLDER).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn inspect_matches_the_listing_and_refuses_names_locks_refuse() {
    let table = unique("pg_admin_inspect");
    let node = node(&table).await;
    admin_tests::inspect_matches_the_listing_and_refuses_names_locks_refuse(&node, &node).await;
    // PostgreSQL text cannot hold NUL: refused as the lock operations refuse it.
    let nul = node.inspect_lock("a\0b").await;
    assert!(matches!(nul, Err(LockError::InvalidName { .. })), "{nul:?}");
    drop_table(&table).await;
}

#[tokio::test]
async fn force_unlock_frees_exactly_the_acquisition_it_names_with_fencing() {
    let table = unique("pg_admin_force");
    let (a, b, c) = (
        node(&table).await,
        node_on_existing(&table, "node-b").await,
        node_on_existing(&table, "node-c").await,
    );
    assert!(a.has_fencing());
    admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &a).await;
    drop_table(&table).await;
}

/// `TIMESTAMPTZ` columns hold instants: `locked_at` goes into the id and back as one.
#[tokio::test]
async fn force_unlock_on_a_timestamptz_table_without_fencing() {
    let table = unique("pg_admin_tz");
    exec(
        &pool().await,
        &format!(
            "CREATE TABLE {table} (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMPTZ(6) NOT NULL, \
             locked_at TIMESTAMPTZ(6) NOT NULL, locked_by VARCHAR(255) NOT NULL)"
        ),
    )
    .await;
    let (a, b, c) = (
        node_on_existing(&table, HOLDER).await,
        node_on_existing(&table, "node-b").await,
        node_on_existing(&table, "node-c").await,
    );
    assert!(!a.has_fencing());
    admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &b).await;
    admin_tests::held_released_and_at_least_locks_show_their_state(&a, &c, HOLDER).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn the_configured_table_and_column_names_are_used() {
    let table = unique("pg_admin_renamed");
    let renamed = |holder: &str| {
        shared::renamed_table_and_columns(PostgresLockProvider::builder(), &table).holder(holder)
    };
    let a = renamed(HOLDER)
        .create_table_with_fencing_if_missing()
        .connect(url())
        .await
        .unwrap();
    let b = renamed("node-b").connect(url()).await.unwrap();
    let c = renamed("node-c").connect(url()).await.unwrap();
    admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &c).await;
    admin_tests::listing_pages_through_a_prefix_literally_in_name_order(&a, &b).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn a_java_row_lists_and_is_freed_by_its_own_acquisition_only() {
    let pool = pool().await;
    for fencing in [true, false] {
        let table = unique("pg_admin_java");
        let builder = PostgresLockProvider::builder().table_name(&table);
        let node = if fencing {
            builder.create_table_with_fencing_if_missing()
        } else {
            builder.create_table_if_missing()
        }
        .connect(url())
        .await
        .unwrap();
        admin_tests::a_java_row_lists_and_is_freed_by_its_own_acquisition_only::<PostgresKit>(
            &node, &node, &pool, &table,
        )
        .await;
        drop_table(&table).await;
    }
}

#[tokio::test]
async fn a_thousand_names_list_in_ten_pages_of_a_hundred() {
    let table = unique("pg_admin_scale");
    let node = node(&table).await;
    exec(
        &pool().await,
        &format!(
            "INSERT INTO {table} (name, lock_until, locked_at, locked_by) \
             SELECT 'bulk-' || lpad(g::text, 4, '0'), \
             timezone('utc', CURRENT_TIMESTAMP) + interval '1 hour', \
             timezone('utc', CURRENT_TIMESTAMP), 'bulk-host' FROM generate_series(1, 1000) g"
        ),
    )
    .await;
    assert!(
        lock(&node, "other", Duration::from_secs(60))
            .await
            .is_some()
    );
    let expected: Vec<String> = (1..=1000).map(|n| format!("bulk-{n:04}")).collect();
    admin_tests::a_thousand_names_list_in_ten_pages_of_a_hundred(&node, "bulk-", &expected).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn client_time_admin_judges_by_the_nodes_clock() {
    let table = unique("pg_admin_client");
    node(&table).await;
    let client = PostgresLockProvider::builder()
        .table_name(&table)
        .time_source(TimeSource::Client)
        .connect(url())
        .await
        .unwrap();
    admin_tests::client_time_admin_judges_by_the_nodes_clock(&client).await;
    drop_table(&table).await;
}

/// A failed call is a [`LockError`] for its operation, which names the statement's failure but
/// never the password of the URL.
#[tokio::test]
async fn admin_errors_name_the_operation_and_never_the_password() {
    let table = unique("pg_admin_errors");
    // The test server trusts every connection, so any password connects.
    let with_password = url().replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    assert!(with_password.contains("s3cr3t-pw"), "{with_password}");
    let node = PostgresLockProvider::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .connect(with_password)
        .await
        .unwrap();
    let held = lock(&node, "job", Duration::from_secs(60)).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    drop_table(&table).await;
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
        let shown = format!("{error} / {error:?}");
        assert!(!shown.contains("s3cr3t-pw"), "{shown}");
    }
    drop(held);
}

/// A force-unlock that waits (here on a row another transaction is changing) gives up after
/// the provider's operation timeout, as a lock operation does.
#[tokio::test]
async fn a_force_unlock_that_waits_gives_up_within_the_operation_timeout() {
    let table = unique("pg_admin_timeout");
    let node = PostgresLockProvider::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .operation_timeout(Duration::from_millis(800))
        .connect(url())
        .await
        .unwrap();
    let held = lock(&node, "job", Duration::from_secs(60)).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    let mut other = <sqlx::PgConnection as sqlx::Connection>::connect(&url())
        .await
        .unwrap();
    let mut transaction = sqlx::Connection::begin(&mut other).await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT 1 FROM {table} WHERE name = 'job' FOR UPDATE"
    )))
    .execute(&mut *transaction)
    .await
    .unwrap();

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
    // A statement the client stopped waiting for may still run on the server until the
    // session's statement_timeout (the operation timeout) cancels it: past that, nothing of
    // the failed call is left to free the lock behind this test's back.
    tokio::time::sleep(Duration::from_millis(800)).await;
    transaction.rollback().await.unwrap();
    assert_eq!(
        node.inspect_lock("job").await.unwrap().unwrap().state,
        shedlock_core::LockState::Held,
        "the failed force-unlock changed nothing"
    );
    assert!(node.force_unlock("job", &seen.acquisition).await.unwrap());
    assert!(!held.unlock().await.unwrap());
    drop_table(&table).await;
}

/// PostgreSQL's timestamps reach the year 294276 and chrono's calendar ends with 262142: a row
/// another client wrote past that (or `infinity`) is listed and inspected exactly, where
/// decoding it through chrono panicked, and the rows around it are listed as well.
#[tokio::test]
async fn a_row_past_chronos_calendar_is_listed_exactly_without_a_panic() {
    use std::time::SystemTime;

    let table = unique("pg_admin_far");
    let node = node(&table).await;
    exec(
        &pool().await,
        &format!(
            "INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES \
             ('far', '294276-12-31 23:59:59.999999', '262143-01-01 00:00:00', 'another-client'), \
             ('forever', 'infinity', '2024-01-01 00:00:00', 'another-client'), \
             ('near', '2000-01-01 00:00:00', '1999-12-31 23:59:59.5', 'another-client')"
        ),
    )
    .await;
    let micros = |micros: u64| SystemTime::UNIX_EPOCH + Duration::from_micros(micros);
    let page = node.list_locks(&PageRequest::first("")).await.unwrap();
    let names: Vec<&str> = page.locks.iter().map(|lock| lock.name.as_str()).collect();
    assert_eq!(names, ["far", "forever", "near"]);
    let far = node.inspect_lock("far").await.unwrap().unwrap();
    assert_eq!(
        (&far.acquisition, far.held_until, far.locked_at),
        (
            &page.locks[0].acquisition,
            page.locks[0].held_until,
            page.locks[0].locked_at
        )
    );
    assert_eq!(far.state, shedlock_core::LockState::Held);
    assert_eq!(far.held_until, Some(micros(9_224_318_015_999_999_999)));
    assert_eq!(far.locked_at, Some(micros(8_210_266_876_800_000_000)));
    assert_eq!(far.locked_by.as_deref(), Some("another-client"));
    assert!(
        far.acquisition
            .as_str()
            .starts_with("another-client/8210266876800000000/"),
        "{}",
        far.acquisition
    );
    let forever = &page.locks[1];
    assert_eq!(forever.state, shedlock_core::LockState::Held);
    assert_eq!(forever.held_until, None, "infinity is no instant");
    assert_eq!(forever.locked_at, Some(micros(1_704_067_200_000_000)));
    let near = &page.locks[2];
    assert_eq!(near.state, shedlock_core::LockState::Free);
    assert_eq!(near.held_until, Some(micros(946_684_800_000_000)));
    assert_eq!(near.locked_at, Some(micros(946_684_799_500_000)));
    drop_table(&table).await;
}
