//! What a task asks of its lock: a name and two time bounds, checked once at construction.

use std::time::Duration;

use thiserror::Error;

use crate::duration::{DurationParseError, parse_duration};
use crate::shown_name::ShownName;

/// A lock request that broke one of the rules of [`LockConfiguration::new`].
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ConfigurationError {
    /// Every lock needs a name: the name is the lock.
    #[error("lock name must not be empty")]
    EmptyName,
    /// A lock that is held for no time at all protects nothing.
    #[error("lock {}: lock_at_most_for must be greater than zero", ShownName(name))]
    ZeroLockAtMostFor {
        /// The lock the configuration was for.
        name: String,
    },
    /// The minimum hold cannot exceed the safety-net maximum.
    #[error(
        "lock {}: lock_at_least_for ({lock_at_least_for:?}) must not exceed lock_at_most_for ({lock_at_most_for:?})",
        ShownName(name)
    )]
    LockAtLeastExceedsAtMost {
        /// The lock the configuration was for.
        name: String,
        /// The requested minimum hold.
        lock_at_least_for: Duration,
        /// The requested maximum hold.
        lock_at_most_for: Duration,
    },
    /// One of the durations was given as text that does not parse.
    ///
    /// The parse error is part of this message, not its `source()`, so a report that prints
    /// the whole chain says it once.
    #[error("lock {}: {field}: {error}", ShownName(name))]
    InvalidDuration {
        /// The lock the configuration was for.
        name: String,
        /// `lock_at_most_for` or `lock_at_least_for`.
        field: &'static str,
        /// What was wrong with the text.
        error: DurationParseError,
    },
}

/// A validated lock request: `name`, held at most `lock_at_most_for`, at least `lock_at_least_for`.
///
/// `lock_at_most_for` is the safety net for a holder that dies: the lock frees itself then.
/// Pick it well above the task's longest run, or two nodes may run the task at once.
/// `lock_at_least_for` keeps the lock after an early finish, so nodes whose clocks or schedules
/// are a little apart do not run the same tick twice.
///
/// # Example
///
/// ```
/// use std::time::Duration;
/// use shedlock_configuration::{ConfigurationError, LockConfiguration};
///
/// // Held at most 10 minutes; kept at least 30 s after an early finish.
/// let report = LockConfiguration::parse("nightly-report", "PT10M", "30s")?;
/// assert_eq!(report.lock_at_most_for(), Duration::from_secs(600));
///
/// // A name computed at run time: one lock per tenant.
/// let tenant = "acme";
/// let per_tenant = LockConfiguration::new(
///     format!("invoices-{tenant}"),
///     Duration::from_secs(300),
///     Duration::ZERO,
/// )?;
/// assert_eq!(per_tenant.name(), "invoices-acme");
///
/// // The rules are checked here, not when the lock is taken.
/// assert!(matches!(
///     LockConfiguration::parse("report", "30s", "1m"),
///     Err(ConfigurationError::LockAtLeastExceedsAtMost { .. })
/// ));
/// // A bare number has no unit: "10ms" or "10s"?
/// assert!(LockConfiguration::parse("report", "10", "0").is_err());
/// # Ok::<(), ConfigurationError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockConfiguration {
    name: String,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
}

impl LockConfiguration {
    /// Checks the rules: the name is not empty, `lock_at_most_for > 0`, and
    /// `lock_at_least_for <= lock_at_most_for`. Providers add their own limits (name length,
    /// allowed characters) when the lock is taken.
    pub fn new(
        name: impl Into<String>,
        lock_at_most_for: Duration,
        lock_at_least_for: Duration,
    ) -> Result<Self, ConfigurationError> {
        let name = name.into();
        check_rules(&name, lock_at_most_for, lock_at_least_for)?;
        Ok(Self {
            name,
            lock_at_most_for,
            lock_at_least_for,
        })
    }

