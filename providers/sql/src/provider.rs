//! The provider and its builder, once for every [`SqlBackend`]: where the pool comes from,
//! connect timeouts and their messages, and one node's view of the table.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, Capabilities, Clock, ErrorKind, LockConfiguration, LockError, LockProvider,
    Operation, SystemClock, TimeSource,
    raw::{DEFAULT_OPERATION_TIMEOUT, StorageBasedLockProvider},
    redact_url,
};
use sqlx::Pool;

use crate::backend::{ConnectOptionsOf, SqlBackend};
use crate::connections::{Connections, OwnConnections};
use crate::identifier::IdentifierError;
use crate::storage::SqlStorage;
use crate::table::{Column, LockTable};

/// How long connecting (and each wait for a pooled connection) may take by default.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The default pool size for a pool a provider opens from a URL.
pub const DEFAULT_MAX_CONNECTIONS: u32 = 10;

enum Source<B: SqlBackend> {
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
    fn new(source: Source<B>) -> Self {
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

/// A connect that failed with `error`, naming the TLS feature to turn on when the URL asked for
/// TLS that this build of sqlx lacks (sqlx's own message names none of this crate's features).
fn cannot_connect<B: SqlBackend>(target: &str, error: sqlx::Error) -> LockError {
    if matches!(&error, sqlx::Error::Tls(tls) if tls.to_string().contains("without TLS support")) {
        return connect_error::<B>(
            ErrorKind::Configuration,
            format!(
                "{target} asks for TLS, which this build leaves out: enable the \"tls-rustls\" \
             feature of shedlock-{provider} (on by default), or the \"rustls\" feature of shedlock",
                provider = B::PROVIDER
            ),
        );
    }
    LockError::backend(
        crate::backend::kind_of(Operation::Connect, &error),
        B::PROVIDER,
        Operation::Connect,
        "",
        format!("{target}: cannot connect"),
        crate::backend::cause_of(error),
    )
}

/// A connect that failed for a reason of `kind` with no client error behind it.
fn connect_error<B: SqlBackend>(kind: ErrorKind, message: String) -> LockError {
    LockError::backend_message(kind, B::PROVIDER, Operation::Connect, "", message)
}

fn bad_table<B: SqlBackend>(error: IdentifierError) -> LockError {
    connect_error::<B>(
        ErrorKind::Configuration,
        format!("bad lock table configuration: {error}"),
    )
}

/// Parses `url` into connect options with the backend's session settings.
/// Makes ring the process's rustls crypto provider unless the application chose one. sqlx's
/// rustls asks rustls for the default provider when a URL asks for TLS, and a build in which
/// another dependency turns on aws-lc-rs too (zookeeper-client's TLS does) has two and no
/// default: rustls would panic inside the connect instead of answering.
#[cfg(feature = "tls")]
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

fn url_options<B: SqlBackend>(
    url: &str,
    target: &str,
    operation_timeout: Duration,
) -> Result<ConnectOptionsOf<B::Database>, LockError> {
    check_url_scheme::<B>(url)?;
    #[cfg(feature = "tls")]
    install_ring_provider();
    let options = ConnectOptionsOf::<B::Database>::from_str(url).map_err(|e| {
        LockError::backend(
            ErrorKind::Configuration,
            B::PROVIDER,
            Operation::Connect,
            "",
            format!("{target} is not a valid {} URL", B::DATABASE_NAME),
            e,
        )
    })?;
    Ok(B::session_options(options, operation_timeout))
}

/// Refuses a URL whose scheme is not one of `B`'s, naming the scheme (never the rest of the URL,
/// which may hold a password) and the forms `B` accepts.
fn check_url_scheme<B: SqlBackend>(url: &str) -> Result<(), LockError> {
    let Some(refused) = scheme_refusal(url, B::URL_SCHEMES, B::ACCEPTS_FILE_PATH) else {
        return Ok(());
    };
    let mut accepted: Vec<String> = B::URL_SCHEMES
        .iter()
        .map(|scheme| format!("{scheme}://..."))
        .collect();
    if B::ACCEPTS_FILE_PATH {
        accepted.push("a file path".to_owned());
    }
    Err(connect_error::<B>(
        ErrorKind::Configuration,
        format!(
            "{refused}, which is not a {} URL: the {} provider accepts {}",
            B::DATABASE_NAME,
            B::PROVIDER,
            accepted.join(" or ")
        ),
    ))
}

/// What is wrong with `url` for a database whose client reads `schemes` (and file paths, when
/// `file_paths`), or `None` when nothing is.
///
/// The scheme is the text before `://`, or one of `schemes` followed by `:` alone
/// (`sqlite:locks.db`, `sqlite::memory:`). Any other text has none, and is a file path where
/// the database takes one (`locks.db`, `jobs:locks.db`, `C:\locks.db`).
fn scheme_refusal(url: &str, schemes: &[&str], file_paths: bool) -> Option<String> {
    let is_ours = |scheme: &str| {
        schemes
            .iter()
            .any(|accepted| scheme.eq_ignore_ascii_case(accepted))
    };
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme)
        .or_else(|| {
            url.split_once(':')
                .map(|(scheme, _)| scheme)
                .filter(|scheme| is_ours(scheme))
        })
        .filter(|scheme| is_url_scheme(scheme));
    match scheme {
        Some(scheme) if is_ours(scheme) => None,
        None if file_paths => None,
        Some(scheme) => Some(format!("the URL's scheme is {scheme:?}")),
        None => Some("the URL has no scheme".to_owned()),
    }
}

/// Whether `text` has the form of a URL scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_url_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Prefixes a connect error with the redacted target, so the message says which database.
fn add_target(error: LockError, target: &str) -> LockError {
    match error {
        LockError::Backend {
            kind,
            provider,
            operation,
            name,
            message,
            source,
        } => LockError::Backend {
            kind,
            provider,
            operation,
            name,
            message: format!("{target}: {message}"),
            source,
        },
        other => other,
    }
}

/// A lock provider on a SQL table: one node's view of it.
///
/// Each provider crate names it for its database (`PostgresLockProvider`,
/// `MySqlLockProvider`, `SqliteLockProvider`), and documents its table and statements there.
///
/// It is also the table's [`LockAdmin`](shedlock_core::LockAdmin), for operators: list,
/// inspect and force-unlock on the same connections, one statement each.
///
/// Cloning is not offered; call [`node`](Self::node) for another node on the same pool and
/// table (with its own name cache), as tests of several nodes do.
pub struct SqlLockProvider<B: SqlBackend> {
    inner: StorageBasedLockProvider,
    pub(crate) storage: Arc<SqlStorage<B>>,
    pub(crate) operation_timeout: Duration,
    /// The node clock again, for the operator's view ([`LockAdmin`](shedlock_core::LockAdmin))
    /// in client time, which judges locks by the clock the lock statements compare with.
    pub(crate) clock: Arc<dyn Clock>,
}

impl<B: SqlBackend> fmt::Debug for SqlLockProvider<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<B: SqlBackend> SqlLockProvider<B> {
    /// A builder that opens its own pool from `url` (`postgres://user@host:5432/db`,
    /// `mysql://user@host:3306/db`, `sqlite://locks.db?mode=rwc`).
    pub fn builder_from_url(url: impl Into<String>) -> SqlLockProviderBuilder<B> {
        SqlLockProviderBuilder::new(Source::Url(url.into()))
    }

