//! The operator's statements: read rows (one, or one page of a listing) with the clock they are
//! judged by, and free one acquisition.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use shedlock_core::{LockError, Operation, TimeSource, raw::NodeTime};
use shedlock_sql::{
    Dialect, LIKE_ESCAPE, LockSelection, LockTable, SqlAdmin, StoredAcquisition, StoredLock,
    TableSchema, client_time_parameter, statement_error,
};
use sqlx::postgres::{PgArguments, PgConnection, PgRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Postgres, Row};

use crate::PostgresBackend;
use crate::storage::read_time;

const DIALECT: Dialect = Dialect::Postgres;

/// The admin statements for one table. The node's clock, for client time, is always the last
/// parameter.
#[derive(Debug)]
pub struct AdminStatements {
    /// `$1` name.
    inspect: Arc<str>,
    /// `$1` pattern, `$2` limit.
    first_page: Arc<str>,
    /// `$1` pattern, `$2` limit, `$3` the previous page's last name.
    next_page: Arc<str>,
    /// `$1` name, `$2` locked_by, `$3` locked_at, `$4` the fencing token (with the column).
    force_unlock: Arc<str>,
    time_source: TimeSource,
    timestamps_with_time_zone: bool,
    fencing: bool,
}

impl AdminStatements {
    pub(crate) fn prepare(
        table: &LockTable,
        schema: &TableSchema,
        time_source: TimeSource,
    ) -> Self {
        let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
        // The lock statements' clock: UTC wall time for TIMESTAMP, an instant for TIMESTAMPTZ,
        // or the node's, bound after the statement's own parameters.
        let now = |parameters: usize| match (time_source, schema.timestamps_with_time_zone) {
            (TimeSource::Server, false) => "timezone('utc', CURRENT_TIMESTAMP)".to_owned(),
            (TimeSource::Server, true) => "CURRENT_TIMESTAMP".to_owned(),
            (TimeSource::Client, _) => format!("${}", parameters + 1),
        };
        let fence_value = if schema.fencing {
            format!("{fence}::int8")
        } else {
            "NULL::int8".to_owned()
        };
        // `::text` reads a CHAR(n) column without its padding, as the lock statements compare
        // it; the statement's now comes back too, so the state is judged by the clock the
        // comparison used.
        let select = |parameters: usize| {
            let now = now(parameters);
            format!(
                "SELECT {name}::text, {by}::text, {at}, {until}, {fence_value}, {now}, \
                 {until} > {now} FROM {t}"
            )
        };
        let like = format!("{name} LIKE $1 ESCAPE '{LIKE_ESCAPE}'");
        let fence_matches = if schema.fencing {
            format!(" AND {fence} IS NOT DISTINCT FROM $4")
        } else {
            String::new()
        };
        let unlock_now = now(if schema.fencing { 4 } else { 3 });
        let live_at = read_time(time_source, schema.timestamps_with_time_zone)
            .map_or_else(|| unlock_now.clone(), str::to_owned);
        Self {
            inspect: format!("{} WHERE {name} = $1", select(1)).into(),
            first_page: format!("{} WHERE {like} ORDER BY {name} LIMIT $2", select(2)).into(),
            next_page: format!(
                "{} WHERE {name} > $3 AND {like} ORDER BY {name} LIMIT $2",
                select(3)
            )
            .into(),
            force_unlock: format!(
                "UPDATE {t} SET {until} = LEAST({unlock_now}, {at}) WHERE {name} = $1 \
                 AND {by} = $2 AND {at} = $3{fence_matches} AND {until} > {live_at} \
                 AND {until} > {at}"
            )
            .into(),
            time_source,
            timestamps_with_time_zone: schema.timestamps_with_time_zone,
            fencing: schema.fencing,
        }
    }

