//! [`MySqlBackend`]: MySQL's and MariaDB's side of the shared SQL provider, which runs the
//! prepared statements (one per acquire, release and extend, all on ShedLock's table) and reads
//! their outcome.

use std::time::Duration;

use chrono::{DateTime, NaiveDateTime, Utc};
use shedlock_core::{
    ErrorKind, LockError, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, NodeTime},
};
use shedlock_sql::{
    AcquireAnswer, AcquireStatement, HeldStatement, LockStatements, LockTable, SqlBackend,
    TableSchema, TimestampLimit, client_time_parameter, statement_error,
};
use sqlx::AssertSqlSafe;
use sqlx::mysql::{MySql, MySqlArguments, MySqlConnectOptions, MySqlConnection, MySqlQueryResult};
use sqlx::query::Query;

use crate::admin::AdminStatements;
use crate::catalog::{self, FoundTable, NameColumn};
use crate::statements::{Param, Statement, prepare_statements};
#[cfg(doc)]
use crate::table::create_table_statement;
use crate::table::{Flavor, TIMESTAMP_LIMIT};

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
        // A statement waiting on a row lock gives up server-side too, not only here. Sent as
        // plain text: one round trip, where a prepared statement would take two (prepare,
        // execute) for a statement each session sends once.
        let lock_wait = operation_timeout.as_secs().max(1);
        sqlx::raw_sql(AssertSqlSafe(format!(
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
        let FoundTable {
            schema,
            name_column,
            flavor,
        } = catalog::find_table(connection, table, create_table).await?;
        let backend = Self {
            statements: prepare_statements(table, &schema, time_source, flavor),
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
            statements: prepare_statements(table, schema, time_source, Flavor::MySql),
            admin: AdminStatements::prepare(table, schema, time_source),
            time_source,
            name_column: NameColumn::default(),
            flavor: Flavor::MySql,
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        self.name_column.check_name(name)
    }

    async fn acquire(
        &self,
        connection: &mut MySqlConnection,
        statement: AcquireStatement,
        record: &LockRecord<'_>,
    ) -> Result<AcquireAnswer, LockError> {
        let sql = self.statements.for_acquire(statement);
        let done = self
            .bind(
                sql,
                Operation::Acquire,
                record.name,
                record.locked_by,
                record.lock_at_most_for,
                record.now,
            )?
            .execute(&mut *connection)
            .await;
        let done: MySqlQueryResult = match done {
            Err(error)
                if statement == AcquireStatement::TakeOver && held_by_a_transaction(&error) =>
            {
                // Another transaction is changing the row: someone is taking it over or
                // releasing it right now. Nobody to name, since that change is not committed.
                return Ok(AcquireAnswer::NotAcquired(None));
            }
            done => {
                done.map_err(|e| statement_error::<Self>(Operation::Acquire, record.name, e))?
            }
        };
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

    type Admin = AdminStatements;

    fn admin(&self) -> &AdminStatements {
        &self.admin
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

/// Whether the take-over gave up on a row whose lock another transaction holds
/// (`ER_LOCK_WAIT_TIMEOUT`): at once on MariaDB, where it waits 0 s, and after the session's
/// lock wait on MySQL.
fn held_by_a_transaction(error: &sqlx::Error) -> bool {
    const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
    error
        .as_database_error()
        .and_then(|refusal| refusal.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
        .is_some_and(|refusal| refusal.number() == ER_LOCK_WAIT_TIMEOUT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_test_support::sql::binding::{
        a_node_time_that_contradicts_the_time_source_is_refused, millisecond_schema,
    };

    #[test]
    fn a_node_time_that_contradicts_the_time_source_is_refused_before_binding() {
        let schema = millisecond_schema("timestamp(3)", TIMESTAMP_LIMIT);
        a_node_time_that_contradicts_the_time_source_is_refused(|time_source, now| {
            let backend = MySqlBackend::unchecked(&LockTable::default(), &schema, time_source);
            let statement = &backend.statements.extend;
            let second = Duration::from_secs(1);
            let bound = backend.bind(statement, Operation::Extend, "job", "node#1", second, now);
            bound.map(drop)
        });
    }
}
