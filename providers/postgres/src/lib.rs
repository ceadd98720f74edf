//! PostgreSQL lock provider for shedlock-rs, on Java ShedLock's own table, so Java and Rust
//! nodes can share locks during a migration.
//!
//! # The table
//!
//! ShedLock's PostgreSQL table (names configurable, schema-qualified allowed):
//!
//! ```sql
//! CREATE TABLE shedlock (
//!     name       VARCHAR(64)  NOT NULL,
//!     lock_until TIMESTAMP    NOT NULL,
//!     locked_at  TIMESTAMP    NOT NULL,
//!     locked_by  VARCHAR(255) NOT NULL,
//!     PRIMARY KEY (name)
//! );
//! -- optional, for fencing tokens; Java ShedLock ignores it:
//! ALTER TABLE shedlock ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! ```
//!
//! Times are UTC wall times in `TIMESTAMP` columns, as ShedLock writes them. `TIMESTAMPTZ`
//! columns are accepted too (the statements then compare instants). [`create_table_statement`]
//! gives the DDL for any configured names, and
//! [`PostgresLockProviderBuilder::create_table_if_missing`] runs it.
//!
//! Connecting reads the table from the catalog: a missing table, a missing column, a column of
//! the wrong type or a `name` without a unique index is an error that says how to fix it. The
//! `name` column's declared length becomes [`Capabilities::max_name_chars`]: a longer name is
//! refused with [`LockError::InvalidName`] before anything is written, never truncated.
//!
//! # The statements
//!
//! Server time (the default) uses the database clock, `timezone('utc', CURRENT_TIMESTAMP)`, so
//! the nodes' clocks do not matter. Every operation is one statement, outside any transaction
//! of the caller (each runs on its own pooled connection, in autocommit):
//!
//! ```sql
//! -- acquire, including the first acquire of a new name ($3 = lock_at_most_for in seconds):
//! INSERT INTO shedlock AS lock_row (name, lock_until, locked_at, locked_by)
//!   VALUES ($1, now + make_interval(secs => $3), now, $2)
//!   ON CONFLICT (name) DO UPDATE SET lock_until = EXCLUDED.lock_until,
//!     locked_at = EXCLUDED.locked_at, locked_by = EXCLUDED.locked_by
//!   WHERE lock_row.lock_until <= now
//!   RETURNING 0::int8                     -- or the new fencing token; no row: not acquired
//! -- release ($3 = lock_at_least_for):
//! UPDATE shedlock SET lock_until = GREATEST(now, locked_at + make_interval(secs => $3))
//!   WHERE name = $1 AND locked_by = $2 AND lock_until > now
//! -- extend ($3 = the new lock_at_most_for):
//! UPDATE shedlock SET lock_until = now + make_interval(secs => $3)
//!   WHERE name = $1 AND locked_by = $2 AND lock_until > now
//! ```
//!
//! `locked_by` is `<holder>#<random>`, unique per acquisition, so a node whose lock expired and
//! was taken over can neither release nor extend the new holder's lock. A Java node's rows
//! (`locked_by` = its host name) are honoured exactly like Rust ones.
//!
//! With [`TimeSource::Client`] the node's clock is bound as `$4` instead of `now`; exclusion
//! then holds only while the nodes' clocks differ by less than `lock_at_most_for` minus the
//! task's run time.
//!
//! # Sharing the table with Java ShedLock
//!
//! Java nodes and Rust nodes honour each other's rows (tested with ShedLock's own statements).
//! On the Java side: `JdbcTemplateLockProvider` with `usingDbTime()` uses the same server
//! clock; the plain `JdbcLockProvider` writes its JVM's clock through the JVM's default time
//! zone, so that JVM must run in UTC (`-Duser.timezone=UTC`) and its clock must be close to
//! the database's. Java's unlock checks only its host name, not its acquisition: a Java node
//! whose lock expired while its task still ran can shorten a lock a Rust node then took
//! (ShedLock issues #186, #317). Rust's release and extend never touch another acquisition.
//!
//! # Fencing
//!
//! If the table has the fencing column (default name `fencing_token`, an integer), each
//! acquisition increments it in the acquire statement and returns the new value as the lock's
//! fencing token. Without the column the table stays exactly ShedLock's and
//! [`Capabilities::fencing`] is false. Tokens restart if a row is deleted by hand.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_postgres::PostgresLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = PostgresLockProvider::builder_from_url("postgres://app@db/app")
//!     .create_table_if_missing(true)
//!     .build()
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
//! executor.execute(&config, async { /* at most one node at a time */ }).await?;
//! # Ok(()) }
//! ```

