//! The conformance kit's harness for any SQL provider: nodes on one fixed table in one of the
//! provider's supported configurations ([`KitRun`]), an unreachable node, and a pool of its
//! own to plant and clean rows. Each provider's conformance targets include this file with
//! `#[path]` and say, through [`PlantRecords`], how their database writes a row as another
//! program would.

use std::future::Future;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use shedlock_conformance::backends::LaunchError;
use shedlock_conformance::{
    Clock, ConformanceHarness, LockError, PlantedRecord, Support, async_trait,
};
use shedlock_core::{Operation, TimeSource};
use shedlock_sql::{SqlBackend, SqlLockProvider};
use sqlx::Pool;
use sqlx::pool::PoolOptions;

/// One supported configuration the kit runs against. Each has a fixed table of its own, so
/// repeated runs reuse it and runs of different configurations can go in parallel on one
/// server; each run's names are unique.
#[derive(Debug, Clone, Copy)]
pub struct KitRun {
    /// Appended to the provider's name for the report file (`postgres-client-time.json`),
    /// so the runs' reports do not overwrite each other.
    pub report_suffix: &'static str,
    /// The lock table this configuration owns.
    pub table: &'static str,
    /// Whose clock decides expiry.
    pub time_source: TimeSource,
    /// Whether the table has the fencing column, so whether the provider declares fencing.
    pub fencing: bool,
}

// Each conformance target runs one of these, so the other is unused in it.
#[allow(dead_code)]
impl KitRun {
    /// The default configuration: the database's clock, and the fencing column.
    pub const SERVER_TIME_WITH_FENCING: KitRun = KitRun {
        report_suffix: "",
        table: "shedlock_conformance",
        time_source: TimeSource::Server,
        fencing: true,
    };

    /// The other one: each node's clock bound as a parameter, on exactly ShedLock's table (no
    /// fencing column), as a node sharing a table with Java's client-time JdbcLockProvider runs.
    pub const CLIENT_TIME_WITHOUT_FENCING: KitRun = KitRun {
        report_suffix: "-client-time",
        table: "shedlock_conformance_client_time",
        time_source: TimeSource::Client,
        fencing: false,
    };
}

/// What differs per database: the SQL another program would use on the run's table.
#[async_trait]
pub trait PlantRecords: SqlBackend {
    /// A URL where no database answers (with a password, as a real one would have).
    const UNREACHABLE_URL: &'static str;

    /// Writes `record` into `table` as another program would, replacing any row of the same
    /// name.
    async fn write_record(
        admin: &Pool<Self::Database>,
        table: &str,
        record: &PlantedRecord,
    ) -> Result<(), sqlx::Error>;

    /// Deletes the rows of `table` whose names start with `name_prefix`.
    async fn cleanup(
        admin: &Pool<Self::Database>,
        table: &str,
        name_prefix: &str,
    ) -> Result<(), sqlx::Error>;
}

/// The harness: where nodes connect, in which configuration, and the pool for planting and
/// cleaning records.
pub struct SqlHarness<B: SqlBackend> {
    name: String,
    url: String,
    run: KitRun,
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
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<SqlLockProvider<B>, LockError> {
        SqlLockProvider::<B>::builder_from_url(self.url.clone())
            .table_name(self.run.table)
            .time_source(self.run.time_source)
            .max_connections(3)
            .clock(clock)
            .build()
            .await
    }

    async fn unreachable_node(&self) -> Result<Support<SqlLockProvider<B>>, LockError> {
        SqlLockProvider::<B>::builder_from_url(B::UNREACHABLE_URL)
            .table_name(self.run.table)
            .time_source(self.run.time_source)
            .connect_timeout(Duration::from_secs(2))
            .build_without_connecting(self.run.fencing)
            .map(Support::Supported)
    }

    fn clear_name_cache(&self, node: &SqlLockProvider<B>) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, LockError> {
        B::write_record(&self.admin, self.run.table, record)
            .await
            .map_err(harness_error::<B>)?;
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), LockError> {
        B::cleanup(&self.admin, self.run.table, name_prefix)
            .await
            .map_err(harness_error::<B>)
    }
}

/// Runs the kit in configuration `run` on the server `url` finds, with `admin_connections`
/// for the harness's own pool. The run's table is created before checks run in parallel; a
/// table left by an earlier run with the other shape is an error, not a silently different
/// configuration.
pub fn run<B: PlantRecords>(
    url: impl Future<Output = Result<String, LaunchError>>,
    admin_connections: u32,
    run: KitRun,
) -> ExitCode {
    shedlock_conformance::run(|| async move {
        let url = url.await?;
        let admin = PoolOptions::<B::Database>::new()
            .max_connections(admin_connections)
            .connect(&url)
            .await?;
        let provider = SqlLockProvider::<B>::builder(admin.clone())
            .table_name(run.table)
            .time_source(run.time_source)
            .create_table_if_missing(run.fencing)
            .build()
            .await?;
        if provider.has_fencing() != run.fencing {
            return Err(format!(
                "table {} {} the fencing column, but this run is meant to be {:?}: drop the table",
                run.table,
                if provider.has_fencing() {
                    "has"
                } else {
                    "lacks"
                },
                run
            )
            .into());
        }
        Ok(SqlHarness::<B> {
            name: format!("{}{}", B::PROVIDER, run.report_suffix),
            url,
            run,
            admin,
        })
    })
}