    /// Like [`new`](Self::new), with durations as text (`"PT30S"`, `"5m"`, `"500ms"`); see
    /// [`parse_duration`](crate::parse_duration). A bare number other than `"0"` is refused:
    /// Java ShedLock reads `"10"` as ten milliseconds, which is rarely what was meant.
    pub fn parse(
        name: impl Into<String>,
        lock_at_most_for: &str,
        lock_at_least_for: &str,
    ) -> Result<Self, ConfigurationError> {
        let name = name.into();
        let parse = |field, text| {
            parse_duration(text).map_err(|error| ConfigurationError::InvalidDuration {
                name: name.clone(),
                field,
                error,
            })
        };
        let at_most = parse("lock_at_most_for", lock_at_most_for)?;
        let at_least = parse("lock_at_least_for", lock_at_least_for)?;
        Self::new(name, at_most, at_least)
    }

    /// The lock's name, which is its identity in storage.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How long the lock is held if its holder never releases it.
    pub fn lock_at_most_for(&self) -> Duration {
        self.lock_at_most_for
    }

    /// How long the lock stays held after acquisition even if released earlier.
    pub fn lock_at_least_for(&self) -> Duration {
        self.lock_at_least_for
    }
}

/// The rules of [`LockConfiguration::new`], in the order they are reported.
fn check_rules(
    name: &str,
    lock_at_most_for: Duration,
    lock_at_least_for: Duration,
) -> Result<(), ConfigurationError> {
    if name.is_empty() {
        return Err(ConfigurationError::EmptyName);
    }
    if lock_at_most_for.is_zero() {
        return Err(ConfigurationError::ZeroLockAtMostFor {
            name: name.to_owned(),
        });
    }
    if lock_at_least_for > lock_at_most_for {
        return Err(ConfigurationError::LockAtLeastExceedsAtMost {
            name: name.to_owned(),
            lock_at_least_for,
            lock_at_most_for,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn accepts_valid_bounds() {
        let config = LockConfiguration::new("report", 10 * S, 2 * S).unwrap();
        assert_eq!(config.name(), "report");
        assert_eq!(config.lock_at_most_for(), 10 * S);
        assert_eq!(config.lock_at_least_for(), 2 * S);
        LockConfiguration::new("equal", S, S).unwrap();
        LockConfiguration::new("no-minimum", S, Duration::ZERO).unwrap();
    }

    #[test]
    fn rejects_empty_name() {
        let err = LockConfiguration::new("", S, Duration::ZERO).unwrap_err();
        assert_eq!(err, ConfigurationError::EmptyName);
        assert_eq!(err.to_string(), "lock name must not be empty");
    }

    #[test]
    fn rejects_zero_at_most_naming_the_lock() {
        let err = LockConfiguration::new("report", Duration::ZERO, Duration::ZERO).unwrap_err();
        assert_eq!(
            err.to_string(),
            "lock \"report\": lock_at_most_for must be greater than zero"
        );
    }

    #[test]
    fn rejects_at_least_above_at_most_naming_both() {
        let err = LockConfiguration::new("report", S, 2 * S).unwrap_err();
        assert_eq!(
            err.to_string(),
            "lock \"report\": lock_at_least_for (2s) must not exceed lock_at_most_for (1s)"
        );
    }

    const NS: Duration = Duration::from_nanos(1);

    #[test]
    fn at_least_may_equal_at_most_but_not_exceed_it_by_a_nanosecond() {
        let config = LockConfiguration::new("report", S, S).unwrap();
        assert_eq!(config.lock_at_least_for(), config.lock_at_most_for());
        assert_eq!(
            LockConfiguration::new("report", S, S + NS),
            Err(ConfigurationError::LockAtLeastExceedsAtMost {
                name: "report".to_owned(),
                lock_at_least_for: S + NS,
                lock_at_most_for: S,
            })
        );
    }

    #[test]
    fn the_shortest_hold_is_one_nanosecond() {
        let config = LockConfiguration::new("report", NS, Duration::ZERO).unwrap();
        assert_eq!(config.lock_at_most_for(), NS);
        assert_eq!(
            LockConfiguration::new("report", Duration::ZERO, Duration::ZERO),
            Err(ConfigurationError::ZeroLockAtMostFor {
                name: "report".to_owned()
            })
        );
    }

    #[test]
    fn a_long_name_is_quoted_by_its_head_and_length() {
        let name = "n".repeat(1 << 20);
        let err = LockConfiguration::new(name.as_str(), Duration::ZERO, Duration::ZERO);
        assert_eq!(
            err.unwrap_err().to_string(),
            format!(
                "lock {:?}... (1048576 characters): lock_at_most_for must be greater than zero",
                "n".repeat(64)
            )
        );
        let err = LockConfiguration::new(name.as_str(), S, 2 * S).unwrap_err();
        assert!(
            err.to_string()
                .ends_with("... (1048576 characters): lock_at_least_for (2s) must not exceed lock_at_most_for (1s)"),
            "{err}"
        );
        let err = LockConfiguration::parse(name, "soon", "0").unwrap_err();
        assert!(
            err.to_string()
                .contains("... (1048576 characters): lock_at_most_for: invalid duration \"soon\""),
            "{err}"
        );
    }

    #[test]
    fn a_one_character_name_is_enough() {
        assert_eq!(LockConfiguration::new("r", S, S).unwrap().name(), "r");
    }

    #[test]
    fn the_empty_name_is_reported_before_the_durations() {
        assert_eq!(
            LockConfiguration::new("", Duration::ZERO, 2 * S),
            Err(ConfigurationError::EmptyName)
        );
        assert_eq!(
            LockConfiguration::parse("", "0", "2s"),
            Err(ConfigurationError::EmptyName)
        );
    }

    #[test]
    fn text_durations_follow_the_same_rules() {
        assert_eq!(
            LockConfiguration::parse("report", "0", "0"),
            Err(ConfigurationError::ZeroLockAtMostFor {
                name: "report".to_owned()
            })
        );
        assert_eq!(
            LockConfiguration::parse("report", "PT1S", "1.000000001s")
                .unwrap_err()
                .to_string(),
            "lock \"report\": lock_at_least_for (1.000000001s) must not exceed lock_at_most_for (1s)"
        );
        let config = LockConfiguration::parse("report", "PT1S", "1000ms").unwrap();
        assert_eq!(config.lock_at_least_for(), S);
    }

    #[test]
    fn text_errors_name_the_field_that_does_not_parse() {
        let err = LockConfiguration::parse("report", "PT1M", "P1M").unwrap_err();
        let ConfigurationError::InvalidDuration { name, field, error } = &err else {
            panic!("expected InvalidDuration, got {err:?}");
        };
        assert_eq!((name.as_str(), *field), ("report", "lock_at_least_for"));
        assert_eq!(error.input, "P1M");
        assert!(
            std::error::Error::source(&err).is_none(),
            "said once, in the message"
        );
        assert!(
            err.to_string()
                .starts_with("lock \"report\": lock_at_least_for: invalid duration \"P1M\": "),
            "{err}"
        );
    }

    #[test]
    fn parses_text_durations() {
        let config = LockConfiguration::parse("report", "PT1M", "30s").unwrap();
        assert_eq!(config.lock_at_most_for(), 60 * S);
        assert_eq!(config.lock_at_least_for(), 30 * S);
        let config = LockConfiguration::parse("report", "1500ms", "0").unwrap();
        assert_eq!(config.lock_at_most_for(), Duration::from_millis(1500));
    }

    #[test]
    fn text_errors_name_the_lock_field_and_input() {
        let err = LockConfiguration::parse("report", "5 minutes", "0").unwrap_err();
        let message = err.to_string();
        assert!(
            message
                .starts_with("lock \"report\": lock_at_most_for: invalid duration \"5 minutes\""),
            "{message}"
        );
        let err = LockConfiguration::parse("report", "1m", "2m").unwrap_err();
        assert!(matches!(
            err,
            ConfigurationError::LockAtLeastExceedsAtMost { .. }
        ));
    }
}
