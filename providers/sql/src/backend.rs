//! What differs between the SQL databases: each provider crate implements [`SqlBackend`] in its
//! `storage.rs`, and [`SqlLockProvider`](crate::SqlLockProvider) does the rest once.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use shedlock_core::{
    BoxError, ErrorKind, LockError, LockHolder, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, NodeTime},
};
use sqlx::{Connection, Database};

use crate::schema::TableSchema;
use crate::table::LockTable;
use crate::timestamp_limit::TimestampLimit;

/// The connect options of `DB`'s connections (`PgConnectOptions` for PostgreSQL).
pub type ConnectOptionsOf<DB> = <<DB as Database>::Connection as Connection>::Options;

/// The connection type of backend `B`'s database (`PgConnection` for PostgreSQL).
pub type ConnectionOf<B> = <<B as SqlBackend>::Database as Database>::Connection;

/// The stored `locked_at` of backend `B`'s acquisition ids, as its admin binds it back.
pub type LockedAtOf<B> = <<B as SqlBackend>::Admin as SqlAdmin<B>>::LockedAt;

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

    /// The URL schemes this database's client reads (`["postgres", "postgresql"]`). A URL with
    /// another scheme is refused before the client parses it: the clients ignore the scheme, so
    /// a URL meant for another backend would otherwise fail later with a misleading error.
    const URL_SCHEMES: &'static [&'static str];

    /// Whether text without a scheme is a file path (SQLite's `locks.db`) rather than an error.
    const ACCEPTS_FILE_PATH: bool = false;

    /// The declared type of column `lock_until` in the table this backend's own
    /// `CREATE TABLE` makes, as its catalog shows it (`"timestamp(3)"`): a provider built
    /// without connecting trusts the table to be that one, and names it in errors.
    const CREATED_LOCK_UNTIL_TYPE: &'static str;

    /// How far that column reaches, at its precision (`TIMESTAMP(3)` keeps milliseconds):
    /// a provider built without connecting refuses locks that would end later.
    const CREATED_LOCK_UNTIL_LIMIT: TimestampLimit;

    /// This backend's session settings on options parsed from a URL (time zone, statement or
    /// busy timeouts), derived from the provider's `operation_timeout`.
    fn session_options(
        options: ConnectOptionsOf<Self::Database>,
        operation_timeout: Duration,
    ) -> ConnectOptionsOf<Self::Database>;

    /// Sets up a connection the provider opened from a URL, before its first statement, where
    /// a session setting can only be made by a statement. A pool the application gives is set
    /// up by the application.
    fn prepare_connection(
        connection: &mut ConnectionOf<Self>,
        operation_timeout: Duration,
    ) -> impl Future<Output = Result<(), sqlx::Error>> + Send {
        let _ = (connection, operation_timeout);
        async { Ok(()) }
    }

    /// Creates the table if asked (`create_table`: `Some(fencing)`), reads it from the
    /// catalog, checks it, and prepares the statements for what it found.
    fn connect(
        connection: &mut ConnectionOf<Self>,
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

    /// The rule `text` (a listing's prefix or page cursor, compared with the name column)
    /// breaks because this database cannot hold it as text at all, or `None`; such a listing
    /// is refused before anything is sent.
    fn text_rule(&self, text: &str) -> Option<&'static str> {
        let _ = text;
        None
    }

    /// Runs one acquire statement for `record`, as one round trip.
    ///
    /// `record.now` binds as a parameter only in client-time statements; see
    /// [`client_time_parameter`].
    fn acquire(
        &self,
        connection: &mut ConnectionOf<Self>,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> impl Future<Output = Result<AcquireAnswer, LockError>> + Send;

    /// This backend's admin statements: what listing, inspecting and force-unlocking run.
    type Admin: SqlAdmin<Self>;

    /// The admin statements prepared for this table.
    fn admin(&self) -> &Self::Admin;

    /// Runs release or extend for `held` with `duration` (`lock_at_least_for` or the new
    /// `lock_at_most_for`): whether the caller's own acquisition was still there to change.
    ///
    /// `now` binds as a parameter only in client-time statements; see
    /// [`client_time_parameter`].
    fn change_held(
        &self,
        connection: &mut ConnectionOf<Self>,
        statement: HeldStatement,
        held: &HeldRecord,
        duration: Duration,
        now: NodeTime,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;
}

/// The admin statements of a [`SqlBackend`] ([`SqlBackend::Admin`]): how an operator's
/// listing, inspect and force-unlock read and free rows. Apart from the lock statements, as
/// they are prepared, bound and read apart from them; [`SqlLockProvider`](crate::SqlLockProvider)
/// puts every call on a connection of its pool and judges the answers once.
pub trait SqlAdmin<B: SqlBackend>: Send + Sync + fmt::Debug + 'static {
    /// How [`locked_at_from_key`](Self::locked_at_from_key) reads the `locked_at` part of an
    /// acquisition id, for the error an unreadable one gets (`"microseconds since the Unix
    /// epoch"`).
    const LOCKED_AT_KEY: &'static str;

    /// A stored `locked_at` as the force-unlock statement binds it back: the same type the
    /// column is read as, so the comparison is exact.
    type LockedAt: Send + Sync;

    /// Reads the `locked_at` part of an acquisition id, [`StoredLock::locked_at_key`] as this
    /// backend wrote it; `None` when it is not one.
    fn locked_at_from_key(&self, key: &str) -> Option<Self::LockedAt>;

    /// Reads the rows `selection` names, with the database's own clock read in the same
    /// statement (or the node's, bound, for client time), as one round trip.
    fn read_locks(
        &self,
        connection: &mut ConnectionOf<B>,
        selection: LockSelection<'_>,
        now: NodeTime,
    ) -> impl Future<Output = Result<Vec<StoredLock>, LockError>> + Send;

    /// Frees `name` if `acquisition` still holds it: one conditional `UPDATE` that sets
    /// `lock_until` to now (the row stays, the fencing counter is untouched), as one round trip.
    /// Whether it did.
    fn force_unlock(
        &self,
        connection: &mut ConnectionOf<B>,
        name: &str,
        acquisition: &StoredAcquisition<Self::LockedAt>,
        now: NodeTime,
    ) -> impl Future<Output = Result<bool, LockError>> + Send;
}

