//! Parsing of lock durations in the three spellings ShedLock users already write.

use std::time::Duration;

use thiserror::Error;

/// A duration string that none of the accepted spellings matches.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "invalid duration {input:?}: {reason} (expected ISO-8601 like \"PT30S\" or human like \"1h30m\" or \"500ms\")"
)]
pub struct DurationParseError {
    /// The text as given, quoted in the message so the user can find it in their config.
    pub input: String,
    /// Which rule the text broke.
    pub reason: String,
}

/// Parses a lock duration the way ShedLock's `lockAtMostForString` does, plus combined human units.
///
/// Accepted, case-insensitively:
/// - ISO-8601 durations: `PT30S`, `PT1M30S`, `PT0.5S`, `P1DT2H` (days are 24 h, no months or years);
/// - human durations, one or more `<number><unit>` parts with units `ms`, `s`, `m`, `h`, `d`:
///   `30s`, `5m`, `1h30m`, `1m500ms`;
/// - `0`, which means zero in any unit.
///
/// A bare number other than zero (`"10"`) is refused, with a message suggesting `"10ms"` or
/// `"10s"`. Java ShedLock reads it as milliseconds, which surprises whoever meant seconds: a
/// lock meant for ten seconds would expire after ten milliseconds and let another node run the
/// task at once, so the unit must be written.
///
/// Negative values are rejected: a lock cannot be held for less than nothing.
///
/// A fraction (`PT0.5S`, `1.5s`, `0.25ms`) has at most nine decimal places, as in Java's
/// `Duration.parse`, and must come to a whole number of nanoseconds: `0.0000001ms` is refused,
/// never rounded or truncated. In ISO-8601 only seconds may have a fraction, and an `M` before
/// the `T` (`P1M`) means months, refused like years and weeks: one minute is `PT1M`.
pub fn parse_duration(input: &str) -> Result<Duration, DurationParseError> {
    let error = |reason: &str| DurationParseError {
        input: input.to_owned(),
        reason: reason.to_owned(),
    };
    let text = input.trim();
    if text.is_empty() {
        return Err(error("it is empty"));
    }
    if text.starts_with('-') {
        return Err(error("it is negative"));
    }
    let text = text.strip_prefix('+').unwrap_or(text);
    if text.is_empty() {
        return Err(error("no number follows the '+'"));
    }
    if text.bytes().all(|b| b.is_ascii_digit()) {
        if text.bytes().all(|b| b == b'0') {
            return Ok(Duration::ZERO);
        }
        return Err(error(&format!(
            "a bare number has no unit; write \"{text}ms\" or \"{text}s\" (Java ShedLock would read it as milliseconds)"
        )));
    }
    let upper = text.to_ascii_uppercase();
    if let Some(iso) = upper.strip_prefix('P') {
        return parse_iso(iso).map_err(|reason| error(&reason));
    }
    parse_human(&text.to_ascii_lowercase()).map_err(|reason| error(&reason))
}

/// Splits `text` into `(number, unit)` parts: `1h30m` gives `[("1","h"), ("30","m")]`.
fn split_parts(text: &str) -> Result<Vec<(&str, &str)>, String> {
    let mut parts = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if number_len == 0 {
            return Err(format!("expected a number before {rest:?}"));
        }
        let (number, after) = rest.split_at(number_len);
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        if unit_len == 0 {
            return Err(format!("the number {number:?} has no unit"));
        }
        let (unit, next) = after.split_at(unit_len);
        parts.push((number, unit));
        rest = next;
    }
    Ok(parts)
}

