//! The PostgreSQL server in `SHEDLOCK_TEST_POSTGRES_URL`, as this binary's tests use it: every
//! test on tables of its own.

use std::time::Duration;

use shedlock_postgres::PostgresBackend;
use shedlock_test_support::settings;
use shedlock_test_support::sql::provider_tests::{self as shared, StoredRow, StoredRows};
use shedlock_test_support::sql::test_database::{TestDatabase, TestServer};
use sqlx::PgPool;
use sqlx::Row;

use crate::planted_records::PostgresKit;

pub fn url() -> String {
    settings::POSTGRES.value()
}

/// The test server.
pub struct Postgres;

impl TestDatabase for Postgres {
    type Backend = PostgresBackend;
    type Kit = PostgresKit;
    const TABLE_PREFIX: &'static str = "pg";
    // PostgreSQL's text cannot hold NUL.
    const UNSTORABLE_NAMES: &'static [&'static str] = &["a\0b"];
    const NOW: &'static str = "timezone('utc', CURRENT_TIMESTAMP)";
    const IN_AN_HOUR: &'static str = "timezone('utc', CURRENT_TIMESTAMP) + interval '1 hour'";

    fn url(&self) -> String {
        url()
    }

    async fn exec(&self, sql: &str) {
        shared::exec(&self.pool().await, sql).await;
    }

    async fn rows(&self, table: &str) -> Box<dyn StoredRows> {
        Box::new(Rows {
            pool: self.pool().await,
            table: table.to_owned(),
        })
    }
}

impl TestServer for Postgres {
    const SCHEMES: [&'static str; 2] = ["postgres", "postgresql"];
    const PORT: u16 = 5432;
    const QUOTE: char = '"';
    const NO_SUCH_TABLE: &'static str = "does not exist";
    // The session's statement_timeout (the operation timeout) cancels it.
    const ROW_LOCK_WAIT_OUTLIVES: Duration = Duration::from_millis(800);

    async fn has_table(&self, table: &str) -> bool {
        sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
            .bind(table)
            .fetch_one(&self.pool().await)
            .await
            .unwrap()
    }
}

/// Reads `table`'s rows back.
struct Rows {
    pool: PgPool,
    table: String,
}

#[async_trait::async_trait]
impl StoredRows for Rows {
    async fn row(&self, name: &str) -> Option<StoredRow> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT EXTRACT(EPOCH FROM lock_until - locked_at)::float8 * 1000, locked_by, \
             EXTRACT(EPOCH FROM locked_at - timezone('utc', CURRENT_TIMESTAMP))::float8 \
             FROM {} WHERE name = $1",
            self.table
        )))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .unwrap()
        .map(|r| StoredRow {
            held_ms: r.get(0),
            locked_by: r.get(1),
            locked_at_from_now: r.get(2),
        })
    }

    async fn count(&self) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {}",
            self.table
        )))
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }
}
