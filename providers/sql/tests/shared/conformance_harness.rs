//! The conformance kit's harness for any SQL provider: nodes on one fixed table, an
//! unreachable node, and a pool of its own to plant and clean rows. Each provider's
//! `tests/conformance.rs` includes this file with `#[path]` and says, through
//! [`PlantRecords`], how its database writes a row as another program would.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use shedlock_conformance::backends::LaunchError;
use shedlock_conformance::{
    Clock, ConformanceHarness, LockError, PlantedRecord, Support, async_trait,
};
use shedlock_core::Operation;
use shedlock_sql::{SqlBackend, SqlLockProvider};
use sqlx::Pool;
use sqlx::pool::PoolOptions;

/// The kit's table: fixed, so repeated runs reuse it; each run's names are unique.
pub const TABLE: &str = "shedlock_conformance";

/// What differs per database: the SQL another program would use on [`TABLE`].
#[async_trait]
pub trait PlantRecords: SqlBackend {
    /// A URL where no database answers (with a password, as a real one would have).
    const UNREACHABLE_URL: &'static str;

    /// Writes `record` as another program would, replacing any row of the same name.
    async fn write_record(
        admin: &Pool<Self::Database>,
        record: &PlantedRecord,
    ) -> Result<(), sqlx::Error>;

    /// Deletes the rows whose names start with `name_prefix`.
    async fn cleanup(admin: &Pool<Self::Database>, name_prefix: &str) -> Result<(), sqlx::Error>;
}

/// The harness: where nodes connect, and the pool for planting and cleaning records.
pub struct SqlHarness<B: SqlBackend> {
    url: String,
    admin: Pool<B::Database>,
}

fn harness_error<B: SqlBackend>(error: sqlx::Error) -> LockError {
    LockError::backend(
        B::PROVIDER,
        Operation::Acquire,
        "",
        "harness SQL failed",
        error,
    )
}

#[async_trait]
impl<B: PlantRecords> ConformanceHarness for SqlHarness<B> {
    type Node = SqlLockProvider<B>;

    fn name(&self) -> &str {
        B::PROVIDER
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<SqlLockProvider<B>, LockError> {
        SqlLockProvider::<B>::builder_from_url(self.url.clone())
            .table_name(TABLE)
            .max_connections(3)
            .clock(clock)
            .build()
            .await
    }

    async fn unreachable_node(&self) -> Result<Support<SqlLockProvider<B>>, LockError> {
        SqlLockProvider::<B>::builder_from_url(B::UNREACHABLE_URL)
            .table_name(TABLE)
            .connect_timeout(Duration::from_secs(2))
            .build_without_connecting(true)
            .map(Support::Supported)
    }

    fn clear_name_cache(&self, node: &SqlLockProvider<B>) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, LockError> {
        B::write_record(&self.admin, record)
            .await
            .map_err(harness_error::<B>)?;
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), LockError> {
        B::cleanup(&self.admin, name_prefix)
            .await
            .map_err(harness_error::<B>)
    }
}

/// Runs the kit on the server `url` finds, with `admin_connections` for the harness's own
/// pool. The table (with the fencing column) is created before checks run in parallel.
pub fn run<B: PlantRecords>(
    url: impl Future<Output = Result<String, LaunchError>>,
    admin_connections: u32,
) -> ExitCode {
    shedlock_conformance::run(|| async move {
        let url = url.await?;
        let admin = PoolOptions::<B::Database>::new()
            .max_connections(admin_connections)
            .connect(&url)
            .await?;
        SqlLockProvider::<B>::builder(admin.clone())
            .table_name(TABLE)
            .create_table_if_missing(true)
            .build()
            .await?;
        Ok(SqlHarness::<B> { url, admin })
    })
}
