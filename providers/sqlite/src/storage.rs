//! The statements: one per acquire, release and extend, all on ShedLock's table.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use shedlock_core::{
    ErrorKind, LockError, LockHolder, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, NodeTime},
};
use shedlock_sql::{
    AcquireAnswer, AcquireStatement, Column, ColumnInfo, ColumnKind, Dialect, HeldStatement,
    LockStatements, LockTable, SqlBackend, TableSchema, TimestampLimit, UtcInstant,
    client_time_parameter, statement_error,
};
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnectOptions, SqliteConnection};
use sqlx::{AssertSqlSafe, Row};

use crate::admin::{AdminStatements, instant};

const DIALECT: Dialect = Dialect::Sqlite;

/// How times are stored: SQLite's own date-time text, in UTC, with milliseconds. Fixed width,
/// so text comparison is time comparison.
pub(crate) const FORMAT: &str = "'%Y-%m-%d %H:%M:%f'";

/// The same format for chrono, for times taken from the node clock.
pub(crate) const CHRONO_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.3f";

/// How far a time column reaches, whatever its declared type: SQLite's date functions, which
/// compute every stored time, give NULL past the year 9999.
const TIMESTAMP_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((9999, 12, 31), (23, 59, 59), 999_000_000),
    advice: " (SQLite's date functions end with the year 9999, whatever the column's type)",
};

/// `CREATE TABLE IF NOT EXISTS` for `table`: ShedLock's table in SQLite's types, plus the
/// fencing column when `fencing` is true.
///
/// SQLite does not enforce `VARCHAR(64)`; the provider does, from the declared length.
pub fn create_table_statement(table: &LockTable, fencing: bool) -> String {
    let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
    let fencing_column = if fencing {
        format!(", {fence} BIGINT NOT NULL DEFAULT 0")
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ({name} VARCHAR(64) NOT NULL, {until} TIMESTAMP(3) NOT NULL, \
         {at} TIMESTAMP(3) NOT NULL, {by} VARCHAR(255) NOT NULL{fencing_column}, PRIMARY KEY ({name}))",
    )
}

/// `?1` name, `?2` locked_by, `?3` a duration modifier (`+1.500 seconds`), `?4` the time:
/// `'now'` (SQLite's clock) for server time, the node's UTC time for client time.
fn prepare_statements(table: &LockTable, schema: &TableSchema) -> LockStatements<Arc<str>> {
    let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
    let now = format!("strftime({FORMAT}, ?4)");
    let now_plus = format!("strftime({FORMAT}, ?4, ?3)");
    let (fence_col, fence_val, fence_update, returning) = if schema.fencing {
        (
            format!(", {fence}"),
            ", 1".to_owned(),
            format!(", {fence} = COALESCE({fence}, 0) + 1"),
            fence.clone(),
        )
    } else {
        (String::new(), String::new(), String::new(), "0".to_owned())
    };
    let values = format!(
        "INSERT INTO {t} ({name}, {until}, {at}, {by}{fence_col}) \
         VALUES (?1, {now_plus}, {now}, ?2{fence_val})"
    );
    LockStatements {
        // SQLite has no row locks (a write statement takes the file's write lock whether or
        // not its WHERE matches), so the upsert costs a refused attempt no more than a plain
        // UPDATE would, and it recreates a row deleted by hand in the same statement.
        take_over: format!(
            "{values} ON CONFLICT ({name}) DO UPDATE SET {until} = excluded.{until}, \
             {at} = excluded.{at}, {by} = excluded.{by}{fence_update} \
             WHERE {until} <= {now} RETURNING {returning}"
        )
        .into(),
        insert: format!("{values} ON CONFLICT ({name}) DO NOTHING RETURNING {returning}").into(),
        release: format!(
            "UPDATE {t} SET {until} = max({now}, strftime({FORMAT}, {at}, ?3)) \
             WHERE {name} = ?1 AND {by} = ?2 AND {until} > {now} AND {until} > {at}"
        )
        .into(),
        extend: format!(
            "UPDATE {t} SET {until} = {now_plus} WHERE {name} = ?1 AND {by} = ?2 \
             AND {until} > {now} AND {until} > {at}"
        )
        .into(),
    }
}

