//! [`SqlLockProviderBuilder`], once for every [`SqlBackend`]: where the pool comes from, the
//! connect timeouts, and connecting and checking the table before the provider exists.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{
    Clock, ErrorKind, LockError, TimeSource, raw::DEFAULT_OPERATION_TIMEOUT, redact_url,
};
use sqlx::Pool;

use crate::backend::SqlBackend;
use crate::connect_failure::{add_target, bad_table, cannot_connect, connect_error};
use crate::connections::{Connections, OwnConnections};
use crate::identifier::IdentifierError;
use crate::provider::SqlLockProvider;
use crate::storage::SqlStorage;
use crate::table::{Column, LockTable};
use crate::url::url_options;

/// How long connecting (and each wait for a pooled connection) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default pool size for a pool a provider opens from a URL.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// Where the provider's connections come from.
pub(crate) enum Source<B: SqlBackend> {
    Url(String),
    Pool(Pool<B::Database>),
}

impl<B: SqlBackend> Source<B> {
    /// Where the pool points, for messages: the URL without its password.
    fn describe(&self) -> String {
        match self {
            Source::Url(url) => redact_url(url),
            Source::Pool(_) => "the given pool".to_owned(),
        }
    }
}

/// Configures and connects a [`SqlLockProvider`]. Every setting has ShedLock's default.
///
/// Each provider crate names it for its database (`PostgresLockProviderBuilder`,
/// `MySqlLockProviderBuilder`, `SqliteLockProviderBuilder`); get one from
/// [`SqlLockProvider::builder_from_url`] or [`SqlLockProvider::builder`].
pub struct SqlLockProviderBuilder<B: SqlBackend> {
    source: Source<B>,
    table: Result<LockTable, IdentifierError>,
    time_source: TimeSource,
    create_table: Option<bool>,
    connect_timeout: Duration,
    operation_timeout: Duration,
    max_connections: u32,
    holder: Option<String>,
    clock: Option<Arc<dyn Clock>>,
}

impl<B: SqlBackend> fmt::Debug for SqlLockProviderBuilder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLockProviderBuilder")
            .field("provider", &B::PROVIDER)
            .field("target", &self.source.describe())
            .field("table", &self.table)
            .field("time_source", &self.time_source)
            .field("create_table", &self.create_table)
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl<B: SqlBackend> SqlLockProviderBuilder<B> {
    pub(crate) fn new(source: Source<B>) -> Self {
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

    /// The lock table's name (default `shedlock`); `schema.table` names another schema
    /// (MySQL: another database; SQLite: an attached database). Plain identifiers only
    /// (letters, digits, `_`); they fold as unquoted SQL does. The column names are kept.
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

    /// Whose clock decides expiry: [`TimeSource::Server`] (default: the database's clock; for
    /// SQLite the clock of the machine holding the file, shared by every process using it) or
    /// [`TimeSource::Client`] (each node's clock, bound as a parameter).
    pub fn time_source(mut self, time_source: TimeSource) -> Self {
        self.time_source = time_source;
        self
    }

    /// Creates ShedLock's table at connect if it does not exist. An existing table is left as
    /// it is, whatever its columns.
    pub fn create_table_if_missing(mut self) -> Self {
        self.create_table = Some(false);
        self
    }

    /// Like [`create_table_if_missing`](Self::create_table_if_missing), with the fencing column
    /// too, so acquisitions carry a fencing token. An existing table is left as it is: one
    /// without the column keeps working, without tokens.
    pub fn create_table_with_fencing_if_missing(mut self) -> Self {
        self.create_table = Some(true);
        self
    }

    /// The bound on connecting (opening the file, for SQLite) and on each wait for a free
    /// connection (default 5 s), so an unreachable database is an error, not a hang.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The bound on each lock statement (default 5 s). For a pool opened from a URL it is also
    /// the database's own bound, so a statement given up here gives up on the server too:
    /// PostgreSQL's `statement_timeout`, MySQL's `innodb_lock_wait_timeout` (whole seconds),
    /// SQLite's busy timeout (how long a statement waits for another writer's file lock).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The most connections the provider opens from a URL (default 10), for lock statements
    /// running at the same moment; ignored for a given pool.
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
    pub async fn build(self) -> Result<SqlLockProvider<B>, LockError> {
        let target = self.source.describe();
        let table = self
            .table
            .and_then(LockTable::checked)
            .map_err(bad_table::<B>)?;
        let timeout = self.connect_timeout;
        let connections = match self.source {
            Source::Pool(pool) => Connections::Given(pool),
            Source::Url(url) => {
                let options = url_options::<B>(&url, &target, self.operation_timeout)?;
                let own = OwnConnections::new(
                    options,
                    self.max_connections,
                    timeout,
                    self.operation_timeout,
                );
                // One connection first, outside any bound on waiting for a slot: its error says
                // why (refused, no such host, authentication). It then reads the catalog and
                // stays for the lock statements.
                match own.open().await {
                    Ok(connection) => own.adopt(connection),
                    Err(sqlx::Error::PoolTimedOut) => {
                        return Err(connect_error::<B>(
                            ErrorKind::Unreachable,
                            format!(
                                "{target}: no connection within {timeout:?} (is the server reachable?)"
                            ),
                        ));
                    }
                    Err(e) => return Err(cannot_connect::<B>(&target, e)),
                }
                Connections::Own(own)
            }
        };
        let connecting = SqlStorage::connect(
            connections,
            table,
            self.time_source,
            self.create_table,
            target.clone(),
        );
        let storage = match tokio::time::timeout(timeout, connecting).await {
            Ok(result) => result.map_err(|e| add_target(e, &target))?,
            Err(_) => {
                return Err(connect_error::<B>(
                    ErrorKind::Unreachable,
                    format!("{target}: no answer within {timeout:?} (is the server reachable?)"),
                ));
            }
        };
        Ok(SqlLockProvider::new(
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
    /// The table is trusted to be exactly what the provider crate's `create_table_statement`
    /// creates for the configured names (with the fencing column when `fencing` is true);
    /// nothing checks it, so prefer [`build`](Self::build) whenever the database is up.
    pub fn build_without_connecting(self, fencing: bool) -> Result<SqlLockProvider<B>, LockError> {
        let target = self.source.describe();
        let table = self
            .table
            .and_then(LockTable::checked)
            .map_err(bad_table::<B>)?;
        let connections = match self.source {
            Source::Pool(pool) => Connections::Given(pool),
            Source::Url(url) => Connections::Own(OwnConnections::new(
                url_options::<B>(&url, &target, self.operation_timeout)?,
                self.max_connections,
                self.connect_timeout,
                self.operation_timeout,
            )),
        };
        let storage = SqlStorage::unchecked(connections, table, self.time_source, fencing, target);
        Ok(SqlLockProvider::new(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }
}
