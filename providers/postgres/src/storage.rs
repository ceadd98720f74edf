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
use sqlx::postgres::{PgArguments, PgPool};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres, Row};

pub(crate) const PROVIDER: &str = "postgres";
const DIALECT: Dialect = Dialect::Postgres;

/// `CREATE TABLE IF NOT EXISTS` for `table`: ShedLock's PostgreSQL table, plus the fencing
/// column when `fencing` is true.
///
/// With the default names and `fencing = false` this is exactly ShedLock's documented DDL:
///
/// ```sql
/// CREATE TABLE IF NOT EXISTS "shedlock" ("name" VARCHAR(64) NOT NULL, "lock_until" TIMESTAMP NOT NULL,
///     "locked_at" TIMESTAMP NOT NULL, "locked_by" VARCHAR(255) NOT NULL, PRIMARY KEY ("name"))
/// ```
pub fn create_table_statement(table: &LockTable, fencing: bool) -> String {
    let q = |c| table.quoted(DIALECT, c);
    let fencing_column = if fencing {
        format!(", {} BIGINT NOT NULL DEFAULT 0", q(Column::FencingToken))
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ({name} VARCHAR(64) NOT NULL, {until} TIMESTAMP NOT NULL, \
         {at} TIMESTAMP NOT NULL, {by} VARCHAR(255) NOT NULL{fencing_column}, PRIMARY KEY ({name}))",
        t = table.quoted_table(DIALECT),
        name = q(Column::Name),
        until = q(Column::LockUntil),
        at = q(Column::LockedAt),
        by = q(Column::LockedBy),
    )
}

/// The statements for one table, built once at connect from validated, quoted identifiers.
#[derive(Debug)]
struct Statements {
    acquire: Arc<str>,
    insert: Arc<str>,
    release: Arc<str>,
    extend: Arc<str>,
}

impl Statements {
    /// `$1` name, `$2` locked_by, `$3` seconds (f64), `$4` the node's now (client time only).
    fn new(table: &LockTable, schema: &TableSchema, time_source: TimeSource) -> Self {
        let q = |c| table.quoted(DIALECT, c);
        let (t, name, until, at, by, fence) = (
            table.quoted_table(DIALECT),
            q(Column::Name),
            q(Column::LockUntil),
            q(Column::LockedAt),
            q(Column::LockedBy),
            q(Column::FencingToken),
        );
        let now = match (time_source, schema.timestamps_with_time_zone) {
            // ShedLock's own server-time expression: UTC wall time, for TIMESTAMP columns.
            (TimeSource::Server, false) => "timezone('utc', CURRENT_TIMESTAMP)",
            // An instant, for TIMESTAMPTZ columns; no session time zone is involved either way.
            (TimeSource::Server, true) => "CURRENT_TIMESTAMP",
            (TimeSource::Client, _) => "$4",
        };
        let (fence_insert_col, fence_insert_val, fence_update, returning) = if schema.fencing {
            (
                format!(", {fence}"),
                ", 1".to_owned(),
                format!(", {fence} = COALESCE(lock_row.{fence}, 0) + 1"),
                format!("lock_row.{fence}::int8"),
            )
        } else {
            (
                String::new(),
                String::new(),
                String::new(),
                "0::int8".to_owned(),
            )
        };
        let values = format!(
            "INSERT INTO {t} AS lock_row ({name}, {until}, {at}, {by}{fence_insert_col}) \
             VALUES ($1, {now} + make_interval(secs => $3), {now}, $2{fence_insert_val})"
        );
        let acquire = format!(
            "{values} ON CONFLICT ({name}) DO UPDATE SET {until} = EXCLUDED.{until}, \
             {at} = EXCLUDED.{at}, {by} = EXCLUDED.{by}{fence_update} \
             WHERE lock_row.{until} <= {now} RETURNING {returning}"
        );
        let insert = format!("{values} ON CONFLICT ({name}) DO NOTHING RETURNING {returning}");
        let release = format!(
            "UPDATE {t} SET {until} = GREATEST({now}, {at} + make_interval(secs => $3)) \
             WHERE {name} = $1 AND {by} = $2 AND {until} > {now}"
        );
        let extend = format!(
            "UPDATE {t} SET {until} = {now} + make_interval(secs => $3) \
             WHERE {name} = $1 AND {by} = $2 AND {until} > {now}"
        );
        Self {
            acquire: acquire.into(),
            insert: insert.into(),
            release: release.into(),
            extend: extend.into(),
        }
    }
}

