//! The MySQL/MariaDB provider against a real server: the one-statement acquire and how its
//! outcome is read, schema checks, errors, fencing, time sources, collations and
//! interoperation with Java ShedLock's own SQL.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shedlock_core::{LockProvider, TimeSource};
use shedlock_mysql::{Column, Flavor, LockTable, MySqlLockProvider, create_table_statement};
use shedlock_test_support::sql::provider_tests::{self as shared, config, exec, lock, unique};
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
    let builder = MySqlLockProvider::builder().table_name(table);
    let builder = if fencing {
        builder.create_table_with_fencing_if_missing()
    } else {
        builder.create_table_if_missing()
    };
    builder.holder("rust-node").connect(url()).await.unwrap()
}

/// Reads `table`'s rows back.
struct Rows<'a> {
    pool: &'a MySqlPool,
    table: &'a str,
}

#[async_trait::async_trait]
impl shared::StoredRows for Rows<'_> {
    async fn row(&self, name: &str) -> Option<shared::StoredRow> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, locked_at, lock_until) / 1000 AS DOUBLE), \
             locked_by, CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), locked_at) / 1e6 AS DOUBLE) \
             FROM {} WHERE name = ?",
            self.table
        )))
        .bind(name)
        .fetch_optional(self.pool)
        .await
        .unwrap()
        .map(|r| shared::StoredRow {
            held_ms: r.get(0),
            locked_by: r.get(1),
            locked_at_from_now: r.get(2),
        })
    }

    async fn count(&self) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COUNT(*) FROM {}",
            self.table
        )))
        .fetch_one(self.pool)
        .await
        .unwrap()
    }
}

#[tokio::test]
async fn a_column_name_given_twice_is_refused_and_no_table_created() {
    let pool = pool().await;
    let table = shared::unique("twice");
    shared::a_column_name_given_twice_is_refused_before_anything_is_written(
        MySqlLockProvider::builder().table_name(&table),
        &url(),
    )
    .await;
    let found: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
    )
    .bind(&table)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(found, 0, "table {table} was created");
}

#[tokio::test]
async fn one_statement_acquire_creates_the_row_excludes_others_and_releases() {
    let table = unique("my_basic");
    let node_a = provider_on(&table, false).await;
    let node_b = node_a.node().with_holder("other-node");
    let pool = pool().await;
    let rows = Rows {
        pool: &pool,
        table: &table,
    };
    shared::acquire_writes_the_row_excludes_others_and_releases(&node_a, &node_b, &rows).await;
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
    let provider = MySqlLockProvider::builder()
        .table_name(&table)
        .build(pool.clone())
        .await
        .unwrap();
    let rows = Rows {
        pool: &pool,
        table: &table,
    };
    shared::a_narrow_name_column_refuses_longer_names_before_writing(&provider, &rows).await;

    let default_table = unique("my_len64");
    let shedlock = provider_on(&default_table, false).await;
    let rows = Rows {
        pool: &pool,
        table: &default_table,
    };
    shared::shedlocks_name_column_takes_64_characters(&shedlock, &rows).await;
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
    let provider = MySqlLockProvider::builder()
        .table_name(&table)
        .build(pool.clone())
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
    let rows = Rows {
        pool: &pool,
        table: &table,
    };
    assert_eq!(shared::StoredRows::count(&rows).await, 0, "nothing written");
    // Case-insensitive: one lock for both spellings (over-exclusion, never under-exclusion).
    let held = lock(&provider, "Job", MINUTE).await.unwrap();
    assert!(lock(&provider, "job", MINUTE).await.is_none());
    held.unlock().await.unwrap();
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn a_missing_table_is_an_error_that_shows_how_to_create_it() {
    let table = unique("my_missing");
    let error = MySqlLockProvider::builder()
        .table_name(&table)
        .connect(url())
        .await
        .unwrap_err();
    assert_eq!(
        error.kind(),
        shedlock_core::ErrorKind::Configuration,
        "{error}"
    );
    let error = error.to_string();
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
        let error = MySqlLockProvider::builder()
            .table_name(&table)
            .build(pool.clone())
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(expected), "{columns}: {error}");
        exec(&pool, &format!("DROP TABLE {table}")).await;
    }
    let bad = MySqlLockProvider::builder()
        .column_name(Column::LockedBy, "locked`by")
        .build(pool.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(bad.contains("column locked_by"), "{bad}");
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_within_the_connect_timeout_without_the_password() {
    let started = Instant::now();
    let error = MySqlLockProvider::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect("mysql://app:hunter2@127.0.0.1:1/test")
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
    let error = MySqlLockProvider::builder()
        .connect_timeout(Duration::from_secs(1))
        .connect("mysql://app:hunter2@10.255.255.1:3306/test")
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
    shared::fencing_tokens_count_acquisitions(&node_a, &node_a.node()).await;
    let stored: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT fencing_token FROM {with} WHERE name = 'fenced'"
    )))
    .fetch_one(&pool().await)
    .await
    .unwrap();
    assert_eq!(stored, 4, "the returned token is the stored one");

    let without = unique("my_nofence");
    let plain = provider_on(&without, false).await;
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(&without)
    .fetch_all(&pool().await)
    .await
    .unwrap();
    assert_eq!(columns, ["name", "lock_until", "locked_at", "locked_by"]);
    shared::no_fencing_tokens_without_the_column(&plain).await;
    exec(&pool().await, &format!("DROP TABLE {with}, {without}")).await;
    let [with, without] =
        shared::the_fencing_column_is_checked_by_connect_and_trusted_by_connect_lazy::<
            shedlock_mysql::MySqlBackend,
        >(&url())
        .await;
    exec(&pool().await, &format!("DROP TABLE {with}, {without}")).await;
}

