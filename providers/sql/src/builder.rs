//! [`SqlLockProviderBuilder`], once for every [`SqlBackend`]: the settings, then where the
//! connections come from (a URL, now or lazily, or a pool of yours), connecting and checking
//! the table before the provider exists.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use shedlock_core::{
    Clock, ErrorKind, LockError, TimeSource,
    raw::{DEFAULT_OPERATION_TIMEOUT, check_positive_duration, invalid_setting},
    redact_url,
};
use sqlx::Pool;

use crate::backend::SqlBackend;
use crate::connect_failure::{add_target, bad_table, cannot_connect, connect_error};
use crate::connections::{Connections, IDLE_LIMIT, OwnConnections};
use crate::identifier::IdentifierError;
use crate::provider::SqlLockProvider;
use crate::storage::SqlStorage;
use crate::table::{Column, LockTable};
use crate::url::url_options;

/// How long connecting (and each wait for a pooled connection) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default pool size for a pool a provider opens from a URL.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

/// How long a connection opened from a URL may sit idle before a background check pings it,
/// by default; see [`SqlLockProviderBuilder::idle_check_interval`].
pub const DEFAULT_IDLE_CHECK_INTERVAL: Duration = Duration::from_secs(60);

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
/// [`SqlLockProvider::builder`], set what differs from the defaults, and finish with one of the
/// constructors every shedlock provider has: [`connect`](Self::connect) (a URL, connected and
/// checked now), [`connect_lazy`](Self::connect_lazy) (a URL, connected on first use) or
/// [`build`](Self::build) (a pool of yours).
pub struct SqlLockProviderBuilder<B: SqlBackend> {
    table: Result<LockTable, IdentifierError>,
    time_source: TimeSource,
    create_table: Option<bool>,
    fencing_column: bool,
    connect_timeout: Duration,
    operation_timeout: Duration,
    max_connections: u32,
    idle_check_interval: Duration,
    holder: Option<String>,
    clock: Option<Arc<dyn Clock>>,
    backend: PhantomData<fn() -> B>,
}

impl<B: SqlBackend> fmt::Debug for SqlLockProviderBuilder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLockProviderBuilder")
            .field("provider", &B::PROVIDER)
            .field("table", &self.table)
            .field("time_source", &self.time_source)
            .field("create_table", &self.create_table)
            .field("connect_timeout", &self.connect_timeout)
            .field("operation_timeout", &self.operation_timeout)
            .finish_non_exhaustive()
    }
}

impl<B: SqlBackend> SqlLockProviderBuilder<B> {
    pub(crate) fn new() -> Self {
        Self {
            table: Ok(LockTable::default()),
            time_source: TimeSource::Server,
            create_table: None,
            fencing_column: false,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            idle_check_interval: DEFAULT_IDLE_CHECK_INTERVAL,
            holder: None,
            clock: None,
            backend: PhantomData,
        }
    }

    /// The lock table's name (default `shedlock`); `schema.table` names another schema
    /// (MySQL: another database; SQLite: an attached database). Plain identifiers only
    /// (letters, digits, `_`); they fold as unquoted SQL does. The column names are kept.
    /// A refused name is reported when the provider is made, before anything connects.
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
    /// it is, whatever its columns. [`connect_lazy`](Self::connect_lazy) creates nothing.
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