/// The lock table on one PostgreSQL database, checked at connect.
pub(crate) struct PostgresStorage {
    pool: PgPool,
    table: LockTable,
    schema: TableSchema,
    time_source: TimeSource,
    statements: Statements,
    /// Where the pool points, without secrets.
    target: String,
}

impl fmt::Debug for PostgresStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStorage")
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
            "no database connection became available in time (is the server reachable?)".to_owned()
        }
        other => format!("the statement failed: {other}"),
    };
    LockError::backend(PROVIDER, operation, name, message, error)
}

impl PostgresStorage {
    /// Reads the table's columns from the catalog (creating the table first when asked) and
    /// prepares the statements.
    pub(crate) async fn connect(
        pool: PgPool,
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
        let regclass = table.quoted_table(DIALECT);
        let rows = sqlx::query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), t.typname::text, \
             a.atttypmod FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
        )
        .bind(&regclass)
        .fetch_all(&pool)
        .await
        .map_err(connect_error)?;
        let mut columns = Vec::with_capacity(rows.len());
        for row in rows {
            let name: String = row.try_get(0).map_err(connect_error)?;
            let declared: String = row.try_get(1).map_err(connect_error)?;
            let type_name: String = row.try_get(2).map_err(connect_error)?;
            let typmod: i32 = row.try_get(3).map_err(connect_error)?;
            columns.push(ColumnInfo {
                name,
                declared_type: declared,
                kind: classify(&type_name, typmod),
            });
        }
        let ddl = format!("{};", create_table_statement(&table, false));
        let schema = table.check_columns(DIALECT, PROVIDER, &columns, &ddl)?;
        let name_is_unique: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a \
             ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
             WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 \
             AND i.indpred IS NULL AND a.attname = $2)",
        )
        .bind(&regclass)
        .bind(table.column(Column::Name).catalog_name(DIALECT))
        .fetch_one(&pool)
        .await
        .map_err(connect_error)?;
        if !name_is_unique {
            return Err(LockError::backend_message(
                PROVIDER,
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
        let statements = Statements::new(&table, &schema, time_source);
        Ok(Self {
            pool,
            table,
            schema,
            time_source,
            statements,
            target,
        })
    }

    /// Storage that trusts `table` to be ShedLock's table as [`create_table_statement`] makes
    /// it (`VARCHAR(64)` names, `TIMESTAMP` columns, the fencing column when `fencing`), without
    /// connecting: the first statement connects.
    pub(crate) fn unchecked(
        pool: PgPool,
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
        let statements = Statements::new(&table, &schema, time_source);
        Self {
            pool,
            table,
            schema,
            time_source,
            statements,
            target,
        }
    }

    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
    }

    pub(crate) fn table(&self) -> &LockTable {
        &self.table
    }

    pub(crate) fn schema(&self) -> &TableSchema {
        &self.schema
    }

    /// Binds `$1` name, `$2` locked_by, `$3` seconds and, for client time, `$4` now.
    fn bind<'q>(
        &self,
        sql: &Arc<str>,
        name: &'q str,
        locked_by: &'q str,
        duration: Duration,
        now: SystemTime,
    ) -> Query<'q, Postgres, PgArguments> {
        let query = sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(name)
            .bind(locked_by)
            .bind(duration.as_secs_f64());
        match self.time_source {
            TimeSource::Server => query,
            TimeSource::Client => {
                let now = DateTime::<Utc>::from(now);
                if self.schema.timestamps_with_time_zone {
                    query.bind(now)
                } else {
                    query.bind(now.naive_utc())
                }
            }
        }
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

fn classify(type_name: &str, typmod: i32) -> ColumnKind {
    match type_name {
        // VARCHAR(n) and CHAR(n) store n + 4 in the type modifier; -1 means no limit.
        "varchar" | "bpchar" => ColumnKind::Text {
            max_chars: (typmod >= 4).then(|| (typmod - 4) as usize),
        },
        "text" => ColumnKind::Text { max_chars: None },
        "timestamp" | "timestamptz" => ColumnKind::Timestamp {
            // The modifier is the number of fraction digits; -1 means the default, 6.
            fraction_digits: if typmod >= 0 { typmod as u32 } else { 6 },
            with_time_zone: type_name == "timestamptz",
        },
        "int8" | "int4" | "int2" => ColumnKind::Integer,
        _ => ColumnKind::Other,
    }
}

#[async_trait]
impl LockStorage for PostgresStorage {
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

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        self.capabilities().check_name_length(PROVIDER, name)?;
        if name.contains('\0') {
            return Err(LockError::invalid_name(
                PROVIDER,
                name,
                "PostgreSQL text cannot contain the NUL character",
            ));
        }
        Ok(())
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
