//! The MySQL/MariaDB provider against a real server: the one-statement acquire and how its
//! outcome is read, schema checks, errors, fencing, time sources, collations and
//! interoperation with Java ShedLock's own SQL.

#[path = "../../sql/tests/shared/provider_tests.rs"]
mod shared;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shared::{config, exec, lock, unique};
use shedlock_core::{Clock, LockError, LockProvider, SkewedClock, SystemClock, TimeSource};
use shedlock_mysql::{Column, Flavor, LockTable, MySqlLockProvider, create_table_statement};
use sqlx::Row;
use sqlx::mysql::MySqlPool;

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

async fn provider_on(table: &str, fencing: bool) -> MySqlLockProvider {
    MySqlLockProvider::builder_from_url(url())
        .table_name(table)
        .create_table_if_missing(fencing)
        .holder("rust-node")
        .build()
        .await
        .unwrap()
}

/// The row as stored: (lock_until - locked_at in ms, locked_by, seconds between locked_at and
/// the server's UTC now).
async fn row(pool: &MySqlPool, table: &str, name: &str) -> Option<(f64, String, f64)> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, locked_at, lock_until) / 1000 AS DOUBLE), \
         locked_by, CAST(ABS(TIMESTAMPDIFF(MICROSECOND, locked_at, UTC_TIMESTAMP(3))) / 1e6 AS DOUBLE) \
         FROM {table} WHERE name = ?"
    )))
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

