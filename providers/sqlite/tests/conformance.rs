//! The conformance kit on a SQLite database file (`SHEDLOCK_TEST_SQLITE_URL`, else a fresh
//! file in the temp folder), on a ShedLock table with the fencing column, in server time.

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;

use std::time::SystemTime;

use conformance_harness::{PlantRecords, TABLE};
use shedlock_conformance::{PlantedRecord, async_trait, backends};
use shedlock_sqlite::SqliteBackend;
use sqlx::SqlitePool;

/// The provider's storage format: UTC text with milliseconds.
fn text(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

#[async_trait]
impl PlantRecords for SqliteBackend {
    const UNREACHABLE_URL: &'static str = "sqlite:///nonexistent-shedlock-dir/locks.db";

    async fn write_record(admin: &SqlitePool, record: &PlantedRecord) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT OR REPLACE INTO {TABLE} (name, lock_until, locked_at, locked_by) \
             VALUES (?1, ?2, ?3, ?4)"
        )))
        .bind(&record.name)
        .bind(text(record.lock_until))
        .bind(text(record.locked_at))
        .bind(&record.locked_by)
        .execute(admin)
        .await?;
        Ok(())
    }

    async fn cleanup(admin: &SqlitePool, name_prefix: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {TABLE} WHERE substr(name, 1, length(?1)) = ?1"
        )))
        .bind(name_prefix)
        .execute(admin)
        .await?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    // One admin connection: SQLite has one writer at a time anyway.
    conformance_harness::run::<SqliteBackend>(backends::sqlite_url(), 1)
}