    /// The table has the fencing column, so every acquisition carries a fencing token.
    /// [`connect`](Self::connect) and [`build`](Self::build) find the column in the catalog
    /// without being told, and with this refuse a table that lacks it;
    /// [`connect_lazy`](Self::connect_lazy) reads no catalog and relies on it.
    pub fn fencing_column(mut self) -> Self {
        self.fencing_column = true;
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

    /// About the longest a connection the provider opened from a URL sits idle before a
    /// background check pings it (default 60 s, at most 120 s; ignored for a given pool). The ping keeps the
    /// connection alive through firewalls that drop idle flows, and a connection found dead is
    /// replaced there, so a job that runs hourly finds a connection ready instead of opening
    /// one on its own path. A connection idle for four minutes unchecked is never reused.
    pub fn idle_check_interval(mut self, interval: Duration) -> Self {
        self.idle_check_interval = interval;
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

    /// Connects to `url` (`postgres://user@host:5432/db`, `mysql://user@host:3306/db`,
    /// `sqlite://locks.db?mode=rwc`) with connections of the provider's own, creates the table
    /// if asked, checks it, and returns the provider. Each lock operation sends only its
    /// statement.
    pub async fn connect(self, url: impl Into<String>) -> Result<SqlLockProvider<B>, LockError> {
        self.finish(Source::Url(url.into())).await
    }

    /// Uses a pool of yours: creates the table if asked, checks it, and returns the provider.
    /// Lock statements take a connection from the pool per statement, never joining a
    /// transaction of yours.
    ///
    /// The pool is used as you configured it, and sqlx's pool pings a connection when it goes
    /// back (and, with `test_before_acquire`, its default, before handing it out), so each
    /// operation costs those round trips on top of its statement;
    /// [`connect`](Self::connect) opens connections that send only the statement.
    pub async fn build(self, pool: Pool<B::Database>) -> Result<SqlLockProvider<B>, LockError> {
        self.finish(Source::Pool(pool)).await
    }

    /// Makes the provider for `url` without connecting or reading the catalog, for an
    /// application that must start while the database is down: the first lock statement
    /// connects, and an unreachable database is then that statement's error. Only a malformed
    /// URL or setting is refused here.
    ///
    /// The table is trusted to be exactly what the provider crate's `create_table_statement`
    /// creates for the configured names, with the fencing column when
    /// [`fencing_column`](Self::fencing_column) says so; nothing checks it, so prefer
    /// [`connect`](Self::connect) whenever the database is up. Asynchronous, as every
    /// provider's `connect_lazy`, though nothing here waits.
    pub async fn connect_lazy(
        self,
        url: impl Into<String>,
    ) -> Result<SqlLockProvider<B>, LockError> {
        let url = url.into();
        let target = redact_url(&url);
        let table = self.checked_table()?;
        let connections = Connections::Own(self.own_connections(&url, &target)?);
        let storage = SqlStorage::unchecked(
            connections,
            table,
            self.time_source,
            self.fencing_column,
            target,
        );
        Ok(SqlLockProvider::new(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }

    /// The configured table, or the error naming what is wrong with its names; before anything
    /// connects.
    fn checked_table(&self) -> Result<LockTable, LockError> {
        self.table
            .clone()
            .and_then(LockTable::checked)
            .map_err(bad_table::<B>)
    }

    /// Connections of the provider's own to `url` (`target` is its redacted form), bounded as
    /// the builder says; none is opened yet.
    fn own_connections(
        &self,
        url: &str,
        target: &str,
    ) -> Result<Arc<OwnConnections<B>>, LockError> {
        let interval = self.idle_check_interval;
        check_positive_duration(B::PROVIDER, "idle_check_interval", interval)?;
        if interval > IDLE_LIMIT / 2 {
            return Err(invalid_setting(
                B::PROVIDER,
                "idle_check_interval",
                &format!("{interval:?}"),
                &format!(
                    "it must be at most {:?}, so every idle connection is checked before it has \
                     been idle for {IDLE_LIMIT:?}, after which it is closed rather than reused",
                    IDLE_LIMIT / 2
                ),
            ));
        }
        Ok(Arc::new(OwnConnections::new(
            url_options::<B>(url, target, self.operation_timeout)?,
            self.max_connections,
            self.connect_timeout,
            self.operation_timeout,
            interval,
        )))
    }

    /// Connects to `source`, creates the table if asked, checks it, and returns the provider.
    async fn finish(self, source: Source<B>) -> Result<SqlLockProvider<B>, LockError> {
        let target = source.describe();
        let table = self.checked_table()?;
        let timeout = self.connect_timeout;
        let connections = match source {
            Source::Pool(pool) => Connections::Given(pool),
            Source::Url(url) => {
                let own = self.own_connections(&url, &target)?;
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
        if self.fencing_column && !storage.schema().fencing {
            return Err(connect_error::<B>(
                ErrorKind::Configuration,
                format!(
                    "{target}: table {} has no fencing column {}, though the builder was told it has one (fencing_column()); add the column, or let create_table_with_fencing_if_missing() create the table",
                    storage.table().table(),
                    storage.table().column(Column::FencingToken)
                ),
            ));
        }
        Ok(SqlLockProvider::new(
            storage,
            self.operation_timeout,
            self.holder,
            self.clock,
        ))
    }
}
