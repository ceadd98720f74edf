//! The table as the catalog describes it, checked once at connect so a wrong table fails with
//! a clear message instead of at the first lock.

use std::fmt;
use std::time::{Duration, SystemTime};

use shedlock_core::{ErrorKind, LockError, Operation};

use crate::identifier::Dialect;
use crate::table::{Column, LockTable};

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

/// How far a date-time column type reaches: the latest instant a provider can write into it
/// and read back, and what to tell someone whose lock would end later.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampLimit {
    /// The latest instant, at the type's finest precision; [`LockTable::check_columns`] cuts
    /// it to the column's fractional digits.
    pub latest: UtcInstant,
    /// Said after "use a shorter lock_at_most_for" in the error of a lock that would end
    /// later: a type that reaches further (`", or make the column DATETIME(3)"`), or why the
    /// limit is where it is. May be empty.
    pub advice: &'static str,
}

/// An instant in UTC, as time since the Unix epoch: how the lock table's limits are given.
///
/// Not a [`SystemTime`]: PostgreSQL's limit is beyond what a `SystemTime` reaches on some
/// platforms (Windows counts 100 ns ticks in a `u64`), and a limit must never overflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcInstant {
    since_epoch: Duration,
}

impl UtcInstant {
    /// The instant `since_epoch` after 1970-01-01 00:00:00 UTC.
    pub const fn from_unix(since_epoch: Duration) -> Self {
        Self { since_epoch }
    }

    /// The instant `year-month-day hour:minute:second` and `nanos` in UTC, in the proleptic
    /// Gregorian calendar, from 1970 on.
    ///
    /// # Panics
    ///
    /// On a date before 1970 or a field out of its range (evaluated in a `const`, that is a
    /// compile error).
    pub const fn from_civil(
        (year, month, day): (u64, u64, u64),
        (hour, minute, second): (u64, u64, u64),
        nanos: u32,
    ) -> Self {
        assert!(year >= 1970 && month >= 1 && month <= 12 && day >= 1 && day <= 31);
        assert!(hour < 24 && minute < 60 && second < 60 && nanos < 1_000_000_000);
        let days = days_from_civil(year, month, day);
        Self::from_unix(Duration::new(
            days * 86_400 + hour * 3_600 + minute * 60 + second,
            nanos,
        ))
    }

    /// The time since 1970-01-01 00:00:00 UTC.
    pub const fn since_unix_epoch(self) -> Duration {
        self.since_epoch
    }

    /// The latest instant at or before this one that `fraction_digits` digits after the
    /// seconds can write (all of them from 9 on).
    pub const fn truncated_to(self, fraction_digits: u32) -> Self {
        let unit = match fraction_digits {
            0..=8 => 10u32.pow(9 - fraction_digits),
            _ => 1,
        };
        let nanos = self.since_epoch.subsec_nanos();
        Self::from_unix(Duration::new(
            self.since_epoch.as_secs(),
            nanos - nanos % unit,
        ))
    }
}

/// `2038-01-19 03:14:07.999 UTC`: the fraction in as many groups of three digits as it needs.
impl fmt::Display for UtcInstant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.since_epoch.as_secs();
        let (year, month, day) = civil_from_days(secs / 86_400);
        let second_of_day = secs % 86_400;
        write!(
            f,
            "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
            second_of_day / 3_600,
            second_of_day / 60 % 60,
            second_of_day % 60,
        )?;
        match self.since_epoch.subsec_nanos() {
            0 => {}
            nanos if nanos % 1_000_000 == 0 => write!(f, ".{:03}", nanos / 1_000_000)?,
            nanos if nanos % 1_000 == 0 => write!(f, ".{:06}", nanos / 1_000)?,
            nanos => write!(f, ".{nanos:09}")?,
        }
        f.write_str(" UTC")
    }
}

/// Days from 1970-01-01 to a date from 1970 on (Howard Hinnant's `days_from_civil`).
const fn days_from_civil(year: u64, month: u64, day: u64) -> u64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year / 400;
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let day_of_era = z % 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let shifted_month = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * shifted_month + 2) / 5 + 1;
    let month = if shifted_month < 10 {
        shifted_month + 3
    } else {
        shifted_month - 9
    };
    (year_of_era + era * 400 + u64::from(month <= 2), month, day)
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

