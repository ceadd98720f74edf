//! The PostgreSQL provider against a real server: statements, schema checks, errors, fencing,
//! time sources and interoperation with Java ShedLock's own SQL.

use std::time::{Duration, Instant, SystemTime};

use shedlock_core::{LockProvider, TimeSource};
use shedlock_postgres::{PostgresLockProvider, create_table_statement};
use shedlock_test_support::sql::provider_tests::{self as shared, config, exec, lock, unique};
use shedlock_test_support::sql::test_database::TestDatabase;

use crate::database::{Postgres, url};

const MINUTE: Duration = Duration::from_secs(60);

shedlock_test_support::sql_provider_tests!(Postgres, server);

/// A narrower column than ShedLock's: the limit comes from the catalog, not a constant.
/// PostgreSQL cannot store NUL in text: refused as a name, not a database error.
#[tokio::test]
async fn names_longer_than_the_column_are_refused_before_anything_is_written() {
    shared::names_longer_than_the_column_are_refused_before_anything_is_written(
        &Postgres,
        "name VARCHAR(10) PRIMARY KEY, lock_until TIMESTAMP NOT NULL, \
         locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL",
    )
    .await;
}

#[tokio::test]
async fn wrong_column_types_and_a_name_without_unique_index_are_refused() {
    shared::tables_of_the_wrong_shape_are_refused(
        &Postgres,
        &[
            (
                "name VARCHAR(64) PRIMARY KEY, lock_until VARCHAR(30), locked_at TIMESTAMP, \
                 locked_by VARCHAR(255)",
                &[
                    "column lock_until has type character varying(30)",
                    "must be a timestamp type",
                ],
            ),
            (
                "name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP, locked_at TIMESTAMP, \
                 locked_by VARCHAR(255), fencing_token TEXT",
                &["column fencing_token has type text"],
            ),
            (
                "name VARCHAR(64), lock_until TIMESTAMP, locked_at TIMESTAMP, \
                 locked_by VARCHAR(255)",
                &["must be its primary key"],
            ),
        ],
    )
    .await;
    let bad_identifier = PostgresLockProvider::builder()
        .table_name("shedlock; DROP TABLE x")
        .build(Postgres.pool().await)
        .await
        .unwrap_err()
        .to_string();
    assert!(bad_identifier.contains("table name"), "{bad_identifier}");
}

#[tokio::test]
async fn fencing_tokens_increase_with_the_column_and_are_absent_without_it() {
    let with = unique("pg_fence");
    let node_a = Postgres.node(&with, true).await;
    assert!(node_a.has_fencing(), "the table was made with the column");
    shared::fencing_tokens_count_acquisitions(&node_a, &node_a.node()).await;

    let without = unique("pg_nofence");
    let plain = Postgres.node(&without, false).await;
    assert!(
        !plain.has_fencing(),
        "ShedLock's table has no fencing column"
    );
    let columns: Vec<String> = sqlx::query_scalar(
        "SELECT column_name::text FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position",
    )
    .bind(&without)
    .fetch_all(&Postgres.pool().await)
    .await
    .unwrap();
    assert_eq!(
        columns,
        ["name", "lock_until", "locked_at", "locked_by"],
        "exactly ShedLock's"
    );
    shared::no_fencing_tokens_without_the_column(&plain).await;
    exec(
        &Postgres.pool().await,
        &format!("DROP TABLE {with}, {without}"),
    )
    .await;
    let [with, without] =
        shared::the_fencing_column_is_checked_by_connect_and_trusted_by_connect_lazy::<
            shedlock_postgres::PostgresBackend,
        >(&url())
        .await;
    exec(
        &Postgres.pool().await,
        &format!("DROP TABLE {with}, {without}"),
    )
    .await;
}

#[tokio::test]
async fn custom_schema_table_and_column_names_work() {
    let pool = Postgres.pool().await;
    let schema = unique("shedlock_schema");
    exec(&pool, &format!("CREATE SCHEMA {schema}")).await;
    let qualified = format!("{schema}.Job_Locks");
    let build = || {
        shared::renamed_table_and_columns(PostgresLockProvider::builder(), &qualified)
            .create_table_with_fencing_if_missing()
            .build(pool.clone())
    };
    let (node_a, node_b) = (build().await.unwrap(), build().await.unwrap());
    shared::renamed_table_and_columns_lock_as_shedlocks_do(&node_a, &node_b, true).await;
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
    let pool = Postgres.pool().await;
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
            let node_a = PostgresLockProvider::builder()
                .table_name(&table)
                .time_source(time_source)
                .build(tokyo.clone())
                .await
                .unwrap();
            let node_b = PostgresLockProvider::builder()
                .table_name(&table)
                .time_source(time_source)
                .connect(url.clone())
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

/// Java ShedLock's PostgreSQL statements on one table.
struct JavaShedLock<'a> {
    pool: &'a sqlx::PgPool,
    table: &'a str,
}

