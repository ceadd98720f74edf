//! The PostgreSQL provider against a real server: statements, schema checks, errors, fencing,
//! time sources and interoperation with Java ShedLock's own SQL.

#[path = "../../sql/tests/shared/provider_tests.rs"]
mod shared;

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shared::{config, exec, lock, unique};
use shedlock_core::{Clock, LockError, LockProvider, SkewedClock, SystemClock, TimeSource};
use shedlock_postgres::{Column, PostgresLockProvider, create_table_statement};
use sqlx::Row;

const MINUTE: Duration = Duration::from_secs(60);

fn url() -> String {
    shared::url_from_env(
        "SHEDLOCK_TEST_POSTGRES_URL",
        "a PostgreSQL server",
        "postgres://postgres@127.0.0.1:5432/test",
    )
}

async fn pool() -> sqlx::PgPool {
    shared::pool(&url()).await
}

async fn provider_on(table: &str, fencing: bool) -> PostgresLockProvider {
    PostgresLockProvider::builder_from_url(url())
        .table_name(table)
        .create_table_if_missing(fencing)
        .holder("rust-node")
        .build()
        .await
        .unwrap()
}

/// The row as stored: (lock_until - locked_at in ms, locked_by, seconds between locked_at and
/// the server's UTC now).
async fn row(pool: &sqlx::PgPool, table: &str, name: &str) -> Option<(f64, String, f64)> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT EXTRACT(EPOCH FROM lock_until - locked_at)::float8 * 1000, locked_by, \
         ABS(EXTRACT(EPOCH FROM timezone('utc', CURRENT_TIMESTAMP) - locked_at))::float8 \
         FROM {table} WHERE name = $1"
    )))
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap()
    .map(|r| (r.get(0), r.get(1), r.get(2)))
}

#[tokio::test]
async fn one_statement_acquire_creates_the_row_excludes_others_and_releases() {
    let table = unique("pg_basic");
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

    assert!(lock(&node_b, "job", MINUTE).await.is_none(), "held by A");
    assert!(
        lock(&node_a, "job", MINUTE).await.is_none(),
        "not re-entrant at this level"
    );
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
    again.unlock().await.unwrap();
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn racing_first_acquires_of_a_new_name_let_exactly_one_in() {
    let table = unique("pg_race");
    let first = provider_on(&table, false).await;
    let nodes: Vec<Arc<dyn LockProvider>> = (0..8).map(|_| Arc::new(first.node()) as _).collect();
    shared::exactly_one_racing_node_acquires(&nodes).await;
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn release_keeps_the_lock_until_at_least_and_extend_moves_it() {
    let table = unique("pg_times");
    let node_a = provider_on(&table, false).await;
    shared::release_keeps_at_least_and_extend_moves_the_lock(&node_a, &node_a.node()).await;
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock() {
    let table = unique("pg_stale");
    let node_a = provider_on(&table, false).await;
    let node_b = node_a.node().with_holder("rust-node");
    shared::an_expired_holder_cannot_touch_the_next_holders_lock(&node_a, &node_b).await;
    exec(&pool().await, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn names_longer_than_the_column_are_refused_before_anything_is_written() {
    let pool = pool().await;
    let table = unique("pg_len");
    // A narrower column than ShedLock's: the limit comes from the catalog, not a constant.
    exec(
        &pool,
        &format!(
            "CREATE TABLE {table} (name VARCHAR(10) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, \
             locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)"
        ),
    )
    .await;
    let provider = PostgresLockProvider::builder(pool.clone())
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
            assert!(
                rule.contains("11 characters") && rule.contains("limit is 10"),
                "{rule}"
            );
        }
        other => panic!("expected InvalidName, got {other:?}"),
    }
    // Ten characters, multi-byte: counted in characters as PostgreSQL does.
    assert!(lock(&provider, "ääääääääää", MINUTE).await.is_some());
    let count: i64 =
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(count, 1, "only the accepted name was written");

    let nul = provider
        .try_lock(&config("a\0b", MINUTE, Duration::ZERO))
        .await;
    assert!(matches!(nul, Err(LockError::InvalidName { .. })), "{nul:?}");

    let default_table = unique("pg_len64");
    let shedlock = provider_on(&default_table, false).await;
    assert_eq!(shedlock.capabilities().max_name_chars, Some(64));
    assert!(lock(&shedlock, &"n".repeat(64), MINUTE).await.is_some());
    assert!(matches!(
        shedlock
            .try_lock(&config(&"n".repeat(65), MINUTE, Duration::ZERO))
            .await,
        Err(LockError::InvalidName { .. })
    ));
    exec(&pool, &format!("DROP TABLE {table}, {default_table}")).await;
}

#[tokio::test]
async fn a_missing_table_is_an_error_that_shows_how_to_create_it() {
    let table = unique("pg_missing");
    let error = PostgresLockProvider::builder_from_url(url())
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
        error.contains(&format!("CREATE TABLE IF NOT EXISTS \"{table}\"")),
        "{error}"
    );
    assert!(error.contains("create_table_if_missing"), "{error}");
}

#[tokio::test]
async fn wrong_column_types_and_a_name_without_unique_index_are_refused() {
    let pool = pool().await;
    let text_times = unique("pg_wrongtype");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {text_times} (name VARCHAR(64) PRIMARY KEY, lock_until VARCHAR(30), \
             locked_at TIMESTAMP, locked_by VARCHAR(255))"
        ),
    )
    .await;
    let error = PostgresLockProvider::builder(pool.clone())
        .table_name(&text_times)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("column lock_until has type character varying(30)"),
        "{error}"
    );
    assert!(error.contains("must be a timestamp type"), "{error}");

    let bad_fencing = unique("pg_wrongfence");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {bad_fencing} (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP, \
             locked_at TIMESTAMP, locked_by VARCHAR(255), fencing_token TEXT)"
        ),
    )
    .await;
    let error = PostgresLockProvider::builder(pool.clone())
        .table_name(&bad_fencing)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("column fencing_token has type text"),
        "{error}"
    );

    let no_key = unique("pg_nokey");
    exec(
        &pool,
        &format!(
            "CREATE TABLE {no_key} (name VARCHAR(64), lock_until TIMESTAMP, \
             locked_at TIMESTAMP, locked_by VARCHAR(255))"
        ),
    )
    .await;
    let error = PostgresLockProvider::builder(pool.clone())
        .table_name(&no_key)
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(error.contains("must be its primary key"), "{error}");

    let bad_identifier = PostgresLockProvider::builder(pool.clone())
        .table_name("shedlock; DROP TABLE x")
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(bad_identifier.contains("table name"), "{bad_identifier}");
    exec(
        &pool,
        &format!("DROP TABLE {text_times}, {bad_fencing}, {no_key}"),
    )
    .await;
}

