//! The statements: one per acquire, release and extend, all on ShedLock's table.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use shedlock_core::{
    ErrorKind, LockError, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, NodeTime},
};
use shedlock_sql::{
    AcquireAnswer, AcquireStatement, Column, ColumnInfo, ColumnKind, Dialect, HeldStatement,
    LockSelection, LockStatements, LockTable, SqlBackend, StoredAcquisition, StoredLock,
    TableSchema, TimestampLimit, UtcInstant, client_time_parameter, statement_error,
};
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlQueryResult};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Row};

use crate::admin::{self, AdminStatements};

const DIALECT: Dialect = Dialect::MySql;

/// Which server the pool talks to: the DDL's collation differs between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// MySQL 8 or later.
    MySql,
    /// MariaDB 10.6 or later.
    MariaDb,
}

impl Flavor {
    /// A binary collation that also compares trailing spaces, so distinct names stay distinct.
    fn name_collation(self) -> &'static str {
        match self {
            Flavor::MySql => "utf8mb4_0900_bin",
            Flavor::MariaDb => "utf8mb4_nopad_bin",
        }
    }
}

/// What a `TIMESTAMP` column reaches on MySQL, and on MariaDB before 11.5 (or on a 32-bit
/// server): the largest signed 32-bit count of seconds since the epoch.
const TIMESTAMP_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_999_000),
    advice: TIMESTAMP_ADVICE,
};

/// What a `TIMESTAMP` column reaches on MariaDB 11.5 and later on 64-bit servers (MDEV-32188):
/// the largest unsigned 32-bit count of seconds.
const WIDE_TIMESTAMP_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((2106, 2, 7), (6, 28, 15), 999_999_000),
    advice: TIMESTAMP_ADVICE,
};

const TIMESTAMP_ADVICE: &str = ", or make the column DATETIME(3), which reaches the year 9999";

/// What a `DATETIME` column reaches: the last instant of the year 9999.
const DATETIME_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((9999, 12, 31), (23, 59, 59), 999_999_000),
    advice: "",
};

/// `CREATE TABLE IF NOT EXISTS` for `table` on `flavor`: ShedLock's MySQL table, plus the
/// fencing column when `fencing` is true.
///
/// It differs from ShedLock's documented DDL in one way: the `name` column gets a binary,
/// no-pad collation (`utf8mb4_0900_bin` on MySQL, `utf8mb4_nopad_bin` on MariaDB), so `Job`,
/// `job` and `job ` are three locks, not one. Java nodes are unaffected.
pub fn create_table_statement(table: &LockTable, fencing: bool, flavor: Flavor) -> String {
    let q = |c| table.quoted(DIALECT, c);
    let fencing_column = if fencing {
        format!(", {} BIGINT NOT NULL DEFAULT 0", q(Column::FencingToken))
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ({name} VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {coll} \
         NOT NULL, {until} TIMESTAMP(3) NOT NULL, {at} TIMESTAMP(3) NOT NULL DEFAULT \
         CURRENT_TIMESTAMP(3), {by} VARCHAR(255) NOT NULL{fencing_column}, PRIMARY KEY ({name}))",
        t = table.quoted_table(DIALECT),
        coll = flavor.name_collation(),
        name = q(Column::Name),
        until = q(Column::LockUntil),
        at = q(Column::LockedAt),
        by = q(Column::LockedBy),
    )
}

/// A bound parameter of a statement, in the order the `?` appear.
#[derive(Debug, Clone, Copy)]
enum Param {
    Name,
    LockedBy,
    /// The statement's duration in microseconds.
    Micros,
    /// The node's clock (client time only).
    Now,
}

/// SQL text and the order of its parameters.
#[derive(Debug)]
struct Statement {
    sql: Arc<str>,
    params: Vec<Param>,
}

/// Writes one statement, recording its `?` in order.
struct Writer {
    sql: String,
    params: Vec<Param>,
    time_source: TimeSource,
}

impl Writer {
    fn new(time_source: TimeSource) -> Self {
        Self {
            sql: String::new(),
            params: Vec::new(),
            time_source,
        }
    }

