//! How PostgreSQL writes and deletes a kit record as another program would; shared by this
//! crate's conformance targets.

use std::time::SystemTime;

use shedlock_conformance::backends::Backend;
use shedlock_conformance::{PlantedRecord, async_trait};
use shedlock_postgres::PostgresBackend;
use shedlock_test_support::sql::conformance_harness::PlantRecords;
use sqlx::PgPool;

fn utc(time: SystemTime) -> chrono::NaiveDateTime {
    chrono::DateTime::<chrono::Utc>::from(time).naive_utc()
}

/// PostgreSQL as the kit's SQL harness drives it. The harness's traits are implemented on this
/// type of the crate's own: the orphan rule forbids implementing them for [`PostgresBackend`].
pub struct PostgresKit;

#[async_trait]
impl PlantRecords for PostgresKit {
    type Backend = PostgresBackend;

    const UNREACHABLE_URL: &'static str = "postgres://postgres:secret@127.0.0.1:1/test";

    const SERVER: Option<(Backend, u16)> = Some((Backend::Postgres, 5432));

    async fn write_record(
        admin: &PgPool,
        table: &str,
        record: &PlantedRecord,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} (name, lock_until, locked_at, locked_by) VALUES ($1, $2, $3, $4) \
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

    async fn set_fencing_token(
        admin: &PgPool,
        table: &str,
        name: &str,
        token: i64,
    ) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "UPDATE {table} SET fencing_token = $1 WHERE name = $2"
        )))
        .bind(token)
        .bind(name)
        .execute(admin)
        .await?;
        Ok(())
    }

    async fn cleanup(admin: &PgPool, table: &str, name_prefix: &str) -> Result<(), sqlx::Error> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {table} WHERE starts_with(name, $1)"
        )))
        .bind(name_prefix)
        .execute(admin)
        .await?;
        Ok(())
    }
}