const NOW: &str = Postgres::NOW;

#[async_trait::async_trait]
impl shared::JavaShedLock for JavaShedLock<'_> {
    /// One upsert.
    async fn server_time_lock(&self, name: &str, at_most: Duration) -> bool {
        let table = self.table;
        let sql = format!(
            "INSERT INTO {table}(name, lock_until, locked_at, locked_by) VALUES($1, {NOW} + make_interval(secs => $2), {NOW}, $3) \
             ON CONFLICT (name) DO UPDATE SET lock_until = {NOW} + make_interval(secs => $2), locked_at = {NOW}, locked_by = $3 \
             WHERE {table}.name = $1 AND {table}.lock_until <= {NOW}"
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(at_most.as_secs_f64())
            .bind(shared::JAVA_HOST)
            .execute(self.pool)
            .await
            .unwrap()
            .rows_affected()
            == 1
    }

    async fn server_time_unlock(&self, name: &str, at_least: Duration) -> u64 {
        let sql = format!(
            "UPDATE {} SET lock_until = CASE WHEN locked_at + make_interval(secs => $3) > {NOW} \
             THEN locked_at + make_interval(secs => $3) ELSE {NOW} END WHERE name = $1 AND locked_by = $2",
            self.table
        );
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .bind(shared::JAVA_HOST)
            .bind(at_least.as_secs_f64())
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
            "INSERT INTO {table}(name, lock_until, locked_at, locked_by) VALUES($1, $2, $3, $4)"
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
            "UPDATE {table} SET lock_until = $1, locked_at = $2, locked_by = $3 WHERE name = $4 AND lock_until <= $5"
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
    let pool = Postgres.pool().await;
    let table = unique("pg_interop");
    let rust = Postgres.node(&table, false).await;
    let java = JavaShedLock {
        pool: &pool,
        table: &table,
    };
    shared::rows_written_by_java_shedlock_and_by_rust_honour_each_other(&rust, &java).await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

/// A connection the server refuses while a statement waits for it ("too many connections for
/// role") is reported as what it is, not as a statement the database refused.
#[tokio::test]
async fn a_connection_refused_for_want_of_room_is_not_called_a_refused_statement() {
    let pool = Postgres.pool().await;
    let role = unique("shedlock_limited");
    let table = unique("pg_room");
    exec(
        &pool,
        &format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 1"),
    )
    .await;
    exec(
        &pool,
        &format!("GRANT CREATE, USAGE ON SCHEMA public TO {role}"),
    )
    .await;
    let url = url().replacen("postgres@", &format!("{role}@"), 1);
    let provider = PostgresLockProvider::builder()
        .table_name(&table)
        .create_table_if_missing()
        .connect(&url)
        .await
        .unwrap();
    // The provider's connection ends, and another session takes the role's only slot.
    let terminate =
        format!("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'");
    exec(&pool, &terminate).await;
    let deadline = Instant::now() + Duration::from_secs(10);
    let other = loop {
        match sqlx::PgPool::connect(&url).await {
            Ok(other) => break other,
            Err(error) if Instant::now() < deadline => {
                let _ = error;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(error) => panic!("the role's slot never came free: {error}"),
        }
    };
    let mut errors = Vec::new();
    for _ in 0..5 {
        match provider
            .try_lock(&config("job", MINUTE, Duration::ZERO))
            .await
        {
            Err(error) => errors.push(error.to_string()),
            Ok(acquisition) => panic!("acquired without a connection: {acquisition:?}"),
        }
    }
    assert!(
        errors
            .iter()
            .any(|error| error.contains("the database is out of resources (too many connections")),
        "{errors:#?}"
    );
    assert!(
        !errors
            .iter()
            .any(|error| error.contains("refused the statement")),
        "{errors:#?}"
    );
    other.close().await;
    drop(provider);
    exec(&pool, &terminate).await;
    exec(&pool, &format!("DROP TABLE {table}")).await;
    exec(&pool, &format!("REVOKE ALL ON SCHEMA public FROM {role}")).await;
    exec(&pool, &format!("DROP ROLE {role}")).await;
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

#[tokio::test]
async fn the_declared_precision_follows_the_timestamp_columns_fractional_digits() {
    let pool = Postgres.pool().await;
    // Coarser than a millisecond, the column decides how late a lock may be seen to expire;
    // finer, ShedLock's millisecond does.
    for (digits, precision) in [
        (0, Duration::from_secs(1)),
        (1, Duration::from_millis(100)),
        (2, Duration::from_millis(10)),
        (3, Duration::from_millis(1)),
        (6, Duration::from_millis(1)),
    ] {
        let table = unique("pg_digits");
        exec(
            &pool,
            &format!(
                "CREATE TABLE {table} (name VARCHAR(64) PRIMARY KEY, lock_until TIMESTAMP({digits}), \
                 locked_at TIMESTAMP({digits}), locked_by VARCHAR(255))"
            ),
        )
        .await;
        let provider = PostgresLockProvider::builder()
            .table_name(&table)
            .build(pool.clone())
            .await
            .unwrap();
        assert_eq!(
            provider.capabilities().time_precision,
            precision,
            "TIMESTAMP({digits})"
        );
        exec(&pool, &format!("DROP TABLE {table}")).await;
    }
}

#[test]
fn a_builders_debug_output_names_the_backend_and_table() {
    let builder = PostgresLockProvider::builder().table_name("job_locks");
    let debug = format!("{builder:?}");
    for expected in ["postgres", "job_locks", "operation_timeout"] {
        assert!(debug.contains(expected), "{expected} missing from {debug}");
    }
}

#[tokio::test]
async fn a_pool_with_no_free_connection_is_a_timeout_that_says_so() {
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .acquire_timeout(Duration::from_millis(200))
        .connect(&url())
        .await
        .unwrap();
    let table = unique("pg_busy");
    let provider = PostgresLockProvider::builder()
        .table_name(&table)
        .create_table_if_missing()
        .build(pool.clone())
        .await
        .unwrap();
    let held = pool.acquire().await.unwrap();
    let error = provider
        .try_lock(&config("job", MINUTE, Duration::ZERO))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains("no database connection became available in time"),
        "{text}"
    );
    drop(held);
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

#[tokio::test]
async fn locks_ending_past_what_the_provider_reads_back_are_refused_before_writing() {
    // PostgreSQL's timestamps reach 294276, but the provider's own locks end by 262142, far
    // from the take-over's int8 overflow; see
    // the_provider_reaches_the_end_of_chronos_calendar_and_not_further.
    let limit = |column| shared::LockUntilLimit {
        latest: Duration::from_secs(CHRONO_LAST_SECOND),
        shown: "262142-12-31 23:59:59 UTC",
        column,
    };
    shared::locks_ending_past_the_lock_until_columns_limit_are_refused_on_every_table(
        &Postgres,
        "TIMESTAMPTZ(3)",
        [
            limit("column lock_until (timestamp without time zone)"),
            limit("column lock_until (timestamp without time zone)"),
            limit("column lock_until (timestamp(3) with time zone)"),
        ],
    )
    .await;
}

/// 262142-12-31 23:59:59 UTC, chrono's last whole second, as seconds since the epoch.
const CHRONO_LAST_SECOND: u64 = 8_210_266_876_799;

/// Why the provider's own locks end by chrono's last second rather than PostgreSQL's 294276:
/// a row ending after 294247-01-10 (written here by hand, as another program could) fails
/// every other node's acquire with an `int8` overflow, and the limit keeps a node whose clock
/// is wrong far from that. Rows past chrono's calendar that others wrote still read exactly.
#[tokio::test]
async fn the_provider_reaches_the_end_of_chronos_calendar_and_not_further() {
    use shedlock_core::LockAdmin;
    let pool = Postgres.pool().await;
    let table = unique("pg_reach");
    let provider = Postgres.node(&table, false).await;
    let write = |name: &'static str, until: &'static str| {
        let (pool, table) = (pool.clone(), table.clone());
        async move {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {table} VALUES ($1, $2::timestamp, timezone('utc', now()), 'other#1')"
            )))
            .bind(name)
            .bind(until)
            .execute(&pool)
            .await
            .unwrap();
        }
    };
    // The limit itself, and PostgreSQL's own last microsecond, are stored as they are.
    write("at-limit", "262142-12-31 23:59:59").await;
    write("postgres-last", "294276-12-31 23:59:59.999999").await;
    // At the limit, both the acquire's take-over and the admin read the row.
    assert!(lock(&provider, "at-limit", MINUTE).await.is_none(), "held");
    let info = provider.inspect_lock("at-limit").await.unwrap().unwrap();
    assert_eq!(
        info.held_until,
        Some(SystemTime::UNIX_EPOCH + Duration::from_secs(CHRONO_LAST_SECOND))
    );
    // A microsecond into the next year (another client's row), the admin reads it exactly
    // and the acquire's take-over sees it held.
    write("past-chrono", "262143-01-01 00:00:00.000001").await;
    let info = provider.inspect_lock("past-chrono").await.unwrap().unwrap();
    assert_eq!(
        info.held_until,
        Some(
            SystemTime::UNIX_EPOCH
                + Duration::from_secs(CHRONO_LAST_SECOND + 1)
                + Duration::from_micros(1)
        )
    );
    assert!(
        lock(&provider, "past-chrono", MINUTE).await.is_none(),
        "held"
    );
    // Past 294247-01-10 04:00:54.775807, the take-over's microseconds overflow int8.
    let error = provider
        .try_lock(&config("postgres-last", MINUTE, Duration::ZERO))
        .await
        .map(|_| ())
        .unwrap_err();
    let chain = format!("{:?}", std::error::Error::source(&error));
    assert!(chain.contains("bigint out of range"), "{error}: {chain}");
    exec(&pool, &format!("DROP TABLE {table}")).await;
}

/// A new schema per round, reached with its sessions' `search_path` set to it, so the default
/// table name (`shedlock`) lives there.
struct NewSchema(sqlx::PgPool);

impl shared::NewStorage for NewSchema {
    async fn make(&self) -> String {
        let schema = unique("first_use");
        exec(&self.0, &format!("CREATE SCHEMA {schema}")).await;
        let url = url();
        let separator = if url.contains('?') { '&' } else { '?' };
        format!("{url}{separator}options=-c%20search_path%3D{schema}")
    }

    async fn columns(&self, url: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_schema = $1 AND table_name = 'shedlock'",
        )
        .bind(schema_of(url))
        .fetch_one(&self.0)
        .await
        .unwrap()
    }

    async fn remove(&self, url: &str) {
        exec(&self.0, &format!("DROP SCHEMA {} CASCADE", schema_of(url))).await;
    }
}