#[tokio::test]
async fn custom_database_table_and_column_names_work() {
    let pool = pool().await;
    let database = unique("shedlock_db");
    exec(&pool, &format!("CREATE DATABASE {database}")).await;
    let qualified = format!("{database}.job_locks");
    let build = || {
        shared::renamed_table_and_columns(MySqlLockProvider::builder(), &qualified)
            .create_table_with_fencing_if_missing()
            .build(pool.clone())
    };
    let (node_a, node_b) = (build().await.unwrap(), build().await.unwrap());
    shared::renamed_table_and_columns_lock_as_shedlocks_do(&node_a, &node_b, true).await;
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
    let error = MySqlLockProvider::builder()
        .table_name(&timestamps)
        .build(tokyo.clone())
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
        let node_a = MySqlLockProvider::builder()
            .table_name(&datetimes)
            .time_source(time_source)
            .build(tokyo.clone())
            .await
            .unwrap();
        let node_b = MySqlLockProvider::builder()
            .table_name(&datetimes)
            .time_source(time_source)
            .connect(url())
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
        let rows = Rows {
            pool: &pool,
            table: &datetimes,
        };
        let age = shared::StoredRows::row(&rows, &case)
            .await
            .unwrap()
            .locked_at_from_now;
        assert!(age.abs() < 5.0, "{case}: stored times are UTC, {age}s off");
    }
    exec(&pool, &format!("DROP TABLE {timestamps}, {datetimes}")).await;
}

