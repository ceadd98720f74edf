//! The conformance kit against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`), on a
//! ShedLock table with the fencing column, in server time.

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;

use std::time::SystemTime;

use conformance_harness::{PlantRecords, TABLE};
use shedlock_conformance::{PlantedRecord, async_trait, backends};
use shedlock_mysql::MySqlBackend;
use sqlx::MySqlPool;

fn utc(time: SystemTime) -> chrono::NaiveDateTime {
    chrono::DateTime::<chrono::Utc>::from(time).naive_utc()
}

#[async_trait]
impl PlantRecords for MySqlBackend {
    const UNREACHABLE_URL: &'static str = "mysql://root:secret@127.0.0.1:1/test";

    async fn write_record(admin: &MySqlPool, record: &PlantedRecord) -> Result<(), sqlx::Error> {
        let (until, at) = (utc(record.lock_until), utc(record.locked_at));
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {TABLE} (name, lock_until, locked_at, locked_by) VALUES (?, ?, ?, ?) \
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

    async fn cleanup(admin: &MySqlPool, name_prefix: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {TABLE} WHERE LEFT(name, CHAR_LENGTH(?)) = ?"
        )))
        .bind(name_prefix)
        .bind(name_prefix)
        .execute(admin)
        .await?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    conformance_harness::run::<MySqlBackend>(backends::mysql_url(), 2)
}
