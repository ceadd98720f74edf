//! MySQL 8 and MariaDB 10.6+ lock provider for shedlock-rs, on Java ShedLock's own table, so
//! Java and Rust nodes can share locks during a migration.
//!
//! # The table
//!
//! ShedLock's MySQL table (names configurable, `database.table` allowed):
//!
//! ```sql
//! CREATE TABLE shedlock (
//!     name       VARCHAR(64)  NOT NULL,
//!     lock_until TIMESTAMP(3) NOT NULL,
//!     locked_at  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
//!     locked_by  VARCHAR(255) NOT NULL,
//!     PRIMARY KEY (name)
//! );
//! -- optional, for fencing tokens; Java ShedLock ignores it:
//! ALTER TABLE shedlock ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! ```
//!
//! [`create_table_statement`] (run by [`MySqlLockProviderBuilder::create_table_if_missing`])
//! adds one thing: the `name` column gets a binary, no-pad collation (`utf8mb4_0900_bin` on
//! MySQL, `utf8mb4_nopad_bin` on MariaDB), so `Job`, `job` and `job ` stay three locks. On a
//! table with a case-insensitive collation such names share one lock (safe, but surprising; a
//! warning is logged), and with a PAD SPACE collation names ending in a space are refused.
//!
//! Times are UTC wall times, as ShedLock writes them, in `TIMESTAMP(3)` or `DATETIME(3)`
//! columns (a lower precision is accepted and reported in
//! [`Capabilities::time_precision`]). `TIMESTAMP` converts through the session time zone, so
//! sessions must be UTC: pools opened from a URL are (`time_zone = '+00:00'`, sqlx's default),
//! and connecting checks a given pool. `TIMESTAMP` ends in 2038: a `lock_until` beyond it is an
//! error, never a wrapped time.
//!
//! Connecting reads the table from `information_schema`: a missing table, a missing column, a
//! column of the wrong type or a `name` that is not the key is an error that says how to fix
//! it. The `name` column's declared length becomes [`Capabilities::max_name_chars`]: a longer
//! name is refused with [`LockError::InvalidName`] before anything is written, never
//! truncated (ShedLock's `INSERT IGNORE` can truncate silently).
//!
//! # The statements
//!
//! Server time (the default) uses the database clock, `UTC_TIMESTAMP(3)`. Every operation is
//! one statement, outside any transaction of the caller. Acquire, including the first acquire
//! of a new name, valid on MySQL 8 and MariaDB alike (no `VALUES()` function, no row alias):
//!
//! ```sql
//! INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
//!   VALUES (?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), UTC_TIMESTAMP(3),
//!           IF(LAST_INSERT_ID(1) > 0, ?, NULL))
//! ON DUPLICATE KEY UPDATE
//!   locked_by  = IF(lock_until <= UTC_TIMESTAMP(3), IF(LAST_INSERT_ID(1) > 0, ?, NULL),
//!                   IF(LAST_INSERT_ID(0) = 0, locked_by, NULL)),
//!   locked_at  = IF(lock_until <= UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), locked_at),
//!   lock_until = IF(lock_until <= UTC_TIMESTAMP(3),
//!                   TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), lock_until)
//! ```
//!
//! Whether it took the lock is read from the statement's insert id, which the server sets to
//! the argument of the last `LAST_INSERT_ID(expr)` evaluated: 1 when the row was inserted or
//! taken over, 0 when it was held and left alone. The affected-row count cannot tell: sqlx
//! connects with `CLIENT_FOUND_ROWS`, under which "inserted" and "left unchanged" both count 1.
//! With the fencing column, the take-over branch instead evaluates
//! `fencing_token = IF(lock_until <= now, LAST_INSERT_ID(COALESCE(fencing_token, 0) + 1),
//! fencing_token)`, so the insert id *is* the new token. Every assignment tests the old
//! `lock_until`, which is assigned last, so the statement means the same whether assignments
//! are evaluated left to right or simultaneously. (The session's `LAST_INSERT_ID()` is changed
//! as a side effect.)
//!
//! ```sql
//! -- release (? = lock_at_least_for in microseconds):
//! UPDATE shedlock SET lock_until = GREATEST(UTC_TIMESTAMP(3),
//!     TIMESTAMPADD(MICROSECOND, ?, locked_at))
//!   WHERE name = ? AND locked_by = ? AND lock_until > UTC_TIMESTAMP(3)
//! -- extend:
//! UPDATE shedlock SET lock_until = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))
//!   WHERE name = ? AND locked_by = ? AND lock_until > UTC_TIMESTAMP(3)
//! ```
//!
//! `locked_by` is `<holder>#<random>`, unique per acquisition, so a node whose lock expired and
//! was taken over can neither release nor extend the new holder's lock. A Java node's rows
//! (`locked_by` = its host name) are honoured exactly like Rust ones.
//!
//! Java's `JdbcTemplateLockProvider` with `usingDbTime()` uses the same `UTC_TIMESTAMP(3)`;
//! the plain `JdbcLockProvider` writes its JVM's clock, so that JVM must run in UTC. Java's
//! unlock checks only its host name, so a Java node whose lock expired can still shorten a
//! lock a Rust node took afterwards (ShedLock issues #186, #317); Rust's never can.
//!
//! With [`TimeSource::Client`] the node's clock is bound in place of `UTC_TIMESTAMP(3)`;
//! exclusion then holds only while the nodes' clocks differ by less than `lock_at_most_for`
//! minus the task's run time.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_mysql::MySqlLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = MySqlLockProvider::builder_from_url("mysql://app@db/app")
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
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection, MySqlPool, MySqlPoolOptions};
use sqlx::{AssertSqlSafe, Connection};

