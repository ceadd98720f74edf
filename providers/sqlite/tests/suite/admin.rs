//! The operator's view ([`LockAdmin`]) of the SQLite provider on a real database file: listing,
//! inspecting and force-unlocking, with and without the fencing column, renamed, in client time,
//! rows written as Java ShedLock writes them, and rows whose times are in another format.

use std::time::Duration;

use shedlock_core::{LockAdmin, LockState};
use shedlock_test_support::sql::admin_tests;
use shedlock_test_support::sql::provider_tests::lock;
use shedlock_test_support::sql::test_database::{HOLDER, TestDatabase};

use crate::database::SqliteFile;

const MINUTE: Duration = Duration::from_secs(60);

shedlock_test_support::sql_admin_tests!(SqliteFile::new());

#[tokio::test]
async fn force_unlock_frees_exactly_the_acquisition_it_names() {
    for fencing in [true, false] {
        let database = SqliteFile::new();
        let a = database.node("shedlock", fencing).await;
        let b = database.node_on_existing("shedlock", "node-b").await;
        let c = database.node_on_existing("shedlock", "node-c").await;
        assert_eq!(a.has_fencing(), fencing);
        admin_tests::force_unlock_frees_exactly_the_acquisition_it_names(&a, &b, &c, &b).await;
    }
}

/// Times written in another format than the provider's (by another program) do not read as
/// instants; the state is then the statement's own text comparison, the one the lock
/// statements make, and `locked_at` goes into the id as the stored text, so force-unlock still
/// matches it exactly.
#[tokio::test]
async fn rows_with_times_in_another_format_list_and_force_unlock_by_the_stored_text() {
    let database = SqliteFile::new();
    let node = database.node("shedlock", false).await;
    database
        .exec(
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
}

#[tokio::test]
async fn admin_errors_name_the_operation() {
    let database = SqliteFile::new();
    let node = database.node("shedlock", true).await;
    admin_tests::admin_calls_on_a_dropped_table_fail_naming_their_operation(
        &node,
        database.drop_table("shedlock"),
        None,
    )
    .await;
}

/// A force-unlock that waits for the database's write lock gives up after the provider's
/// operation timeout (SQLite's busy timeout), as a lock operation does.
#[tokio::test]
async fn a_force_unlock_that_waits_gives_up_within_the_operation_timeout() {
    let database = SqliteFile::new();
    let node = database
        .builder("shedlock", HOLDER)
        .create_table_with_fencing_if_missing()
        .operation_timeout(Duration::from_millis(800))
        .connect(database.url())
        .await
        .unwrap();
    admin_tests::a_force_unlock_that_waits_gives_up(
        &node,
        async || {
            let mut writer = <sqlx::SqliteConnection as sqlx::Connection>::connect(&database.url())
                .await
                .unwrap();
            sqlx::query("BEGIN IMMEDIATE")
                .execute(&mut writer)
                .await
                .unwrap();
            writer
        },
        async |mut writer| {
            sqlx::query("ROLLBACK").execute(&mut writer).await.unwrap();
        },
        // A statement the client stopped waiting for may still wait until the busy timeout (the
        // operation timeout) gives up: past that, nothing of it is left to free the lock.
        Duration::from_millis(800),
    )
    .await;
}