    fn sql(&mut self, text: &str) -> &mut Self {
        self.sql.push_str(text);
        self
    }

    fn param(&mut self, param: Param) -> &mut Self {
        self.sql.push('?');
        self.params.push(param);
        self
    }

    /// The current time: the server's UTC clock, or the node's as a parameter.
    fn now(&mut self) -> &mut Self {
        match self.time_source {
            TimeSource::Server => self.sql("UTC_TIMESTAMP(3)"),
            TimeSource::Client => self.param(Param::Now),
        }
    }

    /// The time when the row is read, to judge whether an acquisition still holds its lock:
    /// see [`READ_TIME`].
    fn read_time(&mut self) -> &mut Self {
        match self.time_source {
            TimeSource::Server => self.sql(READ_TIME),
            TimeSource::Client => self.param(Param::Now),
        }
    }

    /// `now + duration`.
    fn now_plus(&mut self) -> &mut Self {
        self.sql("TIMESTAMPADD(MICROSECOND, ")
            .param(Param::Micros)
            .sql(", ")
            .now()
            .sql(")")
    }

    fn finish(&mut self) -> Statement {
        Statement {
            sql: std::mem::take(&mut self.sql).into(),
            params: std::mem::take(&mut self.params),
        }
    }
}

/// The server's UTC clock when a row is read (the statement's start plus the time since, as
/// `SYSDATE` counts it), for release, extend and force-unlock to judge whether an acquisition
/// still holds its lock. `UTC_TIMESTAMP` is fixed when the statement starts: a statement that
/// waited on the row lock behind another (two force-unlocks of one acquisition, an extend
/// behind one) would see the `lock_until` that other write just set, its own later "now", as
/// still ahead, and act on an acquisition that was already freed. (A server started with
/// `--sysdate-is-now` reads `SYSDATE` as `NOW`, and gets the statement's start again.)
pub(crate) const READ_TIME: &str = "TIMESTAMPADD(MICROSECOND, \
     TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6)), UTC_TIMESTAMP(6))";

fn prepare_statements(
    table: &LockTable,
    schema: &TableSchema,
    time_source: TimeSource,
) -> LockStatements<Statement> {
    let q = |c| table.quoted(DIALECT, c);
    let (t, name, until, at, by, fence) = (
        table.quoted_table(DIALECT),
        q(Column::Name),
        q(Column::LockUntil),
        q(Column::LockedAt),
        q(Column::LockedBy),
        q(Column::FencingToken),
    );
    let mut w = Writer::new(time_source);

    // Insert only: an existing row, held or not, is left alone. `LAST_INSERT_ID(1)` marks
    // "inserted" (the server reports the last `LAST_INSERT_ID(expr)` of the statement as its
    // insert id), and the no-op assignment on a duplicate resets it to 0.
    let fence_col = if schema.fencing {
        format!(", {fence}")
    } else {
        String::new()
    };
    w.sql(&format!(
        "INSERT INTO {t} ({name}, {until}, {at}, {by}{fence_col}) VALUES ("
    ))
    .param(Param::Name)
    .sql(", ")
    .now_plus()
    .sql(", ")
    .now()
    .sql(", IF(LAST_INSERT_ID(1) > 0, ")
    .param(Param::LockedBy)
    .sql(", NULL)");
    if schema.fencing {
        w.sql(", 1");
    }
    w.sql(&format!(
        ") ON DUPLICATE KEY UPDATE {by} = IF(LAST_INSERT_ID(0) = 0, {by}, NULL)"
    ));
    let insert = w.finish();

    // Take-over: every assignment is conditioned on the old lock_until, which is assigned
    // last, so the conditions read the old row whether the server evaluates assignments
    // left to right (MySQL, MariaDB) or simultaneously (MariaDB's SIMULTANEOUS_ASSIGNMENT).
    // The taken branch sets the insert id to the new token (or 1), the other to 0. The WHERE
    // matches the row whether held or not, so the matched-row count tells a held row from a
    // missing one; a held row is assigned its own values, which InnoDB does not write.
    w.sql(&format!("UPDATE {t} SET "));
    if schema.fencing {
        w.sql(&format!("{fence} = IF({until} <= "))
            .now()
            .sql(&format!(
                ", LAST_INSERT_ID(COALESCE({fence}, 0) + 1), {fence}), "
            ));
        w.sql(&format!("{by} = IF({until} <= "))
            .now()
            .sql(", ")
            .param(Param::LockedBy);
    } else {
        w.sql(&format!("{by} = IF({until} <= "))
            .now()
            .sql(", IF(LAST_INSERT_ID(1) > 0, ")
            .param(Param::LockedBy)
            .sql(", NULL)");
    }
    w.sql(&format!(", IF(LAST_INSERT_ID(0) = 0, {by}, NULL)), "));
    w.sql(&format!("{at} = IF({until} <= "))
        .now()
        .sql(", ")
        .now()
        .sql(&format!(", {at}), "));
    w.sql(&format!("{until} = IF({until} <= "))
        .now()
        .sql(", ")
        .now_plus()
        .sql(&format!(", {until}) WHERE {name} = "))
        .param(Param::Name);
    let take_over = w.finish();

    w.sql(&format!("UPDATE {t} SET {until} = GREATEST("))
        .now()
        .sql(", TIMESTAMPADD(MICROSECOND, ")
        .param(Param::Micros)
        .sql(&format!(", {at})) WHERE {name} = "))
        .param(Param::Name)
        .sql(&format!(" AND {by} = "))
        .param(Param::LockedBy)
        .sql(&format!(" AND {until} > {at} AND {until} > "))
        .read_time();
    let release = w.finish();

    w.sql(&format!("UPDATE {t} SET {until} = "))
        .now_plus()
        .sql(&format!(" WHERE {name} = "))
        .param(Param::Name)
        .sql(&format!(" AND {by} = "))
        .param(Param::LockedBy)
        .sql(&format!(" AND {until} > {at} AND {until} > "))
        .read_time();
    let extend = w.finish();

    LockStatements {
        insert,
        take_over,
        release,
        extend,
    }
}

