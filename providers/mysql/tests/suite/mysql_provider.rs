//! The MySQL/MariaDB provider against a real server: the one-statement acquire and how its
//! outcome is read, schema checks, errors, fencing, time sources, collations and
//! interoperation with Java ShedLock's own SQL.

use std::time::{Duration, SystemTime};

use shedlock_core::{LockProvider, TimeSource};
use shedlock_mysql::{Column, Flavor, LockTable, MySqlLockProvider, create_table_statement};
use shedlock_test_support::sql::provider_tests::{self as shared, config, exec, lock, unique};
use shedlock_test_support::sql::test_database::TestDatabase;
use sqlx::mysql::MySqlPool;

use crate::database::{MySql, url};

const MINUTE: Duration = Duration::from_secs(60);

shedlock_test_support::sql_provider_tests!(MySql, server);

#[tokio::test]
async fn names_longer_than_the_column_are_refused_before_anything_is_written() {
    shared::names_longer_than_the_column_are_refused_before_anything_is_written(
        &MySql,
        "name VARCHAR(10) CHARACTER SET utf8mb4 PRIMARY KEY, lock_until TIMESTAMP(3) NOT NULL, \
         locked_at TIMESTAMP(3) NOT NULL, locked_by VARCHAR(255) NOT NULL",
    )
    .await;
}

#[tokio::test]
async fn created_tables_keep_case_and_space_distinct_names_apart() {
    let table = unique("my_names");
    let provider = MySql.node(&table, false).await;
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
    MySql.drop_table(&table).await;
}

#[tokio::test]
async fn shedlock_style_collations_and_charsets_refuse_names_they_would_merge_or_mangle() {
    let pool = MySql.pool().await;
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
    let rows = MySql.rows(&table).await;
    assert_eq!(rows.count().await, 0, "nothing written");
    // Case-insensitive: one lock for both spellings (over-exclusion, never under-exclusion).
    let held = lock(&provider, "Job", MINUTE).await.unwrap();
    assert!(lock(&provider, "job", MINUTE).await.is_none());
    held.unlock().await.unwrap();
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn wrong_column_types_keys_and_auto_increment_are_refused() {
    shared::tables_of_the_wrong_shape_are_refused(
        &MySql,
        &[
            (
                "name VARCHAR(64) NOT NULL, lock_until VARCHAR(30), locked_at TIMESTAMP(3), \
                 locked_by VARCHAR(255), PRIMARY KEY (name)",
                &["column lock_until has type varchar(30), but it must be a timestamp type"],
            ),
            (
                "name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), \
                 locked_by INT, PRIMARY KEY (name)",
                &["column locked_by has type int"],
            ),
            (
                "name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), \
                 locked_by VARCHAR(255), fencing_token VARCHAR(5), PRIMARY KEY (name)",
                &["column fencing_token has type varchar(5)"],
            ),
            (
                "name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), \
                 locked_by VARCHAR(255)",
                &["must be its primary key"],
            ),
            (
                "name VARCHAR(64) NOT NULL, lock_until TIMESTAMP(3), locked_at TIMESTAMP(3), \
                 locked_by VARCHAR(255), id BIGINT AUTO_INCREMENT, PRIMARY KEY (name), KEY (id)",
                &["AUTO_INCREMENT column id"],
            ),
        ],
    )
    .await;
    let bad = MySqlLockProvider::builder()
        .column_name(Column::LockedBy, "locked`by")
        .build(MySql.pool().await)
        .await
        .unwrap_err()
        .to_string();
    assert!(bad.contains("column locked_by"), "{bad}");
}

#[tokio::test]
async fn fencing_tokens_come_back_through_the_insert_id_and_are_absent_without_the_column() {
    let with = unique("my_fence");
    let node_a = MySql.node(&with, true).await;
    shared::fencing_tokens_count_acquisitions(&node_a, &node_a.node()).await;
    let stored: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT fencing_token FROM {with} WHERE name = 'fenced'"
    )))
    .fetch_one(&MySql.pool().await)
    .await
    .unwrap();
    assert_eq!(stored, 4, "the returned token is the stored one");

    let without = unique("my_nofence");
    let plain = MySql.node(&without, false).await;
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT CAST(COLUMN_NAME AS CHAR) FROM information_schema.COLUMNS \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
    )
    .bind(&without)
    .fetch_all(&MySql.pool().await)
    .await
    .unwrap();
    assert_eq!(columns, ["name", "lock_until", "locked_at", "locked_by"]);
    shared::no_fencing_tokens_without_the_column(&plain).await;
    exec(
        &MySql.pool().await,
        &format!("DROP TABLE {with}, {without}"),
    )
    .await;
    let [with, without] =
        shared::the_fencing_column_is_checked_by_connect_and_trusted_by_connect_lazy::<
            shedlock_mysql::MySqlBackend,
        >(&url())
        .await;
    exec(
        &MySql.pool().await,
        &format!("DROP TABLE {with}, {without}"),
    )
    .await;
}