/// The time a statement compares with: `'now'` (SQLite's clock) for server time, the node's UTC
/// time for client time.
pub(crate) fn time_parameter(
    time_source: TimeSource,
    now: NodeTime,
    operation: Operation,
    name: &str,
) -> Result<String, LockError> {
    Ok(
        match client_time_parameter::<SqliteBackend>(time_source, now, operation, name)? {
            None => "now".to_owned(),
            Some(now) => DateTime::<Utc>::from(now).format(CHRONO_FORMAT).to_string(),
        },
    )
}

/// The read before a take-over: whether the lock is free at `?2` (the time, as `?4` of the
/// statements), and who holds it until when. `?1` name.
fn current_statement(table: &LockTable) -> Arc<str> {
    let [t, name, until, _, by, _] = table.quoted_names(DIALECT);
    format!("SELECT {until} <= strftime({FORMAT}, ?2), {by}, {until} FROM {t} WHERE {name} = ?1")
        .into()
}

/// The provider's writes, one at a time in the order they were asked.
///
/// SQLite lets one connection write at a time. A connection that finds the file's write lock
/// taken waits in SQLite's busy handler, which retries at growing intervals (every 100 ms once it
/// has waited a while): a connection that started waiting later retries sooner and takes the
/// lock first, so under steady load one call could be overtaken again and again until its
/// operation timeout ran out. A provider gains nothing from writing on several connections at
/// once, so its own writes take turns here, first come first served, and only writers of other
/// processes (or other providers) meet the busy handler. Reads, a refused take-over's included,
/// do not queue.
#[derive(Debug, Default)]
pub(crate) struct WriteTurns(tokio::sync::Mutex<()>);

impl WriteTurns {
    /// Runs `write` when every write asked before it has finished.
    pub(crate) async fn run<T>(&self, write: impl Future<Output = T>) -> T {
        let _turn = self.0.lock().await;
        write.await
    }
}

/// SQLite's side of [`SqliteLockProvider`](crate::SqliteLockProvider): the busy timeout, the
/// catalog checks, and the statements prepared for one table.
#[derive(Debug)]
pub struct SqliteBackend {
    statements: LockStatements<Arc<str>>,
    /// [`current_statement`].
    current: Arc<str>,
    admin: AdminStatements,
    time_source: TimeSource,
    /// Shared with [`AdminStatements`], whose force-unlock writes too.
    write_turns: Arc<WriteTurns>,
}

impl SqliteBackend {
    /// Binds `?1` name, `?2` locked_by, `?3` the duration modifier and `?4` the time.
    fn bind<'q>(
        &self,
        sql: &Arc<str>,
        operation: Operation,
        name: &'q str,
        locked_by: &'q str,
        duration: Duration,
        now: NodeTime,
    ) -> Result<Query<'q, Sqlite, SqliteArguments>, LockError> {
        let modifier = format!(
            "+{}.{:03} seconds",
            duration.as_secs(),
            duration.subsec_millis()
        );
        Ok(sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(name)
            .bind(locked_by)
            .bind(modifier)
            .bind(time_parameter(self.time_source, now, operation, name)?))
    }
}

/// The declared length in `VARCHAR(64)`, if any.
fn declared_length(declared: &str) -> Option<usize> {
    let open = declared.find('(')?;
    let close = declared[open..].find(')')? + open;
    declared[open + 1..close].trim().parse().ok()
}

fn classify(declared: &str) -> ColumnKind {
    let upper = declared.to_ascii_uppercase();
    if upper.contains("CHAR") || upper.contains("TEXT") || upper.contains("CLOB") {
        ColumnKind::Text {
            max_chars: declared_length(declared),
        }
    } else if upper.starts_with("TIMESTAMP") || upper.starts_with("DATETIME") {
        // Stored as text with milliseconds, whatever the declared precision.
        ColumnKind::Timestamp {
            fraction_digits: 3,
            with_time_zone: false,
            limit: TIMESTAMP_LIMIT,
        }
    } else if upper.contains("INT") {
        ColumnKind::Integer
    } else {
        ColumnKind::Other
    }
}

