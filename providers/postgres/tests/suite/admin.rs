//! The operator's view ([`LockAdmin`]) of the PostgreSQL provider against a real server: listing,
//! inspecting and force-unlocking on `TIMESTAMP` and `TIMESTAMPTZ` tables, with and without the
//! fencing column, renamed, in client time, and rows Java ShedLock wrote.

use std::time::Duration;

use shedlock_core::{LockAdmin, PageRequest};
use shedlock_postgres::PostgresLockProvider;
use shedlock_test_support::sql::admin_tests;
use shedlock_test_support::sql::provider_tests::exec;
use shedlock_test_support::sql::test_database::TestDatabase;

use crate::database::{Postgres, url};

shedlock_test_support::sql_admin_tests!(Postgres, server);

/// `TIMESTAMPTZ` columns hold instants: `locked_at` goes into the id and back as one.
#[tokio::test]
async fn force_unlock_on_a_timestamptz_table_without_fencing() {
    admin_tests::force_unlock_on_a_table_without_fencing(
        &Postgres,
        "admin_tz",
        "name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMPTZ(6) NOT NULL, \
         locked_at TIMESTAMPTZ(6) NOT NULL, locked_by VARCHAR(255) NOT NULL",
    )
    .await;
}

/// A failed call is a [`LockError`](shedlock_core::LockError) for its operation, which names
/// the statement's failure but never the password of the URL.
#[tokio::test]
async fn admin_errors_name_the_operation_and_never_the_password() {
    let table = Postgres.new_table("admin_errors");
    // The test server trusts every connection, so any password connects.
    let with_password = url().replacen("postgres@", "postgres:s3cr3t-pw@", 1);
    assert!(with_password.contains("s3cr3t-pw"), "{with_password}");
    let node = PostgresLockProvider::builder()
        .table_name(&table)
        .create_table_with_fencing_if_missing()
        .connect(with_password)
        .await
        .unwrap();
    admin_tests::admin_calls_on_a_dropped_table_fail_naming_their_operation(
        &node,
        Postgres.drop_table(&table),
        Some("s3cr3t-pw"),
    )
    .await;
}

/// PostgreSQL's timestamps reach the year 294276 and chrono's calendar ends with 262142: a row
/// another client wrote past that (or `infinity`) is listed and inspected exactly, where
/// decoding it through chrono panicked, and the rows around it are listed as well.
#[tokio::test]
async fn a_row_past_chronos_calendar_is_listed_exactly_without_a_panic() {
    use std::time::SystemTime;

    let table = Postgres.new_table("admin_far");
    let node = Postgres.node(&table, true).await;
    exec(
        &Postgres.pool().await,
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
    Postgres.drop_table(&table).await;
}