#[tokio::test]
async fn an_unreachable_server_is_an_error_within_the_connect_timeout_without_the_password() {
    let started = Instant::now();
    let error = PostgresLockProvider::builder_from_url("postgres://app:hunter2@127.0.0.1:1/test")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err();
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(4), "took {elapsed:?}");
    let text = format!("{error} / {error:?}");
    eprintln!("unreachable: {error}");
    assert!(!text.contains("hunter2"), "{text}");
    assert!(text.contains("app:***@127.0.0.1:1"), "{text}");
    assert!(text.contains("cannot connect"), "{text}");

    // A non-routable address never answers: the timeout, not the OS, ends the wait.
    let started = Instant::now();
    let error =
        PostgresLockProvider::builder_from_url("postgres://app:hunter2@10.255.255.1:5432/test")
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
async fn fencing_tokens_increase_with_the_column_and_are_absent_without_it() {
    let with = unique("pg_fence");
    let node_a = provider_on(&with, true).await;
    let node_b = node_a.node();
    assert!(node_a.capabilities().fencing);
    let mut last = 0;
    for i in 0..4 {
        let node = if i % 2 == 0 { &node_a } else { &node_b };
        let handle = lock(node, "fenced", MINUTE).await.unwrap();
        let token = handle.fencing_token().expect("a token");
        assert!(token > last, "token {token} after {last}");
        last = token;
        assert!(lock(&node_b, "fenced", MINUTE).await.is_none());
        handle.unlock().await.unwrap();
    }
    assert_eq!(last, 4);

    let without = unique("pg_nofence");
    let plain = provider_on(&without, false).await;
    assert!(!plain.capabilities().fencing);
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position",
    )
    .bind(&without)
    .fetch_all(&pool().await)
    .await
    .unwrap();
    assert_eq!(
        columns,
        ["name", "lock_until", "locked_at", "locked_by"],
        "exactly ShedLock's"
    );
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
async fn custom_schema_table_and_column_names_work() {
    let pool = pool().await;
    let schema = unique("shedlock_schema");
    exec(&pool, &format!("CREATE SCHEMA {schema}")).await;
    let qualified = format!("{schema}.Job_Locks");
    let build = || {
        PostgresLockProvider::builder(pool.clone())
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
    // Unquoted-identifier semantics: Job_Locks is job_locks, as in Java ShedLock's SQL.
    let owner: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT owner FROM {schema}.job_locks WHERE lock_name = 'job'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(owner.contains('#'), "{owner}");
    exec(&pool, &format!("DROP SCHEMA {schema} CASCADE")).await;
}

#[tokio::test]
async fn timestamp_and_timestamptz_columns_work_whatever_the_session_time_zone() {
    let pool = pool().await;
    let url = url();
    // A session far from UTC: UTC wall times and instants must still compare correctly.
    let tokyo = sqlx::postgres::PgPoolOptions::new()
        .after_connect(|connection, _| {
            Box::pin(async move {
                sqlx::query("SET TIME ZONE 'Asia/Tokyo'")
                    .execute(connection)
                    .await
                    .map(|_| ())
            })
        })
        .connect(&url)
        .await
        .unwrap();
    let zone: String = sqlx::query_scalar("SELECT current_setting('TimeZone')")
        .fetch_one(&tokyo)
        .await
        .unwrap();
    assert_eq!(zone, "Asia/Tokyo", "the session really is far from UTC");
    for column_type in ["TIMESTAMP", "TIMESTAMPTZ"] {
        let table = unique("pg_tz");
        exec(
            &pool,
            &format!(
                "CREATE TABLE {table} (name VARCHAR(64) PRIMARY KEY, lock_until {column_type} NOT NULL, \
                 locked_at {column_type} NOT NULL, locked_by VARCHAR(255) NOT NULL)"
            ),
        )
        .await;
        for time_source in [TimeSource::Server, TimeSource::Client] {
            let case = format!("{column_type} {time_source:?}");
            let node_a = PostgresLockProvider::builder(tokyo.clone())
                .table_name(&table)
                .time_source(time_source)
                .build()
                .await
                .unwrap();
            let node_b = PostgresLockProvider::builder_from_url(url.clone())
                .table_name(&table)
                .time_source(time_source)
                .build()
                .await
                .unwrap();
            let held = lock(&node_a, &case, Duration::from_millis(400))
                .await
                .unwrap();
            assert!(lock(&node_b, &case, MINUTE).await.is_none(), "{case}: held");
            tokio::time::sleep(Duration::from_millis(550)).await;
            let b = lock(&node_b, &case, Duration::from_millis(400)).await;
            assert!(b.is_some(), "{case}: expired");
            assert!(!held.unlock().await.unwrap(), "{case}");
            assert!(
                lock(&node_a, &case, MINUTE).await.is_none(),
                "{case}: B holds it"
            );
        }
        if column_type == "TIMESTAMP" {
            // Stored values are UTC wall times, as Java ShedLock writes them.
            let offset: f64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                "SELECT MAX(ABS(EXTRACT(EPOCH FROM locked_at - timezone('utc', CURRENT_TIMESTAMP))))::float8 FROM {table}"
            )))
            .fetch_one(&pool)
            .await
            .unwrap();
            assert!(offset < 10.0, "locked_at is UTC, {offset}s off");
        }
        exec(&pool, &format!("DROP TABLE {table}")).await;
    }
}

