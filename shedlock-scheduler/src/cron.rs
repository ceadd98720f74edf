//! Cron expressions as Spring's `CronExpression` reads them, checked field by field so a
//! refusal names the field, the value and what the field takes; the instants are then found by
//! [croner], given the expression in its own syntax.
//!
//! Spring's syntax differs from croner's in a few places, each handled here: a step from a start
//! (`0/15`, croner wants `0-59/15`), `?` in either day field, `L-3` (the third-to-last day),
//! a weekday name before `L` or `#` (`THUL`, `MON#1`), the `@hourly` family of macros, and
//! the day of the month and the day of the week both having to match when both are given
//! (croner, as POSIX cron, runs when either matches).

use std::fmt::Write as _;

use chrono::{DateTime, Datelike, NaiveDate, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

use crate::error::SchedulerError;

/// A parsed cron expression.
#[derive(Clone)]
pub(crate) struct CronExpression {
    /// The expression as given, for `Debug` and messages.
    expression: String,
    cron: Box<Cron>,
    /// `L-n`: the day of the month `n` days before its last, which croner cannot express; croner
    /// is then given `*` for the day of the month and each instant it finds is checked here.
    days_before_last: Option<u32>,
}

/// Spring's macros, and the six fields each stands for.
const MACROS: [(&str, &str); 7] = [
    ("@yearly", "0 0 0 1 1 *"),
    ("@annually", "0 0 0 1 1 *"),
    ("@monthly", "0 0 0 1 * *"),
    ("@weekly", "0 0 0 * * 0"),
    ("@daily", "0 0 0 * * *"),
    ("@midnight", "0 0 0 * * *"),
    ("@hourly", "0 0 * * * *"),
];

/// The fields, in the order they are written.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Field {
    Second,
    Minute,
    Hour,
    DayOfMonth,
    Month,
    DayOfWeek,
    Year,
}

const FIELDS: [Field; 7] = [
    Field::Second,
    Field::Minute,
    Field::Hour,
    Field::DayOfMonth,
    Field::Month,
    Field::DayOfWeek,
    Field::Year,
];

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

impl Field {
    fn label(self) -> &'static str {
        match self {
            Field::Second => "second",
            Field::Minute => "minute",
            Field::Hour => "hour",
            Field::DayOfMonth => "day-of-month",
            Field::Month => "month",
            Field::DayOfWeek => "day-of-week",
            Field::Year => "year",
        }
    }

    /// The smallest and largest number the field takes. A day of the week is 0 to 7, Sunday
    /// being both 0 and 7, as in Spring; the year is Quartz's optional seventh field.
    fn bounds(self) -> (u32, u32) {
        match self {
            Field::Second | Field::Minute => (0, 59),
            Field::Hour => (0, 23),
            Field::DayOfMonth => (1, 31),
            Field::Month => (1, 12),
            Field::DayOfWeek => (0, 7),
            Field::Year => (1970, 2099),
        }
    }

    /// The names the field takes, and the number of the first.
    fn names(self) -> (&'static [&'static str], u32) {
        match self {
            Field::Month => (&MONTHS, 1),
            Field::DayOfWeek => (&WEEKDAYS, 0),
            _ => (&[], 0),
        }
    }

    /// What the field takes, for a refusal: "0 to 23", "1 to 12 or JAN to DEC".
    fn takes(self) -> String {
        let (min, max) = self.bounds();
        let mut takes = format!("{min} to {max}");
        let (names, _) = self.names();
        if let (Some(first), Some(last)) = (names.first(), names.last()) {
            let _ = write!(takes, " or a name, {first} to {last}");
        }
        if self == Field::DayOfWeek {
            takes.push_str(" (0 and 7 are both Sunday)");
        }
        takes
    }

    /// One value of the field, a number or a name, within its bounds.
    fn value(self, text: &str) -> Result<u32, String> {
        let (min, max) = self.bounds();
        let label = self.label();
        if !text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()) {
            return match text.parse::<u32>() {
                Ok(value) if (min..=max).contains(&value) => Ok(value),
                _ => Err(format!(
                    "{label} {text} is out of range: the {label} field takes {}",
                    self.takes()
                )),
            };
        }
        let (names, first) = self.names();
        let upper = text.to_ascii_uppercase();
        if let Some(index) = names.iter().position(|name| *name == upper) {
            return Ok(first + u32::try_from(index).unwrap_or(0));
        }
        Err(format!(
            "{label} {text:?} is not a {}: the {label} field takes {}",
            if names.is_empty() {
                "number"
            } else {
                "number or a name"
            },
            self.takes()
        ))
    }
}

