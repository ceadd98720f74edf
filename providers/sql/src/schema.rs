//! The table as the catalog describes it, checked once at connect so a wrong table fails with
//! a clear message instead of at the first lock.

use std::time::Duration;

use shedlock_core::{ErrorKind, LockError, Operation};

use crate::identifier::Dialect;
use crate::table::{Column, LockTable};
use crate::timestamp_limit::TimestampLimit;

/// What kind of values a column holds, as far as the lock statements care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnKind {
    /// A character string, with its declared limit in characters (`None`: unlimited).
    Text {
        /// The declared maximum length in characters, when there is one.
        max_chars: Option<usize>,
    },
    /// A date-time.
    Timestamp {
        /// Digits kept after the seconds (3 for milliseconds).
        fraction_digits: u32,
        /// Whether the type stores an instant (`TIMESTAMPTZ`), not a UTC wall time.
        with_time_zone: bool,
        /// How far the type reaches, as the provider writes and reads it.
        limit: TimestampLimit,
    },
    /// An integer able to count acquisitions (the fencing column).
    Integer,
    /// Anything else: refused for every lock column.
    Other,
}

impl ColumnKind {
    fn describe_expected(column: Column) -> &'static str {
        match column {
            Column::Name | Column::LockedBy => "a character type (VARCHAR)",
            Column::LockUntil | Column::LockedAt => "a timestamp type",
            Column::FencingToken => "an integer type (BIGINT)",
        }
    }

    fn fits(self, column: Column) -> bool {
        matches!(
            (column, self),
            (Column::Name | Column::LockedBy, ColumnKind::Text { .. })
                | (
                    Column::LockUntil | Column::LockedAt,
                    ColumnKind::Timestamp { .. }
                )
                | (Column::FencingToken, ColumnKind::Integer)
        )
    }
}

/// One column as the provider read it from its catalog.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnInfo {
    /// The column's name as stored in the catalog.
    pub name: String,
    /// The declared type as the catalog shows it, for error messages.
    pub declared_type: String,
    /// The provider's reading of that type.
    pub kind: ColumnKind,
}

/// What the checked table allows, for the provider's statements and capabilities.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSchema {
    /// The name column's length limit in characters; longer names are refused, not truncated.
    pub max_name_chars: Option<usize>,
    /// The `locked_by` column's limit in characters.
    pub max_locked_by_chars: Option<usize>,
    /// The granularity of the stored times, never reported finer than 1 ms.
    pub time_precision: Duration,
    /// Whether the timestamp columns store instants (`TIMESTAMPTZ`) rather than UTC wall times.
    pub timestamps_with_time_zone: bool,
    /// Whether the table has the fencing column, so acquisitions carry tokens.
    pub fencing: bool,
    /// The `lock_until` column's declared type, as the catalog shows it, for errors.
    pub lock_until_type: String,
    /// How far the `lock_until` column reaches, cut to its fractional digits: acquire and
    /// extend refuse a lock that would end later, before sending anything.
    pub lock_until_limit: TimestampLimit,
}

