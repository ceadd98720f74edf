//! The MySQL or MariaDB server in `SHEDLOCK_TEST_MYSQL_URL`, as this binary's tests use it:
//! every test on tables of its own.

use std::time::Duration;

use shedlock_mysql::MySqlBackend;
use shedlock_test_support::settings;
use shedlock_test_support::sql::provider_tests::{self as shared, StoredRow, StoredRows};
use shedlock_test_support::sql::test_database::{TestDatabase, TestServer};
use sqlx::Row;
use sqlx::mysql::MySqlPool;

use crate::planted_records::MySqlKit;

pub fn url() -> String {
    settings::MYSQL.value()
}

/// The test server.
pub struct MySql;

impl TestDatabase for MySql {
    type Backend = MySqlBackend;
    type Kit = MySqlKit;
    const TABLE_PREFIX: &'static str = "my";
    const UNSTORABLE_NAMES: &'static [&'static str] = &[];
    const NOW: &'static str = "UTC_TIMESTAMP(3)";
    const IN_AN_HOUR: &'static str = "UTC_TIMESTAMP(3) + INTERVAL 1 HOUR";

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

impl TestServer for MySql {
    const SCHEMES: [&'static str; 2] = ["mysql", "mariadb"];
    const PORT: u16 = 3306;
    const QUOTE: char = '`';
    const NO_SUCH_TABLE: &'static str = "doesn't exist";
    // innodb_lock_wait_timeout is the operation timeout, at least a second.
    const ROW_LOCK_WAIT_OUTLIVES: Duration = Duration::from_millis(1_500);

    async fn has_table(&self, table: &str) -> bool {
        let found: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?",
        )
        .bind(table)
        .fetch_one(&self.pool().await)
        .await
        .unwrap();
        found != 0
    }
}

/// Reads `table`'s rows back.
struct Rows {
    pool: MySqlPool,
    table: String,
}

#[async_trait::async_trait]
impl StoredRows for Rows {
    async fn row(&self, name: &str) -> Option<StoredRow> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT CAST(TIMESTAMPDIFF(MICROSECOND, locked_at, lock_until) / 1000 AS DOUBLE), \
             locked_by, CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(3), locked_at) / 1e6 AS DOUBLE) \
             FROM {} WHERE name = ?",
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
            "SELECT COUNT(*) FROM {}",
            self.table
        )))
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }
}
