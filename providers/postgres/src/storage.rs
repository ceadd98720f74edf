//! The statements: one per acquire, release and extend, all on ShedLock's table.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

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
use sqlx::postgres::{PgArguments, PgConnectOptions, PgConnection};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres, Row};

use crate::admin::AdminStatements;

const DIALECT: Dialect = Dialect::Postgres;

/// How far a `timestamp` or `timestamptz` column reaches with this provider.
///
/// PostgreSQL's own types end with the year 294276, but the provider reaches less far:
/// - the take-over statement reads `lock_until` as microseconds since the epoch in an `int8`,
///   which overflows after 294247-01-10 04:00:54.775807, so every other node's acquire would
///   fail while such a lock is held;
/// - `make_interval` takes the duration in float seconds, and rounds one this long by up to
///   about a millisecond;
/// - under server time the end is computed from the database's clock, but judged here from
///   the node's, so the limit must sit far below the overflow for a node whose clock is wrong
///   by any amount still to stay clear of it.
///
/// So the limit is the last whole second of chrono's calendar (262142), 32,000 years short of
/// the overflow. Rows that other programs wrote past it (up to `infinity`) are still read
/// exactly: the admin decodes timestamps from their binary form, not through chrono.
const TIMESTAMP_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((262_142, 12, 31), (23, 59, 59), 0),
    advice: " (PostgreSQL's timestamps reach the year 294276, but this provider keeps its locks \
             32,000 years short of where its take-over statement's arithmetic overflows)",
};

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
    let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
    let fencing_column = if fencing {
        format!(", {fence} BIGINT NOT NULL DEFAULT 0")
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ({name} VARCHAR(64) NOT NULL, {until} TIMESTAMP NOT NULL, \
         {at} TIMESTAMP NOT NULL, {by} VARCHAR(255) NOT NULL{fencing_column}, PRIMARY KEY ({name}))",
    )
}

/// The server's clock when a row is read, to judge whether an acquisition still holds its
/// lock (`None` with client time: the node's clock, bound as a parameter).
///
/// Release, extend and force-unlock compare `lock_until` with it rather than with the
/// statement's `now`, which is fixed when the statement starts: a statement that waited on the
/// row lock behind another (two force-unlocks of one acquisition, an extend behind one) would
/// otherwise see the `lock_until` that other write just set, its own later `now`, as still
/// ahead, and act on an acquisition that was already freed.
pub(crate) fn read_time(time_source: TimeSource, with_time_zone: bool) -> Option<&'static str> {
    match (time_source, with_time_zone) {
        (TimeSource::Server, false) => Some("timezone('utc', clock_timestamp())"),
        (TimeSource::Server, true) => Some("clock_timestamp()"),
        (TimeSource::Client, _) => None,
    }
}

