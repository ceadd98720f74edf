//! The one error type every lock operation returns, so callers match on meaning, not on backend.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use thiserror::Error;

use crate::configuration::ConfigurationError;

/// A boxed error from a backend client, kept as the `source` of a [`LockError`].
pub type BoxError = Box<dyn StdError + Send + Sync + 'static>;

/// Which lock operation failed: it tells the caller what state the lock may be in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Opening a connection or checking the schema.
    Connect,
    /// Taking a lock. A failed acquire has an unknown outcome: the task must not run.
    Acquire,
    /// Extending a held lock.
    Extend,
    /// Releasing a held lock. A failed release leaves the lock until `lock_at_most_for`.
    Release,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Connect => "connect",
            Operation::Acquire => "acquire",
            Operation::Extend => "extend",
            Operation::Release => "release",
        })
    }
}

/// Why a lock operation did not give an answer.
///
/// "Someone else holds the lock" is not an error: it is
/// [`Acquisition::NotAcquired`](crate::Acquisition::NotAcquired). Every variant here means the
/// outcome is unknown or the request was refused, and the executor does not run the task.
///
/// Messages never contain credentials: providers build them from redacted text.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum LockError {
    /// The lock configuration broke a rule of [`LockConfiguration`](crate::LockConfiguration).
    #[error(transparent)]
    Configuration(#[from] ConfigurationError),
    /// The provider cannot store this name as given (too long, or a character it reserves).
    /// Nothing was written.
    #[error("lock name {name:?} is not accepted by the {provider} provider: {rule}")]
    InvalidName {
        /// The provider that refused the name.
        provider: &'static str,
        /// The name as given.
        name: String,
        /// The rule the name broke.
        rule: String,
    },
    /// The backend failed or answered something the provider does not understand.
    #[error("{provider}: {operation} of lock {name:?} failed: {message}")]
    Backend {
        /// The provider that talked to the backend.
        provider: &'static str,
        /// What was being done.
        operation: Operation,
        /// The lock concerned (empty for [`Operation::Connect`]).
        name: String,
        /// What went wrong, and where useful what to do about it.
        message: String,
        /// The client error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend gave no answer in time; whether the operation took effect is unknown.
    #[error(
        "{provider}: {operation} of lock {name:?} got no answer within {after:?}; its outcome is unknown"
    )]
    Timeout {
        /// The provider that talked to the backend.
        provider: &'static str,
        /// What was being done.
        operation: Operation,
        /// The lock concerned.
        name: String,
        /// The time limit that ran out.
        after: Duration,
    },
    /// The provider does not offer this operation (for example extend on a backend without it).
    #[error("{provider} does not support {operation} (lock {name:?})")]
    Unsupported {
        /// The provider asked.
        provider: &'static str,
        /// What was asked for.
        operation: Operation,
        /// The lock concerned.
        name: String,
    },
    /// [`extend_active_lock`](crate::extend_active_lock) or
    /// [`assert_locked`](crate::assert_locked) was called outside any task the executor runs
    /// under a lock.
    #[error(
        "no lock is held by the current task; call this from inside a task run by LockingTaskExecutor"
    )]
    NoActiveLock,
}

impl LockError {
    /// A backend error with its client error as the source.
    pub fn backend(
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        LockError::Backend {
            provider,
            operation,
            name: name.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A backend error with no client error behind it (an unexpected answer, a bad schema).
    pub fn backend_message(
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        LockError::Backend {
            provider,
            operation,
            name: name.into(),
            message: message.into(),
            source: None,
        }
    }

    /// A refused name; `rule` says what the provider requires.
    pub fn invalid_name(provider: &'static str, name: &str, rule: impl Into<String>) -> Self {
        LockError::InvalidName {
            provider,
            name: name.to_owned(),
            rule: rule.into(),
        }
    }
}