pub use shedlock_sql::{Column, LockTable};
pub use storage::{Flavor, create_table_statement};

use storage::{MySqlStorage, PROVIDER};

/// How long connecting (and each wait for a pooled connection) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default pool size for a pool this crate opens from a URL.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

enum Source {
    Url(String),
    Pool(MySqlPool),
}

/// Configures and connects a [`MySqlLockProvider`]. Every setting has ShedLock's default.
pub struct MySqlLockProviderBuilder {
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

impl fmt::Debug for MySqlLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlLockProviderBuilder")
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

impl MySqlLockProviderBuilder {
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
    /// the session's `innodb_lock_wait_timeout` (whole seconds), so a statement stuck behind a
    /// row lock gives up on the server too.
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
    pub async fn build(self) -> Result<MySqlLockProvider, LockError> {
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
                match tokio_timeout(timeout, MySqlConnection::connect_with(&options)).await {
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
        let connecting = MySqlStorage::connect(
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
    pub fn build_without_connecting(self, fencing: bool) -> Result<MySqlLockProvider, LockError> {
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
        let storage = MySqlStorage::unchecked(pool, table, self.time_source, fencing, target);
        Ok(Self::finish(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }

    fn finish(
        storage: MySqlStorage,
        operation_timeout: Duration,
        holder: Option<String>,
        clock: Option<Arc<dyn Clock>>,
    ) -> MySqlLockProvider {
        let storage = Arc::new(storage);
        let mut inner = StorageBasedLockProvider::from_arc(storage.clone())
            .with_operation_timeout(operation_timeout);
        if let Some(holder) = holder {
            inner = inner.with_holder(holder);
        }
        if let Some(clock) = clock {
            inner = inner.with_clock(clock);
        }
        MySqlLockProvider {
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
) -> Result<MySqlConnectOptions, LockError> {
    let options = MySqlConnectOptions::from_str(url).map_err(|e| {
        LockError::backend(
            PROVIDER,
            Operation::Connect,
            "",
            format!("{target} is not a valid MySQL URL"),
            e,
        )
    })?;
    let _ = operation_timeout;
    // UTC sessions: TIMESTAMP columns then hold the UTC times the statements write.
    Ok(options.timezone(Some("+00:00".to_owned())))
}

/// The pool settings for a pool this crate opens.
fn pool_options(
    max_connections: u32,
    connect_timeout: Duration,
    operation_timeout: Duration,
) -> MySqlPoolOptions {
    // A statement waiting on a row lock gives up server-side too, not only here.
    let lock_wait = operation_timeout.as_secs().max(1);
    MySqlPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(connect_timeout)
        .after_connect(move |connection, _| {
            Box::pin(async move {
                sqlx::query(AssertSqlSafe(format!(
                    "SET SESSION innodb_lock_wait_timeout = {lock_wait}"
                )))
                .execute(connection)
                .await
                .map(|_| ())
            })
        })
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
pub struct MySqlLockProvider {
    inner: StorageBasedLockProvider,
    storage: Arc<MySqlStorage>,
    operation_timeout: Duration,
}

impl fmt::Debug for MySqlLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MySqlLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl MySqlLockProvider {
    /// A builder that opens its own pool from `url` (`mysql://user@host:3306/db`).
    pub fn builder_from_url(url: impl Into<String>) -> MySqlLockProviderBuilder {
        MySqlLockProviderBuilder::new(Source::Url(url.into()))
    }

    /// A builder on an existing pool; lock statements take a connection from it per statement,
    /// never joining a transaction of yours.
    pub fn builder(pool: MySqlPool) -> MySqlLockProviderBuilder {
        MySqlLockProviderBuilder::new(Source::Pool(pool))
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

    /// This node's clock (see [`MySqlLockProviderBuilder::clock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: self.inner.with_clock(clock),
            ..self
        }
    }

    /// This node's holder name (see [`MySqlLockProviderBuilder::holder`]).
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
    pub fn pool(&self) -> &MySqlPool {
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

    /// Whether the server is MySQL or MariaDB.
    pub fn flavor(&self) -> Flavor {
        self.storage.flavor()
    }
}

#[async_trait]
impl LockProvider for MySqlLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