#[tokio::test]
async fn server_time_ignores_node_clocks_and_client_time_uses_them() {
    let table = unique("pg_clock");
    let hour = Duration::from_secs(3600);
    let ahead: Arc<dyn Clock> = Arc::new(SkewedClock::ahead(Arc::new(SystemClock), hour));

    // Server time: a node whose clock is an hour ahead still sees the lock as held.
    let honest = provider_on(&table, false).await;
    let skewed = honest.node().with_clock(ahead.clone());
    assert_eq!(honest.capabilities().time_source, TimeSource::Server);
    let held = lock(&honest, "server", MINUTE).await.unwrap();
    assert!(
        lock(&skewed, "server", MINUTE).await.is_none(),
        "skew must not matter"
    );
    held.unlock().await.unwrap();

    // Client time: the node's clock is what is written and compared.
    let client = PostgresLockProvider::builder_from_url(url())
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
        "an hour ahead, the client-time node believes the lock expired: the documented skew risk"
    );
    assert!(
        !held.unlock().await.unwrap(),
        "taken over, so not ours to release"
    );
    let at: f64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT EXTRACT(EPOCH FROM locked_at - timezone('utc', CURRENT_TIMESTAMP))::float8 FROM {table} WHERE name = 'client'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        (at - 3600.0).abs() < 5.0,
        "the skewed node wrote its own clock: {at}s ahead"
    );
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn lock_statements_run_outside_the_callers_transaction() {
    let pool = pool().await;
    let table = unique("pg_tx");
    let provider = PostgresLockProvider::builder(pool.clone())
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

/// Java ShedLock's statements, as SHEDLOCK-FACTS.md records them, run as plain SQL.
mod java {
    use super::*;

    const NOW: &str = "timezone('utc', CURRENT_TIMESTAMP)";

    /// JdbcTemplateLockProvider with usingDbTime(): one upsert; true when it took the lock.
    pub async fn server_time_lock(
        pool: &sqlx::PgPool,
        table: &str,
        name: &str,
        host: &str,
        at_most: Duration,
    ) -> bool {
        let secs = at_most.as_secs_f64();
        let sql = format!(
            "INSERT INTO {table}(name, lock_until, locked_at, locked_by) VALUES($1, {NOW} + make_interval(secs => $2), {NOW}, $3) \
             ON CONFLICT (name) DO UPDATE SET lock_until = {NOW} + make_interval(secs => $2), locked_at = {NOW}, locked_by = $3 \
             WHERE {table}.name = $1 AND {table}.lock_until <= {NOW}"
        );
        let done = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(secs)
            .bind(host)
            .execute(pool)
            .await
            .unwrap();
        done.rows_affected() == 1
    }

    /// Its server-time unlock: only the host name is checked.
    pub async fn server_time_unlock(
        pool: &sqlx::PgPool,
        table: &str,
        name: &str,
        host: &str,
        at_least: Duration,
    ) -> u64 {
        let sql = format!(
            "UPDATE {table} SET lock_until = CASE WHEN locked_at + make_interval(secs => $3) > {NOW} \
             THEN locked_at + make_interval(secs => $3) ELSE {NOW} END WHERE name = $1 AND locked_by = $2"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(host)
            .bind(at_least.as_secs_f64())
            .execute(pool)
            .await
            .unwrap()
            .rows_affected()
    }

    /// JdbcLockProvider (client time, a JVM in UTC): insert, then the conditional update.
    pub async fn jdbc_lock(
        pool: &sqlx::PgPool,
        table: &str,
        name: &str,
        host: &str,
        at_most: Duration,
    ) -> bool {
        let now = chrono::DateTime::<chrono::Utc>::from(SystemTime::now()).naive_utc();
        let until = now + chrono::Duration::from_std(at_most).unwrap();
        let insert = sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table}(name, lock_until, locked_at, locked_by) VALUES($1, $2, $3, $4)"
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
            "UPDATE {table} SET lock_until = $1, locked_at = $2, locked_by = $3 WHERE name = $4 AND lock_until <= $5"
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
    let table = unique("pg_interop");
    let rust = provider_on(&table, false).await;

    // Java holds the lock (server time): Rust must skip.
    assert!(java::server_time_lock(&pool, &table, "job", "java-host", MINUTE).await);
    assert!(
        lock(&rust, "job", MINUTE).await.is_none(),
        "Java's lock is honoured"
    );
    // Java releases: Rust takes it.
    assert_eq!(
        java::server_time_unlock(&pool, &table, "job", "java-host", Duration::ZERO).await,
        1
    );
    let rust_held = lock(&rust, "job", MINUTE)
        .await
        .expect("free after Java's release");
    // Rust holds it: Java's upsert changes nothing, and Java's unlock (host name only) does not
    // match Rust's per-acquisition owner.
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
        0
    );
    assert!(rust_held.unlock().await.unwrap());
    // Rust releases with at-least 400 ms: Java must wait for it too.
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

    // Java's lock expires by itself: Rust takes it once lock_until has passed, not before.
    assert!(lock(&rust, "job", MINUTE).await.is_none());
    tokio::time::sleep(Duration::from_millis(450)).await;
    let taken = lock(&rust, "job", MINUTE)
        .await
        .expect("Java's lock expired");
    taken.unlock().await.unwrap();

    // The client-time JDBC provider's rows (JVM in UTC) are honoured the same way.
    assert!(
        java::jdbc_lock(&pool, &table, "jdbc", "java-host", MINUTE).await,
        "insert path"
    );
    assert!(lock(&rust, "jdbc", MINUTE).await.is_none());
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn errors_on_a_dropped_table_name_the_statement_and_the_acquire_fails_closed() {
    let pool = pool().await;
    let table = unique("pg_dropped");
    let provider = provider_on(&table, false).await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
    let error = provider
        .try_lock(&config("job", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(text.contains("acquire of lock \"job\" failed"), "{text}");
    assert!(text.contains("does not exist"), "{text}");
    assert!(
        provider
            .try_lock(&config("job", MINUTE, Duration::ZERO))
            .await
            .is_err(),
        "still an error, never a silent NotAcquired"
    );
}

#[test]
fn the_documented_ddl_is_shedlocks_table() {
    let ddl = create_table_statement(&shedlock_postgres::LockTable::default(), false);
    assert_eq!(
        ddl,
        "CREATE TABLE IF NOT EXISTS \"shedlock\" (\"name\" VARCHAR(64) NOT NULL, \"lock_until\" \
         TIMESTAMP NOT NULL, \"locked_at\" TIMESTAMP NOT NULL, \"locked_by\" VARCHAR(255) NOT NULL, \
         PRIMARY KEY (\"name\"))"
    );
}