/// `$1` name, `$2` locked_by, `$3` seconds (f64), `$4` the node's now (client time only).
fn prepare_statements(
    table: &LockTable,
    schema: &TableSchema,
    time_source: TimeSource,
) -> LockStatements<Arc<str>> {
    let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
    let now = match (time_source, schema.timestamps_with_time_zone) {
        // ShedLock's own server-time expression: UTC wall time, for TIMESTAMP columns.
        (TimeSource::Server, false) => "timezone('utc', CURRENT_TIMESTAMP)",
        // An instant, for TIMESTAMPTZ columns; no session time zone is involved either way.
        (TimeSource::Server, true) => "CURRENT_TIMESTAMP",
        (TimeSource::Client, _) => "$4",
    };
    let live_at = read_time(time_source, schema.timestamps_with_time_zone).unwrap_or("$4");
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
    let insert = format!("{values} ON CONFLICT ({name}) DO NOTHING RETURNING {returning}");
    // No attempt may wait on another transaction's row lock:
    // - a held row, the common answer under contention, is neither locked nor written: the row
    //   is read once (`current`, one index probe, as Java ShedLock's plain `UPDATE ... WHERE
    //   lock_until <= now` makes), and when it is held the rest of the statement has no row to
    //   look at. The same read tells a held row (its holder and expiry come back, as
    //   microseconds since the epoch, which reads a UTC TIMESTAMP and a TIMESTAMPTZ alike) from
    //   a missing one (no row at all);
    // - a free row is locked with `FOR UPDATE SKIP LOCKED` and updated, both through the `ctid`
    //   that read found, with no second index probe. A row another transaction is changing (a
    //   node taking it over, an operator) is skipped: "not acquired" at once, where a plain
    //   `UPDATE` would wait for that commit and then find the row held. Whoever holds the row
    //   lock is changing the lock, and a node that misses a lock skips the run;
    // - the lock is taken on the newest version of the row and `lock_until` checked again on
    //   it, so a row taken over since `current` read it is not taken twice.
    let take_over = format!(
        "WITH current AS MATERIALIZED (SELECT ctid AS row_id, {until} <= {now} AS free, \
         {by} AS holder, {until} AS held_until FROM {t} WHERE {name} = $1), \
         taken AS (UPDATE {t} AS lock_row SET {until} = {now} + make_interval(secs => $3), \
         {at} = {now}, {by} = $2{fence_update} \
         WHERE lock_row.ctid = (SELECT ctid FROM {t} \
         WHERE ctid = (SELECT row_id FROM current WHERE free) AND {until} <= {now} \
         FOR UPDATE SKIP LOCKED) AND lock_row.{until} <= {now} RETURNING {returning}) \
         SELECT (SELECT * FROM taken), free, holder, \
         CASE WHEN NOT free THEN (EXTRACT(EPOCH FROM held_until) * 1000000)::int8 END \
         FROM current"
    );
    let release = format!(
        "UPDATE {t} SET {until} = GREATEST({now}, {at} + make_interval(secs => $3)) \
         WHERE {name} = $1 AND {by} = $2 AND {until} > {live_at} AND {until} > {at}"
    );
    let extend = format!(
        "UPDATE {t} SET {until} = {now} + make_interval(secs => $3) \
         WHERE {name} = $1 AND {by} = $2 AND {until} > {live_at} AND {until} > {at}"
    );
    LockStatements {
        insert: insert.into(),
        take_over: take_over.into(),
        release: release.into(),
        extend: extend.into(),
    }
}

/// PostgreSQL's side of [`PostgresLockProvider`](crate::PostgresLockProvider): its session
/// settings, its catalog checks, and the statements prepared for one table.
#[derive(Debug)]
pub struct PostgresBackend {
    statements: LockStatements<Arc<str>>,
    admin: AdminStatements,
    time_source: TimeSource,
    /// `TIMESTAMPTZ` columns: client times are bound as instants, not UTC wall times.
    timestamps_with_time_zone: bool,
}

impl PostgresBackend {
    /// Binds `$1` name, `$2` locked_by, `$3` seconds and, for client time, `$4` now.
    fn bind<'q>(
        &self,
        sql: &Arc<str>,
        operation: Operation,
        name: &'q str,
        locked_by: &'q str,
        duration: Duration,
        now: NodeTime,
    ) -> Result<Query<'q, Postgres, PgArguments>, LockError> {
        let client_now = client_time_parameter::<Self>(self.time_source, now, operation, name)?;
        let query = sqlx::query(AssertSqlSafe(sql.clone()))
            .bind(name)
            .bind(locked_by)
            .bind(duration.as_secs_f64());
        Ok(match client_now {
            None => query,
            Some(now) => {
                let now = DateTime::<Utc>::from(now);
                if self.timestamps_with_time_zone {
                    query.bind(now)
                } else {
                    query.bind(now.naive_utc())
                }
            }
        })
    }
}

/// The first key of the advisory lock creators of the table take turns on ("SHLK"); the second
/// is a hash of the table's name, so creators of different tables do not wait for each other.
const CREATE_TABLE_LOCK_CLASS: i32 = 0x5348_4C4B;

