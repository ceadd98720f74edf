//! ShedLock's table on MySQL and MariaDB: the statement that creates it, and how far its
//! date-time column types reach on each server.

use shedlock_sql::{Dialect, LockTable, TimestampLimit, UtcInstant};

/// How table and column names are quoted and folded on MySQL and MariaDB.
pub(crate) const DIALECT: Dialect = Dialect::MySql;

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
pub(crate) const TIMESTAMP_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_999_000),
    advice: TIMESTAMP_ADVICE,
};

/// What a `TIMESTAMP` column reaches on MariaDB 11.5 and later on 64-bit servers (MDEV-32188):
/// the largest unsigned 32-bit count of seconds.
pub(crate) const WIDE_TIMESTAMP_LIMIT: TimestampLimit = TimestampLimit {
    latest: UtcInstant::from_civil((2106, 2, 7), (6, 28, 15), 999_999_000),
    advice: TIMESTAMP_ADVICE,
};

const TIMESTAMP_ADVICE: &str = ", or make the column DATETIME(3), which reaches the year 9999";

/// What a `DATETIME` column reaches: the last instant of the year 9999.
pub(crate) const DATETIME_LIMIT: TimestampLimit = TimestampLimit {
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
    let [t, name, until, at, by, fence] = table.quoted_names(DIALECT);
    let fencing_column = if fencing {
        format!(", {fence} BIGINT NOT NULL DEFAULT 0")
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS {t} ({name} VARCHAR(64) CHARACTER SET utf8mb4 COLLATE {coll} \
         NOT NULL, {until} TIMESTAMP(3) NOT NULL, {at} TIMESTAMP(3) NOT NULL DEFAULT \
         CURRENT_TIMESTAMP(3), {by} VARCHAR(255) NOT NULL{fencing_column}, PRIMARY KEY ({name}))",
        coll = flavor.name_collation(),
    )
}