#[tokio::test]
async fn custom_database_table_and_column_names_work() {
    let pool = MySql.pool().await;
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
    let pool = MySql.pool().await;
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
        let rows = MySql.rows(&datetimes).await;
        let age = rows.row(&case).await.unwrap().locked_at_from_now;
        assert!(age.abs() < 5.0, "{case}: stored times are UTC, {age}s off");
    }
    exec(&pool, &format!("DROP TABLE {timestamps}, {datetimes}")).await;
}

/// Java ShedLock's MySQL statements on one table.
struct JavaShedLock<'a> {
    pool: &'a MySqlPool,
    table: &'a str,
}

const NOW: &str = MySql::NOW;

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
    let pool = MySql.pool().await;
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
    let provider = MySql.node(&table, false).await;
    let version: String = sqlx::query_scalar("SELECT CAST(VERSION() AS CHAR)")
        .fetch_one(&MySql.pool().await)
        .await
        .unwrap();
    let expected = if version.contains("MariaDB") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    assert_eq!(provider.backend().flavor(), expected, "{version}");
    MySql.drop_table(&table).await;
}

#[tokio::test]
async fn the_acquire_means_the_same_under_mariadbs_simultaneous_assignment() {
    let probe_table = unique("my_probe");
    let flavor = MySql.node(&probe_table, false).await.backend().flavor();
    MySql.drop_table(&probe_table).await;
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
async fn locks_ending_past_what_lock_until_can_keep_are_refused_before_writing() {
    // MariaDB's TIMESTAMP reaches 2106 from 11.5 on 64-bit servers (MDEV-32188), and says so
    // through FROM_UNIXTIME, which gives NULL past its range; MySQL's ends in 2038.
    let (version, wide): (String, i64) = sqlx::query_as(
        "SELECT CAST(VERSION() AS CHAR), CAST(FROM_UNIXTIME(4294967295) IS NOT NULL AS SIGNED)",
    )
    .fetch_one(&MySql.pool().await)
    .await
    .unwrap();
    let limit = |seconds, shown, column| shared::LockUntilLimit {
        latest: Duration::new(seconds, 999_000_000),
        shown,
        column,
    };
    let year_2038 = || {
        limit(
            2_147_483_647,
            "2038-01-19 03:14:07.999 UTC",
            "column lock_until (timestamp(3))",
        )
    };
    let made = if version.to_ascii_lowercase().contains("mariadb") && wide == 1 {
        limit(
            4_294_967_295,
            "2106-02-07 06:28:15.999 UTC",
            "column lock_until (timestamp(3))",
        )
    } else {
        year_2038()
    };
    // Built without connecting, the provider trusts the table to be the one it makes, on MySQL.
    shared::locks_ending_past_the_lock_until_columns_limit_are_refused_on_every_table(
        &MySql,
        "DATETIME(3)",
        [
            made,
            year_2038(),
            limit(
                253_402_300_799,
                "9999-12-31 23:59:59.999 UTC",
                "column lock_until (datetime(3))",
            ),
        ],
    )
    .await;
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
        MySql.pool().await,
    ))
    .await;
}