/// Runs [`create_table_statement`] so that any number of nodes may run it at the same instant.
///
/// PostgreSQL's `CREATE TABLE IF NOT EXISTS` looks for the table, then writes the catalog: two
/// sessions that both look before either commits both go on, and the later one fails on a
/// catalog index (`23505` on `pg_type_typname_nsp_index`, or `42P07`). A fleet deployed onto a
/// new database would see some replicas fail to start. So creators of this library take turns
/// on a transaction-scoped advisory lock named after the table (held until the `COMMIT`, so the
/// next one finds the table), and a creator that is not ours racing anyway counts as having
/// created the table: the catalog check that follows decides whether the table is right.
async fn create_table_if_missing(
    connection: &mut PgConnection,
    table: &LockTable,
    fencing: bool,
) -> Result<(), sqlx::Error> {
    let mut transaction = sqlx::Connection::begin(&mut *connection).await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1, hashtext($2))")
        .bind(CREATE_TABLE_LOCK_CLASS)
        .bind(table.quoted_table(DIALECT))
        .execute(&mut *transaction)
        .await?;
    let created = sqlx::query(AssertSqlSafe(create_table_statement(table, fencing)))
        .execute(&mut *transaction)
        .await;
    match created {
        Ok(_) => transaction.commit().await,
        Err(sqlx::Error::Database(error))
            if matches!(error.code().as_deref(), Some("23505" | "42P07")) =>
        {
            transaction.rollback().await
        }
        Err(error) => Err(error),
    }
}