/// The character that escapes `%`, `_` and itself in the `LIKE` patterns of
/// [`LockSelection::Page`]: not the backslash, whose meaning inside a MySQL string literal
/// depends on the session's `sql_mode`, so every backend writes `ESCAPE '!'` alike.
pub const LIKE_ESCAPE: char = '!';

/// The rows an admin statement reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LockSelection<'a> {
    /// The row of one name (as the name column's collation compares names, like the lock
    /// statements).
    Named(&'a str),
    /// One page of a listing, in the name column's order: names after `after` (all names
    /// without it) that match `pattern`, at most `limit` rows.
    Page {
        /// A `LIKE` pattern escaped with [`LIKE_ESCAPE`]. The database may match more names
        /// than the prefix it stands for (a case-insensitive collation, SQLite's `LIKE`), never
        /// fewer; the provider keeps the exact matches.
        pattern: &'a str,
        /// The last name of the previous page.
        after: Option<&'a str>,
        /// The most rows to read.
        limit: i64,
    },
}

impl<'a> LockSelection<'a> {
    /// The operation an error of this read reports.
    pub fn operation(self) -> Operation {
        match self {
            LockSelection::Named(_) => Operation::Inspect,
            LockSelection::Page { .. } => Operation::List,
        }
    }

    /// The lock an error of this read names: none for a listing.
    pub fn name(self) -> &'a str {
        match self {
            LockSelection::Named(name) => name,
            LockSelection::Page { .. } => "",
        }
    }
}

/// One row as an admin statement read it, with the clock the statement compared it with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredLock {
    /// The name as stored.
    pub name: String,
    /// The holder identity as stored.
    pub locked_by: String,
    /// `locked_at` in the backend's own exact text, which
    /// [`locked_at_from_key`](SqlAdmin::locked_at_from_key) reads back for force-unlock.
    pub locked_at_key: String,
    /// `locked_at` as an instant, when the stored value reads as one.
    pub locked_at: Option<SystemTime>,
    /// `lock_until` as an instant, when the stored value reads as one.
    pub lock_until: Option<SystemTime>,
    /// The clock the statement compared with: the database's now, or the node's for client
    /// time.
    pub now: SystemTime,
    /// The statement's own `lock_until > now`, the comparison the lock statements make; the
    /// state when `lock_until` does not read as an instant.
    pub held: bool,
    /// The fencing column's value, when the table has the column and the row a value.
    pub fencing_token: Option<i64>,
}