    /// A builder on an existing pool; lock statements take a connection from it per statement,
    /// never joining a transaction of yours.
    ///
    /// The pool is used as you configured it, and sqlx's pool pings a connection when it goes
    /// back (and, with `test_before_acquire`, its default, before handing it out), so each
    /// operation costs those round trips on top of its statement. A provider built from a URL
    /// ([`builder_from_url`](Self::builder_from_url)) opens connections of its own and sends
    /// only the statement.
    pub fn builder(pool: Pool<B::Database>) -> SqlLockProviderBuilder<B> {
        SqlLockProviderBuilder::new(Source::Pool(pool))
    }

    /// Connects to `url` with every default: ShedLock's table, server time.
    pub async fn connect(url: impl Into<String>) -> Result<Self, LockError> {
        Self::builder_from_url(url).build().await
    }

    fn new(
        storage: SqlStorage<B>,
        operation_timeout: Duration,
        holder: Option<String>,
        clock: Option<Arc<dyn Clock>>,
    ) -> Self {
        let mut provider = Self::on_storage(Arc::new(storage), operation_timeout);
        if let Some(holder) = holder {
            provider = provider.with_holder(holder);
        }
        if let Some(clock) = clock {
            provider = provider.with_clock(clock);
        }
        provider
    }

    fn on_storage(storage: Arc<SqlStorage<B>>, operation_timeout: Duration) -> Self {
        Self {
            inner: StorageBasedLockProvider::from_arc(storage.clone())
                .with_operation_timeout(operation_timeout),
            storage,
            operation_timeout,
            clock: Arc::new(SystemClock),
        }
    }

