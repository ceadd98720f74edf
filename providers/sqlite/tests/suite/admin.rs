//! The operator's view ([`LockAdmin`]) of the SQLite provider on a real database file: listing,
//! inspecting and force-unlocking, with and without the fencing column, renamed, in client time,
//! rows written as Java ShedLock writes them, and rows whose times are in another format.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use shedlock_core::{LockAdmin, LockError, LockState, Operation, PageRequest, TimeSource};
use shedlock_sqlite::{SqliteLockProvider, SqliteLockProviderBuilder};
use shedlock_test_support::sql::admin_tests;
use shedlock_test_support::sql::provider_tests::{self as shared, exec, lock};
use sqlx::sqlite::SqlitePool;

use crate::planted_records::SqliteKit;

const HOLDER: &str = "rust-node";
const MINUTE: Duration = Duration::from_secs(60);

/// A fresh database file in the temp folder, removed when the test is done with it.
struct Database {
    path: PathBuf,
    url: String,
}

impl Database {
    fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "shedlock-sqlite-admin-{}.db",
            uuid::Uuid::new_v4().simple()
        ));
        let url = format!("sqlite://{}?mode=rwc", path.display());
        Self { path, url }
    }

    fn builder(&self, holder: &str) -> SqliteLockProviderBuilder {
        SqliteLockProvider::builder().holder(holder)
    }

    /// A node with its own connection, on ShedLock's table created with the fencing column
    /// (`fencing`) or without.
    async fn node(&self, holder: &str, fencing: bool) -> SqliteLockProvider {
        let builder = self.builder(holder);
        let builder = if fencing {
            builder.create_table_with_fencing_if_missing()
        } else {
            builder.create_table_if_missing()
        };
        builder.connect(&self.url).await.unwrap()
    }

    async fn pool(&self) -> SqlitePool {
        SqlitePool::connect(&self.url).await.unwrap()
    }

    fn remove(self) {
        std::fs::remove_file(&self.path).unwrap();
    }
}

#[tokio::test]
async fn listing_pages_through_a_prefix_literally_in_name_order() {
    let database = Database::new();
    let node = database.node(HOLDER, true).await;
    // SQLite's LIKE ignores ASCII case: `Job-7` is among the rows read for `l.job-`, and must
    // not be among those listed.
    admin_tests::listing_pages_through_a_prefix_literally_in_name_order(&node, &node).await;
    database.remove();
}

#[tokio::test]
async fn held_released_and_at_least_locks_show_their_state() {
    let database = Database::new();
    let node = database.node(HOLDER, true).await;
    admin_tests::held_released_and_at_least_locks_show_their_state(&node, &node, HOLDER).await;
    database.remove();
}

#[tokio::test]
async fn inspect_matches_the_listing_and_refuses_names_locks_refuse() {
    let database = Database::new();
    let node = database.node(HOLDER, true).await;
    admin_tests::inspect_matches_the_listing_and_refuses_names_locks_refuse(&node, &node).await;
    database.remove();
}

#[tokio::test]
async fn force_unlock_frees_exactly_the_acquisition_it_names() {
    for fencing in [true, false] {
        let database = Database::new();
        let a = database.node(HOLDER, fencing).await;
        let b = database.node("node-b", fencing).await;
        let c = database.node("node-c", fencing).await;
        assert_eq!(a.has_fencing(), fencing);
        admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &b).await;
        database.remove();
    }
}

#[tokio::test]
async fn the_configured_table_and_column_names_are_used() {
    let database = Database::new();
    let renamed =
        |holder: &str| shared::renamed_table_and_columns(database.builder(holder), "ops_locks");
    let a = renamed(HOLDER)
        .create_table_with_fencing_if_missing()
        .connect(&database.url)
        .await
        .unwrap();
    let b = renamed("node-b").connect(&database.url).await.unwrap();
    let c = renamed("node-c").connect(&database.url).await.unwrap();
    admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &c).await;
    admin_tests::listing_pages_through_a_prefix_literally_in_name_order(&a, &b).await;
    database.remove();
}

#[tokio::test]
async fn a_java_row_lists_and_is_freed_by_its_own_acquisition_only() {
    for fencing in [true, false] {
        let database = Database::new();
        let node = database.node(HOLDER, fencing).await;
        admin_tests::a_java_row_lists_and_is_freed_by_its_own_acquisition_only::<SqliteKit>(
            &node,
            &node,
            &database.pool().await,
            "shedlock",
        )
        .await;
        database.remove();
    }
}

