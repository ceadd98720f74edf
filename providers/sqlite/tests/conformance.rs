//! The conformance kit on a SQLite database file (`SHEDLOCK_TEST_SQLITE_URL`, else a fresh
//! file in the temp folder), on a ShedLock table with the fencing column, in server time.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use shedlock_conformance::{
    Clock, ConformanceHarness, LockError, PlantedRecord, Support, async_trait, backends,
};
use shedlock_sqlite::SqliteLockProvider;
use sqlx::sqlite::{SqlitePool, SqlitePoolOptions};

/// The kit's table: fixed, so repeated runs on one file reuse it; each run's names are unique.
const TABLE: &str = "shedlock_conformance";

struct Harness {
    url: String,
    /// For planting and cleaning records, as another program would.
    admin: SqlitePool,
}

/// The provider's storage format: UTC text with milliseconds.
fn text(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

fn sql_error(error: sqlx::Error) -> LockError {
    LockError::backend(
        "sqlite",
        shedlock_core::Operation::Acquire,
        "",
        "harness SQL failed",
        error,
    )
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = SqliteLockProvider;

    fn name(&self) -> &str {
        "sqlite"
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<SqliteLockProvider, LockError> {
        SqliteLockProvider::builder_from_url(self.url.clone())
            .table_name(TABLE)
            .max_connections(3)
            .clock(clock)
            .build()
            .await
    }

    async fn unreachable_node(&self) -> Result<Support<SqliteLockProvider>, LockError> {
        SqliteLockProvider::builder_from_url("sqlite:///nonexistent-shedlock-dir/locks.db")
            .table_name(TABLE)
            .connect_timeout(Duration::from_secs(2))
            .build_without_connecting(true)
            .map(Support::Supported)
    }

    fn clear_name_cache(&self, node: &SqliteLockProvider) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, LockError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT OR REPLACE INTO {TABLE} (name, lock_until, locked_at, locked_by) \
             VALUES (?1, ?2, ?3, ?4)"
        )))
        .bind(&record.name)
        .bind(text(record.lock_until))
        .bind(text(record.locked_at))
        .bind(&record.locked_by)
        .execute(&self.admin)
        .await
        .map_err(sql_error)?;
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), LockError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {TABLE} WHERE substr(name, 1, length(?1)) = ?1"
        )))
        .bind(name_prefix)
        .execute(&self.admin)
        .await
        .map_err(sql_error)?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| async {
        let url = backends::sqlite_url().await?;
        let admin = SqlitePoolOptions::new()
            .max_connections(1)
            .connect(&url)
            .await?;
        // Creates the table before checks run in parallel.
        SqliteLockProvider::builder(admin.clone())
            .table_name(TABLE)
            .create_table_if_missing(true)
            .build()
            .await?;
        Ok(Harness { url, admin })
    })
}