/// The name column's character set and collation, as far as they change which names are safe.
#[derive(Debug, Clone, Default)]
struct NameColumn {
    /// Characters the column's character set can store (`None`: all of Unicode).
    max_char: Option<char>,
    /// The character set's name, for errors.
    charset: String,
    /// Whether the collation ignores trailing spaces (PAD SPACE).
    pads: bool,
    collation: String,
}

/// MySQL's and MariaDB's side of [`MySqlLockProvider`](crate::MySqlLockProvider): the UTC
/// session, the catalog checks (collation, character set, `AUTO_INCREMENT`), and the
/// statements prepared for one table.
#[derive(Debug)]
pub struct MySqlBackend {
    statements: LockStatements<Statement>,
    admin: AdminStatements,
    time_source: TimeSource,
    name_column: NameColumn,
    flavor: Flavor,
}

impl MySqlBackend {
    /// Whether the server is MySQL or MariaDB (MySQL when built without connecting).
    pub fn flavor(&self) -> Flavor {
        self.flavor
    }

    fn bind<'q>(
        &self,
        statement: &Statement,
        operation: Operation,
        name: &'q str,
        locked_by: &'q str,
        duration: Duration,
        now: NodeTime,
    ) -> Result<Query<'q, MySql, MySqlArguments>, LockError> {
        let micros = i64::try_from(duration.as_micros()).unwrap_or(i64::MAX);
        let client_now: Option<NaiveDateTime> =
            client_time_parameter::<Self>(self.time_source, now, operation, name)?
                .map(|now| DateTime::<Utc>::from(now).naive_utc());
        let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
        for param in &statement.params {
            query = match (param, client_now) {
                (Param::Name, _) => query.bind(name),
                (Param::LockedBy, _) => query.bind(locked_by),
                (Param::Micros, _) => query.bind(micros),
                (Param::Now, Some(now)) => query.bind(now),
                // Only client-time statements have this parameter, and they are given the
                // node's clock; binding anything else would compare with an undeclared clock.
                (Param::Now, None) => {
                    return Err(LockError::backend_message(
                        ErrorKind::Configuration,
                        Self::PROVIDER,
                        operation,
                        name,
                        "this statement binds the node's clock, yet the backend was prepared \
                         for server time; the statement was not run",
                    ));
                }
            };
        }
        Ok(query)
    }
}

