//! The operator's view ([`LockAdmin`]) of the MySQL/MariaDB provider against a real server:
//! listing, inspecting and force-unlocking on `TIMESTAMP(3)` and `DATETIME(6)` tables, with and
//! without the fencing column, renamed, under a case-insensitive collation, in client time, and
//! rows Java ShedLock wrote.

use std::time::{Duration, Instant};

use shedlock_core::{LockAdmin, LockError, LockState, Operation, PageRequest, TimeSource};
use shedlock_mysql::MySqlLockProvider;
use shedlock_test_support::sql::admin_tests;
use shedlock_test_support::sql::provider_tests::{self as shared, exec, lock, unique};
use sqlx::mysql::MySqlPool;

use crate::planted_records::MySqlKit;

const HOLDER: &str = "rust-node";
const MINUTE: Duration = Duration::from_secs(60);

fn url() -> String {
    shared::url_from_env(
        "SHEDLOCK_TEST_MYSQL_URL",
        "a MySQL or MariaDB server",
        "mysql://root@127.0.0.1:3306/test",
    )
}

async fn pool() -> MySqlPool {
    shared::pool(&url()).await
}

/// A node with its own connections on `table`, created with the fencing column if missing.
async fn node(table: &str) -> MySqlLockProvider {
    MySqlLockProvider::builder()
        .table_name(table)
        .create_table_with_fencing_if_missing()
        .holder(HOLDER)
        .connect(url())
        .await
        .unwrap()
}

/// A node on `table` as it is, without creating it.
async fn node_on_existing(table: &str, holder: &str) -> MySqlLockProvider {
    MySqlLockProvider::builder()
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
    let table = unique("my_admin_list");
    let node = node(&table).await;
    admin_tests::listing_pages_through_a_prefix_literally_in_name_order(&node, &node).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn held_released_and_at_least_locks_show_their_state() {
    let table = unique("my_admin_states");
    let node = node(&table).await;
    admin_tests::held_released_and_at_least_locks_show_their_state(&node, &node, HOLDER).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn inspect_matches_the_listing_and_refuses_names_locks_refuse() {
    let table = unique("my_admin_inspect");
    let node = node(&table).await;
    admin_tests::inspect_matches_the_listing_and_refuses_names_locks_refuse(&node, &node).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn force_unlock_frees_exactly_the_acquisition_it_names_with_fencing() {
    let table = unique("my_admin_force");
    let (a, b, c) = (
        node(&table).await,
        node_on_existing(&table, "node-b").await,
        node_on_existing(&table, "node-c").await,
    );
    assert!(a.has_fencing());
    admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &a).await;
    drop_table(&table).await;
}

/// `DATETIME(6)` keeps microseconds: `locked_at` goes into the id and back with all of them.
#[tokio::test]
async fn force_unlock_on_a_datetime_6_table_without_fencing() {
    let table = unique("my_admin_dt6");
    exec(
        &pool().await,
        &format!(
            "CREATE TABLE {table} (name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin \
             NOT NULL, lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, \
             locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"
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
    let table = unique("my_admin_renamed");
    let renamed = |holder: &str| {
        shared::renamed_table_and_columns(MySqlLockProvider::builder(), &table).holder(holder)
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

/// Under a case- and accent-insensitive collation the key holds no two names the collation
/// calls equal, so pages in its order never skip or repeat a row; its `LIKE` matches more than
/// the prefix, and the listing keeps the exact matches only. Inspect finds the row whose lock a
/// name shares, as an acquire of that name would.
#[tokio::test]
async fn a_case_insensitive_name_column_lists_exact_prefixes_every_row_once() {
    let pool = pool().await;
    let table = unique("my_admin_ci");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {table} (name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE \
             utf8mb4_general_ci NOT NULL, lock_until TIMESTAMP(3) NOT NULL, locked_at \
             TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), locked_by VARCHAR(255) NOT NULL, \
             PRIMARY KEY (name))"
        ),
    )
    .await;
    let node = node_on_existing(&table, HOLDER).await;
    let names = [
        "Job-A", "job-b", "JOB-c", "jobs", "Jobs-X", "JOB", "other", "ä-1", "a-2", "A-3", "b",
    ];
    let mut handles = Vec::new();
    for name in names {
        handles.push(
            lock(&node, name, MINUTE)
                .await
                .expect("distinct under the collation"),
        );
    }
    let in_collation_order: Vec<String> = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT name FROM {table} ORDER BY name"
    )))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(in_collation_order.len(), names.len());
    for prefix in ["", "job", "JOB", "Job-", "a", "ä", "A", "jobs", "x"] {
        let expected: Vec<&String> = in_collation_order
            .iter()
            .filter(|name| name.starts_with(prefix))
            .collect();
        for page_size in [1, 2, 100] {
            let listed = admin_tests::list_all(&node, prefix, page_size).await;
            let listed: Vec<&String> = listed.iter().map(|lock| &lock.name).collect();
            assert_eq!(listed, expected, "prefix {prefix:?}, pages of {page_size}");
        }
    }
    let shared_lock = node.inspect_lock("JOB-C").await.unwrap().unwrap();
    assert_eq!(shared_lock.name, "JOB-c", "the row whose lock JOB-C shares");
    for handle in handles {
        assert!(handle.unlock().await.unwrap());
    }
    drop_table(&table).await;
}

