//! What each lock operation costs on the wire to a real MySQL or MariaDB server.

use shedlock_mysql::MySqlLockProvider;
use shedlock_test_support::sql::round_trips;

fn url() -> String {
    std::env::var("SHEDLOCK_TEST_MYSQL_URL").unwrap_or_else(|_| {
        panic!(
            "SHEDLOCK_TEST_MYSQL_URL is not set: these tests need a MySQL or MariaDB server, \
             e.g. SHEDLOCK_TEST_MYSQL_URL=mysql://root@127.0.0.1:3306/test"
        )
    })
}

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

async fn provider(url: String, table: &str) -> MySqlLockProvider {
    MySqlLockProvider::builder()
        .table_name(table)
        .create_table_with_fencing_if_missing()
        .connect(url)
        .await
        .unwrap()
}

async fn exec(pool: &sqlx::MySqlPool, sql: String) {
    sqlx::query(sqlx::AssertSqlSafe(sql))
        .execute(pool)
        .await
        .unwrap();
}

#[tokio::test]
async fn every_operation_is_one_round_trip() {
    let table = unique("my_round_trips");
    let (proxy, proxied) = round_trips::proxy_for(&url()).await;
    let provider = provider(proxied, &table).await;
    round_trips::every_operation_is_one_round_trip(&proxy, &provider).await;
    let admin = sqlx::MySqlPool::connect(&url()).await.unwrap();
    exec(&admin, format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn every_admin_call_is_one_round_trip() {
    let table = unique("my_admin_round_trips");
    let (proxy, proxied) = round_trips::proxy_for(&url()).await;
    let provider = provider(proxied, &table).await;
    round_trips::every_admin_call_is_one_round_trip(&proxy, &provider).await;
    let admin = sqlx::MySqlPool::connect(&url()).await.unwrap();
    exec(&admin, format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn a_killed_connection_fails_one_operation_then_the_next_reconnects() {
    // The provider connects as a user of its own, so its connections are the ones to kill
    // while other tests run on the same server.
    let table = unique("my_killed");
    let user = unique("shedlock_kill");
    let admin = sqlx::MySqlPool::connect(&url()).await.unwrap();
    exec(&admin, format!("CREATE USER '{user}'@'%'")).await;
    let database: String = sqlx::query_scalar("SELECT CAST(DATABASE() AS CHAR)")
        .fetch_one(&admin)
        .await
        .unwrap();
    exec(
        &admin,
        format!("GRANT ALL ON `{database}`.* TO '{user}'@'%'"),
    )
    .await;
    let as_user = url().replacen("root@", &format!("{user}@"), 1);
    let provider = provider(as_user, &table).await;
    let kill = async {
        let ids: Vec<u64> = sqlx::query_scalar(
            "SELECT CAST(ID AS UNSIGNED) FROM information_schema.PROCESSLIST WHERE USER = ?",
        )
        .bind(&user)
        .fetch_all(&admin)
        .await
        .unwrap();
        for id in &ids {
            exec(&admin, format!("KILL CONNECTION {id}")).await;
        }
        ids.len() as u64
    };
    round_trips::a_killed_connection_fails_one_operation_then_the_next_reconnects(&provider, kill)
        .await;
    exec(&admin, format!("DROP TABLE {table}")).await;
    exec(&admin, format!("DROP USER '{user}'@'%'")).await;
}
