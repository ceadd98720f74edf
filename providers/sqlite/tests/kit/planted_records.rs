//! How SQLite writes and deletes a kit record as another program would; shared by this
//! crate's conformance targets.

use std::time::SystemTime;

use shedlock_conformance::backends::Backend;
use shedlock_conformance::{PlantedRecord, async_trait};
use shedlock_sqlite::SqliteBackend;
use shedlock_test_support::sql::conformance_harness::PlantRecords;
use sqlx::SqlitePool;

/// The provider's storage format: UTC text with milliseconds.
fn text(time: SystemTime) -> String {
    chrono::DateTime::<chrono::Utc>::from(time)
        .format("%Y-%m-%d %H:%M:%S%.3f")
        .to_string()
}

/// SQLite as the kit's SQL harness drives it. The harness's traits are implemented on this
/// type of the crate's own: the orphan rule forbids implementing them for [`SqliteBackend`].
pub struct SqliteKit;

#[async_trait]
impl PlantRecords for SqliteKit {
    type Backend = SqliteBackend;

    const UNREACHABLE_URL: &'static str = "sqlite:///nonexistent-shedlock-dir/locks.db";

    const SERVER: Option<(Backend, u16)> = None;

    async fn write_record(
        admin: &SqlitePool,
        table: &str,
        record: &PlantedRecord,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT OR REPLACE INTO {table} (name, lock_until, locked_at, locked_by) \
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

    async fn set_fencing_token(
        admin: &SqlitePool,
        table: &str,
        name: &str,
        token: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET fencing_token = ? WHERE name = ?"
        )))
        .bind(token)
        .bind(name)
        .execute(admin)
        .await?;
        Ok(())
    }

    async fn cleanup(
        admin: &SqlitePool,
        table: &str,
        name_prefix: &str,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE substr(name, 1, length(?1)) = ?1"
        )))
        .bind(name_prefix)
        .execute(admin)
        .await?;
        Ok(())
    }
}