mod storage;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, Capabilities, Clock, DEFAULT_OPERATION_TIMEOUT, LockConfiguration, LockError,
    LockProvider, Operation, StorageBasedLockProvider, TimeSource, redact_url,
};
use shedlock_sql::IdentifierError;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPool, PgPoolOptions};

pub use shedlock_sql::{Column, LockTable};
pub use storage::create_table_statement;

use storage::{PROVIDER, PostgresStorage};

/// How long connecting (and each wait for a pooled connection) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default pool size for a pool this crate opens from a URL.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

enum Source {
    Url(String),
    Pool(PgPool),
}

/// Configures and connects a [`PostgresLockProvider`]. Every setting has ShedLock's default.
pub struct PostgresLockProviderBuilder {
    source: Source,
    table: Result<LockTable, IdentifierError>,
    time_source: TimeSource,
    create_table: Option<bool>,
    connect_timeout: Duration,
    operation_timeout: Duration,
    max_connections: u32,
    holder: Option<String>,
    clock: Option<Arc<dyn Clock>>,
}

impl fmt::Debug for PostgresLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLockProviderBuilder")
            .field("target", &describe(&self.source))
            .field("table", &self.table)
            .field("time_source", &self.time_source)
            .field("create_table", &self.create_table)
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

fn describe(source: &Source) -> String {
    match source {
        Source::Url(url) => redact_url(url),
        Source::Pool(_) => "the given pool".to_owned(),
    }
}

impl PostgresLockProviderBuilder {
    fn new(source: Source) -> Self {
        Self {
            source,
            table: Ok(LockTable::default()),
            time_source: TimeSource::Server,
            create_table: None,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            holder: None,
            clock: None,
        }
    }

    /// The lock table's name (default `shedlock`); `schema.table` names another schema. Plain
    /// identifiers only (letters, digits, `_`); they fold to lower case as unquoted SQL does.
    /// A refused name is reported by [`build`](Self::build).
    pub fn table_name(mut self, table: &str) -> Self {
        self.table = self.table.and_then(|current| {
            let renamed = LockTable::new(table)?;
            [
                Column::Name,
                Column::LockUntil,
                Column::LockedAt,
                Column::LockedBy,
                Column::FencingToken,
            ]
            .into_iter()
            .try_fold(renamed, |t, c| t.with_column(c, current.column(c).as_str()))
        });
        self
    }

    /// Renames one column, for a table whose columns differ from ShedLock's.
    pub fn column_name(mut self, column: Column, name: &str) -> Self {
        self.table = self.table.and_then(|t| t.with_column(column, name));
        self
    }

    /// The whole table description at once.
    pub fn lock_table(mut self, table: LockTable) -> Self {
        self.table = Ok(table);
        self
    }

    /// Whose clock decides expiry: [`TimeSource::Server`] (default, the database clock) or
    /// [`TimeSource::Client`] (each node's clock, bound as a parameter).
    pub fn time_source(mut self, time_source: TimeSource) -> Self {
        self.time_source = time_source;
        self
    }

    /// Creates the table at connect if it does not exist, with the fencing column when
    /// `fencing` is true. An existing table is left as it is.
    pub fn create_table_if_missing(mut self, fencing: bool) -> Self {
        self.create_table = Some(fencing);
        self
    }