#[tokio::test]
async fn a_java_row_lists_and_is_freed_by_its_own_acquisition_only() {
    let pool = pool().await;
    for fencing in [true, false] {
        let table = unique("my_admin_java");
        let builder = MySqlLockProvider::builder().table_name(&table);
        let node = if fencing {
            builder.create_table_with_fencing_if_missing()
        } else {
            builder.create_table_if_missing()
        }
        .connect(url())
        .await
        .unwrap();
        admin_tests::a_java_row_lists_and_is_freed_by_its_own_acquisition_only::<MySqlKit>(
            &node, &node, &pool, &table,
        )
        .await;
        drop_table(&table).await;
    }
}

#[tokio::test]
async fn a_thousand_names_list_in_ten_pages_of_a_hundred() {
    let table = unique("my_admin_scale");
    let node = node(&table).await;
    let expected: Vec<String> = (1..=1000).map(|n| format!("bulk-{n:04}")).collect();
    let rows = vec!["(?, UTC_TIMESTAMP(3) + INTERVAL 1 HOUR, UTC_TIMESTAMP(3), 'bulk-host')"; 1000];
    let insert = format!(
        "INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES {}",
        rows.join(", ")
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(insert));
    for name in &expected {
        query = query.bind(name);
    }
    query.execute(&pool().await).await.unwrap();
    assert!(lock(&node, "other", MINUTE).await.is_some());
    admin_tests::a_thousand_names_list_in_ten_pages_of_a_hundred(&node, "bulk-", &expected).await;
    drop_table(&table).await;
}

#[tokio::test]
async fn client_time_admin_judges_by_the_nodes_clock() {
    let table = unique("my_admin_client");
    node(&table).await;
    let client = MySqlLockProvider::builder()
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
    let pool = pool().await;
    let table = unique("my_admin_errors");
    let user = unique("shedlock_admin");
    exec(
        &pool,
        &format!("CREATE USER '{user}'@'%' IDENTIFIED BY 's3cr3t-pw'"),
    )
    .await;
    let database: String = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
        .fetch_one(&pool)
        .await
        .unwrap();
    exec(
        &pool,
        &format!("GRANT ALL ON `{database}`.* TO '{user}'@'%'"),
    )
    .await;
    let with_password = url().replacen("root@", &format!("{user}:s3cr3t-pw@"), 1);
    assert!(with_password.contains("s3cr3t-pw"), "{with_password}");
    let node = MySqlLockProvider::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .connect(with_password)
        .await
        .unwrap();
    let held = lock(&node, "job", MINUTE).await.unwrap();
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
    exec(&pool, &format!("DROP USER '{user}'@'%'")).await;
}

/// A force-unlock that waits (here on a row another transaction is changing) gives up after
/// the provider's operation timeout, as a lock operation does.
#[tokio::test]
async fn a_force_unlock_that_waits_gives_up_within_the_operation_timeout() {
    let table = unique("my_admin_timeout");
    let node = MySqlLockProvider::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .operation_timeout(Duration::from_millis(800))
        .connect(url())
        .await
        .unwrap();
    let held = lock(&node, "job", MINUTE).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    let mut other = <sqlx::MySqlConnection as sqlx::Connection>::connect(&url())
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
    // A statement the client stopped waiting for may still wait on the server until
    // innodb_lock_wait_timeout (the operation timeout, at least a second) gives up: past that,
    // nothing of the failed call is left to free the lock behind this test's back.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    transaction.rollback().await.unwrap();
    assert_eq!(
        node.inspect_lock("job").await.unwrap().unwrap().state,
        LockState::Held,
        "the failed force-unlock changed nothing"
    );
    assert!(node.force_unlock("job", &seen.acquisition).await.unwrap());
    assert!(!held.unlock().await.unwrap());
    drop_table(&table).await;
}