impl TableSchema {
    /// Refuses `lock_at_most_for` when `now + lock_at_most_for` is past the latest instant
    /// the `lock_until` column can keep (checked arithmetic: `Duration::MAX` is refused, never
    /// an overflow). The error names the lock, the duration, the column, its type and its
    /// limit, as a request refused before anything was sent.
    pub(crate) fn check_lock_until(
        &self,
        table: &LockTable,
        provider: &'static str,
        operation: Operation,
        name: &str,
        lock_at_most_for: Duration,
        now: SystemTime,
    ) -> Result<(), LockError> {
        // A clock before 1970 counts as 1970: a later "now", so never a lock let through.
        let since_epoch = now
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or(Duration::ZERO);
        let latest = self.lock_until_limit.latest;
        let until = since_epoch.checked_add(lock_at_most_for);
        let end = match until {
            Some(until) if until <= latest.since_unix_epoch() => return Ok(()),
            Some(until) => format!("at {}, past", UtcInstant::from_unix(until)),
            None => "past".to_owned(),
        };
        Err(LockError::invalid_request(
            provider,
            operation,
            name,
            format!(
                "lock_at_most_for of {lock_at_most_for:?} ({about}) would end the lock {end} \
                 {latest}, the latest instant the provider can keep in column {column} \
                 ({column_type}): use a shorter lock_at_most_for{advice}",
                about = about(lock_at_most_for),
                column = table.column(Column::LockUntil),
                column_type = self.lock_until_type,
                advice = self.lock_until_limit.advice,
            ),
        ))
    }
}