impl CronExpression {
    /// Reads `expression`: six fields, seconds first, and an optional seventh for the year, or
    /// one of Spring's macros.
    pub(crate) fn parse(expression: &str) -> Result<Self, SchedulerError> {
        let invalid = |message: String| SchedulerError::InvalidCron {
            expression: expression.to_owned(),
            message,
        };
        let trimmed = expression.trim();
        let fields = if trimmed.starts_with('@') {
            MACROS
                .iter()
                .find(|(name, _)| name.eq_ignore_ascii_case(trimmed))
                .map(|(_, fields)| *fields)
                .ok_or_else(|| {
                    let known: Vec<&str> = MACROS.iter().map(|(name, _)| *name).collect();
                    invalid(format!(
                        "{trimmed} is not a macro; the macros are {}",
                        known.join(", ")
                    ))
                })?
        } else {
            trimmed
        };
        let parts: Vec<&str> = fields.split_whitespace().collect();
        if !(6..=7).contains(&parts.len()) {
            return Err(invalid(format!(
                "it has {} fields; six are needed, seconds first: sec min hour day-of-month \
                 month day-of-week (e.g. \"0 */5 * * * *\"), and a seventh, the year, may follow",
                parts.len()
            )));
        }
        let mut days_before_last = None;
        let mut croner_fields = Vec::with_capacity(7);
        for (field, text) in FIELDS.iter().zip(parts.iter().copied().chain(["*"])) {
            let (translated, before_last) = translate(*field, text).map_err(invalid)?;
            days_before_last = days_before_last.or(before_last);
            croner_fields.push(translated);
        }
        let cron = CronParser::builder()
            .seconds(Seconds::Required)
            .year(Year::Required)
            .dom_and_dow(true)
            .build()
            .parse(&croner_fields.join(" "))
            .map_err(|error| invalid(error.to_string()))?;
        Ok(Self {
            expression: expression.to_owned(),
            cron: Box::new(cron),
            days_before_last,
        })
    }

    /// The expression as given.
    pub(crate) fn as_str(&self) -> &str {
        &self.expression
    }

    /// The first instant the expression names in `zone` after `after`, or `None` if there is
    /// none (a year long past, say).
    pub(crate) fn next_after(&self, zone: &Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let mut after = after;
        // Each instant croner finds that is on a day `L-n` does not name moves the search to the
        // end of that day; ten years of days bound the search for an expression (`L-30` in
        // February only) that never fires.
        for _ in 0..3_700 {
            let next = self
                .cron
                .find_next_occurrence(&after.with_timezone(zone), false)
                .ok()?;
            let Some(before_last) = self.days_before_last else {
                return Some(next.with_timezone(&Utc));
            };
            let date = next.date_naive();
            if date.day() + before_last == last_day_of_month(date) {
                return Some(next.with_timezone(&Utc));
            }
            after = end_of_day(zone, date).unwrap_or(next.with_timezone(&Utc));
        }
        None
    }
}

/// The day number of the last day of `date`'s month: the largest its month has.
fn last_day_of_month(date: NaiveDate) -> u32 {
    (28..=31)
        .rev()
        .find(|day| date.with_day(*day).is_some())
        .unwrap_or(28)
}

/// The last second of `date` in `zone` (its earlier reading if the clocks went back then).
fn end_of_day(zone: &Tz, date: NaiveDate) -> Option<DateTime<Utc>> {
    let end = date.and_hms_opt(23, 59, 59)?;
    zone.from_local_datetime(&end)
        .earliest()
        .map(|end| end.with_timezone(&Utc))
}

/// One field in croner's syntax, and `L-n`'s `n` if the field is one.
fn translate(field: Field, text: &str) -> Result<(String, Option<u32>), String> {
    let label = field.label();
    // Matched without regard to case, but shown as typed.
    let parts: Vec<&str> = text.split(',').collect();
    if let Some(special) = parts
        .iter()
        .find(|part| is_special(field, &part.to_ascii_uppercase()))
    {
        if parts.len() > 1 {
            return Err(format!(
                "{label} {special} must be the field's only value: L, W and # are not combined \
                 with others in a list"
            ));
        }
        return special_part(field, special);
    }
    let mut translated = Vec::with_capacity(parts.len());
    for part in parts {
        translated.push(plain_part(field, part)?);
    }
    Ok((translated.join(","), None))
}

