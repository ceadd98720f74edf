//! [`UtcInstant`]: an instant in UTC as a count since the Unix epoch, made from and shown as a
//! calendar date, so column limits are written as dates and errors show them as dates.

use std::fmt;
use std::time::Duration;
#[cfg(doc)]
use std::time::SystemTime;

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

#[cfg(test)]
mod tests {
    use super::*;

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
        let latest = UtcInstant::from_civil((2038, 1, 19), (3, 14, 7), 999_999_999);
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
}
