//! The operator's statements: read rows (one, or one page of a listing) with the clock they are
//! judged by, and free one acquisition.
//!
//! Pages are in the name column's own order and compared with its own collation, so the primary
//! key's index serves them. That is safe under a case-insensitive or PAD SPACE collation too: the
//! key holds no two names the collation calls equal, so `name > <last name>` steps through every
//! row exactly once. Such a collation's `LIKE` matches more than the exact prefix; the provider
//! drops those rows.

use std::sync::Arc;
use std::time::SystemTime;

use chrono::{DateTime, NaiveDateTime, Utc};
use shedlock_core::{LockError, Operation, TimeSource, raw::NodeTime};
use shedlock_sql::{
    LIKE_ESCAPE, LockSelection, LockTable, SqlAdmin, StoredAcquisition, StoredLock, TableSchema,
    client_time_parameter, statement_error,
};
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnection, MySqlRow};
use sqlx::query::Query;
use sqlx::{AssertSqlSafe, Row};

use crate::MySqlBackend;
use crate::statements::READ_TIME;
use crate::table::DIALECT;

/// A bound parameter of an admin statement, in the order the `?` appear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Param {
    Name,
    Pattern,
    /// The prefix the pattern stands for: the listing's lower bound in the index.
    Prefix,
    Limit,
    After,
    LockedBy,
    LockedAt,
    FencingToken,
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

    fn sql(mut self, text: &str) -> Self {
        self.sql.push_str(text);
        self
    }

    fn param(mut self, param: Param) -> Self {
        self.sql.push('?');
        self.params.push(param);
        self
    }

    /// The lock statements' clock: the server's UTC time, or the node's as a parameter.
    fn now(self) -> Self {
        match self.time_source {
            TimeSource::Server => self.sql("UTC_TIMESTAMP(3)"),
            TimeSource::Client => self.sql("CAST(").param(Param::Now).sql(" AS DATETIME(6))"),
        }
    }

    /// The time when the row is read: see [`READ_TIME`].
    fn read_time(self) -> Self {
        match self.time_source {
            TimeSource::Server => self.sql(READ_TIME),
            TimeSource::Client => self.sql("CAST(").param(Param::Now).sql(" AS DATETIME(6))"),
        }
    }

    fn finish(self) -> Statement {
        Statement {
            sql: self.sql.into(),
            params: self.params,
        }
    }
}

/// The values an admin statement may bind.
#[derive(Default)]
struct Values<'q> {
    name: &'q str,
    pattern: &'q str,
    prefix: String,
    limit: i64,
    after: &'q str,
    locked_by: &'q str,
    locked_at: Option<NaiveDateTime>,
    fencing_token: Option<i64>,
}

/// The admin statements for one table.
#[derive(Debug)]
pub struct AdminStatements {
    inspect: Statement,
    first_page: Statement,
    next_page: Statement,
    force_unlock: Statement,
    time_source: TimeSource,
}

impl AdminStatements {
    pub(crate) fn prepare(
        table: &LockTable,
        schema: &TableSchema,
        time_source: TimeSource,
    ) -> Self {
        let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
        let fence_value = if schema.fencing {
            format!("CAST({fence} AS SIGNED)")
        } else {
            "NULL".to_owned()
        };
        // The statement's now comes back too, so the state is judged by the clock the
        // comparison used.
        let select = || {
            Writer::new(time_source)
                .sql(&format!(
                    "SELECT {name}, {by}, {at}, {until}, {fence_value}, "
                ))
                .now()
                .sql(&format!(", CAST({until} > "))
                .now()
                .sql(&format!(" AS SIGNED) FROM {t} WHERE "))
        };
        // The pattern is matched on `CONCAT(name)`, not on the column: MariaDB 10.11 turns
        // `name LIKE 'p%'` on a binary utf8mb4 column into an index range that ends before
        // characters outside the Basic Multilingual Plane, so `p🔒` was never listed (seen by
        // the conformance kit). The prefix bounds the range from below instead, and the rows
        // are read in the index's order up to the page's limit.
        let like = format!(" ESCAPE '{LIKE_ESCAPE}' ORDER BY {name} LIMIT ");
        let inspect = select()
            .sql(&format!("{name} = "))
            .param(Param::Name)
            .finish();
        let first_page = select()
            .sql(&format!("{name} >= "))
            .param(Param::Prefix)
            .sql(&format!(" AND CONCAT({name}) LIKE "))
            .param(Param::Pattern)
            .sql(&like)
            .param(Param::Limit)
            .finish();
        let next_page = select()
            .sql(&format!("{name} > "))
            .param(Param::After)
            .sql(&format!(" AND CONCAT({name}) LIKE "))
            .param(Param::Pattern)
            .sql(&like)
            .param(Param::Limit)
            .finish();
        let mut unlock = Writer::new(time_source)
            .sql(&format!("UPDATE {t} SET {until} = LEAST("))
            .now()
            .sql(&format!(", {at}) WHERE {name} = "))
            .param(Param::Name)
            .sql(&format!(" AND {by} = "))
            .param(Param::LockedBy)
            .sql(&format!(" AND {at} = "))
            .param(Param::LockedAt);
        if schema.fencing {
            unlock = unlock
                .sql(&format!(" AND {fence} <=> "))
                .param(Param::FencingToken);
        }
        let force_unlock = unlock
            .sql(&format!(" AND {until} > {at} AND {until} > "))
            .read_time()
            .finish();
        Self {
            inspect,
            first_page,
            next_page,
            force_unlock,
            time_source,
        }
    }

