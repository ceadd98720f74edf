//! The conformance kit against a real PostgreSQL server (`SHEDLOCK_TEST_POSTGRES_URL`), on a
//! ShedLock table with the fencing column, in server time.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use shedlock_conformance::{
    Clock, ConformanceHarness, LockError, PlantedRecord, Support, async_trait, backends,
};
use shedlock_postgres::PostgresLockProvider;
use sqlx::postgres::{PgPool, PgPoolOptions};

/// The kit's table: fixed, so repeated runs reuse it; each run's names are unique.
const TABLE: &str = "shedlock_conformance";

struct Harness {
    url: String,
    /// For planting and cleaning records, as another program would.
    admin: PgPool,
}

fn utc(time: SystemTime) -> chrono::NaiveDateTime {
    chrono::DateTime::<chrono::Utc>::from(time).naive_utc()
}

fn sql_error(error: sqlx::Error) -> LockError {
    LockError::backend(
        "postgres",
        shedlock_core::Operation::Acquire,
        "",
        "harness SQL failed",
        error,
    )
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = PostgresLockProvider;

    fn name(&self) -> &str {
        "postgres"
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<PostgresLockProvider, LockError> {
        PostgresLockProvider::builder_from_url(self.url.clone())
            .table_name(TABLE)
            .create_table_if_missing(true)
            .max_connections(3)
            .clock(clock)
            .build()
            .await
    }

    async fn unreachable_node(&self) -> Result<Support<PostgresLockProvider>, LockError> {
        PostgresLockProvider::builder_from_url("postgres://postgres:secret@127.0.0.1:1/test")
            .table_name(TABLE)
            .connect_timeout(Duration::from_secs(2))
            .build_without_connecting(true)
            .map(Support::Supported)
    }

    fn clear_name_cache(&self, node: &PostgresLockProvider) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, LockError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "INSERT INTO {TABLE} (name, lock_until, locked_at, locked_by) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until, \
             locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by"
        )))
        .bind(&record.name)
        .bind(utc(record.lock_until))
        .bind(utc(record.locked_at))
        .bind(&record.locked_by)
        .execute(&self.admin)
        .await
        .map_err(sql_error)?;
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), LockError> {
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DELETE FROM {TABLE} WHERE starts_with(name, $1)"
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
        let url = backends::postgres_url().await?;
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect(&url)
            .await?;
        // Creates the table before checks run in parallel.
        PostgresLockProvider::builder(admin.clone())
            .table_name(TABLE)
            .create_table_if_missing(true)
            .build()
            .await?;
        Ok(Harness { url, admin })
    })
}
