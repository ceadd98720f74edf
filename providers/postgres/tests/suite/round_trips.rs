//! What each lock operation costs on the wire to a real PostgreSQL server.

use shedlock_postgres::PostgresBackend;
use shedlock_test_support::sql::round_trips;
use shedlock_test_support::sql::test_database::TestDatabase;

use crate::database::{Postgres, url};

shedlock_test_support::sql_tests_on!(
    Postgres;
    round_trips::every_operation_is_one_round_trip,
    round_trips::every_admin_call_is_one_round_trip,
    round_trips::a_name_locked_on_every_run_stays_known_among_many_one_off_names,
    round_trips::an_acquire_never_waits_for_another_transaction_holding_the_row,
    round_trips::an_idle_connection_is_kept_ready_off_the_callers_path,
    round_trips::a_connection_lost_while_idle_is_replaced_off_the_callers_path,
    round_trips::idle_check_intervals_out_of_range_are_refused,
);

#[tokio::test]
async fn a_killed_connection_fails_one_operation_then_the_next_reconnects() {
    let table = Postgres.new_table("killed");
    let provider = round_trips::provider_at::<PostgresBackend>(url(), &table).await;
    // The provider's idle connection is the one whose last statement named this table.
    let kill = async {
        let pool = Postgres.pool().await;
        let killed: Vec<bool> = sqlx::query_scalar(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND position($1 in query) > 0",
        )
        .bind(&table)
        .fetch_all(&pool)
        .await
        .unwrap();
        killed.into_iter().filter(|&killed| killed).count() as u64
    };
    round_trips::a_killed_connection_fails_one_operation_then_the_next_reconnects(&provider, kill)
        .await;
    Postgres.drop_table(&table).await;
}

/// A refused acquire says who holds the lock and until when, in its one round trip: the
/// take-over statement reads the held row anyway.
#[tokio::test]
async fn a_refused_acquire_names_the_holder_in_the_same_round_trip() {
    use std::time::{Duration, SystemTime};

    use shedlock_core::{Acquisition, LockConfiguration, LockProvider};

    let table = Postgres.new_table("holder");
    let (proxy, proxied) = round_trips::proxy_for(&url()).await;
    let holder = round_trips::provider_at::<PostgresBackend>(proxied, &table)
        .await
        .with_holder("node-a");
    let contender = holder.node().with_holder("node-b");
    let config = LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
    let handle = holder
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    // The contender's first attempt inserts (refused), then takes over (refused): the
    // take-over is the one that names the holder; after it the name is known.
    assert!(!contender.try_lock(&config).await.unwrap().is_acquired());

    let asked = SystemTime::now();
    let before = proxy.round_trips();
    let refused = contender.try_lock(&config).await.unwrap();
    assert_eq!(
        proxy.round_trips() - before,
        1,
        "refused acquire of a known name"
    );
    let Acquisition::NotAcquired(Some(held)) = refused else {
        panic!("refused without naming the holder: {refused:?}");
    };
    assert_eq!(held.locked_by.as_deref(), Some("node-a"), "{held:?}");
    // The server's clock and this one agree within a second here: both are this machine's.
    let left = held.held_until.unwrap().duration_since(asked).unwrap();
    assert!(
        left > Duration::from_secs(58) && left <= Duration::from_secs(61),
        "{left:?}"
    );
    assert!(handle.unlock().await.unwrap());
    Postgres.drop_table(&table).await;
}
