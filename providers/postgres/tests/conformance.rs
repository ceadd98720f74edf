//! The conformance kit against a real PostgreSQL server (`SHEDLOCK_TEST_POSTGRES_URL`), on a
//! ShedLock table with the fencing column, in server time.

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;

use std::time::SystemTime;

use conformance_harness::{PlantRecords, TABLE};
use shedlock_conformance::{PlantedRecord, async_trait, backends};
use shedlock_postgres::PostgresBackend;
use sqlx::PgPool;

fn utc(time: SystemTime) -> chrono::NaiveDateTime {
    chrono::DateTime::<chrono::Utc>::from(time).naive_utc()
}

#[async_trait]
impl PlantRecords for PostgresBackend {
    const UNREACHABLE_URL: &'static str = "postgres://postgres:secret@127.0.0.1:1/test";

    async fn write_record(admin: &PgPool, record: &PlantedRecord) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {TABLE} (name, lock_until, locked_at, locked_by) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until, \
             locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by"
        )))
        .bind(&record.name)
        .bind(utc(record.lock_until))
        .bind(utc(record.locked_at))
        .bind(&record.locked_by)
        .execute(admin)
        .await?;
        Ok(())
    }

    async fn cleanup(admin: &PgPool, name_prefix: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {TABLE} WHERE starts_with(name, $1)"
        )))
        .bind(name_prefix)
        .execute(admin)
        .await?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    conformance_harness::run::<PostgresBackend>(backends::postgres_url(), 2)
}
