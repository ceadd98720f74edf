//! How errors and instants read in log events: whole, and in words an operator can compare.

use std::error::Error as StdError;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// An error followed by each of its causes, `": "`-separated, each said once: a log line is
/// often all an operator has, and [`LockError`](crate::LockError)'s own message leaves its
/// causes to `source()`.
///
/// Some client errors quote their cause in their own message as well (sqlx's I/O error ends
/// with the `io::Error` it holds as its source), so a cause whose text the line already holds is
/// left out rather than said twice; the causes below it are still written.
///
/// ```
/// use shedlock_core::ErrorChain;
/// #[derive(Debug)]
/// struct Quoting(std::io::Error);
/// impl std::fmt::Display for Quoting {
///     fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
///         write!(f, "error communicating with database: {}", self.0)
///     }
/// }
/// impl std::error::Error for Quoting {
///     fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
///         Some(&self.0)
///     }
/// }
/// let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "Connection refused");
/// assert_eq!(
///     ErrorChain(&Quoting(refused)).to_string(),
///     "error communicating with database: Connection refused",
/// );
/// ```
#[derive(Clone, Copy)]
pub struct ErrorChain<'a>(pub &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut line = self.0.to_string();
        let mut cause = self.0.source();
        while let Some(error) = cause {
            let said = error.to_string();
            if !said.is_empty() && !line.contains(&said) {
                line.push_str(": ");
                line.push_str(&said);
            }
            cause = error.source();
        }
        f.write_str(&line)
    }
}

/// An instant as RFC 3339 UTC, written exactly for any instant a `SystemTime` can hold, with
/// three or six digits of the second (`2023-11-14T22:13:20.005Z`): the form backends print
/// their own times in, for log events, JSON and operators' tables, instead of `SystemTime`'s
/// seconds-and-nanoseconds `Debug`.
///
/// A year outside 0 to 9999 is written signed, with five digits or more (ISO 8601's expanded
/// form, as chrono writes the years its calendar has), so an instant past chrono's calendar
/// (the year 262143 on, which a PostgreSQL row may hold) is written rather than a panic.
/// Fractions are truncated toward the past.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use shedlock_core::raw::Rfc3339;
/// let instant = UNIX_EPOCH + Duration::from_micros(1_700_000_000_005_123);
/// assert_eq!(Rfc3339::millis(instant).to_string(), "2023-11-14T22:13:20.005Z");
/// assert_eq!(Rfc3339::micros(instant).to_string(), "2023-11-14T22:13:20.005123Z");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rfc3339 {
    instant: SystemTime,
    /// Digits of the second: 3 or 6.
    digits: u32,
}

impl Rfc3339 {
    /// With milliseconds.
    pub fn millis(instant: SystemTime) -> Self {
        Self { instant, digits: 3 }
    }

    /// With microseconds, the precision the SQL backends store.
    pub fn micros(instant: SystemTime) -> Self {
        Self { instant, digits: 6 }
    }
}

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos: i128 = match self.instant.duration_since(UNIX_EPOCH) {
            Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
            Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
        };
        let unit = 10_i128.pow(9 - self.digits);
        let per_second = 10_i128.pow(self.digits);
        let fractions = nanos.div_euclid(unit);
        let seconds = fractions.div_euclid(per_second);
        let fraction = fractions.rem_euclid(per_second);
        let (days, of_day) = (seconds.div_euclid(86_400), seconds.rem_euclid(86_400));
        let (year, month, day) = civil_from_days(days);
        if (0..=9999).contains(&year) {
            write!(f, "{year:04}")?;
        } else {
            write!(f, "{year:+05}")?;
        }
        write!(
            f,
            "-{month:02}-{day:02}T{:02}:{:02}:{:02}.{fraction:0width$}Z",
            of_day / 3_600,
            of_day % 3_600 / 60,
            of_day % 60,
            width = self.digits as usize
        )
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`),
/// for any number of days an instant can have.
fn civil_from_days(days: i128) -> (i128, i128, i128) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
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
    let year = year_of_era + era * 400 + i128::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{ErrorKind, LockError, Operation};

    fn at(secs: u64, millis: u64) -> String {
        Rfc3339::millis(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
            .to_string()
    }

    #[test]
    fn instants_read_as_utc_calendar_times() {
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(1_700_000_000, 5), "2023-11-14T22:13:20.005Z");
        // A leap day, the last second of a year, and the end of February in a century year.
        assert_eq!(at(951_782_400, 0), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_735_689_599, 999), "2024-12-31T23:59:59.999Z");
        assert_eq!(at(4_107_456_000, 0), "2100-02-28T00:00:00.000Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
        // Before the epoch, and past chrono's calendar.
        let before = UNIX_EPOCH - Duration::from_millis(1);
        assert_eq!(
            Rfc3339::millis(before).to_string(),
            "1969-12-31T23:59:59.999Z"
        );
        let far = UNIX_EPOCH + Duration::from_micros(9_224_318_015_999_999_999);
        assert_eq!(
            Rfc3339::micros(far).to_string(),
            "+294276-12-31T23:59:59.999999Z"
        );
    }

    #[test]
    fn a_chain_lists_each_cause_after_the_error() {
        let refused = std::io::Error::other("connection refused");
        let error = LockError::backend(
            ErrorKind::OutcomeUnknown,
            "redis",
            Operation::Acquire,
            "job",
            "no answer",
            refused,
        );
        assert_eq!(
            ErrorChain(&error).to_string(),
            "redis: acquire of lock \"job\" failed: no answer: connection refused"
        );
    }
}