/// Times written in another format than the provider's (by another program) do not read as
/// instants; the state is then the statement's own text comparison, the one the lock
/// statements make, and `locked_at` goes into the id as the stored text, so force-unlock still
/// matches it exactly.
#[tokio::test]
async fn rows_with_times_in_another_format_list_and_force_unlock_by_the_stored_text() {
    let database = Database::new();
    let node = database.node(HOLDER, false).await;
    exec(
        &database.pool().await,
        "INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES \
         ('iso-held', '9999-01-01T00:00:00Z', '2024-06-10T12:00:00Z', 'other-program'), \
         ('iso-free', '2000-01-01T00:00:00Z', '1999-12-31T23:00:00Z', 'other-program')",
    )
    .await;
    let listed = admin_tests::list_all(&node, "iso-", 1).await;
    let states: Vec<(&str, LockState)> = listed
        .iter()
        .map(|lock| (lock.name.as_str(), lock.state))
        .collect();
    assert_eq!(
        states,
        [("iso-free", LockState::Free), ("iso-held", LockState::Held)]
    );
    let held = &listed[1];
    assert_eq!(
        (held.held_until, held.locked_at, held.remaining),
        (None, None, None)
    );
    assert_eq!(
        held.acquisition.as_str(),
        "other-program/2024-06-10T12:00:00Z"
    );
    assert!(lock(&node, "iso-held", MINUTE).await.is_none());
    assert!(
        node.force_unlock("iso-held", &held.acquisition)
            .await
            .unwrap()
    );
    let taken = lock(&node, "iso-held", MINUTE).await.expect("freed");
    assert!(taken.unlock().await.unwrap());
    database.remove();
}

#[tokio::test]
async fn a_thousand_names_list_in_ten_pages_of_a_hundred() {
    let database = Database::new();
    let node = database.node(HOLDER, true).await;
    let expected: Vec<String> = (1..=1000).map(|n| format!("bulk-{n:04}")).collect();
    let row = "(?, strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour'), \
               strftime('%Y-%m-%d %H:%M:%f', 'now'), 'bulk-host')";
    let insert = format!(
        "INSERT INTO shedlock (name, lock_until, locked_at, locked_by) VALUES {}",
        vec![row; 1000].join(", ")
    );
    let mut query = sqlx::query(sqlx::AssertSqlSafe(insert));
    for name in &expected {
        query = query.bind(name);
    }
    query.execute(&database.pool().await).await.unwrap();
    assert!(lock(&node, "other", MINUTE).await.is_some());
    admin_tests::a_thousand_names_list_in_ten_pages_of_a_hundred(&node, "bulk-", &expected).await;
    database.remove();
}

#[tokio::test]
async fn client_time_admin_judges_by_the_nodes_clock() {
    let database = Database::new();
    database.node(HOLDER, true).await;
    let client = database
        .builder(HOLDER)
        .time_source(TimeSource::Client)
        .connect(&database.url)
        .await
        .unwrap();
    admin_tests::client_time_admin_judges_by_the_nodes_clock(&client).await;
    database.remove();
}

#[tokio::test]
async fn admin_errors_name_the_operation() {
    let database = Database::new();
    let node = database.node(HOLDER, true).await;
    let held = lock(&node, "job", MINUTE).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    exec(&database.pool().await, "DROP TABLE shedlock").await;
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
    }
    drop(held);
    database.remove();
}

/// A force-unlock that waits for the database's write lock gives up after the provider's
/// operation timeout (SQLite's busy timeout), as a lock operation does.
#[tokio::test]
async fn a_force_unlock_that_waits_gives_up_within_the_operation_timeout() {
    let database = Database::new();
    let node = database
        .builder(HOLDER)
        .create_table_with_fencing_if_missing()
        .operation_timeout(Duration::from_millis(800))
        .connect(&database.url)
        .await
        .unwrap();
    let held = lock(&node, "job", MINUTE).await.unwrap();
    let seen = node.inspect_lock("job").await.unwrap().unwrap();
    let mut writer = <sqlx::SqliteConnection as sqlx::Connection>::connect(&database.url)
        .await
        .unwrap();
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut writer)
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
    // A statement the client stopped waiting for may still wait until the busy timeout (the
    // operation timeout) gives up: past that, nothing of it is left to free the lock.
    tokio::time::sleep(Duration::from_millis(800)).await;
    sqlx::query("ROLLBACK").execute(&mut writer).await.unwrap();
    assert_eq!(
        node.inspect_lock("job").await.unwrap().unwrap().state,
        LockState::Held,
        "the failed force-unlock changed nothing"
    );
    assert!(node.force_unlock("job", &seen.acquisition).await.unwrap());
    assert!(!held.unlock().await.unwrap());
    database.remove();
}