/// A duration for people: `about 13.0 years`, or in days under a year.
fn about(duration: Duration) -> String {
    const DAY: f64 = 86_400.0;
    // The Gregorian calendar's average year, 365.2425 days.
    const YEAR: f64 = 31_556_952.0;
    let secs = duration.as_secs_f64();
    if secs < YEAR {
        format!("about {:.1} days", secs / DAY)
    } else {
        format!("about {:.1} years", secs / YEAR)
    }
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
    fn civil_dates_count_days_as_the_gregorian_calendar_does() {
        let secs = |instant: UtcInstant| instant.since_unix_epoch().as_secs();
        assert_eq!(secs(UtcInstant::from_civil((1970, 1, 1), (0, 0, 0), 0)), 0);
        assert_eq!(
            UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_999_000).since_unix_epoch(),
            Duration::new(2_147_483_647, 999_999_000)
        );
        assert_eq!(
            secs(UtcInstant::from_civil((2106, 2, 7), (6, 28, 15), 0)),
            4_294_967_295
        );
        assert_eq!(
            secs(UtcInstant::from_civil((9999, 12, 31), (23, 59, 59), 0)),
            253_402_300_799
        );
        // Leap days: every fourth year, but not 2100, yet 2000.
        assert_eq!(
            secs(UtcInstant::from_civil((2000, 2, 29), (0, 0, 0), 0)),
            951_782_400
        );
        assert_eq!(
            secs(UtcInstant::from_civil((2000, 3, 1), (0, 0, 0), 0)),
            951_868_800
        );
        assert_eq!(
            secs(UtcInstant::from_civil((2100, 3, 1), (0, 0, 0), 0))
                - secs(UtcInstant::from_civil((2100, 2, 28), (0, 0, 0), 0)),
            86_400
        );
        assert_eq!(
            secs(UtcInstant::from_civil((2024, 12, 31), (23, 59, 59), 0)),
            1_735_689_599
        );
        // Every day of four centuries reads back as the date it was made from.
        for days in (0..146_097 * 4).step_by(7) {
            let instant = UtcInstant::from_unix(Duration::from_secs(days * 86_400 + 45_296));
            let (year, month, day) = civil_from_days(days);
            assert_eq!(
                UtcInstant::from_civil((year, month, day), (12, 34, 56), 0),
                instant,
                "{instant}"
            );
        }
    }

    #[test]
    fn instants_show_their_fraction_in_groups_of_three_digits() {
        let at = |nanos| UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), nanos).to_string();
        assert_eq!(at(0), "2038-01-19 03:14:07 UTC");
        assert_eq!(at(999_000_000), "2038-01-19 03:14:07.999 UTC");
        assert_eq!(at(5_000_000), "2038-01-19 03:14:07.005 UTC");
        assert_eq!(at(999_999_000), "2038-01-19 03:14:07.999999 UTC");
        assert_eq!(at(5_000), "2038-01-19 03:14:07.000005 UTC");
        assert_eq!(at(1), "2038-01-19 03:14:07.000000001 UTC");
        assert_eq!(
            UtcInstant::from_civil((262_142, 12, 31), (23, 59, 59), 0).to_string(),
            "262142-12-31 23:59:59 UTC"
        );
        assert_eq!(
            UtcInstant::from_unix(Duration::ZERO).to_string(),
            "1970-01-01 00:00:00 UTC"
        );
        assert_eq!(
            UtcInstant::from_civil((2000, 2, 29), (23, 0, 9), 0).to_string(),
            "2000-02-29 23:00:09 UTC"
        );
    }

    #[test]
    fn a_limit_is_cut_to_the_digits_a_column_keeps() {
        let latest = LIMIT_2038.latest;
        let cut = |digits| {
            latest
                .truncated_to(digits)
                .since_unix_epoch()
                .subsec_nanos()
        };
        assert_eq!(cut(0), 0);
        assert_eq!(cut(3), 999_000_000);
        assert_eq!(cut(6), 999_999_000);
        assert_eq!(cut(9), 999_999_999);
        assert_eq!(cut(12), 999_999_999);
        assert_eq!(
            latest.truncated_to(3).since_unix_epoch().as_secs(),
            2_147_483_647
        );
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

    fn schema_2038() -> TableSchema {
        let mut columns = shedlock_columns();
        columns[1].declared_type = "timestamp(3)".to_owned();
        LockTable::default()
            .check_columns(Dialect::MySql, "test", &columns, "DDL")
            .unwrap()
    }

    /// 2025-01-01 00:00:00 UTC.
    fn new_year_2025() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_735_689_600)
    }

    fn check(now: SystemTime, lock_at_most_for: Duration) -> Result<(), LockError> {
        let table = LockTable::new("jobs")
            .unwrap()
            .with_column(Column::LockUntil, "held_until")
            .unwrap();
        schema_2038().check_lock_until(
            &table,
            "mysql",
            Operation::Acquire,
            "report",
            lock_at_most_for,
            now,
        )
    }

    #[test]
    fn a_lock_may_end_at_the_columns_last_instant_but_not_a_nanosecond_later() {
        let latest = SystemTime::UNIX_EPOCH + Duration::new(2_147_483_647, 999_000_000);
        let up_to_latest = latest.duration_since(new_year_2025()).unwrap();
        check(new_year_2025(), up_to_latest).unwrap();
        check(new_year_2025(), Duration::from_secs(60)).unwrap();
        let error = check(new_year_2025(), up_to_latest + Duration::from_nanos(1)).unwrap_err();
        assert_eq!(
            error.to_string(),
            "mysql refused acquire of lock \"report\" before sending anything: \
             lock_at_most_for of 411794047.999000001s (about 13.0 years) would end the lock at \
             2038-01-19 03:14:07.999000001 UTC, past 2038-01-19 03:14:07.999 UTC, the latest \
             instant the provider can keep in column held_until (timestamp(3)): use a shorter \
             lock_at_most_for, or another type"
        );
        assert!(matches!(
            error,
            LockError::InvalidRequest {
                operation: Operation::Acquire,
                ..
            }
        ));
        // The same duration from a clock one second earlier fits.
        check(new_year_2025() - Duration::from_secs(1), up_to_latest).unwrap();
    }

    #[test]
    fn a_duration_past_any_instant_is_refused_without_overflowing() {
        let error = check(new_year_2025(), Duration::MAX)
            .unwrap_err()
            .to_string();
        assert!(
            error.contains(
                "lock_at_most_for of 18446744073709551615.999999999s (about 584554049253.9 \
                 years) would end the lock past 2038-01-19 03:14:07.999 UTC, the latest"
            ),
            "{error}"
        );
        let from_far_future = SystemTime::UNIX_EPOCH + Duration::from_secs(u64::MAX / 2);
        assert!(check(from_far_future, Duration::MAX).is_err());
        assert!(check(from_far_future, Duration::from_secs(1)).is_err());
    }

    #[test]
    fn a_clock_before_1970_counts_as_1970() {
        let before = SystemTime::UNIX_EPOCH - Duration::from_secs(86_400);
        let to_latest = Duration::new(2_147_483_647, 999_000_000);
        check(before, to_latest).unwrap();
        assert!(check(before, to_latest + Duration::from_nanos(1)).is_err());
    }

    #[test]
    fn durations_are_shown_in_days_under_a_year_and_in_years_from_one() {
        let year = Duration::from_secs(31_556_952);
        assert_eq!(about(Duration::from_secs(36 * 3600)), "about 1.5 days");
        assert_eq!(about(year - Duration::from_secs(1)), "about 365.2 days");
        assert_eq!(about(year), "about 1.0 years");
        assert_eq!(about(year * 13 + year / 2), "about 13.5 years");
    }
}