    /// Binds `time` as the column type holds it: a UTC wall time, or an instant.
    fn bind_time<'q>(
        &self,
        query: Query<'q, Postgres, PgArguments>,
        time: DateTime<Utc>,
    ) -> Query<'q, Postgres, PgArguments> {
        if self.timestamps_with_time_zone {
            query.bind(time)
        } else {
            query.bind(time.naive_utc())
        }
    }

    /// Binds the node's clock last, for client time only.
    fn bind_now<'q>(
        &self,
        query: Query<'q, Postgres, PgArguments>,
        now: NodeTime,
        operation: Operation,
        name: &str,
    ) -> Result<Query<'q, Postgres, PgArguments>, LockError> {
        Ok(
            match client_time_parameter::<PostgresBackend>(self.time_source, now, operation, name)?
            {
                None => query,
                Some(now) => self.bind_time(query, now.into()),
            },
        )
    }

    fn time(&self, row: &PgRow, index: usize) -> Result<DateTime<Utc>, sqlx::Error> {
        if self.timestamps_with_time_zone {
            row.try_get(index)
        } else {
            row.try_get(index)
                .map(|naive: chrono::NaiveDateTime| naive.and_utc())
        }
    }

    /// A stored `timestamp` or `timestamptz` exactly, as microseconds since the Unix epoch
    /// (UTC wall time for `timestamp`), read from its binary form rather than through chrono:
    /// chrono's calendar ends with the year 262142 and PostgreSQL's with 294276, and sqlx
    /// panics decoding a later row, which another client may well have written. `None` for
    /// `infinity` and `-infinity`.
    fn stored_micros(row: &PgRow, index: usize) -> Result<Option<i128>, sqlx::Error> {
        /// 2000-01-01, PostgreSQL's epoch, in microseconds since the Unix epoch.
        const POSTGRES_EPOCH_MICROS: i128 = 946_684_800_000_000;
        let micros: i64 = row.try_get_unchecked(index)?;
        Ok((micros != i64::MAX && micros != i64::MIN)
            .then(|| i128::from(micros) + POSTGRES_EPOCH_MICROS))
    }

    fn stored_lock(&self, row: &PgRow) -> Result<StoredLock, sqlx::Error> {
        let locked_at = Self::stored_micros(row, 2)?;
        let lock_until = Self::stored_micros(row, 3)?;
        Ok(StoredLock {
            name: row.try_get(0)?,
            locked_by: row.try_get(1)?,
            locked_at_key: locked_at
                .map_or_else(|| INFINITE_KEY.to_owned(), |micros| micros.to_string()),
            locked_at: locked_at.and_then(system_time),
            lock_until: lock_until.and_then(system_time),
            fencing_token: row.try_get(4)?,
            now: SystemTime::from(self.time(row, 5)?),
            held: row.try_get(6)?,
        })
    }
}

impl SqlAdmin<PostgresBackend> for AdminStatements {
    const LOCKED_AT_KEY: &'static str = "microseconds since the Unix epoch (UTC)";

    type LockedAt = DateTime<Utc>;

    /// A `locked_at` key back as the instant it was read from.
    fn locked_at_from_key(&self, key: &str) -> Option<DateTime<Utc>> {
        DateTime::from_timestamp_micros(key.parse().ok()?)
    }

    async fn read_locks(
        &self,
        connection: &mut PgConnection,
        selection: LockSelection<'_>,
        now: NodeTime,
    ) -> Result<Vec<StoredLock>, LockError> {
        let (operation, name) = (selection.operation(), selection.name());
        let query = match selection {
            LockSelection::Named(name) => {
                sqlx::query(AssertSqlSafe(self.inspect.clone())).bind(name)
            }
            LockSelection::Page {
                pattern,
                after: None,
                limit,
            } => sqlx::query(AssertSqlSafe(self.first_page.clone()))
                .bind(pattern)
                .bind(limit),
            LockSelection::Page {
                pattern,
                after: Some(after),
                limit,
            } => sqlx::query(AssertSqlSafe(self.next_page.clone()))
                .bind(pattern)
                .bind(limit)
                .bind(after),
        };
        let read_error = |e| statement_error::<PostgresBackend>(operation, name, e);
        let rows = self
            .bind_now(query, now, operation, name)?
            .fetch_all(&mut *connection)
            .await
            .map_err(read_error)?;
        rows.iter()
            .map(|row| self.stored_lock(row).map_err(read_error))
            .collect()
    }

    async fn force_unlock(
        &self,
        connection: &mut PgConnection,
        name: &str,
        acquisition: &StoredAcquisition<DateTime<Utc>>,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let query = sqlx::query(AssertSqlSafe(self.force_unlock.clone()))
            .bind(name)
            .bind(acquisition.locked_by.as_str());
        let query = self.bind_time(query, acquisition.locked_at);
        let query = if self.fencing {
            query.bind(acquisition.fencing_token)
        } else {
            query
        };
        let done = self
            .bind_now(query, now, Operation::ForceUnlock, name)?
            .execute(&mut *connection)
            .await
            .map_err(|e| statement_error::<PostgresBackend>(Operation::ForceUnlock, name, e))?;
        Ok(done.rows_affected() > 0)
    }
}

/// The `locked_at` key of an `infinity` or `-infinity` value, which no acquisition writes; such
/// a row cannot be force-unlocked (no instant binds back to it).
const INFINITE_KEY: &str = "infinity";

/// Microseconds since the Unix epoch as an instant, when the platform's clock type reaches it.
fn system_time(micros: i128) -> Option<SystemTime> {
    let magnitude = u64::try_from(micros.unsigned_abs() / 1_000_000).ok()?;
    let sub = u32::try_from(micros.unsigned_abs() % 1_000_000).ok()? * 1_000;
    let span = Duration::new(magnitude, sub);
    if micros >= 0 {
        SystemTime::UNIX_EPOCH.checked_add(span)
    } else {
        SystemTime::UNIX_EPOCH.checked_sub(span)
    }
}
