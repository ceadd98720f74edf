//! What each lock operation costs on the wire to a real MySQL or MariaDB server.

use shedlock_mysql::MySqlBackend;
use shedlock_test_support::sql::provider_tests::{exec, unique};
use shedlock_test_support::sql::round_trips;
use shedlock_test_support::sql::test_database::TestDatabase;

use crate::database::{MySql, url};

shedlock_test_support::sql_tests_on!(
    MySql;
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
    // The provider connects as a user of its own, so its connections are the ones to kill
    // while other tests run on the same server.
    let table = MySql.new_table("killed");
    let user = unique("shedlock_kill");
    let admin = MySql.pool().await;
    exec(&admin, &format!("CREATE USER '{user}'@'%'")).await;
    let database: String = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
        .fetch_one(&admin)
        .await
        .unwrap();
    exec(
        &admin,
        &format!("GRANT ALL ON `{database}`.* TO '{user}'@'%'"),
    )
    .await;
    let as_user = url().replacen("root@", &format!("{user}@"), 1);
    let provider = round_trips::provider_at::<MySqlBackend>(as_user, &table).await;
    let kill = async {
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE USER = ?",
        )
        .bind(&user)
        .fetch_all(&admin)
        .await
        .unwrap();
        for id in &ids {
            exec(&admin, &format!("KILL CONNECTION {id}")).await;
        }
        ids.len() as u64
    };
    round_trips::a_killed_connection_fails_one_operation_then_the_next_reconnects(&provider, kill)
        .await;
    exec(&admin, &format!("DROP TABLE {table}")).await;
    exec(&admin, &format!("DROP USER '{user}'@'%'")).await;
}
