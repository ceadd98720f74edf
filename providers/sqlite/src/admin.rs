//! The operator's statements: read rows (one, or one page of a listing) with the clock they are
//! judged by, and free one acquisition.
//!
//! Times are the stored text, compared as text exactly as the lock statements compare them:
//! `locked_at` goes into an acquisition id as that text and is bound back as that text.
//! SQLite's `LIKE` ignores ASCII case, so a listing's `LIKE` matches more than the exact prefix;
//! the provider drops those rows.

use std::sync::Arc;
use std::time::SystemTime;

use chrono::NaiveDateTime;
use shedlock_core::{LockError, Operation, TimeSource, raw::NodeTime};
use shedlock_sql::{
    Dialect, LIKE_ESCAPE, LockSelection, LockTable, SqlAdmin, StoredAcquisition, StoredLock,
    TableSchema, statement_error,
};
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnection, SqliteRow};
use sqlx::{AssertSqlSafe, Row};

use crate::SqliteBackend;
use crate::storage::{FORMAT, WriteTurns, time_parameter};

const DIALECT: Dialect = Dialect::Sqlite;

/// The admin statements for one table. The time (`'now'`, or the node's UTC time for client
/// time) is bound as the parameter after the selection's own.
#[derive(Debug)]
pub struct AdminStatements {
    /// `?1` name, `?2` time.
    inspect: Arc<str>,
    /// `?1` pattern, `?2` limit, `?3` time.
    first_page: Arc<str>,
    /// `?1` pattern, `?2` limit, `?3` time, `?4` the previous page's last name.
    next_page: Arc<str>,
    /// `?1` name, `?2` locked_by, `?3` locked_at, `?4` time, `?5` the fencing token (with the
    /// column).
    force_unlock: Arc<str>,
    time_source: TimeSource,
    fencing: bool,
    write_turns: Arc<WriteTurns>,
}

impl AdminStatements {
    pub(crate) fn prepare(
        table: &LockTable,
        schema: &TableSchema,
        time_source: TimeSource,
        write_turns: Arc<WriteTurns>,
    ) -> Self {
        let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
        let fence_value = if schema.fencing {
            fence.clone()
        } else {
            "NULL".to_owned()
        };
        // The statement's now comes back too, so the state is judged by the clock the
        // comparison used; SQLite keeps 'now' the same within one row.
        let select = |time: usize| {
            let now = format!("strftime({FORMAT}, ?{time})");
            format!(
                "SELECT {name}, {by}, CAST({at} AS TEXT), CAST({until} AS TEXT), {fence_value}, \
                 {now}, {until} > {now} FROM {t}"
            )
        };
        let like = format!("{name} LIKE ?1 ESCAPE '{LIKE_ESCAPE}'");
        let fence_matches = if schema.fencing {
            format!(" AND {fence} IS ?5")
        } else {
            String::new()
        };
        let now = format!("strftime({FORMAT}, ?4)");
        Self {
            inspect: format!("{} WHERE {name} = ?1", select(2)).into(),
            first_page: format!("{} WHERE {like} ORDER BY {name} LIMIT ?2", select(3)).into(),
            next_page: format!(
                "{} WHERE {name} > ?4 AND {like} ORDER BY {name} LIMIT ?2",
                select(3)
            )
            .into(),
            force_unlock: format!(
                "UPDATE {t} SET {until} = min({now}, {at}) WHERE {name} = ?1 AND {by} = ?2 \
                 AND {at} = ?3{fence_matches} AND {until} > {now} AND {until} > {at}"
            )
            .into(),
            time_source,
            fencing: schema.fencing,
            write_turns,
        }
    }
}

impl SqlAdmin<SqliteBackend> for AdminStatements {
    const LOCKED_AT_KEY: &'static str = "the stored locked_at text (YYYY-MM-DD HH:MM:SS.SSS)";

    type LockedAt = String;

    /// Any text: it is compared with the stored text as it is.
    fn locked_at_from_key(&self, key: &str) -> Option<String> {
        Some(key.to_owned())
    }

    async fn read_locks(
        &self,
        connection: &mut SqliteConnection,
        selection: LockSelection<'_>,
        now: NodeTime,
    ) -> Result<Vec<StoredLock>, LockError> {
        let (operation, name) = (selection.operation(), selection.name());
        let time = time_parameter(self.time_source, now, operation, name)?;
        let query: Query<'_, Sqlite, SqliteArguments> = match selection {
            LockSelection::Named(name) => sqlx::query(AssertSqlSafe(self.inspect.clone()))
                .bind(name)
                .bind(time),
            LockSelection::Page {
                pattern,
                after: None,
                limit,
            } => sqlx::query(AssertSqlSafe(self.first_page.clone()))
                .bind(pattern)
                .bind(limit)
                .bind(time),
            LockSelection::Page {
                pattern,
                after: Some(after),
                limit,
            } => sqlx::query(AssertSqlSafe(self.next_page.clone()))
                .bind(pattern)
                .bind(limit)
                .bind(time)
                .bind(after),
        };
        let read_error = |e| statement_error::<SqliteBackend>(operation, name, e);
        let rows = query
            .fetch_all(&mut *connection)
            .await
            .map_err(read_error)?;
        rows.iter()
            .map(|row| stored_lock(row).map_err(read_error))
            .collect()
    }

    async fn force_unlock(
        &self,
        connection: &mut SqliteConnection,
        name: &str,
        acquisition: &StoredAcquisition<String>,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let query = sqlx::query(AssertSqlSafe(self.force_unlock.clone()))
            .bind(name)
            .bind(acquisition.locked_by.as_str())
            .bind(acquisition.locked_at.as_str())
            .bind(time_parameter(
                self.time_source,
                now,
                Operation::ForceUnlock,
                name,
            )?);
        let query = if self.fencing {
            query.bind(acquisition.fencing_token)
        } else {
            query
        };
        let done = self
            .write_turns
            .run(query.execute(&mut *connection))
            .await
            .map_err(|e| statement_error::<SqliteBackend>(Operation::ForceUnlock, name, e))?;
        Ok(done.rows_affected() > 0)
    }
}

/// A row as read. A time that is not in the provider's text format (written by another
/// program) reads as no instant; its state is then the statement's own text comparison, which
/// is what the lock statements act on.
fn stored_lock(row: &SqliteRow) -> Result<StoredLock, sqlx::Error> {
    let locked_at_key: String = row.try_get(2)?;
    let lock_until: String = row.try_get(3)?;
    let now: String = row.try_get(5)?;
    let now = instant(&now).ok_or_else(|| {
        sqlx::Error::Decode(format!("SQLite's clock read as {now:?}, not a date-time").into())
    })?;
    Ok(StoredLock {
        name: row.try_get(0)?,
        locked_by: row.try_get(1)?,
        locked_at: instant(&locked_at_key),
        lock_until: instant(&lock_until),
        locked_at_key,
        fencing_token: row.try_get(4)?,
        now,
        held: row.try_get(6)?,
    })
}

/// The instant SQLite date-time text in UTC names.
pub(crate) fn instant(text: &str) -> Option<SystemTime> {
    let time = NaiveDateTime::parse_from_str(text, "%Y-%m-%d %H:%M:%S%.f").ok()?;
    Some(SystemTime::from(time.and_utc()))
}
