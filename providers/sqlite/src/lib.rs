//! SQLite lock provider for shedlock-rs: ShedLock's table in a database file that several
//! processes on one machine share.
//!
//! # The table
//!
//! ```sql
//! CREATE TABLE shedlock (
//!     name       VARCHAR(64)  NOT NULL,
//!     lock_until TIMESTAMP(3) NOT NULL,
//!     locked_at  TIMESTAMP(3) NOT NULL,
//!     locked_by  VARCHAR(255) NOT NULL,
//!     PRIMARY KEY (name)
//! );
//! -- optional, for fencing tokens:
//! ALTER TABLE shedlock ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! ```
//!
//! Times are stored as SQLite's own date-time text in UTC with milliseconds,
//! `YYYY-MM-DD HH:MM:SS.SSS` (what `strftime('%Y-%m-%d %H:%M:%f', 'now')` returns). The width
//! is fixed, so comparing the text compares the times. Another program writing this table must
//! use the same format (a Java node with sqlite-jdbc: `date_class=TEXT`,
//! `date_string_format=yyyy-MM-dd HH:mm:ss.SSS`, a UTC JVM); numbers or other formats would not
//! compare correctly.
//!
//! SQLite does not enforce `VARCHAR(64)`, but this provider does: the declared length becomes
//! [`Capabilities::max_name_chars`] and a longer name is [`LockError::InvalidName`], as on the
//! server databases. A missing table, a missing column, a column of the wrong type or a `name`
//! that is not the primary key is an error at connect that says how to fix it;
//! [`SqliteLockProviderBuilder::create_table_if_missing`] creates the table.
//!
//! # The statements
//!
//! Every operation is one statement, outside any transaction of the caller. `?4` is the time:
//! the text `'now'` by default, so SQLite's own clock decides ([`TimeSource::Server`]: every
//! process sharing the file reads the same machine clock, and a node clock passed with
//! `with_clock` decides nothing); or the node's UTC time with [`TimeSource::Client`].
//!
//! ```sql
//! -- acquire, including the first acquire of a new name (?3 = '+60.000 seconds'):
//! INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
//!   VALUES (?1, strftime('%Y-%m-%d %H:%M:%f', ?4, ?3), strftime('%Y-%m-%d %H:%M:%f', ?4), ?2)
//!   ON CONFLICT (name) DO UPDATE SET lock_until = excluded.lock_until,
//!     locked_at = excluded.locked_at, locked_by = excluded.locked_by
//!   WHERE lock_until <= strftime('%Y-%m-%d %H:%M:%f', ?4)
//!   RETURNING 0                  -- or the new fencing token; no row: not acquired
//! -- release (?3 = lock_at_least_for):
//! UPDATE shedlock SET lock_until = max(strftime('%Y-%m-%d %H:%M:%f', ?4),
//!     strftime('%Y-%m-%d %H:%M:%f', locked_at, ?3))
//!   WHERE name = ?1 AND locked_by = ?2 AND lock_until > strftime('%Y-%m-%d %H:%M:%f', ?4)
//! -- extend (?3 = the new lock_at_most_for):
//! UPDATE shedlock SET lock_until = strftime('%Y-%m-%d %H:%M:%f', ?4, ?3)
//!   WHERE name = ?1 AND locked_by = ?2 AND lock_until > strftime('%Y-%m-%d %H:%M:%f', ?4)
//! ```
//!
//! `locked_by` is `<holder>#<random>`, unique per acquisition, so a node whose lock expired and
//! was taken over can neither release nor extend the new holder's lock. With the fencing
//! column (default name `fencing_token`), the acquire increments it and returns it as the
//! lock's fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_sqlite::SqliteLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = SqliteLockProvider::builder_from_url("sqlite://locks.db?mode=rwc")
//!     .create_table_if_missing(true)
//!     .build()
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
//! executor.execute(&config, async { /* at most one process at a time */ }).await?;
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
use sqlx::sqlite::{SqliteConnectOptions, SqliteConnection, SqlitePool, SqlitePoolOptions};

