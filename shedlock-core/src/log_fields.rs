//! How errors and instants read in log events: whole, and in words an operator can compare.

use std::error::Error as StdError;
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// An error followed by each of its causes, `": "`-separated: a log line is often all an
/// operator has, and [`LockError`](crate::LockError)'s own message leaves its causes to
/// `source()`.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn StdError + 'static));

impl fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

/// An instant as RFC 3339 UTC with milliseconds (`2023-11-14T22:13:20.000Z`), the form backends
/// print their own times in, instead of `SystemTime`'s seconds-and-nanoseconds `Debug`.
pub(crate) struct Timestamp(pub(crate) SystemTime);

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Ok(since_epoch) = self.0.duration_since(UNIX_EPOCH) else {
            return write!(f, "{:?}", self.0);
        };
        let secs = since_epoch.as_secs();
        let (days, second_of_day) = (secs / 86_400, secs % 86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            second_of_day / 3_600,
            second_of_day / 60 % 60,
            second_of_day % 60,
            since_epoch.subsec_millis()
        )
    }
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
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
    let year = year_of_era + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{LockError, Operation};

    fn at(secs: u64, millis: u64) -> String {
        Timestamp(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(millis))
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
    }

    #[test]
    fn a_chain_lists_each_cause_after_the_error() {
        let refused = std::io::Error::other("connection refused");
        let error = LockError::backend("redis", Operation::Acquire, "job", "no answer", refused);
        assert_eq!(
            ErrorChain(&error).to_string(),
            "redis: acquire of lock \"job\" failed: no answer: connection refused"
        );
    }
}