/// Whether `part` uses `L`, `W` or `#`. Only the day fields take them; `WED` is a name.
fn is_special(field: Field, part: &str) -> bool {
    match field {
        Field::DayOfMonth => part.contains(['L', 'W']),
        Field::DayOfWeek => part.contains('#') || part.ends_with('L'),
        _ => false,
    }
}

/// `L`, `L-n`, `nW` and `LW` in the day of the month; `dL` and `d#n` in the day of the week.
fn special_part(field: Field, part: &str) -> Result<(String, Option<u32>), String> {
    let label = field.label();
    let upper = part.to_ascii_uppercase();
    // Upper-casing ASCII keeps every byte where it was, so `part[..n]` is what `upper[..n]` reads.
    let typed = |matched: &str| &part[..matched.len()];
    if field == Field::DayOfMonth {
        if upper == "L" || upper == "LW" {
            return Ok((upper, None));
        }
        if let Some(before) = upper.strip_prefix("L-") {
            return match before.parse::<u32>() {
                Ok(days) if days <= 30 => Ok(("*".to_owned(), Some(days))),
                _ => Err(format!(
                    "{label} {part}: the days before the last day (L-n) must be 0 to 30"
                )),
            };
        }
        if let Some(day) = upper.strip_suffix('W') {
            let day = field.value(typed(day))?;
            return Ok((format!("{day}W"), None));
        }
        return Err(format!(
            "{label} {part:?} is not understood: L is the last day, L-3 the third-to-last, \
             15W the weekday nearest the 15th, LW the last weekday"
        ));
    }
    if let Some(day) = upper.strip_suffix('L') {
        if day.is_empty() {
            return Err(format!(
                "{label} L needs a weekday before it: 5L or FRIL is the last Friday of the month"
            ));
        }
        let day = field.value(typed(day))?;
        return Ok((format!("{day}L"), None));
    }
    let (day, nth) = part.split_once('#').unwrap_or((part, ""));
    let day = field.value(day)?;
    match nth.parse::<u32>() {
        Ok(nth @ 1..=5) => Ok((format!("{day}#{nth}"), None)),
        _ => Err(format!(
            "{label} {part}: the week after # must be 1 to 5 (MON#1 is the first Monday of the \
             month)"
        )),
    }
}