/// The acquisition a force-unlock frees, as its id named it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredAcquisition<L> {
    /// The holder identity, compared exactly.
    pub locked_by: String,
    /// `locked_at`, as [`StoredLock::locked_at_key`] gave it.
    pub locked_at: L,
    /// The fencing token, when the table has the column (`None` also for a row whose column is
    /// NULL): compared null-safely.
    pub fencing_token: Option<i64>,
}

/// Which acquire statement to run.
///
/// The two are separate so that an attempt on a held lock, the common case under contention,
/// never waits for another attempt's row lock: PostgreSQL's `INSERT ... ON CONFLICT DO UPDATE
/// ... WHERE` locks the conflicting row even when its `WHERE` is false, and the lock lasts until
/// that statement commits, so every refused attempt would queue behind the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireStatement {
    /// For a name not known to have a row: inserts it, held. An existing row, held or not, is
    /// left alone ([`AcquireAnswer::NotAcquired`]).
    Insert,
    /// For a name known to have a row: takes it over once its `lock_until` has passed, without
    /// waiting on a held row. [`AcquireAnswer::Missing`] if the row is gone (a backend whose
    /// statement creates the row instead never answers that).
    TakeOver,
}

/// What an acquire statement found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AcquireAnswer {
    /// The statement took the lock; the new fencing token (meaningful only with the fencing
    /// column).
    Acquired(u64),
    /// Someone else holds it (or, for [`AcquireStatement::Insert`], the row exists); who and
    /// until when, if the same statement could read it. A backend never runs a second
    /// statement to find out: that would cost every skipped run another round trip.
    NotAcquired(Option<LockHolder>),
    /// [`AcquireStatement::TakeOver`] found no row for the name.
    Missing,
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
    /// Inserts a new name's row only.
    pub insert: S,
    /// Takes an existing row over once it has expired.
    pub take_over: S,
    /// Releases the caller's own acquisition.
    pub release: S,
    /// Extends the caller's own acquisition.
    pub extend: S,
}

impl<S> LockStatements<S> {
    /// The statement that runs `statement`.
    pub fn for_acquire(&self, statement: AcquireStatement) -> &S {
        match statement {
            AcquireStatement::Insert => &self.insert,
            AcquireStatement::TakeOver => &self.take_over,
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
            ErrorKind::Configuration,
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
///
/// The client error is the source and is not repeated in the message: a report that walks the
/// chain shows it once.
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
        sqlx::Error::Database(refusal) => refusal_of(refusal.code().as_deref()).to_owned(),
        sqlx::Error::Io(_) => "the connection to the database failed".to_owned(),
        _ => "the statement failed".to_owned(),
    };
    let kind = kind_of(operation, &error);
    LockError::backend(kind, B::PROVIDER, operation, name, message, cause_of(error))
}

/// What kind of failure `error` is for `operation`: what a caller can do about it.
///
/// No free connection in time, or a connection that could not be opened, means nothing was
/// sent. The database's own refusals are read by SQLSTATE (PostgreSQL's and MySQL's codes share
/// the standard classes). Anything else on a statement already sent leaves its outcome unknown.
pub(crate) fn kind_of(operation: Operation, error: &sqlx::Error) -> ErrorKind {
    let unanswered = ErrorKind::OutcomeUnknown.during(operation);
    match error {
        sqlx::Error::Configuration(_) => ErrorKind::Configuration,
        sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed | sqlx::Error::Tls(_) => {
            ErrorKind::Unreachable
        }
        sqlx::Error::Io(io) => ErrorKind::of_io(io.kind(), operation),
        sqlx::Error::Database(refusal) => {
            let code = refusal.code();
            let code = code.as_deref().unwrap_or("");
            // PostgreSQL and MySQL give a five-character SQLSTATE; SQLite its result code, a
            // number of at most four digits.
            if code.len() < 5
                && let Ok(result) = code.parse::<u32>()
            {
                return sqlite_kind(result & 0xff, unanswered);
            }
            let class = |prefix: &str| code.starts_with(prefix);
            if class("28") || code == "42501" {
                // Refused credentials, or a permission the user lacks.
                ErrorKind::CredentialsRefused
            } else if class("08") || class("53") || class("57P") {
                // The server would not take (or keep) the connection.
                unanswered
            } else if class("3D") || class("42") {
                // A database, table or column that is not there, or not of the layout asked.
                ErrorKind::Configuration
            } else if code == "22001" {
                // A value longer than its column.
                ErrorKind::Limit
            } else {
                ErrorKind::OutcomeUnknown
            }
        }
        sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::TypeNotFound { .. } => ErrorKind::Configuration,
        sqlx::Error::ColumnDecode { .. } | sqlx::Error::Decode(_) => ErrorKind::CorruptData,
        _ => unanswered,
    }
}

/// The kind of an SQLite primary result code (<https://sqlite.org/rescode.html>).
fn sqlite_kind(primary: u32, unanswered: ErrorKind) -> ErrorKind {
    match primary {
        // SQLITE_ERROR (no such table or column), SQLITE_PERM, SQLITE_READONLY,
        // SQLITE_CANTOPEN: the file or its table is not what the provider needs.
        1 | 3 | 8 | 14 => ErrorKind::Configuration,
        // SQLITE_AUTH.
        23 => ErrorKind::CredentialsRefused,
        // SQLITE_CORRUPT, SQLITE_NOTADB.
        11 | 26 => ErrorKind::CorruptData,
        // SQLITE_FULL, SQLITE_TOOBIG.
        13 | 18 => ErrorKind::Limit,
        _ => unanswered,
    }
}

/// What the database refused, by the SQLSTATE class of its error (PostgreSQL's and MySQL's
/// codes share the standard classes): an error on a connection opened for the statement
/// (too many clients, a server starting up, credentials) is not a refused statement, and
/// saying so sends the reader to the wrong place.
fn refusal_of(sqlstate: Option<&str>) -> &'static str {
    let class = |prefix: &str| sqlstate.is_some_and(|code| code.starts_with(prefix));
    if class("08") {
        "the database refused the connection"
    } else if class("28") {
        "the database refused the credentials"
    } else if class("53") {
        "the database is out of resources (too many connections, or out of memory or disk)"
    } else if class("57P") {
        "the database is shutting down, starting up or restarting"
    } else {
        "the database refused the statement"
    }
}