async fn count(pool: &MySqlPool, table: &str) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT COUNT(*) FROM {table}")))
        .fetch_one(pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn one_statement_acquire_creates_the_row_excludes_others_and_releases() {
    let table = unique("my_basic");
    let node_a = provider_on(&table, false).await;
    let node_b = node_a.node().with_holder("other-node");
    let pool = pool().await;

    let held = lock(&node_a, "job", MINUTE).await.expect("first acquire");
    let (held_ms, locked_by, age) = row(&pool, &table, "job").await.expect("row written");
    assert!(
        (held_ms - 60_000.0).abs() < 1.0,
        "lock_until - locked_at = {held_ms} ms"
    );
    assert!(locked_by.starts_with("rust-node#"), "{locked_by}");
    assert!(age < 5.0, "locked_at is UTC server time, {age}s from now");
    assert!(held.fencing_token().is_none());

    // Held: the upsert leaves the row alone and reports "not acquired", every time.
    for _ in 0..3 {
        assert!(lock(&node_b, "job", MINUTE).await.is_none(), "held by A");
    }
    let (_, still, _) = row(&pool, &table, "job").await.unwrap();
    assert_eq!(still, locked_by, "the refused upsert changed nothing");
    assert!(held.unlock().await.unwrap(), "released");
    assert!(
        !held.unlock().await.unwrap(),
        "a second release changes nothing"
    );
    let again = lock(&node_b, "job", MINUTE)
        .await
        .expect("free after release");
    let (_, locked_by, _) = row(&pool, &table, "job").await.unwrap();
    assert!(locked_by.starts_with("other-node#"), "{locked_by}");
    assert!(again.unlock().await.unwrap());
    assert_eq!(
        count(&pool, &table).await,
        1,
        "rows are kept, never duplicated"
    );
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn racing_first_acquires_of_a_new_name_let_exactly_one_in() {
    let table = unique("my_race");
    let first = provider_on(&table, false).await;
    let nodes: Vec<Arc<dyn LockProvider>> = (0..8).map(|_| Arc::new(first.node()) as _).collect();
    shared::exactly_one_racing_node_acquires(&nodes).await;
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn release_keeps_the_lock_until_at_least_and_extend_moves_it() {
    let table = unique("my_times");
    let node_a = provider_on(&table, false).await;
    shared::release_keeps_at_least_and_extend_moves_the_lock(&node_a, &node_a.node()).await;
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock() {
    let table = unique("my_stale");
    let node_a = provider_on(&table, false).await;
    let node_b = node_a.node().with_holder("rust-node");
    shared::an_expired_holder_cannot_touch_the_next_holders_lock(&node_a, &node_b).await;
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn names_longer_than_the_column_are_refused_before_anything_is_written() {
    let pool = pool().await;
    let table = unique("my_len");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {table} (name VARCHAR(10) CHARACTER SET utf8mb4 PRIMARY KEY, \
             lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL, \
             locked_by VARCHAR(255) NOT NULL)"
        ),
    )
    .await;
    let provider = MySqlLockProvider::builder(pool.clone())
        .table_name(&table)
        .build()
        .await
        .unwrap();
    assert_eq!(provider.capabilities().max_name_chars, Some(10));
    let error = provider
        .try_lock(&config("abcdefghijk", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    match &error {
        LockError::InvalidName { name, rule, .. } => {
            assert_eq!(name, "abcdefghijk");
            assert!(rule.contains("limit is 10"), "{rule}");
        }
        other => panic!("expected InvalidName, got {other:?}"),
    }
    assert!(
        lock(&provider, "ääääääääää", MINUTE).await.is_some(),
        "10 characters"
    );
    assert_eq!(
        count(&pool, &table).await,
        1,
        "only the accepted name was written"
    );

    let default_table = unique("my_len64");
    let shedlock = provider_on(&default_table, false).await;
    assert_eq!(shedlock.capabilities().max_name_chars, Some(64));
    assert!(lock(&shedlock, &"n".repeat(64), MINUTE).await.is_some());
    assert!(matches!(
        shedlock
            .try_lock(&config(&"n".repeat(65), MINUTE, Duration::ZERO))
            .await,
        Err(LockError::InvalidName { .. })
    ));
    assert_eq!(count(&pool, &default_table).await, 1);
    exec(&pool, &format!("DROP TABLE {table}, {default_table}")).await;
}

#[tokio::test]
async fn created_tables_keep_case_and_space_distinct_names_apart() {
    let table = unique("my_names");
    let provider = provider_on(&table, false).await;
    let names = ["Job", "job", "job ", "jöb", "job\u{1F600}"];
    let mut held = Vec::new();
    for name in names {
        held.push(lock(&provider, name, MINUTE).await.unwrap_or_else(|| {
            panic!("{name:?} is its own lock");
        }));
    }
    for name in names {
        assert!(
            lock(&provider.node(), name, MINUTE).await.is_none(),
            "{name:?}"
        );
    }
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn shedlock_style_collations_and_charsets_refuse_names_they_would_merge_or_mangle() {
    let pool = pool().await;
    let table = unique("my_pad");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {table} (name VARCHAR(64) CHARACTER SET latin1 COLLATE latin1_swedish_ci \
             NOT NULL PRIMARY KEY, lock_until TIMESTAMP(3) NOT NULL, locked_at TIMESTAMP(3) NOT NULL, \
             locked_by VARCHAR(255) NOT NULL)"
        ),
    )
    .await;
    let provider = MySqlLockProvider::builder(pool.clone())
        .table_name(&table)
        .build()
        .await
        .unwrap();
    let trailing = provider
        .try_lock(&config("job ", MINUTE, Duration::ZERO))
        .await
        .unwrap_err()
        .to_string();
    assert!(trailing.contains("ends with a space"), "{trailing}");
    let cjk = provider
        .try_lock(&config("任务", MINUTE, Duration::ZERO))
        .await
        .unwrap_err()
        .to_string();
    assert!(cjk.contains("latin1 cannot store"), "{cjk}");
    assert_eq!(count(&pool, &table).await, 0, "nothing written");
    // Case-insensitive: one lock for both spellings (over-exclusion, never under-exclusion).
    let held = lock(&provider, "Job", MINUTE).await.unwrap();
    assert!(lock(&provider, "job", MINUTE).await.is_none());
    held.unlock().await.unwrap();
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn a_missing_table_is_an_error_that_shows_how_to_create_it() {
    let table = unique("my_missing");
    let error = MySqlLockProvider::builder_from_url(url())
        .table_name(&table)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains(&format!("{table} does not exist")),
        "{error}"
    );
    assert!(
        error.contains(&format!("CREATE TABLE IF NOT EXISTS `{table}`")),
        "{error}"
    );
    assert!(error.contains("create_table_if_missing"), "{error}");
}

#[tokio::test]
async fn wrong_column_types_keys_and_auto_increment_are_refused() {
    let pool = pool().await;
    let cases = [
        (
            "lock_until VARCHAR(30), locked_at TIMESTAMP(3), locked_by VARCHAR(255), PRIMARY KEY (name)",
            "column lock_until has type varchar(30), but it must be a timestamp type",
        ),
        (
            "lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), locked_by INT, PRIMARY KEY (name)",
            "column locked_by has type int",
        ),
        (
            "lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), locked_by VARCHAR(255), fencing_token VARCHAR(5), PRIMARY KEY (name)",
            "column fencing_token has type varchar(5)",
        ),
        (
            "lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), locked_by VARCHAR(255)",
            "must be its primary key",
        ),
        (
            "lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), locked_by VARCHAR(255), id BIGINT AUTO_INCREMENT, PRIMARY KEY (name), KEY (id)",
            "AUTO_INCREMENT column id",
        ),
    ];
    for (columns, expected) in cases {
        let table = unique("my_wrong");
        exec(
            &pool,
            &format!("CREATE TABLE {table} (name VARCHAR(64) NOT NULL, {columns})"),
        )
        .await;
        let error = MySqlLockProvider::builder(pool.clone())
            .table_name(&table)
            .build()
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{columns}: {error}");
        exec(&pool, &format!("DROP TABLE {table}")).await;
    }
    let bad = MySqlLockProvider::builder(pool.clone())
        .column_name(Column::LockedBy, "locked`by")
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(bad.contains("column locked_by"), "{bad}");
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_within_the_connect_timeout_without_the_password() {
    let started = Instant::now();
    let error = MySqlLockProvider::builder_from_url("mysql://app:hunter2@127.0.0.1:1/test")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "took {:?}",
        started.elapsed()
    );
    let text = format!("{error} / {error:?}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("app:***@127.0.0.1:1"), "{text}");
    assert!(text.contains("cannot connect"), "{text}");

    let started = Instant::now();
    let error = MySqlLockProvider::builder_from_url("mysql://app:hunter2@10.255.255.1:3306/test")
        .connect_timeout(Duration::from_secs(1))
        .build()
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(!format!("{error} {error:?}").contains("hunter2"));
}

#[tokio::test]
async fn fencing_tokens_come_back_through_the_insert_id_and_are_absent_without_the_column() {
    let with = unique("my_fence");
    let node_a = provider_on(&with, true).await;
    let node_b = node_a.node();
    assert!(node_a.capabilities().fencing);
    let mut last = 0;
    for i in 0..4 {
        let node = if i % 2 == 0 { &node_a } else { &node_b };
        let handle = lock(node, "fenced", MINUTE).await.unwrap();
        let token = handle.fencing_token().expect("a token");
        assert_eq!(token, last + 1, "tokens count acquisitions");
        last = token;
        assert!(lock(&node_b, "fenced", MINUTE).await.is_none());
        handle.unlock().await.unwrap();
    }
    let stored: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT fencing_token FROM {with} WHERE name = 'fenced'"
    )))
    .fetch_one(&pool().await)
    .await
    .unwrap();
    assert_eq!(stored, 4, "the returned token is the stored one");

    let without = unique("my_nofence");
    let plain = provider_on(&without, false).await;
    assert!(!plain.capabilities().fencing);
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(&without)
    .fetch_all(&pool().await)
    .await
    .unwrap();
    assert_eq!(columns, ["name", "lock_until", "locked_at", "locked_by"]);
    assert!(
        lock(&plain, "x", MINUTE)
            .await
            .unwrap()
            .fencing_token()
            .is_none()
    );
    exec(&pool().await, &format!("DROP TABLE {with}, {without}")).await;
}

#[tokio::test]
async fn custom_database_table_and_column_names_work() {
    let pool = pool().await;
    let database = unique("shedlock_db");
    exec(&pool, &format!("CREATE DATABASE {database}")).await;
    let qualified = format!("{database}.job_locks");
    let build = || {
        MySqlLockProvider::builder(pool.clone())
            .table_name(&qualified)
            .column_name(Column::Name, "lock_name")
            .column_name(Column::LockUntil, "held_until")
            .column_name(Column::LockedAt, "taken_at")
            .column_name(Column::LockedBy, "owner")
            .column_name(Column::FencingToken, "fence")
            .create_table_if_missing(true)
            .build()
    };
    let node_a = build().await.unwrap();
    let node_b = build().await.unwrap();
    let handle = lock(&node_a, "job", MINUTE).await.unwrap();
    assert_eq!(handle.fencing_token(), Some(1));
    assert!(lock(&node_b, "job", MINUTE).await.is_none());
    handle.unlock().await.unwrap();
    assert_eq!(
        lock(&node_b, "job", MINUTE).await.unwrap().fencing_token(),
        Some(2)
    );
    let owner: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT owner FROM {database}.job_locks WHERE lock_name = 'job'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(owner.contains('#'), "{owner}");
    exec(&pool, &format!("DROP DATABASE {database}")).await;
}

/// A pool whose sessions are nine hours east of UTC.
async fn tokyo_pool() -> MySqlPool {
    sqlx::mysql::MySqlPoolOptions::new()
        .after_connect(|connection, _| {
            Box::pin(async move {
                sqlx::query("SET time_zone = '+09:00'")
                    .execute(connection)
                    .await
                    .map(|_| ())
            })
        })
        .connect(&url())
        .await
        .unwrap()
}

#[tokio::test]
async fn timestamp_columns_need_a_utc_session_and_datetime_columns_do_not() {
    let pool = pool().await;
    let tokyo = tokyo_pool().await;
    let timestamps = unique("my_tz_ts");
    exec(
        &pool,
        &create_table_statement(
            &LockTable::new(&timestamps).unwrap(),
            false,
            Flavor::MariaDb,
        )
        .replace("utf8mb4_nopad_bin", "utf8mb4_bin"),
    )
    .await;
    let error = MySqlLockProvider::builder(tokyo.clone())
        .table_name(&timestamps)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("time_zone is 540 minutes from UTC"),
        "{error}"
    );

    let datetimes = unique("my_tz_dt");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {datetimes} (name VARCHAR(64) PRIMARY KEY, lock_until DATETIME(3) NOT NULL, \
             locked_at DATETIME(3) NOT NULL, locked_by VARCHAR(255) NOT NULL)"
        ),
    )
    .await;
    for time_source in [TimeSource::Server, TimeSource::Client] {
        let case = format!("{time_source:?}");
        let node_a = MySqlLockProvider::builder(tokyo.clone())
            .table_name(&datetimes)
            .time_source(time_source)
            .build()
            .await
            .unwrap();
        let node_b = MySqlLockProvider::builder_from_url(url())
            .table_name(&datetimes)
            .time_source(time_source)
            .build()
            .await
            .unwrap();
        let held = lock(&node_a, &case, Duration::from_millis(400))
            .await
            .unwrap();
        assert!(lock(&node_b, &case, MINUTE).await.is_none(), "{case}: held");
        tokio::time::sleep(Duration::from_millis(550)).await;
        assert!(
            lock(&node_b, &case, MINUTE).await.is_some(),
            "{case}: expired"
        );
        assert!(!held.unlock().await.unwrap(), "{case}");
        let (_, _, age) = row(&pool, &datetimes, &case).await.unwrap();
        assert!(age < 5.0, "{case}: stored times are UTC, {age}s off");
    }
    exec(&pool, &format!("DROP TABLE {timestamps}, {datetimes}")).await;
}

