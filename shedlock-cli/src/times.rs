//! How instants and durations read in the CLI's tables and messages: UTC instants with
//! milliseconds (backends store UTC; the reader's zone would hide which is which), and
//! durations in the largest units that keep them short.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};

/// `2026-12-01T04:05:06.123Z`; an instant past the calendar `chrono` prints (the year 262143,
/// which a backend's date can pass: a BSON date reaches the year 292 million) as its seconds
/// from the Unix epoch, rather than a panic.
pub fn instant(time: SystemTime) -> String {
    let (since, after) = match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => (after, true),
        Err(before) => (before.duration(), false),
    };
    let date = TimeDelta::from_std(since).ok().and_then(|delta| {
        if after {
            DateTime::<Utc>::UNIX_EPOCH.checked_add_signed(delta)
        } else {
            DateTime::<Utc>::UNIX_EPOCH.checked_sub_signed(delta)
        }
    });
    match date {
        Some(date) => date.to_rfc3339_opts(SecondsFormat::Millis, true),
        None => format!(
            "{}{}s from the Unix epoch",
            if after { "" } else { "-" },
            since.as_secs()
        ),
    }
}

/// `850ms`, `1s`, `12.3s`, `4m05s`, `3h02m`, `2d03h`.
pub fn span(duration: Duration) -> String {
    let seconds = duration.as_secs();
    match seconds {
        0 => format!("{}ms", duration.subsec_millis()),
        1..60 => match duration.subsec_millis() / 100 {
            0 => format!("{seconds}s"),
            tenths => format!("{seconds}.{tenths}s"),
        },
        60..3_600 => format!("{}m{:02}s", seconds / 60, seconds % 60),
        3_600..86_400 => format!("{}h{:02}m", seconds / 3_600, seconds % 3_600 / 60),
        _ => format!("{}d{:02}h", seconds / 86_400, seconds % 86_400 / 3_600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_keep_the_two_largest_units() {
        assert_eq!(span(Duration::from_millis(850)), "850ms");
        assert_eq!(span(Duration::ZERO), "0ms");
        assert_eq!(span(Duration::from_millis(12_345)), "12.3s");
        assert_eq!(span(Duration::from_millis(1_050)), "1s");
        assert_eq!(span(Duration::from_secs(245)), "4m05s");
        assert_eq!(span(Duration::from_secs(3 * 3_600 + 2 * 60 + 59)), "3h02m");
        assert_eq!(span(Duration::from_secs(2 * 86_400 + 3 * 3_600)), "2d03h");
    }

    #[test]
    fn instants_are_utc_with_milliseconds() {
        let time = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_561_906_123_456);
        assert_eq!(instant(time), "2025-12-01T04:05:06.123Z");
        let before = SystemTime::UNIX_EPOCH - Duration::from_millis(1_500);
        assert_eq!(instant(before), "1969-12-31T23:59:58.500Z");
    }

    #[test]
    fn instants_past_the_calendar_are_seconds_from_the_epoch() {
        // A BSON date near its end, the year 292 million: lockUntil of a very long lock.
        let far = SystemTime::UNIX_EPOCH + Duration::from_millis(i64::MAX as u64);
        assert_eq!(instant(far), "9223372036854775s from the Unix epoch");
        let early = SystemTime::UNIX_EPOCH - Duration::from_secs(1 << 44);
        assert_eq!(instant(early), "-17592186044416s from the Unix epoch");
        let last = SystemTime::from(DateTime::<Utc>::MAX_UTC);
        assert_eq!(
            instant(last),
            DateTime::<Utc>::MAX_UTC.to_rfc3339_opts(SecondsFormat::Millis, true)
        );
        let after_last = last + Duration::from_secs(1);
        assert!(instant(after_last).ends_with("s from the Unix epoch"));
    }
}
