//! The statements: one per acquire, release and extend, all on ShedLock's table.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use shedlock_core::{
    Capabilities, HeldRecord, LockError, LockRecord, LockStorage, Operation, RecordOutcome,
    TimeSource,
};
use shedlock_sql::{Column, ColumnInfo, ColumnKind, Dialect, LockTable, TableSchema};
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqlitePool};
use sqlx::{AssertSqlSafe, Row};

pub(crate) const PROVIDER: &str = "sqlite";
const DIALECT: Dialect = Dialect::Sqlite;

/// How times are stored: SQLite's own date-time text, in UTC, with milliseconds. Fixed width,
/// so text comparison is time comparison.
const FORMAT: &str = "'%Y-%m-%d %H:%M:%f'";

/// The same format for chrono, for times taken from the node clock.
const CHRONO_FORMAT: &str = "%Y-%m-%d %H:%M:%S%.3f";

/// `CREATE TABLE IF NOT EXISTS` for `table`: ShedLock's table in SQLite's types, plus the
/// fencing column when `fencing` is true.
///
/// SQLite does not enforce `VARCHAR(64)`; the provider does, from the declared length.
pub fn create_table_statement(table: &LockTable, fencing: bool) -> String {
    let q = |c| table.quoted(DIALECT, c);
    let fencing_column = if fencing {
        format!(", {} BIGINT NOT NULL DEFAULT 0", q(Column::FencingToken))
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ({name} VARCHAR(64) NOT NULL, {until} TIMESTAMP(3) NOT NULL, \
         {at} TIMESTAMP(3) NOT NULL, {by} VARCHAR(255) NOT NULL{fencing_column}, PRIMARY KEY ({name}))",
        t = table.quoted_table(DIALECT),
        name = q(Column::Name),
        until = q(Column::LockUntil),
        at = q(Column::LockedAt),
        by = q(Column::LockedBy),
    )
}

#[derive(Debug)]
struct Statements {
    acquire: Arc<str>,
    insert: Arc<str>,
    release: Arc<str>,
    extend: Arc<str>,
}

impl Statements {
    /// `?1` name, `?2` locked_by, `?3` a duration modifier (`+1.500 seconds`), `?4` the time:
    /// `'now'` (SQLite's clock) for server time, the node's UTC time for client time.
    fn new(table: &LockTable, schema: &TableSchema) -> Self {
        let q = |c| table.quoted(DIALECT, c);
        let (t, name, until, at, by, fence) = (
            table.quoted_table(DIALECT),
            q(Column::Name),
            q(Column::LockUntil),
            q(Column::LockedAt),
            q(Column::LockedBy),
            q(Column::FencingToken),
        );
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
        Self {
            acquire: format!(
                "{values} ON CONFLICT ({name}) DO UPDATE SET {until} = excluded.{until}, \
                 {at} = excluded.{at}, {by} = excluded.{by}{fence_update} \
                 WHERE {until} <= {now} RETURNING {returning}"
            )
            .into(),
            insert: format!("{values} ON CONFLICT ({name}) DO NOTHING RETURNING {returning}").into(),
            release: format!(
                "UPDATE {t} SET {until} = max({now}, strftime({FORMAT}, {at}, ?3)) \
                 WHERE {name} = ?1 AND {by} = ?2 AND {until} > {now}"
            )
            .into(),
            extend: format!(
                "UPDATE {t} SET {until} = {now_plus} WHERE {name} = ?1 AND {by} = ?2 AND {until} > {now}"
            )
            .into(),
        }
    }
}

/// The lock table in one SQLite database, checked at connect.
pub(crate) struct SqliteStorage {
    pool: SqlitePool,
    table: LockTable,
    schema: TableSchema,
    time_source: TimeSource,
    statements: Statements,
    target: String,
}

impl fmt::Debug for SqliteStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStorage")
            .field("target", &self.target)
            .field("table", &self.table.table().to_string())
            .field("time_source", &self.time_source)
            .field("fencing", &self.schema.fencing)
            .finish_non_exhaustive()
    }
}

fn sql_error(operation: Operation, name: &str, error: sqlx::Error) -> LockError {
    let message = match &error {
        sqlx::Error::PoolTimedOut => {
            "no database connection became available in time (can the file be opened?)".to_owned()
        }
        other => format!("the statement failed: {other}"),
    };
    LockError::backend(PROVIDER, operation, name, message, error)
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
        }
    } else if upper.contains("INT") {
        ColumnKind::Integer
    } else {
        ColumnKind::Other
    }
}

impl SqliteStorage {
    /// Reads the table's columns (creating the table first when asked) and prepares the
    /// statements.
    pub(crate) async fn connect(
        pool: SqlitePool,
        table: LockTable,
        time_source: TimeSource,
        create_table: Option<bool>,
        target: String,
    ) -> Result<Self, LockError> {
        let connect_error = |e| sql_error(Operation::Connect, "", e);
        if let Some(fencing) = create_table {
            sqlx::query(AssertSqlSafe(create_table_statement(&table, fencing)))
                .execute(&pool)
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
            .fetch_all(&pool)
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
        let ddl = format!("{};", create_table_statement(&table, false));
        let schema = table.check_columns(DIALECT, PROVIDER, &columns, &ddl)?;
        let name_column = table.column(Column::Name);
        if !(key_columns.len() == 1 && name_column.matches_column(DIALECT, &key_columns[0])) {
            return Err(LockError::backend_message(
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the lock table {t}: column {name_column} must be its (only) primary key \
                     column; ShedLock's table is:\n{ddl}",
                    t = table.table(),
                ),
            ));
        }
        Ok(Self::from_schema(pool, table, schema, time_source, target))
    }