impl LockTable {
    /// Checks the columns a provider read for this table.
    ///
    /// `columns` empty means the table does not exist; the error then shows `create_table`,
    /// the statement that creates it. Every error is a [`LockError::Backend`] for
    /// [`Operation::Connect`] naming the table, the column and the rule.
    pub fn check_columns(
        &self,
        dialect: Dialect,
        provider: &'static str,
        columns: &[ColumnInfo],
        create_table: &str,
    ) -> Result<TableSchema, LockError> {
        let fail = |message: String| {
            Err(LockError::backend_message(
                ErrorKind::Configuration,
                provider,
                Operation::Connect,
                "",
                message,
            ))
        };
        if columns.is_empty() {
            return fail(format!(
                "the lock table {table} does not exist (or this user cannot see it). Create it \
                 with:\n{create_table}\nor let the provider do it: call \
                 create_table_if_missing() on the builder (or \
                 create_table_with_fencing_if_missing() for fencing tokens)",
                table = self.table()
            ));
        }
        let find = |column: Column| {
            columns
                .iter()
                .find(|info| self.column(column).matches_column(dialect, &info.name))
        };
        let mut found = Vec::new();
        for column in [
            Column::Name,
            Column::LockUntil,
            Column::LockedAt,
            Column::LockedBy,
        ] {
            let Some(info) = find(column) else {
                return fail(format!(
                    "the lock table {table} has no column {col} (it has: {have}). ShedLock's \
                     table is:\n{create_table}\nor rename the column in the provider's \
                     configuration",
                    table = self.table(),
                    col = self.column(column),
                    have = columns
                        .iter()
                        .map(|c| c.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                ));
            };
            if !info.kind.fits(column) {
                return fail(wrong_type(self, column, info, create_table));
            }
            found.push(info);
        }
        let fencing = match find(Column::FencingToken) {
            Some(info) if info.kind.fits(Column::FencingToken) => true,
            Some(info) => return fail(wrong_type(self, Column::FencingToken, info, create_table)),
            None => false,
        };
        let text_limit = |kind: ColumnKind| match kind {
            ColumnKind::Text { max_chars } => max_chars,
            _ => None,
        };
        let (
            ColumnKind::Timestamp {
                fraction_digits: until_digits,
                with_time_zone: until_tz,
                limit: until_limit,
            },
            ColumnKind::Timestamp {
                fraction_digits: at_digits,
                with_time_zone: at_tz,
                ..
            },
        ) = (found[1].kind, found[2].kind)
        else {
            unreachable!("both were checked to be timestamps");
        };
        if until_tz != at_tz {
            return fail(format!(
                "the lock table {table}: columns {until} and {at} must both be timestamps with \
                 time zone or both without; one is each",
                table = self.table(),
                until = self.column(Column::LockUntil),
                at = self.column(Column::LockedAt),
            ));
        }
        let digits = until_digits.min(at_digits).min(9);
        let precision = Duration::from_nanos(10u64.pow(9 - digits)).max(Duration::from_millis(1));
        Ok(TableSchema {
            max_name_chars: text_limit(found[0].kind),
            max_locked_by_chars: text_limit(found[3].kind),
            time_precision: precision,
            timestamps_with_time_zone: until_tz,
            fencing,
            lock_until_type: found[1].declared_type.clone(),
            lock_until_limit: TimestampLimit {
                latest: until_limit.latest.truncated_to(until_digits),
                ..until_limit
            },
        })
    }
}

fn wrong_type(table: &LockTable, column: Column, info: &ColumnInfo, create_table: &str) -> String {
    format!(
        "the lock table {t}: column {c} has type {ty}, but it must be {want}. ShedLock's table \
         is:\n{create_table}",
        t = table.table(),
        c = info.name,
        ty = info.declared_type,
        want = ColumnKind::describe_expected(column),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn col(name: &str, kind: ColumnKind) -> ColumnInfo {
        ColumnInfo {
            name: name.to_owned(),
            declared_type: format!("{kind:?}"),
            kind,
        }
    }

    use crate::utc_instant::UtcInstant;

    /// MySQL's `TIMESTAMP`, at its finest precision.
    const LIMIT_2038: TimestampLimit = TimestampLimit {
        latest: UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_999_999),
        advice: ", or another type",
    };

    fn shedlock_columns() -> Vec<ColumnInfo> {
        let ts = ColumnKind::Timestamp {
            fraction_digits: 3,
            with_time_zone: false,
            limit: LIMIT_2038,
        };
        vec![
            col(
                "name",
                ColumnKind::Text {
                    max_chars: Some(64),
                },
            ),
            col("lock_until", ts),
            col("locked_at", ts),
            col(
                "locked_by",
                ColumnKind::Text {
                    max_chars: Some(255),
                },
            ),
        ]
    }

    #[test]
    fn reads_limits_precision_and_fencing() {
        let table = LockTable::default();
        let schema = table
            .check_columns(Dialect::Postgres, "test", &shedlock_columns(), "DDL")
            .unwrap();
        assert_eq!(schema.max_name_chars, Some(64));
        assert_eq!(schema.max_locked_by_chars, Some(255));
        assert_eq!(schema.time_precision, Duration::from_millis(1));
        assert!(!schema.fencing);
        let mut with_fencing = shedlock_columns();
        with_fencing.push(col("fencing_token", ColumnKind::Integer));
        assert!(
            table
                .check_columns(Dialect::Postgres, "test", &with_fencing, "DDL")
                .unwrap()
                .fencing
        );
    }

    #[test]
    fn explains_missing_table_missing_column_and_wrong_types() {
        let table = LockTable::default();
        let missing = table
            .check_columns(Dialect::MySql, "test", &[], "CREATE TABLE shedlock(...)")
            .unwrap_err()
            .to_string();
        assert!(missing.contains("does not exist"), "{missing}");
        assert!(missing.contains("CREATE TABLE shedlock(...)"), "{missing}");

        let mut no_locked_by = shedlock_columns();
        no_locked_by.pop();
        let error = table
            .check_columns(Dialect::MySql, "test", &no_locked_by, "DDL")
            .unwrap_err()
            .to_string();
        assert!(error.contains("no column locked_by"), "{error}");

        let mut wrong = shedlock_columns();
        wrong[1] = col("lock_until", ColumnKind::Text { max_chars: None });
        let error = table
            .check_columns(Dialect::MySql, "test", &wrong, "DDL")
            .unwrap_err()
            .to_string();
        assert!(error.contains("column lock_until"), "{error}");
        assert!(error.contains("timestamp"), "{error}");

        let mut bad_fencing = shedlock_columns();
        bad_fencing.push(col("fencing_token", ColumnKind::Other));
        let error = table
            .check_columns(Dialect::MySql, "test", &bad_fencing, "DDL")
            .unwrap_err()
            .to_string();
        assert!(error.contains("integer"), "{error}");
    }

    #[test]
    fn the_schema_keeps_the_lock_until_columns_type_and_limit_at_its_precision() {
        let mut columns = shedlock_columns();
        columns[1] = ColumnInfo {
            name: "lock_until".to_owned(),
            declared_type: "timestamp(3)".to_owned(),
            ..columns[1].clone()
        };
        // locked_at reaches further and keeps more digits: lock_until's limit is the one.
        columns[2].kind = ColumnKind::Timestamp {
            fraction_digits: 6,
            with_time_zone: false,
            limit: TimestampLimit {
                latest: UtcInstant::from_civil((9999, 12, 31), (23, 59, 59), 999_999_999),
                advice: "",
            },
        };
        let schema = LockTable::default()
            .check_columns(Dialect::MySql, "test", &columns, "DDL")
            .unwrap();
        assert_eq!(schema.lock_until_type, "timestamp(3)");
        assert_eq!(
            schema.lock_until_limit,
            TimestampLimit {
                latest: UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_000_000),
                advice: ", or another type",
            }
        );
    }
}