/// The cause to report for `error`: sqlx's database and I/O errors repeat their cause's text
/// in their own message, so the cause itself is the source instead, and is said once.
pub(crate) fn cause_of(error: sqlx::Error) -> BoxError {
    match error {
        sqlx::Error::Database(refusal) => refusal,
        sqlx::Error::Io(io) => Box::new(io),
        other => Box::new(other),
    }
}

#[cfg(test)]
mod tests {
    use super::{kind_of, refusal_of};
    use shedlock_core::{ErrorKind, Operation};

    #[test]
    fn kinds_say_whether_anything_was_sent_and_what_to_fix() {
        let on = |operation, error| kind_of(operation, &error);
        assert_eq!(
            on(Operation::Acquire, sqlx::Error::PoolTimedOut),
            ErrorKind::Unreachable
        );
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            on(Operation::Release, sqlx::Error::Io(refused)),
            ErrorKind::Unreachable
        );
        let reset = || std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert_eq!(
            on(Operation::Acquire, sqlx::Error::Io(reset())),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(
            on(Operation::Connect, sqlx::Error::Io(reset())),
            ErrorKind::Unreachable
        );
        assert_eq!(
            on(Operation::Inspect, sqlx::Error::ColumnNotFound("x".into())),
            ErrorKind::Configuration
        );
        assert_eq!(
            on(Operation::List, sqlx::Error::Decode("not a time".into())),
            ErrorKind::CorruptData
        );
    }

    #[test]
    fn refusals_are_named_by_their_sqlstate_class() {
        // PostgreSQL: too many clients, too many connections for a role, starting up,
        // terminated by an administrator, a bad password; MySQL: too many connections (1040).
        assert!(refusal_of(Some("53300")).starts_with("the database is out of resources"));
        assert!(refusal_of(Some("57P03")).starts_with("the database is shutting down"));
        assert!(refusal_of(Some("57P01")).starts_with("the database is shutting down"));
        assert_eq!(
            refusal_of(Some("28P01")),
            "the database refused the credentials"
        );
        assert_eq!(
            refusal_of(Some("08004")),
            "the database refused the connection"
        );
        // A statement's own errors: a missing table, a constraint, none given.
        assert_eq!(
            refusal_of(Some("42P01")),
            "the database refused the statement"
        );
        assert_eq!(
            refusal_of(Some("23505")),
            "the database refused the statement"
        );
        assert_eq!(refusal_of(None), "the database refused the statement");
    }
}