#[tokio::test]
async fn server_time_ignores_node_clocks_and_client_time_uses_them() {
    let table = unique("my_clock");
    let server_time = provider_on(&table, false).await;
    let client_time = MySqlLockProvider::builder()
        .table_name(&table)
        .time_source(TimeSource::Client)
        .connect(url())
        .await
        .unwrap();
    let pool = pool().await;
    let rows = Rows {
        pool: &pool,
        table: &table,
    };
    shared::server_time_ignores_node_clocks_and_client_time_uses_them(
        &server_time,
        &client_time,
        &rows,
    )
    .await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn lock_statements_run_outside_the_callers_transaction() {
    let pool = pool().await;
    let table = unique("my_tx");
    let provider = MySqlLockProvider::builder()
        .table_name(&table)
        .create_table_if_missing()
        .build(pool.clone())
        .await
        .unwrap();
    shared::lock_statements_run_outside_the_callers_transaction(&provider).await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

/// Java ShedLock's MySQL statements on one table.
struct JavaShedLock<'a> {
    pool: &'a MySqlPool,
    table: &'a str,
}

const NOW: &str = "UTC_TIMESTAMP(3)";

fn micros(d: Duration) -> i64 {
    d.as_micros() as i64
}

#[async_trait::async_trait]
impl shared::JavaShedLock for JavaShedLock<'_> {
    /// `INSERT IGNORE`, then the conditional update.
    async fn server_time_lock(&self, name: &str, at_most: Duration) -> bool {
        let table = self.table;
        let insert = format!(
            "INSERT IGNORE INTO {table}(name, lock_until, locked_at, locked_by) \
             VALUES(?, TIMESTAMPADD(MICROSECOND, ?, {NOW}), {NOW}, ?)"
        );
        let inserted = sqlx::query(sqlx::AssertSqlSafe(insert))
            .bind(name)
            .bind(micros(at_most))
            .bind(shared::JAVA_HOST)
            .execute(self.pool)
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
            .bind(shared::JAVA_HOST)
            .bind(name)
            .execute(self.pool)
            .await
            .unwrap()
            .rows_affected()
            == 1
    }

    async fn server_time_unlock(&self, name: &str, at_least: Duration) -> u64 {
        let sql = format!(
            "UPDATE {} SET lock_until = IF(TIMESTAMPADD(MICROSECOND, ?, locked_at) > {NOW}, \
             TIMESTAMPADD(MICROSECOND, ?, locked_at), {NOW}) WHERE name = ? AND locked_by = ?",
            self.table
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(micros(at_least))
            .bind(micros(at_least))
            .bind(name)
            .bind(shared::JAVA_HOST)
            .execute(self.pool)
            .await
            .unwrap()
            .rows_affected()
    }

    async fn jdbc_lock(&self, name: &str, at_most: Duration) -> bool {
        let table = self.table;
        let now = chrono::DateTime::<chrono::Utc>::from(SystemTime::now()).naive_utc();
        let until = now + chrono::Duration::from_std(at_most).unwrap();
        let insert = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table}(name, lock_until, locked_at, locked_by) VALUES(?, ?, ?, ?)"
        )))
        .bind(name)
        .bind(until)
        .bind(now)
        .bind(shared::JAVA_HOST)
        .execute(self.pool)
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
            .bind(shared::JAVA_HOST)
            .bind(name)
            .bind(now)
            .execute(self.pool)
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
    let rust = MySqlLockProvider::builder()
        .table_name(&table)
        .connect(url())
        .await
        .unwrap();
    let java = JavaShedLock {
        pool: &pool,
        table: &table,
    };
    shared::rows_written_by_java_shedlock_and_by_rust_honour_each_other(&rust, &java).await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn the_server_flavor_is_detected() {
    let table = unique("my_flavor");
    let provider = provider_on(&table, false).await;
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&pool().await)
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
    let error = provider
        .try_lock(&config("job", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("acquire of lock \"job\" failed"), "{text}");
    // The server's words are the cause, said once: in `source()`, not again in the message.
    let chain: Vec<String> =
        std::iter::successors(Some(&error as &(dyn std::error::Error + 'static)), |&e| {
            e.source()
        })
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        chain
            .iter()
            .filter(|message| message.contains("doesn't exist"))
            .count(),
        1,
        "{chain:?}"
    );
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
        MySqlLockProvider::builder()
            .table_name(&table)
            .create_table_with_fencing_if_missing()
            .build(pool.clone())
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

#[tokio::test]
async fn urls_of_other_backends_are_refused_by_their_scheme_before_connecting() {
    for (url, refused) in [
        (
            "redis://:hunter2@127.0.0.1:6379",
            "the URL's scheme is \"redis\"",
        ),
        (
            "postgres://app:hunter2@127.0.0.1:3306/test",
            "the URL's scheme is \"postgres\"",
        ),
        ("app:hunter2@127.0.0.1:3306/test", "the URL has no scheme"),
    ] {
        let error = MySqlLockProvider::connect(url).await.unwrap_err();
        let message = error.to_string();
        assert!(message.contains(refused), "{url}: {message}");
        assert!(
            message.contains("accepts mysql://... or mariadb://..."),
            "{message}"
        );
        assert!(
            !format!("{message} {error:?}").contains("hunter2"),
            "{message}"
        );
    }
    // MariaDB's scheme is the same protocol and connects too.
    let mariadb = url().replacen("mysql://", "mariadb://", 1);
    let provider = tokio::time::timeout(
        Duration::from_secs(30),
        MySqlLockProvider::builder()
            .create_table_if_missing()
            .connect(mariadb),
    )
    .await
    .expect("connecting took over 30 s");
    provider.unwrap();
}

#[tokio::test]
async fn locks_ending_past_what_lock_until_can_keep_are_refused_before_writing() {
    let pool = pool().await;
    // MariaDB's TIMESTAMP reaches 2106 from 11.5 on 64-bit servers (MDEV-32188), and says so
    // through FROM_UNIXTIME, which gives NULL past its range; MySQL's ends in 2038.
    let (version, wide): (String, i64) = sqlx::query_as(
        "SELECT CAST(VERSION() AS CHAR), CAST(FROM_UNIXTIME(4294967295) IS NOT NULL AS SIGNED)",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let timestamp = if version.to_ascii_lowercase().contains("mariadb") && wide == 1 {
        (4_294_967_295, "2106-02-07 06:28:15.999 UTC")
    } else {
        (2_147_483_647, "2038-01-19 03:14:07.999 UTC")
    };
    let made = unique("my_limit_ts");
    let by_hand = unique("my_limit_dt");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {by_hand} (name VARCHAR(64) PRIMARY KEY, lock_until DATETIME(3) NOT NULL, \
             locked_at DATETIME(3) NOT NULL, locked_by VARCHAR(255) NOT NULL)"
        ),
    )
    .await;
    let checked = provider_on(&made, false).await;
    // Built without connecting, the provider trusts the table to be the one it makes, on MySQL.
    let unchecked = MySqlLockProvider::builder()
        .table_name(&made)
        .holder("rust-node")
        .connect_lazy(url())
        .await
        .unwrap();
    let hand_made = MySqlLockProvider::builder()
        .table_name(&by_hand)
        .holder("rust-node")
        .connect(url())
        .await
        .unwrap();
    for (table, provider, (latest, shown), column) in [
        (
            &made,
            checked,
            timestamp,
            "column lock_until (timestamp(3))",
        ),
        (
            &made,
            unchecked,
            (2_147_483_647, "2038-01-19 03:14:07.999 UTC"),
            "column lock_until (timestamp(3))",
        ),
        (
            &by_hand,
            hand_made,
            (253_402_300_799, "9999-12-31 23:59:59.999 UTC"),
            "column lock_until (datetime(3))",
        ),
    ] {
        exec(&pool, &format!("DELETE FROM {table}")).await;
        let ahead = MySqlLockProvider::builder()
            .table_name(table)
            .time_source(TimeSource::Client)
            .clock(shared::two_days_ahead())
            .connect(url())
            .await
            .unwrap();
        shared::locks_ending_past_the_lock_until_columns_limit_are_refused_before_writing(
            &provider,
            Some(&ahead),
            &provider,
            &Rows { pool: &pool, table },
            &shared::LockUntilLimit {
                latest: Duration::new(latest, 999_000_000),
                shown,
                column,
            },
        )
        .await;
    }
    exec(&pool, &format!("DROP TABLE {made}, {by_hand}")).await;
}