    fn bind<'q>(
        &self,
        statement: &Statement,
        values: Values<'q>,
        now: NodeTime,
        operation: Operation,
    ) -> Result<Query<'q, MySql, MySqlArguments>, LockError> {
        let client_now: Option<NaiveDateTime> =
            client_time_parameter::<MySqlBackend>(self.time_source, now, operation, values.name)?
                .map(|now| DateTime::<Utc>::from(now).naive_utc());
        let mut query = sqlx::query(AssertSqlSafe(statement.sql.clone()));
        for param in &statement.params {
            query = match param {
                Param::Name => query.bind(values.name),
                Param::Pattern => query.bind(values.pattern),
                Param::Prefix => query.bind(values.prefix.clone()),
                Param::Limit => query.bind(values.limit),
                Param::After => query.bind(values.after),
                Param::LockedBy => query.bind(values.locked_by),
                Param::LockedAt => query.bind(values.locked_at),
                Param::FencingToken => query.bind(values.fencing_token),
                // Only client-time statements have this parameter, and `client_time_parameter`
                // gives them the node's clock.
                Param::Now => query.bind(client_now),
            };
        }
        Ok(query)
    }
}

impl SqlAdmin<MySqlBackend> for AdminStatements {
    const LOCKED_AT_KEY: &'static str = "microseconds since the Unix epoch (UTC)";

    type LockedAt = NaiveDateTime;

    /// A `locked_at` key back as the UTC wall time it was read from.
    fn locked_at_from_key(&self, key: &str) -> Option<NaiveDateTime> {
        Some(DateTime::from_timestamp_micros(key.parse().ok()?)?.naive_utc())
    }

    async fn read_locks(
        &self,
        connection: &mut MySqlConnection,
        selection: LockSelection<'_>,
        now: NodeTime,
    ) -> Result<Vec<StoredLock>, LockError> {
        let (operation, name) = (selection.operation(), selection.name());
        let (statement, values) = match selection {
            LockSelection::Named(name) => (
                &self.inspect,
                Values {
                    name,
                    ..Values::default()
                },
            ),
            LockSelection::Page {
                pattern,
                after,
                limit,
            } => (
                if after.is_some() {
                    &self.next_page
                } else {
                    &self.first_page
                },
                Values {
                    pattern,
                    prefix: prefix_of(pattern),
                    limit,
                    after: after.unwrap_or_default(),
                    ..Values::default()
                },
            ),
        };
        let read_error = |e| statement_error::<MySqlBackend>(operation, name, e);
        let rows = self
            .bind(statement, values, now, operation)?
            .fetch_all(&mut *connection)
            .await
            .map_err(read_error)?;
        rows.iter()
            .map(|row| stored_lock(row).map_err(read_error))
            .collect()
    }

    async fn force_unlock(
        &self,
        connection: &mut MySqlConnection,
        name: &str,
        acquisition: &StoredAcquisition<NaiveDateTime>,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let values = Values {
            name,
            locked_by: &acquisition.locked_by,
            locked_at: Some(acquisition.locked_at),
            fencing_token: acquisition.fencing_token,
            ..Values::default()
        };
        let done = self
            .bind(&self.force_unlock, values, now, Operation::ForceUnlock)?
            .execute(&mut *connection)
            .await
            .map_err(|e| statement_error::<MySqlBackend>(Operation::ForceUnlock, name, e))?;
        // Under CLIENT_FOUND_ROWS this counts matched rows: the acquisition check decides.
        Ok(done.rows_affected() > 0)
    }
}

/// A row as read: `TIMESTAMP` and `DATETIME` alike hold UTC wall times here (sessions are UTC
/// for `TIMESTAMP` columns, checked at connect).
fn stored_lock(row: &MySqlRow) -> Result<StoredLock, sqlx::Error> {
    let locked_at: DateTime<Utc> = row.try_get(2)?;
    let lock_until: DateTime<Utc> = row.try_get(3)?;
    let now: DateTime<Utc> = row.try_get(5)?;
    let held: i64 = row.try_get(6)?;
    Ok(StoredLock {
        name: row.try_get(0)?,
        locked_by: row.try_get(1)?,
        locked_at_key: locked_at.timestamp_micros().to_string(),
        locked_at: Some(SystemTime::from(locked_at)),
        lock_until: Some(SystemTime::from(lock_until)),
        fencing_token: row.try_get(4)?,
        now: SystemTime::from(now),
        held: held != 0,
    })
}

/// The prefix a `LIKE` pattern of the listing stands for: the pattern without its final `%`,
/// each character escaped with [`LIKE_ESCAPE`] taken literally.
fn prefix_of(pattern: &str) -> String {
    let mut prefix = String::with_capacity(pattern.len());
    let mut chars = pattern.strip_suffix('%').unwrap_or(pattern).chars();
    while let Some(c) = chars.next() {
        if c == LIKE_ESCAPE {
            prefix.extend(chars.next());
        } else {
            prefix.push(c);
        }
    }
    prefix
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prefix_of_a_listing_pattern_takes_escaped_characters_literally() {
        assert_eq!(prefix_of("a!%b!_c!!%"), "a%b_c!");
        assert_eq!(prefix_of("%"), "");
        assert_eq!(prefix_of("job-🔒%"), "job-🔒");
    }
}