impl SqlBackend for SqliteBackend {
    type Database = Sqlite;
    const PROVIDER: &'static str = "sqlite";
    const DATABASE_NAME: &'static str = "SQLite";
    const UNREACHABLE_HINT: &'static str = "can the file be opened?";
    const URL_SCHEMES: &'static [&'static str] = &["sqlite"];
    const ACCEPTS_FILE_PATH: bool = true;
    const CREATED_LOCK_UNTIL_TYPE: &'static str = "TIMESTAMP(3)";
    const CREATED_LOCK_UNTIL_LIMIT: TimestampLimit = TIMESTAMP_LIMIT;

    fn session_options(
        options: SqliteConnectOptions,
        operation_timeout: Duration,
    ) -> SqliteConnectOptions {
        // Writers queue on the file lock for at most the operation timeout.
        options.busy_timeout(operation_timeout)
    }

    /// Reads the table's columns (creating the table first when asked) and prepares the
    /// statements.
    async fn connect(
        connection: &mut SqliteConnection,
        table: &LockTable,
        time_source: TimeSource,
        create_table: Option<bool>,
    ) -> Result<(Self, TableSchema), LockError> {
        let connect_error = |e| statement_error::<Self>(Operation::Connect, "", e);
        if let Some(fencing) = create_table {
            sqlx::query(AssertSqlSafe(create_table_statement(table, fencing)))
                .execute(&mut *connection)
                .await
                .map_err(connect_error)?;
        }
        let rows = sqlx::query("SELECT name, type, pk FROM pragma_table_info(?1, ?2) ORDER BY cid")
            .bind(table.table().table.catalog_name(DIALECT))
            .bind(
                table
                    .table()
                    .schema
                    .as_ref()
                    .map_or_else(|| "main".to_owned(), |s| s.catalog_name(DIALECT)),
            )
            .fetch_all(&mut *connection)
            .await
            .map_err(connect_error)?;
        let mut columns = Vec::with_capacity(rows.len());
        let mut key_columns = Vec::new();
        for row in &rows {
            let name: String = row.try_get(0).map_err(connect_error)?;
            let declared: String = row.try_get(1).map_err(connect_error)?;
            let pk: i64 = row.try_get(2).map_err(connect_error)?;
            if pk > 0 {
                key_columns.push(name.clone());
            }
            columns.push(ColumnInfo {
                kind: classify(&declared),
                declared_type: if declared.is_empty() {
                    "(none)".to_owned()
                } else {
                    declared
                },
                name,
            });
        }
        let ddl = format!("{};", create_table_statement(table, false));
        let schema = table.check_columns(DIALECT, Self::PROVIDER, &columns, &ddl)?;
        let name_column = table.column(Column::Name);
        if !(key_columns.len() == 1 && name_column.matches_column(DIALECT, &key_columns[0])) {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                Self::PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the lock table {t}: column {name_column} must be its (only) primary key \
                     column; ShedLock's table is:\n{ddl}",
                    t = table.table(),
                ),
            ));
        }
        Ok((Self::unchecked(table, &schema, time_source), schema))
    }

    fn unchecked(table: &LockTable, schema: &TableSchema, time_source: TimeSource) -> Self {
        let write_turns = Arc::new(WriteTurns::default());
        Self {
            statements: prepare_statements(table, schema),
            current: current_statement(table),
            admin: AdminStatements::prepare(table, schema, time_source, write_turns.clone()),
            time_source,
            write_turns,
        }
    }

    async fn acquire(
        &self,
        connection: &mut SqliteConnection,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> Result<AcquireAnswer, LockError> {
        let sql = self.statements.for_acquire(statement);
        let acquire_error = |e| statement_error::<Self>(Operation::Acquire, record.name, e);
        if statement == AcquireStatement::TakeOver && !record.freed_by_this_node {
            // Any write statement takes the file's write lock, even one whose WHERE matches
            // nothing, and the nodes refused it would queue on that lock one after another.
            // A read takes a shared lock only: a held lock, the common answer, is known without
            // the write lock, and its holder with it. A lock this node's own release left free
            // is expected free still, so the upsert goes at once.
            let current = sqlx::query(AssertSqlSafe(self.current.clone()))
                .bind(record.name)
                .bind(time_parameter(
                    self.time_source,
                    record.now,
                    Operation::Acquire,
                    record.name,
                )?)
                .fetch_optional(&mut *connection)
                .await
                .map_err(acquire_error)?;
            if let Some(current) = current
                && current
                    .try_get::<Option<bool>, _>(0)
                    .map_err(acquire_error)?
                    == Some(false)
            {
                let locked_by: Option<String> = current.try_get(1).map_err(acquire_error)?;
                let until: Option<String> = current.try_get(2).map_err(acquire_error)?;
                return Ok(AcquireAnswer::NotAcquired(Some(LockHolder::from_stored(
                    locked_by.as_deref(),
                    until.as_deref().and_then(instant),
                ))));
            }
        }
        let write = self
            .bind(
                sql,
                Operation::Acquire,
                record.name,
                record.locked_by,
                record.lock_at_most_for,
                record.now,
            )?
            .fetch_optional(&mut *connection);
        let row = self.write_turns.run(write).await.map_err(acquire_error)?;
        // The statement returns the new fencing token (0 without the column); the take-over
        // inserts a missing row, so no row always means "held": taken by another node since
        // the read, or, for the insert, by anyone.
        match row {
            Some(row) => row
                .try_get::<i64, _>(0)
                .map(|token| AcquireAnswer::Acquired(token as u64))
                .map_err(acquire_error),
            None => Ok(AcquireAnswer::NotAcquired(None)),
        }
    }

    type Admin = AdminStatements;

    fn admin(&self) -> &AdminStatements {
        &self.admin
    }

    async fn change_held(
        &self,
        connection: &mut SqliteConnection,
        statement: HeldStatement,
        held: &HeldRecord,
        duration: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let sql = self.statements.for_held(statement);
        let operation = statement.operation();
        let write = self
            .bind(sql, operation, &held.name, &held.locked_by, duration, now)?
            .execute(&mut *connection);
        let done = self
            .write_turns
            .run(write)
            .await
            .map_err(|e| statement_error::<Self>(operation, &held.name, e))?;
        Ok(done.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_test_support::sql::binding::{
        a_node_time_that_contradicts_the_time_source_is_refused, millisecond_schema,
    };

    #[test]
    fn a_node_time_that_contradicts_the_time_source_is_refused_before_binding() {
        let schema = millisecond_schema("TIMESTAMP(3)", TIMESTAMP_LIMIT);
        a_node_time_that_contradicts_the_time_source_is_refused(|time_source, now| {
            let backend = SqliteBackend::unchecked(&LockTable::default(), &schema, time_source);
            let statement = &backend.statements.extend;
            let second = Duration::from_secs(1);
            let bound = backend.bind(statement, Operation::Extend, "job", "node#1", second, now);
            bound.map(drop)
        });
    }

    #[test]
    fn declared_types_are_read_as_sqlite_declares_them() {
        assert_eq!(
            classify("VARCHAR(64)"),
            ColumnKind::Text {
                max_chars: Some(64)
            }
        );
        assert_eq!(classify("text"), ColumnKind::Text { max_chars: None });
        assert!(matches!(
            classify("TIMESTAMP(3)"),
            ColumnKind::Timestamp { .. }
        ));
        assert!(matches!(classify("datetime"), ColumnKind::Timestamp { .. }));
        assert_eq!(classify("BIGINT"), ColumnKind::Integer);
        assert_eq!(classify(""), ColumnKind::Other);
        assert_eq!(classify("BLOB"), ColumnKind::Other);
    }
}
