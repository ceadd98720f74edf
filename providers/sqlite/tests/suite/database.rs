//! A database file of each test's own, as this binary's tests use it.

use std::path::PathBuf;

use shedlock_sqlite::SqliteBackend;
use shedlock_test_support::sql::provider_tests::{self as shared, StoredRow, StoredRows};
use shedlock_test_support::sql::test_database::TestDatabase;
use sqlx::sqlite::SqlitePool;

use crate::planted_records::SqliteKit;

/// A new database file in the temp folder, removed when the test is done with it.
pub struct SqliteFile {
    path: PathBuf,
    url: String,
}

impl SqliteFile {
    pub fn new() -> Self {
        let path = std::env::temp_dir().join(format!(
            "shedlock-sqlite-test-{}.db",
            uuid::Uuid::new_v4().simple()
        ));
        let url = format!("sqlite://{}?mode=rwc", path.display());
        Self { path, url }
    }
}

impl Drop for SqliteFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl TestDatabase for SqliteFile {
    type Backend = SqliteBackend;
    type Kit = SqliteKit;
    // SQLite keeps names starting `sqlite_` for itself.
    const TABLE_PREFIX: &'static str = "sl";
    const UNSTORABLE_NAMES: &'static [&'static str] = &[];
    const NOW: &'static str = "strftime('%Y-%m-%d %H:%M:%f', 'now')";
    const IN_AN_HOUR: &'static str = "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour')";

    fn url(&self) -> String {
        self.url.clone()
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

/// Reads `table`'s rows back; times are checked to be in the documented text format.
pub struct Rows {
    pub pool: SqlitePool,
    pub table: String,
}

#[async_trait::async_trait]
impl StoredRows for Rows {
    async fn row(&self, name: &str) -> Option<StoredRow> {
        let row: Option<(String, String, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT lock_until, locked_at, locked_by FROM {} WHERE name = ?1",
            self.table
        )))
        .bind(name)
        .fetch_optional(&self.pool)
        .await
        .unwrap();
        row.map(|(until, at, locked_by)| {
            assert_eq!(until.len(), 23, "{until}");
            assert_eq!(at.len(), 23, "{at}");
            let (until, at) = (parse(&until), parse(&at));
            StoredRow {
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
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }
}

fn parse(text: &str) -> chrono::NaiveDateTime {
    chrono::NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.3f")
        .unwrap_or_else(|e| panic!("{text:?} is not YYYY-MM-DD HH:MM:SS.SSS: {e}"))
}

pub fn utc_now() -> chrono::NaiveDateTime {
    chrono::Utc::now().naive_utc()
}
