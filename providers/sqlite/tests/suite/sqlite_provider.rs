//! The SQLite provider on a real database file: statements, schema checks, errors, fencing,
//! time sources and rows written by other programs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use shedlock_core::LockProvider;
use shedlock_sqlite::SqliteLockProvider;
use shedlock_test_support::sql::provider_tests::{self as shared, exec, lock};
use shedlock_test_support::sql::test_database::TestDatabase;
use sqlx::sqlite::SqlitePool;

use crate::database::{Rows, SqliteFile, utc_now};

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

/// Reads `table` of the database file `pool` opens back.
fn rows_of(pool: &SqlitePool, table: &str) -> Rows {
    Rows {
        pool: pool.clone(),
        table: table.to_owned(),
    }
}

shedlock_test_support::sql_provider_tests!(SqliteFile::new());

#[tokio::test]
async fn one_statement_acquire_creates_the_row_excludes_others_and_releases() {
    let url = database_url();
    let node_a = node(&url, false).await;
    let node_b = node(&url, false).await.with_holder("other-node");
    let pool = admin(&url).await;
    let rows = rows_of(&pool, "shedlock");
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
async fn an_expired_holder_cannot_release_or_extend_the_next_holders_lock() {
    let url = database_url();
    let (node_a, node_b) = (node(&url, false).await, node(&url, false).await);
    shared::an_expired_holder_cannot_touch_the_next_holders_lock(&node_a, &node_b).await;
}

#[tokio::test]
async fn the_declared_name_length_is_enforced_though_sqlite_does_not() {
    let database = SqliteFile::new();
    shared::names_longer_than_the_column_are_refused_before_anything_is_written(
        &database,
        "name VARCHAR(10) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, \
         locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL",
    )
    .await;

    database
        .exec(
            "CREATE TABLE wide (name TEXT PRIMARY KEY, lock_until DATETIME NOT NULL, \
             locked_at DATETIME NOT NULL, locked_by TEXT NOT NULL)",
        )
        .await;
    let wide = SqliteLockProvider::builder()
        .table_name("wide")
        .build(database.pool().await)
        .await
        .unwrap();
    assert_eq!(
        wide.capabilities().max_name_chars,
        None,
        "TEXT has no limit"
    );
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
    let database = SqliteFile::new();
    let missing = SqliteLockProvider::builder()
        .build(database.pool().await)
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

    shared::tables_of_the_wrong_shape_are_refused(
        &database,
        &[
            (
                "name VARCHAR(64) PRIMARY KEY, lock_until BLOB, locked_at TIMESTAMP, \
                 locked_by VARCHAR(255)",
                &["column lock_until has type BLOB"],
            ),
            (
                "name VARCHAR(64), lock_until TIMESTAMP, locked_at TIMESTAMP, \
                 locked_by VARCHAR(255)",
                &["must be its (only) primary key"],
            ),
        ],
    )
    .await;
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

/// SQLite's date functions end with the year 9999, whatever the column's declared type. The
/// table the provider makes, one made by hand with another declared type, and the provider
/// built without connecting, which trusts the table it would make.
#[tokio::test]
async fn locks_ending_past_the_year_9999_are_refused_before_writing() {
    let year_9999 = |column| shared::LockUntilLimit {
        latest: Duration::new(253_402_300_799, 999_000_000),
        shown: "9999-12-31 23:59:59.999 UTC",
        column,
    };
    shared::locks_ending_past_the_lock_until_columns_limit_are_refused_on_every_table(
        &SqliteFile::new(),
        "DATETIME",
        [
            year_9999("column lock_until (TIMESTAMP(3))"),
            year_9999("column lock_until (TIMESTAMP(3))"),
            year_9999("column lock_until (DATETIME)"),
        ],
    )
    .await;
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

/// A refused attempt on a held lock reads, and never needs the file's write lock: another
/// connection holding that lock (a writer mid-transaction, or the next winner) does not make it
/// wait, and the answer names the holder and its expiry. A free lock is still taken once the
/// writer is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_attempt_reads_without_the_write_lock_and_names_the_holder() {
    let url = database_url();
    let holder = node(&url, false).await;
    let contender = SqliteLockProvider::builder()
        .holder("other-node")
        .operation_timeout(Duration::from_secs(2))
        .connect(&url)
        .await
        .unwrap();
    let config = shared::config("job", MINUTE, Duration::ZERO);
    let released = lock(&contender, "job", Duration::from_millis(1))
        .await
        .unwrap();
    drop(released);
    tokio::time::sleep(Duration::from_millis(20)).await;
    let held = lock(&holder, "job", MINUTE).await.unwrap();
    let asked = std::time::SystemTime::now();

    let writer = admin(&url).await;
    let mut transaction = writer.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let started = Instant::now();
    let refused = contender.try_lock(&config).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "the refused attempt waited for the write lock: {:?}",
        started.elapsed()
    );
    let holder_seen = refused_by(refused, "rust-node");
    let left = holder_seen
        .held_until
        .unwrap()
        .duration_since(asked)
        .unwrap();
    assert!(left > Duration::from_secs(55) && left <= MINUTE, "{left:?}");
    sqlx::query("SELECT 1")
        .execute(&mut *transaction)
        .await
        .unwrap();
    transaction.rollback().await.unwrap();

    assert!(held.unlock().await.unwrap());
    assert!(lock(&contender, "job", MINUTE).await.is_some());
}

/// SQLite lets one connection write at a time, and its busy handler lets a waiting connection
/// retry only every 100 ms once it has waited a while, so a connection that arrived later and
/// retries sooner takes the file first: under steady load a node's own calls could overtake one
/// another until one ran out its operation timeout. A node's writes queue in the order they were
/// asked: here eight releases wait behind another program's write lock, and are answered in the
/// order they were made once it commits.
#[tokio::test]
async fn a_nodes_writes_wait_their_turn_in_the_order_they_were_asked() {
    const CALLS: usize = 8;
    let url = database_url();
    let node = Arc::new(node(&url, false).await);
    let mut handles = Vec::new();
    for index in 0..CALLS {
        handles.push(lock(&*node, &format!("job-{index}"), MINUTE).await.unwrap());
    }
    let writer = admin(&url).await;
    let transaction = writer.begin_with("BEGIN IMMEDIATE").await.unwrap();
    let answered = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut releases = Vec::new();
    for (index, handle) in handles.into_iter().enumerate() {
        let answered = answered.clone();
        releases.push(tokio::spawn(async move {
            let released = handle.unlock().await.unwrap();
            answered.lock().unwrap().push(index);
            released
        }));
        // Long enough for the call to be waiting before the next is made, and not a multiple
        // of the busy handler's retry period.
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(answered.lock().unwrap().is_empty());
    transaction.commit().await.unwrap();
    for release in releases {
        assert!(release.await.unwrap(), "a release answered false");
    }
    assert_eq!(
        *answered.lock().unwrap(),
        (0..CALLS).collect::<Vec<_>>(),
        "the releases were answered out of the order they were made"
    );
}

/// A node that takes a lock again after its own release left it free sends the upsert without
/// the read. When another node took the lock in between, that one attempt is refused by the
/// upsert, which cannot name the holder; the next attempt reads first again and names it.
#[tokio::test]
async fn after_its_own_release_freed_the_lock_a_node_writes_without_reading_once() {
    let url = database_url();
    let node = node(&url, false).await;
    let other = SqliteLockProvider::builder()
        .holder("other-node")
        .connect(&url)
        .await
        .unwrap();
    let config = shared::config("job", MINUTE, Duration::ZERO);
    let mine = lock(&node, "job", MINUTE).await.unwrap();
    assert!(mine.unlock().await.unwrap());
    let theirs = lock(&other, "job", MINUTE).await.unwrap();

    let unread = node.try_lock(&config).await.unwrap();
    assert!(
        matches!(unread, shedlock_core::Acquisition::NotAcquired(None)),
        "the attempt after the node's own release went to the upsert, which names nobody: \
         {unread:?}"
    );
    // The next attempt reads first and names the holder.
    refused_by(node.try_lock(&config).await.unwrap(), "other-node");
    assert!(theirs.unlock().await.unwrap());
}

/// The holder a refusal names, asserting it is `holder` (the name, without the acquisition's
/// id).
fn refused_by(refused: shedlock_core::Acquisition, holder: &str) -> shedlock_core::LockHolder {
    let shedlock_core::Acquisition::NotAcquired(Some(seen)) = refused else {
        panic!("refused without naming the holder: {refused:?}");
    };
    assert_eq!(seen.locked_by.as_deref(), Some(holder), "{seen:?}");
    seen
}