/// Reads which server this is, and how far its `TIMESTAMP` type reaches.
///
/// MariaDB's `FROM_UNIXTIME` returns NULL past the range of its `TIMESTAMP` values, which
/// reaches 2106 from 11.5 on 64-bit servers and 2038 otherwise, so the server says which it
/// has rather than a version number being read for it. MySQL's `FROM_UNIXTIME` reaches
/// further than its `TIMESTAMP` type (3001 from 8.0.28), which ends in 2038 in every version.
async fn flavor(connection: &mut MySqlConnection) -> Result<(Flavor, TimestampLimit), sqlx::Error> {
    let (version, wide): (String, i64) = sqlx::query_as(
        "SELECT CAST(VERSION() AS CHAR), \
         CAST(FROM_UNIXTIME(4294967295) IS NOT NULL AS SIGNED)",
    )
    .fetch_one(&mut *connection)
    .await?;
    Ok(if version.to_ascii_lowercase().contains("mariadb") {
        let timestamp = if wide == 1 {
            WIDE_TIMESTAMP_LIMIT
        } else {
            TIMESTAMP_LIMIT
        };
        (Flavor::MariaDb, timestamp)
    } else {
        (Flavor::MySql, TIMESTAMP_LIMIT)
    })
}

impl SqlBackend for MySqlBackend {
    type Database = MySql;
    const PROVIDER: &'static str = "mysql";
    const DATABASE_NAME: &'static str = "MySQL";
    const UNREACHABLE_HINT: &'static str = "is the server reachable?";
    const URL_SCHEMES: &'static [&'static str] = &["mysql", "mariadb"];
    const CREATED_LOCK_UNTIL_TYPE: &'static str = "timestamp(3)";
    /// [`create_table_statement`]'s `TIMESTAMP(3)`, on MySQL (a provider built without
    /// connecting assumes MySQL).
    const CREATED_LOCK_UNTIL_LIMIT: TimestampLimit = TimestampLimit {
        latest: TIMESTAMP_LIMIT.latest.truncated_to(3),
        ..TIMESTAMP_LIMIT
    };

    fn session_options(
        options: MySqlConnectOptions,
        _operation_timeout: Duration,
    ) -> MySqlConnectOptions {
        // UTC sessions: TIMESTAMP columns then hold the UTC times the statements write.
        options.timezone(Some("+00:00".to_owned()))
    }

    async fn prepare_connection(
        connection: &mut MySqlConnection,
        operation_timeout: Duration,
    ) -> Result<(), sqlx::Error> {
        // A statement waiting on a row lock gives up server-side too, not only here.
        let lock_wait = operation_timeout.as_secs().max(1);
        sqlx::query(AssertSqlSafe(format!(
            "SET SESSION innodb_lock_wait_timeout = {lock_wait}"
        )))
        .execute(connection)
        .await
        .map(|_| ())
    }

    /// Reads the table's columns from `information_schema` (creating the table first when
    /// asked), checks the session time zone for `TIMESTAMP` columns, and prepares the
    /// statements.
    async fn connect(
        connection: &mut MySqlConnection,
        table: &LockTable,
        time_source: TimeSource,
        create_table: Option<bool>,
    ) -> Result<(Self, TableSchema), LockError> {
        let connect_error = |e| statement_error::<Self>(Operation::Connect, "", e);
        let (flavor, timestamp_limit) = flavor(&mut *connection).await.map_err(connect_error)?;
        if let Some(fencing) = create_table {
            sqlx::query(AssertSqlSafe(create_table_statement(
                table, fencing, flavor,
            )))
            .execute(&mut *connection)
            .await
            .map_err(connect_error)?;
        }
        let rows = sqlx::query(
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(COLUMN_TYPE AS CHAR), \
             CAST(DATA_TYPE AS CHAR), CAST(CHARACTER_MAXIMUM_LENGTH AS SIGNED), \
             CAST(DATETIME_PRECISION AS SIGNED), CAST(CHARACTER_SET_NAME AS CHAR), \
             CAST(COLLATION_NAME AS CHAR), CAST(COLUMN_KEY AS CHAR), CAST(EXTRA AS CHAR) \
             FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = COALESCE(?, DATABASE()) AND TABLE_NAME = ? \
             ORDER BY ORDINAL_POSITION",
        )
        .bind(
            table
                .table()
                .schema
                .as_ref()
                .map(|s| s.catalog_name(DIALECT)),
        )
        .bind(table.table().table.catalog_name(DIALECT))
        .fetch_all(&mut *connection)
        .await
        .map_err(connect_error)?;
        let ddl = format!("{};", create_table_statement(table, false, flavor));
        let mut columns = Vec::with_capacity(rows.len());
        let mut name_column = NameColumn::default();
        let mut name_key = String::new();
        let mut timestamp_columns = false;
        for row in &rows {
            let get = |i| -> Result<Option<String>, LockError> {
                row.try_get::<Option<String>, _>(i).map_err(connect_error)
            };
            let column_name = get(0)?.unwrap_or_default();
            let column_type = get(1)?.unwrap_or_default();
            let data_type = get(2)?.unwrap_or_default().to_ascii_lowercase();
            let max_len: Option<i64> = row.try_get(3).map_err(connect_error)?;
            let precision: Option<i64> = row.try_get(4).map_err(connect_error)?;
            let extra = get(8)?.unwrap_or_default();
            if extra.to_ascii_lowercase().contains("auto_increment") {
                return Err(LockError::backend_message(
                    ErrorKind::Configuration,
                    Self::PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "the lock table {t} has an AUTO_INCREMENT column {column_name}; the \
                         acquire statement reports its outcome through the insert id, so the \
                         table must not have one. ShedLock's table is:\n{ddl}",
                        t = table.table()
                    ),
                ));
            }
            let kind = match data_type.as_str() {
                "varchar" | "char" => ColumnKind::Text {
                    max_chars: max_len.map(|n| n as usize),
                },
                "text" | "tinytext" | "mediumtext" | "longtext" => ColumnKind::Text {
                    max_chars: max_len.map(|n| n as usize),
                },
                "timestamp" | "datetime" => {
                    timestamp_columns |= data_type == "timestamp";
                    ColumnKind::Timestamp {
                        fraction_digits: precision.unwrap_or(0) as u32,
                        // Neither stores an instant: both hold UTC wall times here.
                        with_time_zone: false,
                        limit: if data_type == "timestamp" {
                            timestamp_limit
                        } else {
                            DATETIME_LIMIT
                        },
                    }
                }
                "bigint" | "int" | "integer" | "mediumint" => ColumnKind::Integer,
                _ => ColumnKind::Other,
            };
            if table
                .column(Column::Name)
                .matches_column(DIALECT, &column_name)
            {
                let charset = get(5)?.unwrap_or_default().to_ascii_lowercase();
                let collation = get(6)?.unwrap_or_default().to_ascii_lowercase();
                name_key = get(7)?.unwrap_or_default();
                name_column = NameColumn {
                    max_char: match charset.as_str() {
                        "utf8mb4" | "binary" | "" => None,
                        "utf8" | "utf8mb3" => Some('\u{FFFF}'),
                        "latin1" => Some('\u{FF}'),
                        "ascii" => Some('\u{7F}'),
                        _ => None,
                    },
                    charset,
                    pads: !(collation.contains("nopad")
                        || collation.contains("_0900_")
                        || collation.is_empty()),
                    collation,
                };
            }
            columns.push(ColumnInfo {
                name: column_name,
                declared_type: column_type,
                kind,
            });
        }
        let schema = table.check_columns(DIALECT, Self::PROVIDER, &columns, &ddl)?;
        if !matches!(name_key.as_str(), "PRI" | "UNI") {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                Self::PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the lock table {t}: column {c} must be its primary key (or have a unique \
                     index of its own); ShedLock's table is:\n{ddl}",
                    t = table.table(),
                    c = table.column(Column::Name),
                ),
            ));
        }
        if timestamp_columns {
            // TIMESTAMP columns convert between the session time zone and UTC on every read
            // and write; the statements' UTC times are only right in a UTC session.
            let offset: i64 =
                sqlx::query_scalar("SELECT TIMESTAMPDIFF(MINUTE, UTC_TIMESTAMP(), NOW())")
                    .fetch_one(&mut *connection)
                    .await
                    .map_err(connect_error)?;
            if offset != 0 {
                return Err(LockError::backend_message(
                    ErrorKind::Configuration,
                    Self::PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "the lock table {t} has TIMESTAMP columns, and this pool's session \
                         time_zone is {offset} minutes from UTC; they hold UTC times, so the \
                         session must use time_zone '+00:00' (sqlx's default: do not set \
                         MySqlConnectOptions::timezone(None)), or make the columns DATETIME(3)",
                        t = table.table()
                    ),
                ));
            }
        }
        if name_column.pads || name_column.collation.ends_with("_ci") {
            tracing::warn!(
                table = %table.table(),
                collation = %name_column.collation,
                "the lock name column's collation treats some distinct names as equal (case, \
                 accents or trailing spaces); such names share one lock"
            );
        }
        let backend = Self {
            statements: prepare_statements(table, &schema, time_source),
            admin: AdminStatements::prepare(table, &schema, time_source),
            time_source,
            name_column,
            flavor,
        };
        Ok((backend, schema))
    }

    /// The statements for the table [`create_table_statement`] makes: binary-collated
    /// `utf8mb4` names, on MySQL.
    fn unchecked(table: &LockTable, schema: &TableSchema, time_source: TimeSource) -> Self {
        Self {
            statements: prepare_statements(table, schema, time_source),
            admin: AdminStatements::prepare(table, schema, time_source),
            time_source,
            name_column: NameColumn::default(),
            flavor: Flavor::MySql,
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        if let Some(max) = self.name_column.max_char
            && let Some(c) = name.chars().find(|&c| c > max)
        {
            return Err(LockError::invalid_name(
                Self::PROVIDER,
                name,
                format!(
                    "the name column's character set {} cannot store {c:?}",
                    self.name_column.charset
                ),
            ));
        }
        if self.name_column.pads && name.ends_with(' ') {
            return Err(LockError::invalid_name(
                Self::PROVIDER,
                name,
                format!(
                    "it ends with a space, which the name column's collation {} ignores, so it \
                     would share a lock with the name without it",
                    self.name_column.collation
                ),
            ));
        }
        Ok(())
    }

    async fn acquire(
        &self,
        connection: &mut MySqlConnection,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> Result<AcquireAnswer, LockError> {
        let sql = self.statements.for_acquire(statement);
        let done: MySqlQueryResult = self
            .bind(
                sql,
                Operation::Acquire,
                record.name,
                record.locked_by,
                record.lock_at_most_for,
                record.now,
            )?
            .execute(&mut *connection)
            .await
            .map_err(|e| statement_error::<Self>(Operation::Acquire, record.name, e))?;
        // The insert id is the `LAST_INSERT_ID(expr)` the statement evaluated last: 1 or the
        // new token when the row was inserted or taken over, 0 when it was left alone. Under
        // sqlx's CLIENT_FOUND_ROWS the affected-row count is the matched rows: it cannot tell
        // "inserted" (1) from "left alone" (1), but no matched row in a take-over means no row.
        let id = done.last_insert_id();
        if statement == AcquireStatement::TakeOver && done.rows_affected() == 0 {
            return Ok(AcquireAnswer::Missing);
        }
        if id == 0 {
            // An UPDATE has no RETURNING in MySQL or MariaDB, and the holder could only be
            // read by a second statement, another round trip on every skipped run.
            return Ok(AcquireAnswer::NotAcquired(None));
        }
        if done.rows_affected() == 0 {
            return Err(LockError::backend_message(
                ErrorKind::OutcomeUnknown,
                Self::PROVIDER,
                Operation::Acquire,
                record.name,
                format!(
                    "the acquire statement reported insert id {id} but no affected row; the \
                     outcome is unknown"
                ),
            ));
        }
        // With the fencing column the insert id is the new token.
        Ok(AcquireAnswer::Acquired(id))
    }

    const LOCKED_AT_KEY: &'static str = admin::LOCKED_AT_KEY;

    type LockedAt = NaiveDateTime;

    fn locked_at_from_key(&self, key: &str) -> Option<NaiveDateTime> {
        admin::locked_at_from_key(key)
    }

    async fn read_locks(
        &self,
        connection: &mut MySqlConnection,
        selection: LockSelection<'_>,
        now: NodeTime,
    ) -> Result<Vec<StoredLock>, LockError> {
        self.admin.read_locks(connection, selection, now).await
    }

    async fn force_unlock(
        &self,
        connection: &mut MySqlConnection,
        name: &str,
        acquisition: &StoredAcquisition<NaiveDateTime>,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        self.admin
            .force_unlock(connection, name, acquisition, now)
            .await
    }

    async fn change_held(
        &self,
        connection: &mut MySqlConnection,
        statement: HeldStatement,
        held: &HeldRecord,
        duration: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let operation = statement.operation();
        let statement = self.statements.for_held(statement);
        let done = self
            .bind(
                statement,
                operation,
                &held.name,
                &held.locked_by,
                duration,
                now,
            )?
            .execute(&mut *connection)
            .await
            .map_err(|e| statement_error::<Self>(operation, &held.name, e))?;
        // Under CLIENT_FOUND_ROWS this counts matched rows: the owner check decides.
        Ok(done.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_time_that_contradicts_the_time_source_is_refused_before_binding() {
        let schema = TableSchema {
            max_name_chars: Some(64),
            max_locked_by_chars: Some(255),
            time_precision: Duration::from_millis(1),
            timestamps_with_time_zone: false,
            fencing: false,
            lock_until_type: "timestamp(3)".to_owned(),
            lock_until_limit: TIMESTAMP_LIMIT,
        };
        let node_clock = NodeTime::ClientTime(std::time::SystemTime::now());
        for (time_source, now, agrees) in [
            (TimeSource::Server, NodeTime::ServerTime, true),
            (TimeSource::Client, node_clock, true),
            (TimeSource::Server, node_clock, false),
            (TimeSource::Client, NodeTime::ServerTime, false),
        ] {
            let backend = MySqlBackend::unchecked(&LockTable::default(), &schema, time_source);
            let bound = backend.bind(
                &backend.statements.extend,
                Operation::Extend,
                "job",
                "node#1",
                Duration::from_secs(1),
                now,
            );
            match bound {
                Ok(_) => assert!(agrees, "{time_source:?} bound {now:?}"),
                Err(error) => {
                    assert!(!agrees, "{time_source:?} refused {now:?}: {error}");
                    assert!(error.to_string().contains("time source"), "{error}");
                }
            }
        }
    }

    #[test]
    fn server_time_acquire_statements_use_no_values_function_or_aliases() {
        let schema = TableSchema {
            max_name_chars: Some(64),
            max_locked_by_chars: Some(255),
            time_precision: Duration::from_millis(1),
            timestamps_with_time_zone: false,
            fencing: false,
            lock_until_type: "timestamp(3)".to_owned(),
            lock_until_limit: TIMESTAMP_LIMIT,
        };
        let statements = prepare_statements(&LockTable::default(), &schema, TimeSource::Server);
        for statement in [&statements.insert, &statements.take_over] {
            let sql = &*statement.sql;
            assert!(!sql.contains("VALUES("), "no VALUES() function: {sql}");
            assert!(!sql.contains(" AS "), "no row alias: {sql}");
            assert_eq!(statement.params.len(), 3, "{sql}");
        }
        let insert = &*statements.insert.sql;
        assert_eq!(insert.matches("ON DUPLICATE KEY UPDATE").count(), 1);
        let take_over = &*statements.take_over.sql;
        assert!(take_over.starts_with("UPDATE "), "{take_over}");
        assert!(
            take_over.ends_with("`lock_until`) WHERE `name` = ?"),
            "lock_until is assigned last, and the row is matched by name only: {take_over}"
        );
    }
}