/// A new database per round.
struct NewDatabase(MySqlPool);

impl shared::NewStorage for NewDatabase {
    async fn make(&self) -> String {
        let database = unique("first_use");
        exec(&self.0, &format!("CREATE DATABASE {database}")).await;
        let url = url();
        let (base, query) = url
            .split_once('?')
            .map_or((url.as_str(), None), |(b, q)| (b, Some(q)));
        let server = base.rsplit_once('/').map_or(base, |(server, _)| server);
        match query {
            Some(query) => format!("{server}/{database}?{query}"),
            None => format!("{server}/{database}"),
        }
    }

    async fn columns(&self, url: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = ? AND TABLE_NAME = 'shedlock'",
        )
        .bind(database_of(url))
        .fetch_one(&self.0)
        .await
        .unwrap()
    }

    async fn remove(&self, url: &str) {
        exec(&self.0, &format!("DROP DATABASE {}", database_of(url))).await;
    }
}

fn database_of(url: &str) -> &str {
    let base = url.split_once('?').map_or(url, |(base, _)| base);
    base.rsplit_once('/').unwrap().1
}

/// 16 replicas starting together on a new database, each creating the table: all start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_create_the_table_at_once_on_a_new_database() {
    shared::sixteen_nodes_create_the_table::<shedlock_mysql::MySqlBackend>(NewDatabase(
        pool().await,
    ))
    .await;
}
