//! How MySQL and MariaDB write and delete a kit record as another program would; shared by
//! this crate's conformance targets.

use std::time::SystemTime;

use shedlock_conformance::backends::Backend;
use shedlock_conformance::{PlantedRecord, async_trait};
use shedlock_mysql::MySqlBackend;
use shedlock_test_support::sql::conformance_harness::PlantRecords;
use sqlx::MySqlPool;

fn utc(time: SystemTime) -> chrono::NaiveDateTime {
    chrono::DateTime::<chrono::Utc>::from(time).naive_utc()
}

/// MySQL and MariaDB as the kit's SQL harness drives it. The harness's traits are implemented on this
/// type of the crate's own: the orphan rule forbids implementing them for [`MySqlBackend`].
pub struct MySqlKit;

#[async_trait]
impl PlantRecords for MySqlKit {
    type Backend = MySqlBackend;

    const UNREACHABLE_URL: &'static str = "mysql://root:secret@127.0.0.1:1/test";

    const SERVER: Option<(Backend, u16)> = Some((Backend::Mysql, 3306));

    async fn write_record(
        admin: &MySqlPool,
        table: &str,
        record: &PlantedRecord,
    ) -> Result<(), sqlx::Error> {
        let (until, at) = (utc(record.lock_until), utc(record.locked_at));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES (?, ?, ?, ?) \
             ON DUPLICATE KEY UPDATE lock_until = ?, locked_at = ?, locked_by = ?"
        )))
        .bind(&record.name)
        .bind(until)
        .bind(at)
        .bind(&record.locked_by)
        .bind(until)
        .bind(at)
        .bind(&record.locked_by)
        .execute(admin)
        .await?;
        Ok(())
    }

    async fn set_fencing_token(
        admin: &MySqlPool,
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

    async fn cleanup(admin: &MySqlPool, table: &str, name_prefix: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE LEFT(name, CHAR_LENGTH(?)) = ?"
        )))
        .bind(name_prefix)
        .bind(name_prefix)
        .execute(admin)
        .await?;
        Ok(())
    }
}