    fn from_schema(
        pool: SqlitePool,
        table: LockTable,
        schema: TableSchema,
        time_source: TimeSource,
        target: String,
    ) -> Self {
        let statements = Statements::new(&table, &schema);
        Self {
            pool,
            table,
            schema,
            time_source,
            statements,
            target,
        }
    }

    /// Storage that trusts `table` to be what [`create_table_statement`] makes, without
    /// opening the database: the first statement opens it.
    pub(crate) fn unchecked(
        pool: SqlitePool,
        table: LockTable,
        time_source: TimeSource,
        fencing: bool,
        target: String,
    ) -> Self {
        let schema = TableSchema {
            max_name_chars: Some(64),
            max_locked_by_chars: Some(255),
            time_precision: Duration::from_millis(1),
            timestamps_with_time_zone: false,
            fencing,
        };
        Self::from_schema(pool, table, schema, time_source, target)
    }

    pub(crate) fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    pub(crate) fn table(&self) -> &LockTable {
        &self.table
    }

    pub(crate) fn schema(&self) -> &TableSchema {
        &self.schema
    }

    fn bind<'q>(
        &self,
        sql: &Arc<str>,
        name: &'q str,
        locked_by: &'q str,
        duration: Duration,
        now: SystemTime,
    ) -> Query<'q, Sqlite, SqliteArguments> {
        let modifier = format!(
            "+{}.{:03} seconds",
            duration.as_secs(),
            duration.subsec_millis()
        );
        let time = match self.time_source {
            TimeSource::Server => "now".to_owned(),
            TimeSource::Client => DateTime::<Utc>::from(now).format(CHRONO_FORMAT).to_string(),
        };
        sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(name)
            .bind(locked_by)
            .bind(modifier)
            .bind(time)
    }

    fn check_locked_by(&self, name: &str, locked_by: &str) -> Result<(), LockError> {
        match self.schema.max_locked_by_chars {
            Some(max) if locked_by.chars().count() > max => Err(LockError::backend_message(
                PROVIDER,
                Operation::Acquire,
                name,
                format!(
                    "the holder identity {locked_by:?} is {} characters, longer than column {} \
                     allows ({max}); choose a shorter holder name (with_holder)",
                    locked_by.chars().count(),
                    self.table.column(Column::LockedBy)
                ),
            )),
            _ => Ok(()),
        }
    }

    async fn take(
        &self,
        sql: &Arc<str>,
        record: &LockRecord<'_>,
    ) -> Result<RecordOutcome, LockError> {
        self.check_locked_by(record.name, record.locked_by)?;
        let row = self
            .bind(
                sql,
                record.name,
                record.locked_by,
                record.lock_at_most_for,
                record.now,
            )
            .fetch_optional(&self.pool)
            .await
            .map_err(|e| sql_error(Operation::Acquire, record.name, e))?;
        match row {
            None => Ok(RecordOutcome::NotAcquired(None)),
            Some(row) => {
                let token: i64 = row
                    .try_get(0)
                    .map_err(|e| sql_error(Operation::Acquire, record.name, e))?;
                Ok(RecordOutcome::Acquired {
                    fencing_token: self.schema.fencing.then_some(token as u64),
                })
            }
        }
    }
}

#[async_trait]
impl LockStorage for SqliteStorage {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        let capabilities = Capabilities::new(self.time_source)
            .with_extend(true)
            .with_fencing(self.schema.fencing)
            .with_time_precision(self.schema.time_precision);
        match self.schema.max_name_chars {
            Some(max) => capabilities.with_max_name_chars(max),
            None => capabilities,
        }
    }

    fn update_creates_missing_record(&self) -> bool {
        true
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.take(&self.statements.insert, record).await
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        self.take(&self.statements.acquire, record).await
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        lock_at_most_for: Duration,
        now: SystemTime,
    ) -> Result<bool, LockError> {
        let done = self
            .bind(
                &self.statements.extend,
                &held.name,
                &held.locked_by,
                lock_at_most_for,
                now,
            )
            .execute(&self.pool)
            .await
            .map_err(|e| sql_error(Operation::Extend, &held.name, e))?;
        Ok(done.rows_affected() > 0)
    }

    async fn unlock(&self, held: &HeldRecord, now: SystemTime) -> Result<bool, LockError> {
        let done = self
            .bind(
                &self.statements.release,
                &held.name,
                &held.locked_by,
                held.lock_at_least_for,
                now,
            )
            .execute(&self.pool)
            .await
            .map_err(|e| sql_error(Operation::Release, &held.name, e))?;
        Ok(done.rows_affected() > 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