fn schema_of(url: &str) -> &str {
    url.rsplit_once("search_path%3D").unwrap().1
}

/// PostgreSQL's `CREATE TABLE IF NOT EXISTS` fails with a unique violation in its catalog
/// (`pg_type_typname_nsp_index`) when another session creates the same table at the same
/// moment: 16 replicas starting together on a new database must all start anyway.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_create_the_table_at_once_on_a_new_schema() {
    shared::sixteen_nodes_create_the_table::<shedlock_postgres::PostgresBackend>(NewSchema(
        Postgres.pool().await,
    ))
    .await;
}

/// A creator that is not this library (a migration, a Java deployment's DDL) creates the
/// table in a transaction that commits while our node's `CREATE TABLE IF NOT EXISTS` waits for
/// it: PostgreSQL then fails ours with a unique violation in its catalog. The node must take
/// the table as created, check it, and start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_another_session_creates_meanwhile_counts_as_created() {
    let pool = Postgres.pool().await;
    let schema = unique("first_use");
    exec(&pool, &format!("CREATE SCHEMA {schema}")).await;
    let table = format!("{schema}.shedlock");
    let mut migration = pool.begin().await.unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE TABLE {table} (name VARCHAR(64) NOT NULL, lock_until TIMESTAMP NOT NULL, \
         locked_at TIMESTAMP NOT NULL, locked_by VARCHAR(255) NOT NULL, PRIMARY KEY (name))"
    )))
    .execute(&mut *migration)
    .await
    .unwrap();
    let node = tokio::spawn({
        let table = table.clone();
        async move {
            PostgresLockProvider::builder()
                .table_name(&table)
                .create_table_if_missing()
                .connect(url())
                .await
        }
    });
    // The node's CREATE waits on the migration's uncommitted catalog rows.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !node.is_finished(),
        "the node did not wait for the other creator"
    );
    migration.commit().await.unwrap();
    let built = node.await.unwrap();
    let node = built.unwrap_or_else(|error| panic!("{error:?}"));
    let taken = lock(&node, "after-the-race", MINUTE).await;
    exec(&pool, &format!("DROP SCHEMA {schema} CASCADE")).await;
    assert!(
        taken.is_some(),
        "the node could not lock on the table it found"
    );
}