    /// Another node on the same pool and table: the host name as holder, the system clock, and
    /// a name cache of its own.
    pub fn node(&self) -> Self {
        Self::on_storage(self.storage.clone(), self.operation_timeout)
    }

    /// This node's clock (see [`SqlLockProviderBuilder::clock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: self.inner.with_clock(clock.clone()),
            clock,
            ..self
        }
    }

    /// This node's holder name (see [`SqlLockProviderBuilder::holder`]).
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

    /// The pool the statements run on, when the provider was given one
    /// ([`builder`](Self::builder)); `None` when it opened its own connections from a URL.
    pub fn pool(&self) -> Option<&Pool<B::Database>> {
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

    /// The backend as connecting found it, for what only one database has (MySQL's
    /// `flavor()`: MySQL or MariaDB).
    pub fn backend(&self) -> &B {
        self.storage.backend()
    }
}

#[async_trait]
impl<B: SqlBackend> LockProvider for SqlLockProvider<B> {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

#[cfg(test)]
mod tests {
    use super::scheme_refusal;

    const POSTGRES: &[&str] = &["postgres", "postgresql"];
    const SQLITE: &[&str] = &["sqlite"];

    #[test]
    fn a_databases_own_schemes_pass_in_any_case_and_in_their_colon_form() {
        for url in [
            "postgres://app:pw@db/x",
            "POSTGRESQL://db",
            "postgres:///x?host=/run/postgresql",
            "postgres:x",
        ] {
            assert_eq!(scheme_refusal(url, POSTGRES, false), None, "{url}");
        }
        for url in ["sqlite://locks.db", "sqlite:locks.db", "sqlite::memory:"] {
            assert_eq!(scheme_refusal(url, SQLITE, true), None, "{url}");
        }
    }

    #[test]
    fn other_schemes_are_named_and_nothing_else_of_the_url() {
        for (url, scheme) in [
            ("redis://:pw@cache:6379", "redis"),
            ("mongodb+srv://app:pw@db/x", "mongodb+srv"),
            ("my-db.v2://db", "my-db.v2"),
            ("x1://db", "x1"),
        ] {
            let refusal = scheme_refusal(url, POSTGRES, false).unwrap();
            assert_eq!(refusal, format!("the URL's scheme is {scheme:?}"), "{url}");
            assert_eq!(scheme_refusal(url, SQLITE, true), Some(refusal), "{url}");
        }
    }

    #[test]
    fn text_without_a_scheme_is_a_file_path_only_where_the_database_takes_one() {
        for text in [
            "locks.db",
            "jobs:locks.db",
            "C:\\locks.db",
            "app:pw@db/x",
            "1x://db",
            "x_y://db",
            "://db",
        ] {
            assert_eq!(
                scheme_refusal(text, POSTGRES, false).as_deref(),
                Some("the URL has no scheme"),
                "{text}"
            );
            assert_eq!(scheme_refusal(text, SQLITE, true), None, "{text}");
        }
    }
}
