//! The SQLite provider on a real database file: statements, schema checks, errors, fencing,
//! time sources and rows written by other programs.

#[path = "../../sql/tests/shared/provider_tests.rs"]
mod shared;

use std::sync::Arc;
use std::time::{Duration, Instant};

use shared::{config, exec, lock};
use shedlock_core::{Clock, LockError, LockProvider, SkewedClock, SystemClock, TimeSource};
use shedlock_sqlite::{Column, SqliteLockProvider};
use sqlx::sqlite::SqlitePool;

const MINUTE: Duration = Duration::from_secs(60);

/// A fresh database file in the temp folder.
fn database_url() -> String {
    let path = std::env::temp_dir().join(format!(
        "shedlock-sqlite-test-{}.db",
        uuid::Uuid::new_v4().simple()
    ));
    format!("sqlite://{}?mode=rwc", path.display())
}

async fn admin(url: &str) -> SqlitePool {
    SqlitePool::connect(url).await.unwrap()
}

async fn node(url: &str, fencing: bool) -> SqliteLockProvider {
    SqliteLockProvider::builder_from_url(url)
        .create_table_if_missing(fencing)
        .holder("rust-node")
        .build()
        .await
        .unwrap()
}

async fn stored(pool: &SqlitePool, name: &str) -> (String, String, String) {
    sqlx::query_as("SELECT lock_until, locked_at, locked_by FROM shedlock WHERE name = ?1")
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap()
}

fn parse(text: &str) -> chrono::NaiveDateTime {
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.3f")
        .unwrap_or_else(|e| panic!("{text:?} is not YYYY-MM-DD HH:MM:SS.SSS: {e}"))
}

fn utc_now() -> chrono::NaiveDateTime {
    chrono::Utc::now().naive_utc()
}

#[tokio::test]
async fn one_statement_acquire_creates_the_row_excludes_others_and_releases() {
    let url = database_url();
    let node_a = node(&url, false).await;
    let node_b = node(&url, false).await.with_holder("other-node");
    let pool = admin(&url).await;

    let held = lock(&node_a, "job", MINUTE).await.expect("first acquire");
    let (until, at, by) = stored(&pool, "job").await;
    assert_eq!(until.len(), 23, "{until}");
    let (until, at) = (parse(&until), parse(&at));
    assert_eq!((until - at).num_milliseconds(), 60_000);
    assert!(
        (utc_now() - at).num_seconds().abs() < 5,
        "locked_at is UTC: {at}"
    );
    assert!(by.starts_with("rust-node#"), "{by}");
    assert!(lock(&node_b, "job", MINUTE).await.is_none(), "held by A");
    assert!(held.unlock().await.unwrap());
    assert!(!held.unlock().await.unwrap());
    let again = lock(&node_b, "job", MINUTE)
        .await
        .expect("free after release");
    assert!(stored(&pool, "job").await.2.starts_with("other-node#"));
    assert!(again.unlock().await.unwrap());
}

#[tokio::test]
async fn racing_nodes_on_one_file_let_exactly_one_in() {
    let url = database_url();
    let mut nodes: Vec<Arc<dyn LockProvider>> = Vec::new();
    for _ in 0..6 {
        nodes.push(Arc::new(node(&url, true).await));
    }
    shared::exactly_one_racing_node_acquires(&nodes).await;
}

#[tokio::test]
async fn release_keeps_the_lock_until_at_least_and_extend_moves_it() {
    let node_a = node(&database_url(), false).await;
    shared::release_keeps_at_least_and_extend_moves_the_lock(&node_a, &node_a.node()).await;
}

#[tokio::test]
async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock() {
    let url = database_url();
    let (node_a, node_b) = (node(&url, false).await, node(&url, false).await);
    shared::an_expired_holder_cannot_touch_the_next_holders_lock(&node_a, &node_b).await;
}