#[tokio::test]
async fn server_time_ignores_node_clocks_and_client_time_uses_them() {
    let table = unique("my_clock");
    let hour = Duration::from_secs(3600);
    let ahead: Arc<dyn Clock> = Arc::new(SkewedClock::ahead(Arc::new(SystemClock), hour));

    let honest = provider_on(&table, false).await;
    let skewed = honest.node().with_clock(ahead.clone());
    assert_eq!(honest.capabilities().time_source, TimeSource::Server);
    let held = lock(&honest, "server", MINUTE).await.unwrap();
    assert!(
        lock(&skewed, "server", MINUTE).await.is_none(),
        "skew must not matter"
    );
    held.unlock().await.unwrap();

    let client = MySqlLockProvider::builder_from_url(url())
        .table_name(&table)
        .time_source(TimeSource::Client)
        .build()
        .await
        .unwrap();
    assert_eq!(client.capabilities().time_source, TimeSource::Client);
    let client_skewed = client.node().with_clock(ahead);
    let held = lock(&client, "client", MINUTE).await.unwrap();
    let pool = pool().await;
    let (_, _, age) = row(&pool, &table, "client").await.unwrap();
    assert!(
        age < 5.0,
        "locked_at is the node's UTC time, {age}s from the server's"
    );
    assert!(
        lock(&client_skewed, "client", MINUTE).await.is_some(),
        "an hour ahead, the client-time node believes the lock expired: the documented risk"
    );
    assert!(
        !held.unlock().await.unwrap(),
        "taken over, so not ours to release"
    );
    let (_, _, age) = row(&pool, &table, "client").await.unwrap();
    assert!(
        (age - 3600.0).abs() < 5.0,
        "the skewed node wrote its own clock: {age}s"
    );
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn lock_statements_run_outside_the_callers_transaction() {
    let pool = pool().await;
    let table = unique("my_tx");
    let provider = MySqlLockProvider::builder(pool.clone())
        .table_name(&table)
        .create_table_if_missing(false)
        .build()
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    sqlx::query("SELECT 1").execute(&mut *tx).await.unwrap();
    let held = lock(&provider, "job", MINUTE).await.unwrap();
    tx.rollback().await.unwrap();
    assert!(
        lock(&provider.node(), "job", MINUTE).await.is_none(),
        "the lock survived the rollback"
    );
    held.unlock().await.unwrap();
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

/// Java ShedLock's MySQL statements, as SHEDLOCK-FACTS.md records them, run as plain SQL.
mod java {
    use super::*;

    const NOW: &str = "UTC_TIMESTAMP(3)";

    fn micros(d: Duration) -> i64 {
        d.as_micros() as i64
    }

    /// JdbcTemplateLockProvider with usingDbTime(): `INSERT IGNORE`, then the conditional
    /// update. True when it took the lock.
    pub async fn server_time_lock(
        pool: &MySqlPool,
        table: &str,
        name: &str,
        host: &str,
        at_most: Duration,
    ) -> bool {
        let insert = format!(
            "INSERT IGNORE INTO {table}(name, lock_until, locked_at, locked_by) \
             VALUES(?, TIMESTAMPADD(MICROSECOND, ?, {NOW}), {NOW}, ?)"
        );
        let inserted = sqlx::query(sqlx::AssertSqlSafe(insert))
            .bind(name)
            .bind(micros(at_most))
            .bind(host)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected();
        if inserted == 1 {
            return true;
        }
        let update = format!(
            "UPDATE {table} SET lock_until = TIMESTAMPADD(MICROSECOND, ?, {NOW}), locked_at = {NOW}, \
             locked_by = ? WHERE name = ? AND lock_until <= {NOW}"
        );
        sqlx::query(sqlx::AssertSqlSafe(update))
            .bind(micros(at_most))
            .bind(host)
            .bind(name)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected()
            == 1
    }

    /// Its server-time unlock: only the host name is checked.
    pub async fn server_time_unlock(
        pool: &MySqlPool,
        table: &str,
        name: &str,
        host: &str,
        at_least: Duration,
    ) -> u64 {
        let sql = format!(
            "UPDATE {table} SET lock_until = IF(TIMESTAMPADD(MICROSECOND, ?, locked_at) > {NOW}, \
             TIMESTAMPADD(MICROSECOND, ?, locked_at), {NOW}) WHERE name = ? AND locked_by = ?"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(micros(at_least))
            .bind(micros(at_least))
            .bind(name)
            .bind(host)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected()
    }

    /// JdbcLockProvider (client time, a JVM in UTC): insert, then the conditional update.
    pub async fn jdbc_lock(
        pool: &MySqlPool,
        table: &str,
        name: &str,
        host: &str,
        at_most: Duration,
    ) -> bool {
        let now = chrono::DateTime::<chrono::Utc>::from(SystemTime::now()).naive_utc();
        let until = now + chrono::Duration::from_std(at_most).unwrap();
        let insert = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table}(name, lock_until, locked_at, locked_by) VALUES(?, ?, ?, ?)"
        )))
        .bind(name)
        .bind(until)
        .bind(now)
        .bind(host)
        .execute(pool)
        .await;
        if insert.is_ok() {
            return true;
        }
        let update = format!(
            "UPDATE {table} SET lock_until = ?, locked_at = ?, locked_by = ? WHERE name = ? AND lock_until <= ?"
        );
        sqlx::query(sqlx::AssertSqlSafe(update))
            .bind(until)
            .bind(now)
            .bind(host)
            .bind(name)
            .bind(now)
            .execute(pool)
            .await
            .unwrap()
            .rows_affected()
            == 1
    }
}

