//! The SQLite provider on a real database file: statements, schema checks, errors, fencing,
//! time sources and rows written by other programs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shedlock_core::{LockProvider, TimeSource};
use shedlock_sqlite::SqliteLockProvider;
use shedlock_test_support::sql::provider_tests::{self as shared, exec, lock};
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
    let builder = SqliteLockProvider::builder();
    let builder = if fencing {
        builder.create_table_with_fencing_if_missing()
    } else {
        builder.create_table_if_missing()
    };
    builder.holder("rust-node").connect(url).await.unwrap()
}

/// Reads `table`'s rows back; times are checked to be in the documented text format.
struct Rows<'a> {
    pool: &'a SqlitePool,
    table: &'a str,
}

#[async_trait::async_trait]
impl shared::StoredRows for Rows<'_> {
    async fn row(&self, name: &str) -> Option<shared::StoredRow> {
        let row: Option<(String, String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT lock_until, locked_at, locked_by FROM {} WHERE name = ?1",
            self.table
        )))
        .bind(name)
        .fetch_optional(self.pool)
        .await
        .unwrap();
        row.map(|(until, at, locked_by)| {
            assert_eq!(until.len(), 23, "{until}");
            assert_eq!(at.len(), 23, "{at}");
            let (until, at) = (parse(&until), parse(&at));
            shared::StoredRow {
                held_ms: (until - at).num_milliseconds() as f64,
                locked_by,
                locked_at_from_now: (at - utc_now()).num_milliseconds() as f64 / 1000.0,
            }
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
    let rows = Rows {
        pool: &pool,
        table: "shedlock",
    };
    shared::acquire_writes_the_row_excludes_others_and_releases(&node_a, &node_b, &rows).await;
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
    let provider = SqliteLockProvider::builder()
        .table_name("narrow")
        .build(pool.clone())
        .await
        .unwrap();
    let rows = Rows {
        pool: &pool,
        table: "narrow",
    };
    shared::a_narrow_name_column_refuses_longer_names_before_writing(&provider, &rows).await;

    exec(&pool, "CREATE TABLE wide (name TEXT PRIMARY KEY, lock_until DATETIME NOT NULL, locked_at DATETIME NOT NULL, locked_by TEXT NOT NULL)").await;
    let wide = SqliteLockProvider::builder()
        .table_name("wide")
        .build(pool.clone())
        .await
        .unwrap();
    assert_eq!(
        wide.capabilities().max_name_chars,
        None,
        "TEXT has no limit"
    );
    let provider64 = node(&url, false).await;
    let rows = Rows {
        pool: &pool,
        table: "shedlock",
    };
    shared::shedlocks_name_column_takes_64_characters(&provider64, &rows).await;
}

/// `locked_by` is `<holder>#<32 hex digits>`. One that fits the column exactly is written; one
/// character more is refused before anything is written, never truncated. SQLite itself would
/// store it whole, whatever the declared length.
#[tokio::test]
async fn a_holder_longer_than_the_locked_by_column_is_refused_before_writing() {
    let url = database_url();
    let pool = admin(&url).await;
    exec(&pool, "CREATE TABLE short_by (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(40) NOT NULL)").await;
    let fits = SqliteLockProvider::builder()
        .table_name("short_by")
        .holder("node-07")
        .build(pool.clone())
        .await
        .unwrap();
    assert_eq!(fits.lock_table().table().to_string(), "short_by");
    let handle = lock(&fits, "job", MINUTE).await.expect("a free lock");
    let shown = format!("{handle:?}");
    assert!(
        shown.contains("\"sqlite\""),
        "the handle names its provider: {shown}"
    );
    assert!(handle.unlock().await.unwrap());

    let too_long = fits.with_holder("node-008");
    let error = too_long
        .try_lock(&shared::config("other-job", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), shedlock_core::ErrorKind::Limit, "{error}");
    let message = error.to_string();
    for part in [
        "sqlite",
        "other-job",
        "41 characters",
        "locked_by",
        "(40)",
        "with_holder",
    ] {
        assert!(
            message.contains(part),
            "{part:?} is missing from: {message}"
        );
    }
    let rows: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM short_by WHERE name = 'other-job'")
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(rows, 0, "nothing was written");
    let shown = format!("{too_long:?}");
    assert!(
        shown.contains("sqlite") && shown.contains("short_by"),
        "the provider's Debug names its backend and table: {shown}"
    );
}

#[tokio::test]
async fn a_missing_table_wrong_types_and_a_missing_key_are_explained() {
    let url = database_url();
    let pool = admin(&url).await;
    let missing = SqliteLockProvider::builder()
        .build(pool.clone())
        .await
        .unwrap_err();
    assert_eq!(
        missing.kind(),
        shedlock_core::ErrorKind::Configuration,
        "{missing}"
    );
    let missing = missing.to_string();
    assert!(missing.contains("shedlock does not exist"), "{missing}");
    assert!(
        missing.contains("CREATE TABLE IF NOT EXISTS \"shedlock\""),
        "{missing}"
    );

    exec(&pool, "CREATE TABLE wrong (name VARCHAR(64) PRIMARY KEY, lock_until BLOB, locked_at TIMESTAMP, locked_by VARCHAR(255))").await;
    let wrong = SqliteLockProvider::builder()
        .table_name("wrong")
        .build(pool.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(wrong.contains("column lock_until has type BLOB"), "{wrong}");

    exec(&pool, "CREATE TABLE nokey (name VARCHAR(64), lock_until TIMESTAMP, locked_at TIMESTAMP, locked_by VARCHAR(255))").await;
    let nokey = SqliteLockProvider::builder()
        .table_name("nokey")
        .build(pool.clone())
        .await
        .unwrap_err()
        .to_string();
    assert!(nokey.contains("must be its (only) primary key"), "{nokey}");
}

#[tokio::test]
async fn an_unopenable_file_is_an_error_within_the_timeout() {
    let started = Instant::now();
    let error = SqliteLockProvider::builder()
        .connect_timeout(Duration::from_secs(2))
        .connect("sqlite:///nonexistent-dir-shedlock/x.db")
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
    let (a, b) = (node(&url, true).await, node(&url, true).await);
    shared::fencing_tokens_count_acquisitions(&a, &b).await;
    let plain = node(&database_url(), false).await;
    shared::no_fencing_tokens_without_the_column(&plain).await;
    shared::the_fencing_column_is_checked_by_connect_and_trusted_by_connect_lazy::<
        shedlock_sqlite::SqliteBackend,
    >(&database_url())
    .await;
}

#[tokio::test]
async fn a_column_name_given_twice_is_refused_and_no_table_created() {
    let url = database_url();
    shared::a_column_name_given_twice_is_refused_before_anything_is_written(
        SqliteLockProvider::builder(),
        &url,
    )
    .await;
    let tables: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'")
        .fetch_one(&admin(&url).await)
        .await
        .unwrap();
    assert_eq!(tables, 0, "a table was created");
}

#[tokio::test]
async fn custom_table_and_column_names_work() {
    let url = database_url();
    let build = || {
        shared::renamed_table_and_columns(SqliteLockProvider::builder(), "main.job_locks")
            .create_table_if_missing()
            .connect(url.clone())
    };
    let (a, b) = (build().await.unwrap(), build().await.unwrap());
    shared::renamed_table_and_columns_lock_as_shedlocks_do(&a, &b, false).await;
    let owner: String = sqlx::query_scalar("SELECT owner FROM job_locks WHERE lock_name = 'job'")
        .fetch_one(&admin(&url).await)
        .await
        .unwrap();
    assert!(owner.contains('#'));
}

#[tokio::test]
async fn server_time_ignores_node_clocks_and_client_time_uses_them() {
    let url = database_url();
    let server_time = node(&url, false).await;
    let client_time = SqliteLockProvider::builder()
        .time_source(TimeSource::Client)
        .connect(url.clone())
        .await
        .unwrap();
    let pool = admin(&url).await;
    let rows = Rows {
        pool: &pool,
        table: "shedlock",
    };
    shared::server_time_ignores_node_clocks_and_client_time_uses_them(
        &server_time,
        &client_time,
        &rows,
    )
    .await;
}

#[tokio::test]
async fn lock_statements_run_outside_the_callers_transaction() {
    let pool = admin(&database_url()).await;
    let provider = SqliteLockProvider::builder()
        .create_table_if_missing()
        .build(pool)
        .await
        .unwrap();
    shared::lock_statements_run_outside_the_callers_transaction(&provider).await;
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

#[tokio::test]
async fn urls_of_other_backends_are_refused_and_file_paths_still_open() {
    for (url, scheme) in [
        ("postgres://app:hunter2@127.0.0.1:5432/test", "postgres"),
        ("redis://:hunter2@127.0.0.1:6379", "redis"),
        ("mongodb+srv://app:hunter2@db.example/app", "mongodb+srv"),
    ] {
        let error = SqliteLockProvider::connect(url).await.unwrap_err();
        let message = error.to_string();
        assert!(
            message.contains(&format!("the URL's scheme is \"{scheme}\"")),
            "{url}: {message}"
        );
        assert!(
            message.contains("accepts sqlite://... or a file path"),
            "{message}"
        );
        assert!(
            !format!("{message} {error:?}").contains("hunter2"),
            "{message}"
        );
    }
    // A plain path, with no scheme, is still a database file (even with a colon in its
    // name); `sqlite:` forms too.
    let url = database_url();
    node(&url, false).await;
    let path = url
        .trim_start_matches("sqlite://")
        .trim_end_matches("?mode=rwc")
        .to_owned();
    for form in [path.clone(), format!("sqlite:{path}")] {
        let provider = tokio::time::timeout(MINUTE, SqliteLockProvider::connect(form.clone()))
            .await
            .expect("opening the file took over a minute");
        assert!(provider.is_ok(), "{form}: {provider:?}");
    }
    std::fs::remove_file(path).unwrap();
    // A relative file name with a colon is a path too (checked without opening it).
    assert!(
        SqliteLockProvider::builder()
            .connect_lazy("jobs:locks.db")
            .await
            .is_ok()
    );
}

/// SQLite's date functions end with the year 9999, whatever the column's declared type.
fn year_9999(column_type: &str) -> (Duration, String) {
    (
        Duration::new(253_402_300_799, 999_000_000),
        format!("column lock_until ({column_type})"),
    )
}

#[tokio::test]
async fn locks_ending_past_the_year_9999_are_refused_before_writing() {
    // The table the provider makes, one made by hand with another declared type, and the
    // provider built without connecting, which trusts the table it would make.
    let url = database_url();
    let pool = admin(&url).await;
    exec(
        &pool,
        "CREATE TABLE by_hand (name VARCHAR(64) PRIMARY KEY, lock_until DATETIME NOT NULL, \
         locked_at DATETIME NOT NULL, locked_by VARCHAR(255) NOT NULL)",
    )
    .await;
    let made = node(&url, false).await;
    let unchecked = SqliteLockProvider::builder()
        .holder("rust-node")
        .connect_lazy(url.clone())
        .await
        .unwrap();
    for (table, provider, column_type) in [
        ("shedlock", made, "TIMESTAMP(3)"),
        ("shedlock", unchecked, "TIMESTAMP(3)"),
        (
            "by_hand",
            SqliteLockProvider::builder()
                .table_name("by_hand")
                .holder("rust-node")
                .build(pool.clone())
                .await
                .unwrap(),
            "DATETIME",
        ),
    ] {
        exec(&pool, &format!("DELETE FROM {table}")).await;
        let ahead = SqliteLockProvider::builder()
            .table_name(table)
            .time_source(TimeSource::Client)
            .clock(shared::two_days_ahead())
            .connect(url.clone())
            .await
            .unwrap();
        let (latest, column) = year_9999(column_type);
        shared::locks_ending_past_the_lock_until_columns_limit_are_refused_before_writing(
            &provider,
            Some(&ahead),
            &provider,
            &Rows { pool: &pool, table },
            &shared::LockUntilLimit {
                latest,
                shown: "9999-12-31 23:59:59.999 UTC",
                column: &column,
            },
        )
        .await;
    }
}

/// A new database file per round.
struct NewFile;

impl shared::NewStorage for NewFile {
    async fn make(&self) -> String {
        database_url()
    }

    async fn columns(&self, url: &str) -> i64 {
        let pool = admin(url).await;
        let columns = sqlx::query_scalar("SELECT count(*) FROM pragma_table_info('shedlock')")
            .fetch_one(&pool)
            .await
            .unwrap();
        pool.close().await;
        columns
    }

    async fn remove(&self, url: &str) {
        let path = url
            .trim_start_matches("sqlite://")
            .trim_end_matches("?mode=rwc");
        let _ = std::fs::remove_file(path);
    }
}

/// 16 nodes (16 processes on one host would do the same) opening a new database file at the
/// same instant, each creating the table: all start.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_create_the_table_at_once_on_a_new_file() {
    shared::sixteen_nodes_create_the_table::<shedlock_sqlite::SqliteBackend>(NewFile).await;
}