impl SqlBackend for PostgresBackend {
    type Database = Postgres;
    const PROVIDER: &'static str = "postgres";
    const DATABASE_NAME: &'static str = "PostgreSQL";
    const UNREACHABLE_HINT: &'static str = "is the server reachable?";
    const URL_SCHEMES: &'static [&'static str] = &["postgres", "postgresql"];
    /// [`create_table_statement`]'s `TIMESTAMP`, as `format_type` names it.
    const CREATED_LOCK_UNTIL_TYPE: &'static str = "timestamp without time zone";
    const CREATED_LOCK_UNTIL_LIMIT: TimestampLimit = TIMESTAMP_LIMIT;

    fn session_options(options: PgConnectOptions, operation_timeout: Duration) -> PgConnectOptions {
        let statement_timeout = operation_timeout.as_millis().max(1).to_string();
        options
            .options([("statement_timeout", statement_timeout.as_str())])
            .application_name("shedlock-rs")
    }

    /// Reads the table's columns from the catalog (creating the table first when asked) and
    /// prepares the statements.
    async fn connect(
        connection: &mut PgConnection,
        table: &LockTable,
        time_source: TimeSource,
        create_table: Option<bool>,
    ) -> Result<(Self, TableSchema), LockError> {
        let connect_error = |e| statement_error::<Self>(Operation::Connect, "", e);
        if let Some(fencing) = create_table {
            create_table_if_missing(connection, table, fencing)
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
        .fetch_all(&mut *connection)
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
        let ddl = format!("{};", create_table_statement(table, false));
        let schema = table.check_columns(DIALECT, Self::PROVIDER, &columns, &ddl)?;
        let name_is_unique: bool = sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM pg_index i JOIN pg_attribute a \
             ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0] \
             WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indnkeyatts = 1 \
             AND i.indpred IS NULL AND a.attname = $2)",
        )
        .bind(&regclass)
        .bind(table.column(Column::Name).catalog_name(DIALECT))
        .fetch_one(&mut *connection)
        .await
        .map_err(connect_error)?;
        if !name_is_unique {
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
        Ok((Self::unchecked(table, &schema, time_source), schema))
    }

    fn unchecked(table: &LockTable, schema: &TableSchema, time_source: TimeSource) -> Self {
        Self {
            statements: prepare_statements(table, schema, time_source),
            admin: AdminStatements::prepare(table, schema, time_source),
            time_source,
            timestamps_with_time_zone: schema.timestamps_with_time_zone,
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        match self.text_rule(name) {
            Some(rule) => Err(LockError::invalid_name(Self::PROVIDER, name, rule)),
            None => Ok(()),
        }
    }

    fn text_rule(&self, text: &str) -> Option<&'static str> {
        text.contains('\0')
            .then_some("PostgreSQL text cannot contain the NUL character")
    }

    async fn acquire(
        &self,
        connection: &mut PgConnection,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> Result<AcquireAnswer, LockError> {
        let sql = self.statements.for_acquire(statement);
        let acquire_error = |e| statement_error::<Self>(Operation::Acquire, record.name, e);
        let row = self
            .bind(
                sql,
                Operation::Acquire,
                record.name,
                record.locked_by,
                record.lock_at_most_for,
                record.now,
            )?
            .fetch_optional(&mut *connection)
            .await
            .map_err(acquire_error)?;
        // The insert returns the new fencing token (0 without the column), or no row. The
        // take-over returns no row for a missing row, else one: the token or NULL, whether the
        // row was free, and, when it was held, by whom and until when. The insert's refusal is
        // followed by a take-over, which says who holds it.
        let Some(row) = row else {
            return Ok(match statement {
                AcquireStatement::Insert => AcquireAnswer::NotAcquired(None),
                AcquireStatement::TakeOver => AcquireAnswer::Missing,
            });
        };
        let token: Option<i64> = row.try_get(0).map_err(acquire_error)?;
        Ok(match (token, statement) {
            (Some(token), _) => AcquireAnswer::Acquired(token as u64),
            (None, AcquireStatement::Insert) => AcquireAnswer::NotAcquired(None),
            (None, AcquireStatement::TakeOver) => {
                let free: Option<bool> = row.try_get(1).map_err(acquire_error)?;
                if free == Some(true) {
                    // Free, but another node is taking it over at this instant: nobody to
                    // name yet.
                    AcquireAnswer::NotAcquired(None)
                } else {
                    let locked_by: Option<String> = row.try_get(2).map_err(acquire_error)?;
                    let until_micros: Option<i64> = row.try_get(3).map_err(acquire_error)?;
                    AcquireAnswer::NotAcquired(locked_by.map(|locked_by| {
                        LockHolder::from_stored(
                            Some(&locked_by),
                            until_micros.and_then(instant_from_micros),
                        )
                    }))
                }
            }
        })
    }

    type Admin = AdminStatements;

    fn admin(&self) -> &AdminStatements {
        &self.admin
    }

    async fn change_held(
        &self,
        connection: &mut PgConnection,
        statement: HeldStatement,
        held: &HeldRecord,
        duration: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let sql = self.statements.for_held(statement);
        let operation = statement.operation();
        let done = self
            .bind(sql, operation, &held.name, &held.locked_by, duration, now)?
            .execute(&mut *connection)
            .await
            .map_err(|e| statement_error::<Self>(operation, &held.name, e))?;
        Ok(done.rows_affected() > 0)
    }
}

/// The instant `micros` microseconds after the Unix epoch; `None` for one before it, which no
/// lock taken by this provider has.
fn instant_from_micros(micros: i64) -> Option<SystemTime> {
    let micros = u64::try_from(micros).ok()?;
    Some(SystemTime::UNIX_EPOCH + Duration::from_micros(micros))
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
            limit: TIMESTAMP_LIMIT,
        },
        "int8" | "int4" | "int2" => ColumnKind::Integer,
        _ => ColumnKind::Other,
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
        let schema = millisecond_schema("timestamp without time zone", TIMESTAMP_LIMIT);
        a_node_time_that_contradicts_the_time_source_is_refused(|time_source, now| {
            let backend = PostgresBackend::unchecked(&LockTable::default(), &schema, time_source);
            let statement = &backend.statements.extend;
            let second = Duration::from_secs(1);
            let bound = backend.bind(statement, Operation::Extend, "job", "node#1", second, now);
            bound.map(drop)
        });
    }
}