#[tokio::test]
async fn rows_written_by_java_shedlocks_sql_and_by_rust_honour_each_other() {
    let pool = pool().await;
    let table = unique("my_interop");
    // ShedLock's own DDL, exactly as documented (default collation).
    exec(
        &pool,
        &format!(
            "CREATE TABLE {table}(name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3) NOT NULL, \
             locked_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3), \
             locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"
        ),
    )
    .await;
    let rust = MySqlLockProvider::builder_from_url(url())
        .table_name(&table)
        .build()
        .await
        .unwrap();

    assert!(java::server_time_lock(&pool, &table, "job", "java-host", MINUTE).await);
    assert!(
        lock(&rust, "job", MINUTE).await.is_none(),
        "Java's lock is honoured"
    );
    assert_eq!(
        java::server_time_unlock(&pool, &table, "job", "java-host", Duration::ZERO).await,
        1
    );
    let rust_held = lock(&rust, "job", MINUTE)
        .await
        .expect("free after Java's release");
    assert!(
        !java::server_time_lock(&pool, &table, "job", "java-host", MINUTE).await,
        "Rust's lock is honoured"
    );
    assert!(
        !java::jdbc_lock(&pool, &table, "job", "java-host", MINUTE).await,
        "also by the client-time JDBC provider"
    );
    assert_eq!(
        java::server_time_unlock(&pool, &table, "job", "java-host", Duration::ZERO).await,
        0,
        "Java's host-name unlock does not match Rust's owner"
    );
    assert!(rust_held.unlock().await.unwrap());

    let with_at_least = rust
        .try_lock(&config("job2", MINUTE, Duration::from_millis(400)))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert!(with_at_least.unlock().await.unwrap());
    assert!(
        !java::server_time_lock(&pool, &table, "job2", "java-host", MINUTE).await,
        "within Rust's at-least"
    );
    tokio::time::sleep(Duration::from_millis(550)).await;
    assert!(
        java::server_time_lock(&pool, &table, "job2", "java-host", MINUTE).await,
        "after Rust's at-least"
    );
    assert!(
        java::server_time_lock(
            &pool,
            &table,
            "job",
            "java-host",
            Duration::from_millis(300)
        )
        .await,
        "free after Rust's release"
    );
    assert!(lock(&rust, "job", MINUTE).await.is_none());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let taken = lock(&rust, "job", MINUTE)
        .await
        .expect("Java's lock expired");
    taken.unlock().await.unwrap();

    assert!(java::jdbc_lock(&pool, &table, "jdbc", "java-host", MINUTE).await);
    assert!(lock(&rust, "jdbc", MINUTE).await.is_none());
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn the_server_flavor_is_detected() {
    let table = unique("my_flavor");
    let provider = provider_on(&table, false).await;
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(provider.pool())
        .await
        .unwrap();
    let expected = if version.contains("MariaDB") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    assert_eq!(provider.backend().flavor(), expected, "{version}");
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn errors_on_a_dropped_table_name_the_statement_and_the_acquire_fails_closed() {
    let pool = pool().await;
    let table = unique("my_dropped");
    let provider = provider_on(&table, false).await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
    let text = provider
        .try_lock(&config("job", MINUTE, Duration::ZERO))
        .await
        .unwrap_err()
        .to_string();
    assert!(text.contains("acquire of lock \"job\" failed"), "{text}");
    assert!(text.contains("doesn't exist"), "{text}");
}

#[tokio::test]
async fn the_acquire_means_the_same_under_mariadbs_simultaneous_assignment() {
    let probe_table = unique("my_probe");
    let flavor = provider_on(&probe_table, false).await.backend().flavor();
    exec(&pool().await, &format!("DROP TABLE {probe_table}")).await;
    // MariaDB can evaluate assignments simultaneously instead of left to right; the acquire
    // statement must not depend on the order. MySQL has no such mode: the default order runs.
    let mode = if flavor == Flavor::MariaDb {
        "SET sql_mode = CONCAT(@@sql_mode, ',SIMULTANEOUS_ASSIGNMENT')"
    } else {
        "SET sql_mode = @@sql_mode"
    };
    let pool = sqlx::mysql::MySqlPoolOptions::new()
        .after_connect(move |connection, _| {
            Box::pin(async move { sqlx::query(mode).execute(connection).await.map(|_| ()) })
        })
        .connect(&url())
        .await
        .unwrap();
    if flavor == Flavor::MariaDb {
        let mode: String = sqlx::query_scalar("SELECT CAST(@@sql_mode AS CHAR)")
            .fetch_one(&pool)
            .await
            .unwrap();
        assert!(mode.contains("SIMULTANEOUS_ASSIGNMENT"), "{mode}");
    }
    let table = unique("my_simul");
    let build = || {
        MySqlLockProvider::builder(pool.clone())
            .table_name(&table)
            .create_table_if_missing(true)
            .build()
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    for expected in 1..=3u64 {
        let held = lock(&a, "job", Duration::from_millis(300))
            .await
            .expect("free");
        assert_eq!(held.fencing_token(), Some(expected));
        assert!(lock(&b, "job", MINUTE).await.is_none(), "held");
        if expected == 2 {
            // Let it expire instead of releasing: the take-over path.
            tokio::time::sleep(Duration::from_millis(450)).await;
        } else {
            assert!(held.unlock().await.unwrap());
        }
    }
    exec(&pool, &format!("DROP TABLE {table}")).await;
}