/// Converts `number` (decimal allowed) `unit`s, each `unit_nanos` long, to a duration, exactly:
/// never rounded, truncated or wrapped.
fn scaled(number: &str, unit: &str, unit_nanos: u128) -> Result<Duration, String> {
    let too_large = || format!("\"{number}{unit}\" is too large");
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() && fraction.is_empty() || fraction.contains('.') {
        return Err(format!("{number:?} is not a number"));
    }
    let whole: u128 = if whole.is_empty() {
        0
    } else {
        whole.parse().map_err(|_| too_large())?
    };
    let mut nanos = whole.checked_mul(unit_nanos).ok_or_else(too_large)?;
    if !fraction.is_empty() {
        if fraction.len() > MAX_DECIMAL_PLACES {
            return Err(format!(
                "\"{number}{unit}\" has {} decimal places; at most {MAX_DECIMAL_PLACES} are accepted",
                fraction.len()
            ));
        }
        let digits: u128 = fraction
            .parse()
            .map_err(|_| format!("{number:?} is not a number"))?;
        let scale = 10u128.pow(fraction.len() as u32);
        if !(digits * unit_nanos).is_multiple_of(scale) {
            return Err(format!(
                "\"{number}{unit}\" is finer than a nanosecond, the smallest duration; it is not rounded"
            ));
        }
        nanos = nanos
            .checked_add(digits * unit_nanos / scale)
            .ok_or_else(too_large)?;
    }
    let secs = u64::try_from(nanos / 1_000_000_000).map_err(|_| too_large())?;
    Ok(Duration::new(secs, (nanos % 1_000_000_000) as u32))
}

/// The most decimal places a fraction may have, as in Java's `Duration.parse`.
const MAX_DECIMAL_PLACES: usize = 9;

const NANOS_PER_MILLI: u128 = 1_000_000;
const NANOS_PER_SECOND: u128 = 1_000 * NANOS_PER_MILLI;
const NANOS_PER_MINUTE: u128 = 60 * NANOS_PER_SECOND;
const NANOS_PER_HOUR: u128 = 60 * NANOS_PER_MINUTE;
const NANOS_PER_DAY: u128 = 24 * NANOS_PER_HOUR;

fn sum(parts: impl IntoIterator<Item = Result<Duration, String>>) -> Result<Duration, String> {
    parts.into_iter().try_fold(Duration::ZERO, |total, part| {
        total
            .checked_add(part?)
            .ok_or_else(|| "it is too large".to_owned())
    })
}

/// `iso` is what follows the `P`, upper-cased: `T1M30S`, `1DT2H`.
fn parse_iso(iso: &str) -> Result<Duration, String> {
    let (date, time) = match iso.split_once('T') {
        Some((_, "")) => return Err("nothing follows the 'T'".to_owned()),
        Some((date, time)) => (date, time),
        None => (iso, ""),
    };
    if date.is_empty() && time.is_empty() {
        return Err("an ISO-8601 duration needs at least one part after 'P'".to_owned());
    }
    let date_parts = split_parts(date)?;
    let time_parts = split_parts(time)?;
    let mut last_rank = 0;
    let ranked = date_parts
        .into_iter()
        .map(|(n, u)| (n, u, true))
        .chain(time_parts.into_iter().map(|(n, u)| (n, u, false)));
    let mut durations = Vec::new();
    for (number, unit, in_date) in ranked {
        let (rank, nanos) = match (in_date, unit) {
            (true, "D") => (1, NANOS_PER_DAY),
            (true, "M") => {
                return Err(format!(
                    "'{number}M' before the 'T' means months, which have no fixed length; use days ('D'), or write minutes after the 'T' (\"PT{number}M\")"
                ));
            }
            (true, "Y") => {
                return Err(format!(
                    "'{number}Y' means years, which have no fixed length; use days ('D')"
                ));
            }
            (true, "W") => {
                return Err(format!(
                    "'{number}W' means weeks, which are not accepted (as in Java's Duration.parse); use days ('D')"
                ));
            }
            (false, "H") => (2, NANOS_PER_HOUR),
            (false, "M") => (3, NANOS_PER_MINUTE),
            (false, "S") => (4, NANOS_PER_SECOND),
            _ => return Err(format!("unknown ISO-8601 unit '{unit}'")),
        };
        if rank <= last_rank {
            return Err(format!("unit '{unit}' is repeated or out of order"));
        }
        if unit != "S" && number.contains('.') {
            return Err(format!(
                "only seconds may have a fraction, not '{number}{unit}'"
            ));
        }
        last_rank = rank;
        durations.push(scaled(number, unit, nanos));
    }
    sum(durations)
}