    /// The bound on connecting and on each wait for a pooled connection (default 5 s), so an
    /// unreachable database is an error, not a hang.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The bound on each lock statement (default 5 s). For a pool opened from a URL it is also
    /// the server-side `statement_timeout`, so a cancelled statement does not linger.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The pool size when connecting from a URL (default 10); ignored for a given pool.
    pub fn max_connections(mut self, max: u32) -> Self {
        self.max_connections = max;
        self
    }

    /// The readable part of `locked_by` (default: the host name, as ShedLock).
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// The node clock, used for lock decisions only with [`TimeSource::Client`].
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Connects, creates the table if asked, checks it, and returns the provider.
    pub async fn build(self) -> Result<PostgresLockProvider, LockError> {
        let target = describe(&self.source);
        let connect_error =
            |message: String| LockError::backend_message(PROVIDER, Operation::Connect, "", message);
        let table = self
            .table
            .map_err(|e| connect_error(format!("bad lock table configuration: {e}")))?;
        let timeout = self.connect_timeout;
        let pool = match self.source {
            Source::Pool(pool) => pool,
            Source::Url(url) => {
                let options = url_options(&url, &target, self.operation_timeout)?;
                // One direct connection first: its error says why (refused, no such host,
                // authentication), where a pool would only report that it timed out.
                match tokio_timeout(timeout, PgConnection::connect_with(&options)).await {
                    Some(Ok(connection)) => {
                        let _ = connection.close().await;
                    }
                    Some(Err(e)) => {
                        return Err(LockError::backend(
                            PROVIDER,
                            Operation::Connect,
                            "",
                            format!("{target}: cannot connect: {e}"),
                            e,
                        ));
                    }
                    None => {
                        return Err(connect_error(format!(
                            "{target}: no connection within {timeout:?} (is the server reachable?)"
                        )));
                    }
                }
                pool_options(self.max_connections, timeout, self.operation_timeout)
                    .connect_lazy_with(options)
            }
        };
        let connecting = PostgresStorage::connect(
            pool,
            table,
            self.time_source,
            self.create_table,
            target.clone(),
        );
        let storage = match tokio_timeout(timeout, connecting).await {
            Some(result) => result.map_err(|e| add_target(e, &target))?,
            None => {
                return Err(connect_error(format!(
                    "{target}: no answer within {timeout:?} (is the server reachable?)"
                )));
            }
        };
        Ok(Self::finish(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }

    /// Builds the provider without connecting or reading the catalog, for an application that
    /// must start while the database is down: the first lock statement connects, and an
    /// unreachable database is then that statement's error.
    ///
    /// The table is trusted to be exactly what [`create_table_statement`] creates for the
    /// configured names (with the fencing column when `fencing` is true); nothing checks it,
    /// so prefer [`build`](Self::build) whenever the database is up.
    pub fn build_without_connecting(
        self,
        fencing: bool,
    ) -> Result<PostgresLockProvider, LockError> {
        let target = describe(&self.source);
        let table = self.table.map_err(|e| {
            LockError::backend_message(
                PROVIDER,
                Operation::Connect,
                "",
                format!("bad lock table configuration: {e}"),
            )
        })?;
        let pool = match self.source {
            Source::Pool(pool) => pool,
            Source::Url(url) => {
                let options = url_options(&url, &target, self.operation_timeout)?;
                pool_options(
                    self.max_connections,
                    self.connect_timeout,
                    self.operation_timeout,
                )
                .connect_lazy_with(options)
            }
        };
        let storage = PostgresStorage::unchecked(pool, table, self.time_source, fencing, target);
        Ok(Self::finish(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }

    fn finish(
        storage: PostgresStorage,
        operation_timeout: Duration,
        holder: Option<String>,
        clock: Option<Arc<dyn Clock>>,
    ) -> PostgresLockProvider {
        let storage = Arc::new(storage);
        let mut inner = StorageBasedLockProvider::from_arc(storage.clone())
            .with_operation_timeout(operation_timeout);
        if let Some(holder) = holder {
            inner = inner.with_holder(holder);
        }
        if let Some(clock) = clock {
            inner = inner.with_clock(clock);
        }
        PostgresLockProvider {
            inner,
            storage,
            operation_timeout,
        }
    }
}

/// Parses `url` into connect options with this crate's session settings.
fn url_options(
    url: &str,
    target: &str,
    operation_timeout: Duration,
) -> Result<PgConnectOptions, LockError> {
    let options = PgConnectOptions::from_str(url).map_err(|e| {
        LockError::backend(
            PROVIDER,
            Operation::Connect,
            "",
            format!("{target} is not a valid PostgreSQL URL"),
            e,
        )
    })?;
    let statement_timeout = operation_timeout.as_millis().max(1).to_string();
    Ok(options
        .options([("statement_timeout", statement_timeout.as_str())])
        .application_name("shedlock-rs"))
}

/// The pool settings for a pool this crate opens.
fn pool_options(
    max_connections: u32,
    connect_timeout: Duration,
    operation_timeout: Duration,
) -> PgPoolOptions {
    let _ = operation_timeout;
    PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(connect_timeout)
}

async fn tokio_timeout<T>(limit: Duration, future: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout(limit, future).await.ok()
}

/// Prefixes a connect error with the redacted target, so the message says which database.
fn add_target(error: LockError, target: &str) -> LockError {
    match error {
        LockError::Backend {
            provider,
            operation,
            name,
            message,
            source,
        } => LockError::Backend {
            provider,
            operation,
            name,
            message: format!("{target}: {message}"),
            source,
        },
        other => other,
    }
}

/// A lock provider on a PostgreSQL table: one node's view of it.
///
/// Cloning is not offered; call [`node`](Self::node) for another node on the same pool and
/// table (with its own name cache), as tests of several nodes do.
pub struct PostgresLockProvider {
    inner: StorageBasedLockProvider,
    storage: Arc<PostgresStorage>,
    operation_timeout: Duration,
}

impl fmt::Debug for PostgresLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl PostgresLockProvider {
    /// A builder that opens its own pool from `url` (`postgres://user@host:5432/db`).
    pub fn builder_from_url(url: impl Into<String>) -> PostgresLockProviderBuilder {
        PostgresLockProviderBuilder::new(Source::Url(url.into()))
    }

    /// A builder on an existing pool; lock statements take a connection from it per statement,
    /// never joining a transaction of yours.
    pub fn builder(pool: PgPool) -> PostgresLockProviderBuilder {
        PostgresLockProviderBuilder::new(Source::Pool(pool))
    }

    /// Connects to `url` with every default: ShedLock's table, server time.
    pub async fn connect(url: impl Into<String>) -> Result<Self, LockError> {
        Self::builder_from_url(url).build().await
    }

    /// Another node on the same pool and table: the host name as holder, the system clock, and
    /// a name cache of its own.
    pub fn node(&self) -> Self {
        Self {
            inner: StorageBasedLockProvider::from_arc(self.storage.clone())
                .with_operation_timeout(self.operation_timeout),
            storage: self.storage.clone(),
            operation_timeout: self.operation_timeout,
        }
    }

    /// This node's clock (see [`PostgresLockProviderBuilder::clock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: self.inner.with_clock(clock),
            ..self
        }
    }

    /// This node's holder name (see [`PostgresLockProviderBuilder::holder`]).
    pub fn with_holder(self, holder: impl Into<String>) -> Self {
        Self {
            inner: self.inner.with_holder(holder),
            ..self
        }
    }

    /// Forgets which names this node has seen, as a restarted node would.
    pub fn clear_name_cache(&self) {
        self.inner.clear_name_cache();
    }

    /// The pool the statements run on.
    pub fn pool(&self) -> &PgPool {
        self.storage.pool()
    }

    /// The table the provider uses.
    pub fn lock_table(&self) -> &LockTable {
        self.storage.table()
    }

    /// Whether the table has the fencing column, so acquisitions carry tokens.
    pub fn has_fencing(&self) -> bool {
        self.storage.schema().fencing
    }
}

#[async_trait]
impl LockProvider for PostgresLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
