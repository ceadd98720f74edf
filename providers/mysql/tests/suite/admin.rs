//! The operator's view ([`LockAdmin`]) of the MySQL/MariaDB provider against a real server:
//! listing, inspecting and force-unlocking on `TIMESTAMP(3)` and `DATETIME(6)` tables, with and
//! without the fencing column, renamed, under a case-insensitive collation, in client time, and
//! rows Java ShedLock wrote.

use std::time::Duration;

use shedlock_core::LockAdmin;
use shedlock_mysql::MySqlLockProvider;
use shedlock_test_support::sql::admin_tests;
use shedlock_test_support::sql::provider_tests::{exec, lock, unique};
use shedlock_test_support::sql::test_database::{HOLDER, TestDatabase};

use crate::database::{MySql, url};

const MINUTE: Duration = Duration::from_secs(60);

shedlock_test_support::sql_admin_tests!(MySql, server);

/// `DATETIME(6)` keeps microseconds: `locked_at` goes into the id and back with all of them.
#[tokio::test]
async fn force_unlock_on_a_datetime_6_table_without_fencing() {
    admin_tests::force_unlock_on_a_table_without_fencing(
        &MySql,
        "admin_dt6",
        "name VARCHAR(64) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL, \
         lock_until DATETIME(6) NOT NULL, locked_at DATETIME(6) NOT NULL, \
         locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name)",
    )
    .await;
}

/// Under a case- and accent-insensitive collation the key holds no two names the collation
/// calls equal, so pages in its order never skip or repeat a row; its `LIKE` matches more than
/// the prefix, and the listing keeps the exact matches only. Inspect finds the row whose lock a
/// name shares, as an acquire of that name would.
#[tokio::test]
async fn a_case_insensitive_name_column_lists_exact_prefixes_every_row_once() {
    let pool = MySql.pool().await;
    let table = MySql.new_table("admin_ci");
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
    let node = MySql.node_on_existing(&table, HOLDER).await;
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
    MySql.drop_table(&table).await;
}

/// A failed call is a [`LockError`](shedlock_core::LockError) for its operation, which names
/// the statement's failure but never the password of the URL.
#[tokio::test]
async fn admin_errors_name_the_operation_and_never_the_password() {
    let pool = MySql.pool().await;
    let table = MySql.new_table("admin_errors");
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
    admin_tests::admin_calls_on_a_dropped_table_fail_naming_their_operation(
        &node,
        MySql.drop_table(&table),
        Some("s3cr3t-pw"),
    )
    .await;
    exec(&pool, &format!("DROP USER '{user}'@'%'")).await;
}
