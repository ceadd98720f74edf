//! What differs between the SQL databases: each provider crate implements [`SqlBackend`] in its
//! `storage.rs`, and [`SqlLockProvider`](crate::SqlLockProvider) does the rest once.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use shedlock_core::{HeldRecord, LockError, LockRecord, NodeTime, Operation, TimeSource};
use sqlx::pool::PoolOptions;
use sqlx::{Connection, Database, Pool};

use crate::schema::TableSchema;
use crate::table::LockTable;

/// The connect options of `DB`'s connections (`PgConnectOptions` for PostgreSQL).
pub type ConnectOptionsOf<DB> = <<DB as Database>::Connection as Connection>::Options;

/// One SQL database as a lock backend: its session settings, how it reads and checks its
/// catalog, and its lock statements, prepared for one table.
///
/// A value is made once per provider, at connect ([`connect`](Self::connect)) or without
/// connecting ([`unchecked`](Self::unchecked)), and then runs every statement. The builder,
/// the provider, the name and holder checks, capabilities and error messages are shared in
/// [`SqlLockProvider`](crate::SqlLockProvider), so a backend holds only what its SQL needs.
pub trait SqlBackend: Sized + Send + Sync + fmt::Debug + 'static {
    /// The sqlx database the statements run on.
    type Database: Database;

    /// The short provider name in errors, logs and capabilities (`"postgres"`).
    const PROVIDER: &'static str;

    /// The database's name for people, in messages (`"PostgreSQL"`).
    const DATABASE_NAME: &'static str;

    /// What a pool that gives no connection in time most likely means, as a question for the
    /// operator (`"is the server reachable?"`).
    const UNREACHABLE_HINT: &'static str;

    /// This backend's session settings on options parsed from a URL (time zone, statement or
    /// busy timeouts), derived from the provider's `operation_timeout`.
    fn session_options(
        options: ConnectOptionsOf<Self::Database>,
        operation_timeout: Duration,
    ) -> ConnectOptionsOf<Self::Database>;

    /// The options of a pool opened from a URL, before the shared size and acquire timeout are
    /// applied: where a session setting can only be made by a statement, this runs it on every
    /// new connection.
    fn pool_options(operation_timeout: Duration) -> PoolOptions<Self::Database> {
        let _ = operation_timeout;
        PoolOptions::new()
    }

    /// Creates the table if asked (`create_table`: `Some(fencing)`), reads it from the
    /// catalog, checks it, and prepares the statements for what it found.
    fn connect(
        pool: &Pool<Self::Database>,
        table: &LockTable,
        time_source: TimeSource,
        create_table: Option<bool>,
    ) -> impl Future<Output = Result<(Self, TableSchema), LockError>> + Send;

    /// Prepares the statements for a table trusted to be `schema`, without connecting.
    fn unchecked(table: &LockTable, schema: &TableSchema, time_source: TimeSource) -> Self;

    /// Refuses names this database would store differently (a NUL character, a character the
    /// column's character set lacks), beyond the length limit checked for every backend.
    fn check_name(&self, name: &str) -> Result<(), LockError> {
        let _ = name;
        Ok(())
    }

    /// Runs one acquire statement for `record`: `Some(token)` when it took the lock (the token
    /// is meaningful only with the fencing column), `None` when someone else holds it.
    ///
    /// `record.now` binds as a parameter only in client-time statements; see
    /// [`client_time_parameter`].
    fn acquire(
        &self,
        pool: &Pool<Self::Database>,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> impl Future<Output = Result<Option<u64>, LockError>> + Send;

    /// Runs release or extend for `held` with `duration` (`lock_at_least_for` or the new
    /// `lock_at_most_for`): whether the caller's own acquisition was still there to change.
    ///
    /// `now` binds as a parameter only in client-time statements; see
    /// [`client_time_parameter`].
    fn change_held(
        &self,
        pool: &Pool<Self::Database>,
        statement: HeldStatement,
        held: &HeldRecord,
        duration: Duration,
        now: NodeTime,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;
}

/// Which acquire statement to run: both insert the row of a name seen for the first time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireStatement {
    /// Inserts only; an existing row, held or not, is left alone (not acquired).
    InsertOnly,
    /// Inserts, or takes an existing row over once its `lock_until` has passed.
    InsertOrTakeOver,
}

/// Which statement changes a held lock; both act only on the caller's own acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldStatement {
    /// `lock_until = max(now, locked_at + lock_at_least_for)`.
    Release,
    /// `lock_until = now + lock_at_most_for`.
    Extend,
}

impl HeldStatement {
    /// The operation an error of this statement reports.
    pub fn operation(self) -> Operation {
        match self {
            HeldStatement::Release => Operation::Release,
            HeldStatement::Extend => Operation::Extend,
        }
    }
}

/// The four lock statements for one table, in whatever form a backend keeps them (SQL text,
/// or text with the order of its parameters), built once at connect.
#[derive(Debug, Clone)]
pub struct LockStatements<S> {
    /// Inserts a new name's row, or takes an expired row over.
    pub acquire: S,
    /// Inserts a new name's row only.
    pub insert: S,
    /// Releases the caller's own acquisition.
    pub release: S,
    /// Extends the caller's own acquisition.
    pub extend: S,
}

impl<S> LockStatements<S> {
    /// The statement that runs `statement`.
    pub fn for_acquire(&self, statement: AcquireStatement) -> &S {
        match statement {
            AcquireStatement::InsertOnly => &self.insert,
            AcquireStatement::InsertOrTakeOver => &self.acquire,
        }
    }

    /// The statement that runs `statement`.
    pub fn for_held(&self, statement: HeldStatement) -> &S {
        match statement {
            HeldStatement::Release => &self.release,
            HeldStatement::Extend => &self.extend,
        }
    }
}

/// The node's clock as a statement of `B` prepared for `time_source` binds it: `None` for a
/// server-time statement, which reads the database's clock and binds no time of the node;
/// `Some` for a client-time statement.
///
/// The provider hands over the [`NodeTime`] the storage's declared time source implies, so the
/// two agree by construction. Were they ever to disagree, the statement would compare the lock
/// against a clock nobody declared, so that is an error and the statement does not run.
pub fn client_time_parameter<B: SqlBackend>(
    time_source: TimeSource,
    now: NodeTime,
    operation: Operation,
    name: &str,
) -> Result<Option<SystemTime>, LockError> {
    let mismatch = |what: &str| {
        Err(LockError::backend_message(
            B::PROVIDER,
            operation,
            name,
            format!(
                "{what}, so the storage's time source and the provider's disagree; the statement \
                 was not run"
            ),
        ))
    };
    match (time_source, now) {
        (TimeSource::Server, NodeTime::ServerTime) => Ok(None),
        (TimeSource::Client, NodeTime::ClientTime(now)) => Ok(Some(now)),
        (TimeSource::Server, NodeTime::ClientTime(_)) => {
            mismatch("a server-time statement was handed the node's clock")
        }
        (TimeSource::Client, NodeTime::ServerTime) => {
            mismatch("a client-time statement was handed no node time")
        }
    }
}

/// A failed statement of `B` as a lock error, saying what a pool timeout most likely means.
pub fn statement_error<B: SqlBackend>(
    operation: Operation,
    name: &str,
    error: sqlx::Error,
) -> LockError {
    let message = match &error {
        sqlx::Error::PoolTimedOut => format!(
            "no database connection became available in time ({})",
            B::UNREACHABLE_HINT
        ),
        other => format!("the statement failed: {other}"),
    };
    LockError::backend(B::PROVIDER, operation, name, message, error)
}