/// `*`, `?`, a value, a range `a-b`, and each with a step (`*/5`, `0/15`, `8-18/2`).
fn plain_part(field: Field, part: &str) -> Result<String, String> {
    let label = field.label();
    let (_, max) = field.bounds();
    if part.is_empty() {
        return Err(format!(
            "{label} field has an empty value (two commas, or one at an end)"
        ));
    }
    if part == "?" {
        return match field {
            Field::DayOfMonth | Field::DayOfWeek => Ok("*".to_owned()),
            _ => Err(format!(
                "? is for the day-of-month and day-of-week fields only, not the {label} field; \
                 write * for any {label}"
            )),
        };
    }
    let (base, step) = match part.split_once('/') {
        Some((base, step)) => (base, Some(step)),
        None => (part, None),
    };
    let step = step
        .map(|step| match step.parse::<u32>() {
            Ok(step) if step >= 1 => Ok(step),
            _ => Err(format!(
                "{label} {part}: the step after / must be a whole number of at least 1, not \
                 {step:?}"
            )),
        })
        .transpose()?;
    let base = if base == "*" {
        "*".to_owned()
    } else if let Some((low, high)) = base.split_once('-') {
        let (low, high) = (field.value(low)?, field.value(high)?);
        if low > high {
            return Err(format!(
                "{label} range {part} runs backwards: write the lower bound first, within {}",
                field.takes()
            ));
        }
        format!("{low}-{high}")
    } else if step.is_some() {
        // Spring's `0/15`: from the value to the field's end.
        format!("{}-{max}", field.value(base)?)
    } else {
        field.value(base)?.to_string()
    };
    Ok(match step {
        Some(step) => format!("{base}/{step}"),
        None => base,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next three instants of `expression` in UTC after 2026-03-01T00:00:00Z, a Sunday.
    fn next_three(expression: &str) -> Vec<String> {
        let cron = CronExpression::parse(expression)
            .unwrap_or_else(|error| panic!("{expression}: {error}"));
        let mut after = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        (0..3)
            .map(|_| {
                after = cron
                    .next_after(&Tz::UTC, after)
                    .unwrap_or_else(|| panic!("{expression}: no next instant after {after}"));
                after.format("%Y-%m-%d %H:%M:%S").to_string()
            })
            .collect()
    }

    /// The examples of Spring's `CronExpression` documentation, the macros, and a step from
    /// a start, each with the instants Spring gives it.
    #[test]
    fn springs_documented_examples_fire_as_spring_says() {
        let table: &[(&str, [&str; 3])] = &[
            // The top of every hour of every day.
            (
                "0 0 * * * *",
                [
                    "2026-03-01 01:00:00",
                    "2026-03-01 02:00:00",
                    "2026-03-01 03:00:00",
                ],
            ),
            // Every ten seconds.
            (
                "*/10 * * * * *",
                [
                    "2026-03-01 00:00:10",
                    "2026-03-01 00:00:20",
                    "2026-03-01 00:00:30",
                ],
            ),
            // 8, 9 and 10 o'clock of every day.
            (
                "0 0 8-10 * * *",
                [
                    "2026-03-01 08:00:00",
                    "2026-03-01 09:00:00",
                    "2026-03-01 10:00:00",
                ],
            ),
            // 6:00 AM and 7:00 PM every day.
            (
                "0 0 6,19 * * *",
                [
                    "2026-03-01 06:00:00",
                    "2026-03-01 19:00:00",
                    "2026-03-02 06:00:00",
                ],
            ),
            // 8:00, 8:30, 9:00, 9:30, 10:00 and 10:30 every day.
            (
                "0 0/30 8-10 * * *",
                [
                    "2026-03-01 08:00:00",
                    "2026-03-01 08:30:00",
                    "2026-03-01 09:00:00",
                ],
            ),
            // On the hour nine-to-five weekdays (March 1st is a Sunday).
            (
                "0 0 9-17 * * MON-FRI",
                [
                    "2026-03-02 09:00:00",
                    "2026-03-02 10:00:00",
                    "2026-03-02 11:00:00",
                ],
            ),
            // Every Christmas Day at midnight.
            (
                "0 0 0 25 DEC ?",
                [
                    "2026-12-25 00:00:00",
                    "2027-12-25 00:00:00",
                    "2028-12-25 00:00:00",
                ],
            ),
            // The last day of the month at midnight.
            (
                "0 0 0 L * *",
                [
                    "2026-03-31 00:00:00",
                    "2026-04-30 00:00:00",
                    "2026-05-31 00:00:00",
                ],
            ),
            // The third-to-last day of the month at midnight.
            (
                "0 0 0 L-3 * *",
                [
                    "2026-03-28 00:00:00",
                    "2026-04-27 00:00:00",
                    "2026-05-28 00:00:00",
                ],
            ),
            // The last Friday of the month at midnight.
            (
                "0 0 0 * * 5L",
                [
                    "2026-03-27 00:00:00",
                    "2026-04-24 00:00:00",
                    "2026-05-29 00:00:00",
                ],
            ),
            // The last Thursday of the month at midnight.
            (
                "0 0 0 * * THUL",
                [
                    "2026-03-26 00:00:00",
                    "2026-04-30 00:00:00",
                    "2026-05-28 00:00:00",
                ],
            ),
            // The first weekday of the month at midnight (the 1st of March is a Sunday).
            (
                "0 0 0 1W * *",
                [
                    "2026-03-02 00:00:00",
                    "2026-04-01 00:00:00",
                    "2026-05-01 00:00:00",
                ],
            ),
            // The last weekday of the month at midnight (the 31st of May is a Sunday).
            (
                "0 0 0 LW * *",
                [
                    "2026-03-31 00:00:00",
                    "2026-04-30 00:00:00",
                    "2026-05-29 00:00:00",
                ],
            ),
            // The second Friday in the month at midnight.
            (
                "0 0 0 ? * 5#2",
                [
                    "2026-03-13 00:00:00",
                    "2026-04-10 00:00:00",
                    "2026-05-08 00:00:00",
                ],
            ),
            // The first Monday in the month at midnight.
            (
                "0 0 0 ? * MON#1",
                [
                    "2026-03-02 00:00:00",
                    "2026-04-06 00:00:00",
                    "2026-05-04 00:00:00",
                ],
            ),
            // The macros.
            (
                "@hourly",
                [
                    "2026-03-01 01:00:00",
                    "2026-03-01 02:00:00",
                    "2026-03-01 03:00:00",
                ],
            ),
            (
                "@daily",
                [
                    "2026-03-02 00:00:00",
                    "2026-03-03 00:00:00",
                    "2026-03-04 00:00:00",
                ],
            ),
            (
                "@midnight",
                [
                    "2026-03-02 00:00:00",
                    "2026-03-03 00:00:00",
                    "2026-03-04 00:00:00",
                ],
            ),
            (
                "@weekly",
                [
                    "2026-03-08 00:00:00",
                    "2026-03-15 00:00:00",
                    "2026-03-22 00:00:00",
                ],
            ),
            (
                "@monthly",
                [
                    "2026-04-01 00:00:00",
                    "2026-05-01 00:00:00",
                    "2026-06-01 00:00:00",
                ],
            ),
            (
                "@yearly",
                [
                    "2027-01-01 00:00:00",
                    "2028-01-01 00:00:00",
                    "2029-01-01 00:00:00",
                ],
            ),
            (
                "@ANNUALLY",
                [
                    "2027-01-01 00:00:00",
                    "2028-01-01 00:00:00",
                    "2029-01-01 00:00:00",
                ],
            ),
            // Lower case, as typed by hand.
            (
                "0 0 0 ? * thul",
                [
                    "2026-03-26 00:00:00",
                    "2026-04-30 00:00:00",
                    "2026-05-28 00:00:00",
                ],
            ),
            (
                "0 0 0 lw * *",
                [
                    "2026-03-31 00:00:00",
                    "2026-04-30 00:00:00",
                    "2026-05-29 00:00:00",
                ],
            ),
            (
                "0 0 0 l-3 * *",
                [
                    "2026-03-28 00:00:00",
                    "2026-04-27 00:00:00",
                    "2026-05-28 00:00:00",
                ],
            ),
            // A step from a start, and from a start that is not the field's first value.
            (
                "0/15 * * * * *",
                [
                    "2026-03-01 00:00:15",
                    "2026-03-01 00:00:30",
                    "2026-03-01 00:00:45",
                ],
            ),
            (
                "0 0/5 * * * *",
                [
                    "2026-03-01 00:05:00",
                    "2026-03-01 00:10:00",
                    "2026-03-01 00:15:00",
                ],
            ),
            (
                "0 10/20 * * * *",
                [
                    "2026-03-01 00:10:00",
                    "2026-03-01 00:30:00",
                    "2026-03-01 00:50:00",
                ],
            ),
            // A step from a start where only that value fits, and a range of one value.
            (
                "0 50/15 * * * *",
                [
                    "2026-03-01 00:50:00",
                    "2026-03-01 01:50:00",
                    "2026-03-01 02:50:00",
                ],
            ),
            (
                "0 0 5-5 * * *",
                [
                    "2026-03-01 05:00:00",
                    "2026-03-02 05:00:00",
                    "2026-03-03 05:00:00",
                ],
            ),
            // Every second of the third-to-last day (the search skips whole days), and L-0.
            (
                "* * * L-3 * *",
                [
                    "2026-03-28 00:00:00",
                    "2026-03-28 00:00:01",
                    "2026-03-28 00:00:02",
                ],
            ),
            (
                "0 0 0 L-0 * *",
                [
                    "2026-03-31 00:00:00",
                    "2026-04-30 00:00:00",
                    "2026-05-31 00:00:00",
                ],
            ),
            // February's last day, in a leap year and not.
            (
                "0 0 0 L-1 FEB * 2027-2029",
                [
                    "2027-02-27 00:00:00",
                    "2028-02-28 00:00:00",
                    "2029-02-27 00:00:00",
                ],
            ),
            // Names in any case, Sunday as 7, and a year.
            (
                "0 0 12 * jan,Mar sun",
                [
                    "2026-03-01 12:00:00",
                    "2026-03-08 12:00:00",
                    "2026-03-15 12:00:00",
                ],
            ),
            (
                "0 0 12 * * 7",
                [
                    "2026-03-01 12:00:00",
                    "2026-03-08 12:00:00",
                    "2026-03-15 12:00:00",
                ],
            ),
            (
                "0 0 0 1 1 * 2028-2030",
                [
                    "2028-01-01 00:00:00",
                    "2029-01-01 00:00:00",
                    "2030-01-01 00:00:00",
                ],
            ),
            // Both day fields given: a day must match both (the 1st that is a Monday).
            (
                "0 0 0 1 * MON",
                [
                    "2026-06-01 00:00:00",
                    "2027-02-01 00:00:00",
                    "2027-03-01 00:00:00",
                ],
            ),
        ];
        for (expression, expected) in table {
            assert_eq!(next_three(expression), *expected, "{expression}");
        }
    }

    /// An `L-n` no month has (the 30th before the last day of February) ends the schedule
    /// instead of searching for ever.
    #[test]
    fn a_day_no_month_has_ends_the_schedule() {
        let cron = CronExpression::parse("0 0 0 L-30 FEB *").unwrap();
        let after = Utc.with_ymd_and_hms(2026, 3, 1, 0, 0, 0).unwrap();
        assert_eq!(cron.next_after(&Tz::UTC, after), None);
        // Only months of 31 days have a day 30 days before their last: the 1st.
        assert_eq!(
            CronExpression::parse("0 0 0 L-30 * *")
                .unwrap()
                .next_after(&Tz::UTC, after),
            Some(Utc.with_ymd_and_hms(2026, 5, 1, 0, 0, 0).unwrap())
        );
    }

    /// A schedule shows its expression as it was written.
    #[test]
    fn a_schedule_shows_its_expression_as_written() {
        let schedule = crate::Schedule::cron("0 0/5 * * * mon-fri", Tz::Europe__Berlin).unwrap();
        assert_eq!(
            format!("{schedule:?}"),
            "Cron { expression: \"0 0/5 * * * mon-fri\", zone: \"Europe/Berlin\" }"
        );
    }

    /// Each refusal names the field, the value and what the field takes.
    #[test]
    fn a_refusal_names_the_field_the_value_and_the_rule() {
        let cases = [
            (
                "0 0 25 * * *",
                "hour 25 is out of range: the hour field takes 0 to 23",
            ),
            (
                "0 0 8 * * MON-FRY",
                "day-of-week \"FRY\" is not a number or a name: the day-of-week field takes 0 to \
                 7 or a name, SUN to SAT (0 and 7 are both Sunday)",
            ),
            (
                "0 0 0 32 * *",
                "day-of-month 32 is out of range: the day-of-month field takes 1 to 31",
            ),
            (
                "0 0 0 1 13 *",
                "month 13 is out of range: the month field takes 1 to 12 or a name, JAN to DEC",
            ),
            (
                "60 * * * * *",
                "second 60 is out of range: the second field takes 0 to 59",
            ),
            (
                "0 x * * * *",
                "minute \"x\" is not a number: the minute field takes 0 to 59",
            ),
            (
                "0 0 0 ? * mon#9",
                "day-of-week mon#9: the week after # must be 1 to 5",
            ),
            (
                "0 0 0 ? * fryL",
                "day-of-week \"fry\" is not a number or a name",
            ),
            (
                "0 0 0 l-40 * *",
                "day-of-month l-40: the days before the last day",
            ),
            (
                "0 */0 * * * *",
                "minute */0: the step after / must be a whole number of at least 1, not \"0\"",
            ),
            (
                "0 0 10-8 * * *",
                "hour range 10-8 runs backwards: write the lower bound first",
            ),
            (
                "? * * * * *",
                "? is for the day-of-month and day-of-week fields only, not the second field",
            ),
            (
                "0 0 0 L,15 * *",
                "day-of-month L must be the field's only value",
            ),
            (
                "0 0 0 ? * 5#6",
                "day-of-week 5#6: the week after # must be 1 to 5",
            ),
            (
                "0 0 0 L-31 * *",
                "day-of-month L-31: the days before the last day (L-n) must be 0 to 30",
            ),
            ("0 0 0 ? * L", "day-of-week L needs a weekday before it"),
            ("0 0 0 1,,2 * *", "day-of-month field has an empty value"),
            (
                "0 0 0 1 1 * 2100",
                "year 2100 is out of range: the year field takes 1970 to 2099",
            ),
            (
                "@every",
                "@every is not a macro; the macros are @yearly, @annually",
            ),
            (
                "0 3 * * *",
                "it has 5 fields; six are needed, seconds first",
            ),
            ("0 0 0 1 1 * 2026 x", "it has 8 fields"),
        ];
        for (expression, expected) in cases {
            let error = CronExpression::parse(expression)
                .err()
                .unwrap_or_else(|| panic!("{expression} was accepted"));
            let shown = error.to_string();
            assert!(
                shown.starts_with(&format!("cron expression {expression:?} is invalid: ")),
                "{shown}"
            );
            assert!(shown.contains(expected), "{expression}: {shown}");
        }
    }
}
