//! The lock statements' text, written once per table and time source: one per acquire (the
//! insert and the take-over), release and extend, all on ShedLock's table, each with the order
//! of its parameters.

use std::sync::Arc;

use shedlock_core::TimeSource;
use shedlock_sql::{LockStatements, LockTable, TableSchema};

use crate::table::{DIALECT, Flavor};

/// A bound parameter of a statement, in the order the `?` appear.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Param {
    Name,
    LockedBy,
    /// The statement's duration in microseconds.
    Micros,
    /// The node's clock (client time only).
    Now,
}

/// SQL text and the order of its parameters.
#[derive(Debug)]
pub(crate) struct Statement {
    pub(crate) sql: Arc<str>,
    pub(crate) params: Vec<Param>,
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

/// The lock statements for `table` as `schema` describes it, comparing with `time_source`'s
/// clock.
pub(crate) fn prepare_statements(
    table: &LockTable,
    schema: &TableSchema,
    time_source: TimeSource,
    flavor: Flavor,
) -> LockStatements<Statement> {
    let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
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

    // Take-over. On MariaDB it gives up at once when another transaction holds the row's lock,
    // with a lock wait error the storage answers as "not acquired", instead of queueing for the
    // row behind every other contender; MySQL has no per-statement lock wait (the crate docs
    // say what that means there). Every assignment is conditioned on the old lock_until, which
    // is assigned last, so the conditions read the old row whether the server evaluates
    // assignments left to right (MySQL, MariaDB) or simultaneously (MariaDB's
    // SIMULTANEOUS_ASSIGNMENT).
    // The taken branch sets the insert id to the new token (or 1), the other to 0. The WHERE
    // matches the row whether held or not, so the matched-row count tells a held row from a
    // missing one; a held row is assigned its own values, which InnoDB does not write.
    if flavor == Flavor::MariaDb {
        w.sql("SET STATEMENT innodb_lock_wait_timeout = 0 FOR ");
    }
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::table::TIMESTAMP_LIMIT;

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
        for flavor in [Flavor::MySql, Flavor::MariaDb] {
            let statements =
                prepare_statements(&LockTable::default(), &schema, TimeSource::Server, flavor);
            for statement in [&statements.insert, &statements.take_over] {
                let sql = &*statement.sql;
                assert!(!sql.contains("VALUES("), "no VALUES() function: {sql}");
                assert!(!sql.contains(" AS "), "no row alias: {sql}");
                assert_eq!(statement.params.len(), 3, "{sql}");
            }
            let insert = &*statements.insert.sql;
            assert_eq!(insert.matches("ON DUPLICATE KEY UPDATE").count(), 1);
            let take_over = &*statements.take_over.sql;
            let update = match flavor {
                Flavor::MySql => take_over,
                Flavor::MariaDb => take_over
                    .strip_prefix("SET STATEMENT innodb_lock_wait_timeout = 0 FOR ")
                    .expect("on MariaDB the take-over does not wait for a row lock"),
            };
            assert!(update.starts_with("UPDATE "), "{take_over}");
            assert!(
                take_over.ends_with("`lock_until`) WHERE `name` = ?"),
                "lock_until is assigned last, and the row is matched by name only: {take_over}"
            );
        }
    }
}
