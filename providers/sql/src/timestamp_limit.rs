//! How far column `lock_until` reaches ([`TimestampLimit`]), and the refusal, before anything
//! is sent, of a lock that would end later.

use std::time::{Duration, SystemTime};

use shedlock_core::{LockError, Operation};

use crate::schema::TableSchema;
use crate::table::{Column, LockTable};
use crate::utc_instant::UtcInstant;

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

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`LockTable::check_columns`] makes of a MySQL `timestamp(3)` column: 2038, cut to
    /// milliseconds.
    fn schema_2038() -> TableSchema {
        TableSchema {
            max_name_chars: Some(64),
            max_locked_by_chars: Some(255),
            time_precision: Duration::from_millis(1),
            timestamps_with_time_zone: false,
            fencing: false,
            lock_until_type: "timestamp(3)".to_owned(),
            lock_until_limit: TimestampLimit {
                latest: UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_000_000),
                advice: ", or another type",
            },
        }
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