fn parse_human(text: &str) -> Result<Duration, String> {
    let mut last_rank = 0;
    let mut durations = Vec::new();
    for (number, unit) in split_parts(text)? {
        let (rank, nanos) = match unit {
            "d" => (1, NANOS_PER_DAY),
            "h" => (2, NANOS_PER_HOUR),
            "m" => (3, NANOS_PER_MINUTE),
            "s" => (4, NANOS_PER_SECOND),
            "ms" => (5, NANOS_PER_MILLI),
            _ => return Err(format!("unknown unit {unit:?} (use ms, s, m, h or d)")),
        };
        if rank <= last_rank {
            return Err(format!("unit {unit:?} is repeated or out of order"));
        }
        last_rank = rank;
        durations.push(scaled(number, unit, nanos));
    }
    sum(durations)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn iso_8601() {
        assert_eq!(parse_duration("PT30S").unwrap(), ms(30_000));
        assert_eq!(parse_duration("PT1M30S").unwrap(), ms(90_000));
        assert_eq!(parse_duration("pt1m").unwrap(), ms(60_000));
        assert_eq!(parse_duration("PT0.5S").unwrap(), ms(500));
        assert_eq!(parse_duration("PT.25S").unwrap(), ms(250));
        assert_eq!(parse_duration("P1DT2H").unwrap(), ms((26 * 3600) * 1000));
        assert_eq!(parse_duration("P2D").unwrap(), ms(2 * 86_400_000));
        assert_eq!(parse_duration("PT0S").unwrap(), Duration::ZERO);
    }

    #[test]
    fn human() {
        assert_eq!(parse_duration("30s").unwrap(), ms(30_000));
        assert_eq!(parse_duration("5m").unwrap(), ms(300_000));
        assert_eq!(parse_duration("1h30m").unwrap(), ms(5_400_000));
        assert_eq!(parse_duration("1M500MS").unwrap(), ms(60_500));
        assert_eq!(parse_duration("250ms").unwrap(), ms(250));
        assert_eq!(parse_duration("1.5s").unwrap(), ms(1_500));
        assert_eq!(parse_duration(" 2d ").unwrap(), ms(2 * 86_400_000));
    }

    #[test]
    fn zero_needs_no_unit() {
        assert_eq!(parse_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(parse_duration("+00").unwrap(), Duration::ZERO);
    }

    #[test]
    fn a_bare_number_is_refused_with_both_readings_suggested() {
        assert_eq!(
            parse_duration("10").unwrap_err().to_string(),
            r#"invalid duration "10": a bare number has no unit; write "10ms" or "10s" (Java ShedLock would read it as milliseconds) (expected ISO-8601 like "PT30S" or human like "1h30m" or "500ms")"#
        );
        assert_eq!(
            reason(" +30000 "),
            r#"a bare number has no unit; write "30000ms" or "30000s" (Java ShedLock would read it as milliseconds)"#
        );
    }

    #[test]
    fn an_empty_time_part_quotes_the_input_once() {
        for (input, shown) in [("PT", r#""PT""#), ("pt", r#""pt""#), ("P1DT", r#""P1DT""#)] {
            let message = parse_duration(input).unwrap_err().to_string();
            assert_eq!(
                message,
                format!(
                    "invalid duration {shown}: nothing follows the 'T' (expected ISO-8601 like \"PT30S\" or human like \"1h30m\" or \"500ms\")"
                )
            );
        }
    }

    #[test]
    fn rejects_with_the_input_quoted() {
        for bad in [
            "",
            "  ",
            "-5",
            "-PT1S",
            "PT",
            "P",
            "P1M",
            "P1Y",
            "PT1X",
            "1x",
            "s",
            "1.2.3s",
            "5m1h",
            "1s1s",
            "PT1.5M",
            "30 s",
            "1e3",
            "0.0000000001s",
            "99999999999999999999999",
            "PT1S2M",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            assert_eq!(err.input, bad);
            assert!(
                err.to_string().contains(&format!("{bad:?}")),
                "message must quote the input: {err}"
            );
        }
    }

    fn reason(input: &str) -> String {
        parse_duration(input).expect_err(input).reason
    }

    #[test]
    fn a_lone_decimal_point_is_not_zero() {
        for bad in [".s", "PT.S", "pt.s", ".ms", "1h.m"] {
            assert_eq!(reason(bad), r#""." is not a number"#, "{bad}");
        }
        assert_eq!(
            parse_duration(".s").unwrap_err().to_string(),
            r#"invalid duration ".s": "." is not a number (expected ISO-8601 like "PT30S" or human like "1h30m" or "500ms")"#
        );
    }

    #[test]
    fn nine_decimal_places_are_accepted() {
        assert_eq!(
            parse_duration("0.123456789s").unwrap(),
            Duration::from_nanos(123_456_789)
        );
        assert_eq!(
            parse_duration("PT0.123456789S").unwrap(),
            Duration::from_nanos(123_456_789)
        );
        assert_eq!(parse_duration("1.000000001s").unwrap(), Duration::new(1, 1));
        assert_eq!(parse_duration("1.5h").unwrap(), Duration::from_secs(5_400));
    }

    #[test]
    fn more_than_nine_decimal_places_are_refused_even_when_exact() {
        assert_eq!(
            reason("0.1000000000s"),
            r#""0.1000000000s" has 10 decimal places; at most 9 are accepted"#
        );
        assert_eq!(
            reason("PT0.10000000000S"),
            r#""0.10000000000S" has 11 decimal places; at most 9 are accepted"#
        );
    }

    #[test]
    fn finer_than_a_nanosecond_is_refused_not_rounded() {
        assert_eq!(
            reason("0.0000001ms"),
            r#""0.0000001ms" is finer than a nanosecond, the smallest duration; it is not rounded"#
        );
        assert!(reason("1.0000000005s").contains("decimal places"));
        assert!(reason("0.0000009ms").contains("finer than a nanosecond"));
        assert_eq!(
            parse_duration("0.000001ms").unwrap(),
            Duration::from_nanos(1)
        );
        assert_eq!(parse_duration("0.5ms").unwrap(), Duration::from_micros(500));
    }

    #[test]
    fn date_units_without_a_fixed_length_are_refused_by_name() {
        assert_eq!(
            parse_duration("P1M").unwrap_err().to_string(),
            r#"invalid duration "P1M": '1M' before the 'T' means months, which have no fixed length; use days ('D'), or write minutes after the 'T' ("PT1M") (expected ISO-8601 like "PT30S" or human like "1h30m" or "500ms")"#
        );
        assert_eq!(
            reason("p5m"),
            r#"'5M' before the 'T' means months, which have no fixed length; use days ('D'), or write minutes after the 'T' ("PT5M")"#
        );
        assert_eq!(
            reason("P1Y"),
            "'1Y' means years, which have no fixed length; use days ('D')"
        );
        assert_eq!(
            reason("P2W"),
            "'2W' means weeks, which are not accepted (as in Java's Duration.parse); use days ('D')"
        );
    }

    #[test]
    fn iso_units_may_not_repeat_or_go_backwards() {
        assert_eq!(reason("PT1S1S"), "unit 'S' is repeated or out of order");
        assert_eq!(reason("P1DT1H1H"), "unit 'H' is repeated or out of order");
        assert_eq!(reason("P1D1D"), "unit 'D' is repeated or out of order");
        assert_eq!(reason("PT1S2M"), "unit 'M' is repeated or out of order");
        assert_eq!(reason("1s1s"), r#"unit "s" is repeated or out of order"#);
        assert_eq!(reason("5m1h"), r#"unit "h" is repeated or out of order"#);
    }

    #[test]
    fn other_refusals_say_what_is_wrong() {
        assert_eq!(
            reason("PT1.5M"),
            "only seconds may have a fraction, not '1.5M'"
        );
        assert_eq!(reason("+"), "no number follows the '+'");
        assert_eq!(reason("1.5"), r#"the number "1.5" has no unit"#);
        assert_eq!(reason("PT1"), r#"the number "1" has no unit"#);
        assert_eq!(reason("PT"), "nothing follows the 'T'");
        assert_eq!(reason("1x"), r#"unknown unit "x" (use ms, s, m, h or d)"#);
        assert_eq!(reason("PT1X"), "unknown ISO-8601 unit 'X'");
        assert_eq!(reason("s"), r#"expected a number before "s""#);
        assert_eq!(reason("-5"), "it is negative");
        assert_eq!(reason("  "), "it is empty");
    }

    #[test]
    fn rejects_overflow_instead_of_wrapping() {
        for huge in [
            "340282366920938463463374607431.999999999s",
            "18446744073709551616s",
            "P1DT18446744073709551615S",
        ] {
            assert!(
                reason(huge).contains("too large"),
                "{huge}: {}",
                reason(huge)
            );
        }
        let err = parse_duration("P99999999999999999D").unwrap_err();
        assert!(err.reason.contains("too large"), "{err}");
    }
}