#[tokio::test]
async fn the_declared_name_length_is_enforced_though_sqlite_does_not() {
    let url = database_url();
    let pool = admin(&url).await;
    exec(&pool, "CREATE TABLE narrow (name VARCHAR(10) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL)").await;
    let provider = SqliteLockProvider::builder(pool.clone())
        .table_name("narrow")
        .build()
        .await
        .unwrap();
    assert_eq!(provider.capabilities().max_name_chars, Some(10));
    let error = provider
        .try_lock(&config("abcdefghijk", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    assert!(
        matches!(&error, LockError::InvalidName { rule, .. } if rule.contains("limit is 10")),
        "{error:?}"
    );
    assert!(lock(&provider, "ääääääääää", MINUTE).await.is_some());
    let count: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM narrow")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(count, 1, "only the accepted name was written");

    exec(&pool, "CREATE TABLE wide (name TEXT PRIMARY KEY, lock_until DATETIME NOT NULL, locked_at DATETIME NOT NULL, locked_by TEXT NOT NULL)").await;
    let wide = SqliteLockProvider::builder(pool.clone())
        .table_name("wide")
        .build()
        .await
        .unwrap();
    assert_eq!(
        wide.capabilities().max_name_chars,
        None,
        "TEXT has no limit"
    );
    let provider64 = node(&url, false).await;
    assert_eq!(provider64.capabilities().max_name_chars, Some(64));
}

#[tokio::test]
async fn a_missing_table_wrong_types_and_a_missing_key_are_explained() {
    let url = database_url();
    let pool = admin(&url).await;
    let missing = SqliteLockProvider::builder(pool.clone())
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(missing.contains("shedlock does not exist"), "{missing}");
    assert!(
        missing.contains("CREATE TABLE IF NOT EXISTS \"shedlock\""),
        "{missing}"
    );

    exec(&pool, "CREATE TABLE wrong (name VARCHAR(64) PRIMARY KEY, lock_until BLOB, locked_at TIMESTAMP, locked_by VARCHAR(255))").await;
    let wrong = SqliteLockProvider::builder(pool.clone())
        .table_name("wrong")
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("column lock_until has type BLOB"), "{wrong}");

    exec(&pool, "CREATE TABLE nokey (name VARCHAR(64), lock_until TIMESTAMP, locked_at TIMESTAMP, locked_by VARCHAR(255))").await;
    let nokey = SqliteLockProvider::builder(pool.clone())
        .table_name("nokey")
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(nokey.contains("must be its (only) primary key"), "{nokey}");
}

#[tokio::test]
async fn an_unopenable_file_is_an_error_within_the_timeout() {
    let started = Instant::now();
    let error = SqliteLockProvider::builder_from_url("sqlite:///nonexistent-dir-shedlock/x.db")
        .connect_timeout(Duration::from_secs(2))
        .build()
        .await
        .unwrap_err()
        .to_string();
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(error.contains("cannot connect"), "{error}");
    assert!(error.contains("/nonexistent-dir-shedlock/x.db"), "{error}");
}

#[tokio::test]
async fn fencing_tokens_increase_with_the_column_and_are_absent_without_it() {
    let url = database_url();
    let a = node(&url, true).await;
    let b = node(&url, true).await;
    assert!(a.capabilities().fencing);
    for expected in 1..=4u64 {
        let holder = if expected % 2 == 0 { &a } else { &b };
        let handle = lock(holder, "fenced", MINUTE).await.unwrap();
        assert_eq!(handle.fencing_token(), Some(expected));
        handle.unlock().await.unwrap();
    }
    let other = database_url();
    let plain = node(&other, false).await;
    assert!(!plain.capabilities().fencing);
    assert!(
        lock(&plain, "x", MINUTE)
            .await
            .unwrap()
            .fencing_token()
            .is_none()
    );
}

#[tokio::test]
async fn custom_table_and_column_names_work() {
    let url = database_url();
    let build = || {
        SqliteLockProvider::builder_from_url(url.clone())
            .table_name("main.job_locks")
            .column_name(Column::Name, "lock_name")
            .column_name(Column::LockUntil, "held_until")
            .column_name(Column::LockedAt, "taken_at")
            .column_name(Column::LockedBy, "owner")
            .create_table_if_missing(false)
            .build()
    };
    let a = build().await.unwrap();
    let b = build().await.unwrap();
    let held = lock(&a, "job", MINUTE).await.unwrap();
    assert!(lock(&b, "job", MINUTE).await.is_none());
    held.unlock().await.unwrap();
    let owner: String = sqlx::query_scalar("SELECT owner FROM job_locks WHERE lock_name = 'job'")
        .fetch_one(&admin(&url).await)
        .await
        .unwrap();
    assert!(owner.contains('#'));
}

#[tokio::test]
async fn server_time_ignores_node_clocks_and_client_time_uses_them() {
    let url = database_url();
    let ahead: Arc<dyn Clock> = Arc::new(SkewedClock::ahead(
        Arc::new(SystemClock),
        Duration::from_secs(3600),
    ));
    let honest = node(&url, false).await;
    let skewed = honest.node().with_clock(ahead.clone());
    let held = lock(&honest, "server", MINUTE).await.unwrap();
    assert!(
        lock(&skewed, "server", MINUTE).await.is_none(),
        "skew must not matter"
    );
    held.unlock().await.unwrap();

    let client = SqliteLockProvider::builder_from_url(url.clone())
        .time_source(TimeSource::Client)
        .build()
        .await
        .unwrap();
    assert_eq!(client.capabilities().time_source, TimeSource::Client);
    let held = lock(&client, "client", MINUTE).await.unwrap();
    assert!(
        lock(&client.node().with_clock(ahead), "client", MINUTE)
            .await
            .is_some(),
        "client time trusts the node clock"
    );
    assert!(!held.unlock().await.unwrap());
    let (_, at, _) = stored(&admin(&url).await, "client").await;
    let ahead_by = (parse(&at) - utc_now()).num_seconds();
    assert!(
        (ahead_by - 3600).abs() < 5,
        "the skewed node wrote its clock: {ahead_by}s"
    );
}

#[tokio::test]
async fn rows_written_by_another_program_in_the_documented_format_are_honoured_both_ways() {
    let url = database_url();
    let rust = node(&url, false).await;
    let pool = admin(&url).await;
    let format = |t: chrono::NaiveDateTime| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string();
    // Java ShedLock's JdbcLockProvider statements (client time), with text timestamps.
    let java_lock = |name: &'static str, at_most: Duration| {
        let pool = pool.clone();
        async move {
            let now = utc_now();
            let until = now + chrono::Duration::from_std(at_most).unwrap();
            let inserted = sqlx::query(
                "INSERT INTO shedlock(name, lock_until, locked_at, locked_by) VALUES(?, ?, ?, ?)",
            )
            .bind(name)
            .bind(format(until))
            .bind(format(now))
            .bind("java-host")
            .execute(&pool)
            .await
            .is_ok();
            inserted || sqlx::query("UPDATE shedlock SET lock_until = ?, locked_at = ?, locked_by = ? WHERE name = ? AND lock_until <= ?")
                .bind(format(until)).bind(format(now)).bind("java-host").bind(name).bind(format(now))
                .execute(&pool).await.unwrap().rows_affected() == 1
        }
    };
    assert!(java_lock("job", Duration::from_millis(400)).await);
    assert!(
        lock(&rust, "job", MINUTE).await.is_none(),
        "Java's lock is honoured"
    );
    tokio::time::sleep(Duration::from_millis(550)).await;
    let held = lock(&rust, "job", MINUTE)
        .await
        .expect("Java's lock expired");
    assert!(!java_lock("job", MINUTE).await, "Rust's lock is honoured");
    held.unlock().await.unwrap();
    assert!(java_lock("job", MINUTE).await, "free after Rust's release");
}

#[test]
fn the_documented_ddl_is_shedlocks_table() {
    assert_eq!(
        shedlock_sqlite::create_table_statement(&shedlock_sqlite::LockTable::default(), false),
        "CREATE TABLE IF NOT EXISTS \"shedlock\" (\"name\" VARCHAR(64) NOT NULL, \"lock_until\" \
         TIMESTAMP(3) NOT NULL, \"locked_at\" TIMESTAMP(3) NOT NULL, \"locked_by\" VARCHAR(255) \
         NOT NULL, PRIMARY KEY (\"name\"))"
    );
}