pub use shedlock_sql::{Column, LockTable};
pub use storage::create_table_statement;

use storage::{PROVIDER, SqliteStorage};

/// How long connecting (and each wait for a pooled connection) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default pool size for a pool this crate opens from a URL.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

enum Source {
    Url(String),
    Pool(SqlitePool),
}

/// Configures and connects a [`SqliteLockProvider`]. Every setting has ShedLock's default.
pub struct SqliteLockProviderBuilder {
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

impl fmt::Debug for SqliteLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLockProviderBuilder")
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

impl SqliteLockProviderBuilder {
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

    /// The lock table's name (default `shedlock`); `schema.table` names an attached database.
    /// Plain identifiers only (letters, digits, `_`).
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

    /// Whose clock decides expiry: [`TimeSource::Server`] (default: SQLite's own `'now'`, the
    /// clock of the machine holding the file, shared by every process using it) or
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

    /// The bound on opening the file and on each wait for a pooled connection (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The bound on each lock statement (default 5 s). For a pool opened from a URL it is also
    /// SQLite's busy timeout: how long a statement waits for another writer's file lock.
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
    pub async fn build(self) -> Result<SqliteLockProvider, LockError> {
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
                match tokio_timeout(timeout, SqliteConnection::connect_with(&options)).await {
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
        let connecting = SqliteStorage::connect(
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
    pub fn build_without_connecting(self, fencing: bool) -> Result<SqliteLockProvider, LockError> {
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
        let storage = SqliteStorage::unchecked(pool, table, self.time_source, fencing, target);
        Ok(Self::finish(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }

    fn finish(
        storage: SqliteStorage,
        operation_timeout: Duration,
        holder: Option<String>,
        clock: Option<Arc<dyn Clock>>,
    ) -> SqliteLockProvider {
        let storage = Arc::new(storage);
        let mut inner = StorageBasedLockProvider::from_arc(storage.clone())
            .with_operation_timeout(operation_timeout);
        if let Some(holder) = holder {
            inner = inner.with_holder(holder);
        }
        if let Some(clock) = clock {
            inner = inner.with_clock(clock);
        }
        SqliteLockProvider {
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
) -> Result<SqliteConnectOptions, LockError> {
    let options = SqliteConnectOptions::from_str(url).map_err(|e| {
        LockError::backend(
            PROVIDER,
            Operation::Connect,
            "",
            format!("{target} is not a valid SQLite URL"),
            e,
        )
    })?;
    // Writers queue on the file lock for at most the operation timeout.
    Ok(options.busy_timeout(operation_timeout))
}

/// The pool settings for a pool this crate opens.
fn pool_options(
    max_connections: u32,
    connect_timeout: Duration,
    operation_timeout: Duration,
) -> SqlitePoolOptions {
    let _ = operation_timeout;
    SqlitePoolOptions::new()
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
pub struct SqliteLockProvider {
    inner: StorageBasedLockProvider,
    storage: Arc<SqliteStorage>,
    operation_timeout: Duration,
}

impl fmt::Debug for SqliteLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl SqliteLockProvider {
    /// A builder that opens its own pool from `url` (`sqlite://locks.db?mode=rwc`).
    pub fn builder_from_url(url: impl Into<String>) -> SqliteLockProviderBuilder {
        SqliteLockProviderBuilder::new(Source::Url(url.into()))
    }

    /// A builder on an existing pool; lock statements take a connection from it per statement,
    /// never joining a transaction of yours.
    pub fn builder(pool: SqlitePool) -> SqliteLockProviderBuilder {
        SqliteLockProviderBuilder::new(Source::Pool(pool))
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

    /// This node's clock (see [`SqliteLockProviderBuilder::clock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: self.inner.with_clock(clock),
            ..self
        }
    }

    /// This node's holder name (see [`SqliteLockProviderBuilder::holder`]).
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
    pub fn pool(&self) -> &SqlitePool {
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
impl LockProvider for SqliteLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
