//! The one error type every lock operation returns, so callers match on meaning, not on backend.

use std::error::Error as StdError;
use std::fmt;
use std::time::Duration;

use thiserror::Error;

use shedlock_configuration::ConfigurationError;
use shedlock_configuration::ShownName;

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
    /// Listing locks, for an operator.
    List,
    /// Reading one lock, for an operator.
    Inspect,
    /// Freeing a lock on an operator's request. A failed one may or may not have freed it.
    ForceUnlock,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Operation::Connect => "connect",
            Operation::Acquire => "acquire",
            Operation::Extend => "extend",
            Operation::Release => "release",
            Operation::List => "list",
            Operation::Inspect => "inspect",
            Operation::ForceUnlock => "force-unlock",
        })
    }
}

/// What kind of failure a [`LockError`] is: what the caller can do about it, whatever the
/// backend.
///
/// The message says what happened in words; the kind is what code branches on (retry, alert,
/// map to a status). [`ErrorKind::retryable`] says whether trying again can help.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A setting, the lock configuration, or the storage's schema breaks a rule (a missing
    /// table, a column of another type, a URL of another backend, a TLS feature left out of
    /// the build). Nothing about the lock was written; the deployment must change.
    Configuration,
    /// This request (a name, an acquisition id, a page cursor, a holder) cannot be stored or
    /// understood by this provider; it was refused before anything was sent.
    InvalidRequest,
    /// The provider does not offer this operation.
    Unsupported,
    /// [`extend_active_lock`](crate::extend_active_lock) or
    /// [`assert_locked`](crate::assert_locked) was called outside any task run under a lock.
    NoActiveLock,
    /// The backend could not be reached (refused connection, unknown host, failed handshake,
    /// no connection free in time): the request never reached it, so nothing was written. A
    /// read (list, inspect) that got no answer is this kind as well, whatever happened to the
    /// request: a read writes nothing. Trying again may work.
    Unreachable,
    /// The backend refused the credentials, or the user lacks a permission the operation
    /// needs. Trying again will not help until the credentials or grants change.
    CredentialsRefused,
    /// The request was sent and no answer that can be trusted came back (no answer in time, a
    /// connection lost mid-request, an error from the server mid-operation): whether it took
    /// effect is unknown. Trying again may work; a lock it may have taken expires at
    /// `lock_at_most_for`.
    OutcomeUnknown,
    /// The backend holds data under the lock's key that this provider did not write or cannot
    /// read (another application's record, a counter that is not a number). Nothing was
    /// overwritten; someone must look.
    CorruptData,
    /// A limit was reached: a fencing counter at its maximum, a holder longer than the storage
    /// holds, a backend's own quota.
    Limit,
}

impl ErrorKind {
    /// Whether the same request, made again later, can succeed: only when the backend could
    /// not be reached or did not answer. Every other kind needs a change first.
    pub fn retryable(self) -> bool {
        matches!(self, ErrorKind::Unreachable | ErrorKind::OutcomeUnknown)
    }

    /// The kind of a client's I/O error during `operation`: [`Unreachable`](Self::Unreachable)
    /// when no connection was ever made (refused, no route, no address), else a connection
    /// lost with a request on it, [`OutcomeUnknown`](Self::OutcomeUnknown) (see
    /// [`during`](Self::during)). Every provider reads its client's I/O errors this way.
    pub fn of_io(error: std::io::ErrorKind, operation: Operation) -> ErrorKind {
        use std::io::ErrorKind as Io;
        match error {
            Io::ConnectionRefused
            | Io::HostUnreachable
            | Io::NetworkUnreachable
            | Io::AddrNotAvailable => ErrorKind::Unreachable,
            _ => ErrorKind::OutcomeUnknown.during(operation),
        }
    }

    /// This kind as it applies to `operation`: a connect concerns no lock, and a read (list,
    /// inspect) writes nothing, so either one whose outcome is unknown is a server that could
    /// not be reached. Only a write (acquire, extend, release, force-unlock) can leave an
    /// outcome unknown. [`LockError::kind`] applies this to every error, however its provider
    /// classified it.
    pub fn during(self, operation: Operation) -> ErrorKind {
        match (operation, self) {
            (
                Operation::Connect | Operation::List | Operation::Inspect,
                ErrorKind::OutcomeUnknown,
            ) => ErrorKind::Unreachable,
            (_, kind) => kind,
        }
    }

    /// The kind in a few words, as logs and reports write it ("outcome unknown").
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Configuration => "invalid configuration",
            ErrorKind::InvalidRequest => "invalid request",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::NoActiveLock => "no active lock",
            ErrorKind::Unreachable => "unreachable",
            ErrorKind::CredentialsRefused => "credentials refused",
            ErrorKind::OutcomeUnknown => "outcome unknown",
            ErrorKind::CorruptData => "corrupt data",
            ErrorKind::Limit => "limit reached",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an operation that got no answer leaves behind, in the words of its error.
fn unanswered(operation: Operation) -> &'static str {
    match ErrorKind::OutcomeUnknown.during(operation) {
        ErrorKind::OutcomeUnknown => "its outcome is unknown",
        _ => "it changed nothing",
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
    #[error(
        "lock name {} is not accepted by the {provider} provider: {rule}",
        ShownName(name)
    )]
    InvalidName {
        /// The provider that refused the name.
        provider: &'static str,
        /// The name as given.
        name: String,
        /// The rule the name broke.
        rule: String,
    },
    /// The request is malformed (an acquisition id or a page cursor this provider never gives,
    /// text the backend cannot hold): it was refused before anything was sent, so nothing was
    /// read or written and retrying the same request cannot succeed.
    #[error(
        "{provider} refused {} before sending anything: {message}",
        Attempt(*operation, name)
    )]
    InvalidRequest {
        /// The provider that refused the request.
        provider: &'static str,
        /// What was asked for.
        operation: Operation,
        /// The lock concerned; empty for a listing, and then left out of the message.
        name: String,
        /// What was malformed (the value, quoted) and the rule it broke.
        message: String,
    },
    /// The backend failed or answered something the provider does not understand.
    ///
    /// The client error is the `source()`, not part of `message`, so a report that walks the
    /// chain (`anyhow`'s `{:#}`, the executor's log events) shows each cause once.
    #[error("{provider}: {} failed: {message}", Attempt(*operation, name))]
    Backend {
        /// What kind of failure it is.
        kind: ErrorKind,
        /// The provider that talked to the backend.
        provider: &'static str,
        /// What was being done.
        operation: Operation,
        /// The lock concerned; empty for [`Operation::Connect`], which concerns no lock, and
        /// then left out of the message.
        name: String,
        /// What went wrong, and where useful what to do about it.
        message: String,
        /// The client error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// The backend gave no answer in time; whether a write (acquire, extend, release,
    /// force-unlock) took effect is unknown. A connect or a read changed nothing.
    #[error(
        "{provider}: {} got no answer within {after:?}; {}",
        Attempt(*operation, name),
        unanswered(*operation)
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
    #[error("{provider} does not support {operation} (lock {})", ShownName(name))]
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

/// "acquire of lock \"report\"", or just "connect" for an operation on no lock.
struct Attempt<'a>(Operation, &'a str);

impl fmt::Display for Attempt<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt(operation, "") => write!(f, "{operation}"),
            Attempt(operation, name) => write!(f, "{operation} of lock {}", ShownName(name)),
        }
    }
}

impl LockError {
    /// What kind of failure this is; see [`ErrorKind`].
    pub fn kind(&self) -> ErrorKind {
        match self {
            LockError::Configuration(_) => ErrorKind::Configuration,
            LockError::InvalidName { .. } | LockError::InvalidRequest { .. } => {
                ErrorKind::InvalidRequest
            }
            // However the provider classified it: a connect or a read that got no answer has
            // no outcome to be unknown (see `ErrorKind::during`).
            LockError::Backend {
                kind, operation, ..
            } => kind.during(*operation),
            LockError::Timeout { operation, .. } => ErrorKind::OutcomeUnknown.during(*operation),
            LockError::Unsupported { .. } => ErrorKind::Unsupported,
            LockError::NoActiveLock => ErrorKind::NoActiveLock,
        }
    }

    /// Whether the same request, made again later, can succeed
    /// ([`ErrorKind::retryable`] of [`kind`](Self::kind)).
    pub fn retryable(&self) -> bool {
        self.kind().retryable()
    }

    /// A backend error of `kind` with its client error as the source.
    pub fn backend(
        kind: ErrorKind,
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        LockError::Backend {
            kind,
            provider,
            operation,
            name: name.into(),
            message: message.into(),
            source: Some(source.into()),
        }
    }

    /// A backend error of `kind` with no client error behind it (an unexpected answer, a bad
    /// schema).
    pub fn backend_message(
        kind: ErrorKind,
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        LockError::Backend {
            kind,
            provider,
            operation,
            name: name.into(),
            message: message.into(),
            source: None,
        }
    }

    /// A malformed request refused before anything was sent; `message` names the value and
    /// the rule it broke.
    pub fn invalid_request(
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        LockError::InvalidRequest {
            provider,
            operation,
            name: name.into(),
            message: message.into(),
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

    /// No answer within `after`: the request may or may not have taken effect.
    pub fn timeout(
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
        after: Duration,
    ) -> Self {
        LockError::Timeout {
            provider,
            operation,
            name: name.into(),
            after,
        }
    }

    /// An operation this provider does not offer (extend where
    /// [`Capabilities::extend`](crate::Capabilities::extend) is `false`).
    pub fn unsupported(
        provider: &'static str,
        operation: Operation,
        name: impl Into<String>,
    ) -> Self {
        LockError::Unsupported {
            provider,
            operation,
            name: name.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LockConfiguration;

    #[test]
    fn every_kind_an_author_returns_has_a_constructor() {
        let timeout = LockError::timeout("p", Operation::Release, "job", Duration::from_secs(2));
        assert_eq!(
            timeout.to_string(),
            "p: release of lock \"job\" got no answer within 2s; its outcome is unknown"
        );
        let unsupported = LockError::unsupported("p", Operation::Extend, "job");
        assert!(matches!(
            unsupported,
            LockError::Unsupported { provider: "p", operation: Operation::Extend, ref name } if name == "job"
        ));
    }

    /// Each message of `error`'s chain, outermost first.
    fn chain(error: &(dyn StdError + 'static)) -> Vec<String> {
        std::iter::successors(Some(error), |&error| error.source())
            .map(ToString::to_string)
            .collect()
    }

    fn assert_said_once(error: &(dyn StdError + 'static)) {
        let messages = chain(error);
        for (outer, message) in messages.iter().enumerate() {
            for inner in &messages[outer + 1..] {
                assert!(
                    !message.contains(inner.as_str()),
                    "{inner:?} is repeated in {message:?}"
                );
            }
        }
    }

    #[test]
    fn every_error_has_a_kind_and_only_a_missing_answer_is_retryable() {
        let backend = |kind| LockError::backend_message(kind, "p", Operation::Acquire, "job", "m");
        let kinds = [
            (ErrorKind::Configuration, false),
            (ErrorKind::InvalidRequest, false),
            (ErrorKind::Unsupported, false),
            (ErrorKind::NoActiveLock, false),
            (ErrorKind::Unreachable, true),
            (ErrorKind::CredentialsRefused, false),
            (ErrorKind::OutcomeUnknown, true),
            (ErrorKind::CorruptData, false),
            (ErrorKind::Limit, false),
        ];
        for (kind, retryable) in kinds {
            assert_eq!(backend(kind).kind(), kind);
            assert_eq!(backend(kind).retryable(), retryable, "{kind}");
            assert_eq!(kind.retryable(), retryable, "{kind}");
        }
        let configuration: LockError = LockConfiguration::parse("job", "10s", "1m")
            .unwrap_err()
            .into();
        let by_variant = [
            (configuration, ErrorKind::Configuration),
            (
                LockError::invalid_name("p", "a/b", "no slash"),
                ErrorKind::InvalidRequest,
            ),
            (
                LockError::invalid_request("p", Operation::Release, "job", "bad id"),
                ErrorKind::InvalidRequest,
            ),
            (
                LockError::timeout("p", Operation::Acquire, "job", Duration::from_secs(1)),
                ErrorKind::OutcomeUnknown,
            ),
            (
                LockError::timeout("p", Operation::Connect, "", Duration::from_secs(1)),
                ErrorKind::Unreachable,
            ),
            (
                LockError::unsupported("p", Operation::Extend, "job"),
                ErrorKind::Unsupported,
            ),
            (LockError::NoActiveLock, ErrorKind::NoActiveLock),
        ];
        for (error, kind) in by_variant {
            assert_eq!(error.kind(), kind, "{error}");
        }
        assert_eq!(ErrorKind::OutcomeUnknown.to_string(), "outcome unknown");
        use std::io::ErrorKind as Io;
        for (io, operation, kind) in [
            (
                Io::ConnectionRefused,
                Operation::Acquire,
                ErrorKind::Unreachable,
            ),
            (
                Io::HostUnreachable,
                Operation::Release,
                ErrorKind::Unreachable,
            ),
            (
                Io::NetworkUnreachable,
                Operation::Extend,
                ErrorKind::Unreachable,
            ),
            (
                Io::AddrNotAvailable,
                Operation::List,
                ErrorKind::Unreachable,
            ),
            (
                Io::ConnectionReset,
                Operation::Acquire,
                ErrorKind::OutcomeUnknown,
            ),
            (
                Io::ConnectionReset,
                Operation::Connect,
                ErrorKind::Unreachable,
            ),
        ] {
            assert_eq!(
                ErrorKind::of_io(io, operation),
                kind,
                "{io:?} on {operation}"
            );
        }
        assert_eq!(
            ErrorKind::CredentialsRefused.during(Operation::Connect),
            ErrorKind::CredentialsRefused
        );
        for write in [
            Operation::Acquire,
            Operation::Extend,
            Operation::Release,
            Operation::ForceUnlock,
        ] {
            assert_eq!(
                ErrorKind::OutcomeUnknown.during(write),
                ErrorKind::OutcomeUnknown,
                "{write}"
            );
        }
        for no_write in [Operation::Connect, Operation::List, Operation::Inspect] {
            assert_eq!(
                ErrorKind::OutcomeUnknown.during(no_write),
                ErrorKind::Unreachable,
                "{no_write}"
            );
            assert_eq!(
                ErrorKind::CorruptData.during(no_write),
                ErrorKind::CorruptData,
                "{no_write}"
            );
        }
        assert_eq!(
            ErrorKind::CredentialsRefused.as_str(),
            "credentials refused"
        );
    }

    #[test]
    fn a_read_that_got_no_answer_is_unreachable_however_its_provider_classified_it() {
        let lost = |operation| {
            LockError::backend(
                ErrorKind::OutcomeUnknown,
                "redis",
                operation,
                "job",
                "the connection was lost",
                std::io::Error::from(std::io::ErrorKind::ConnectionReset),
            )
        };
        assert_eq!(lost(Operation::List).kind(), ErrorKind::Unreachable);
        assert_eq!(lost(Operation::Inspect).kind(), ErrorKind::Unreachable);
        assert_eq!(
            lost(Operation::ForceUnlock).kind(),
            ErrorKind::OutcomeUnknown
        );
        let timeout = |operation| LockError::Timeout {
            provider: "redis",
            operation,
            name: "job".to_owned(),
            after: Duration::from_secs(5),
        };
        assert_eq!(timeout(Operation::Inspect).kind(), ErrorKind::Unreachable);
        assert_eq!(
            timeout(Operation::List).to_string(),
            "redis: list of lock \"job\" got no answer within 5s; it changed nothing"
        );
        assert_eq!(
            timeout(Operation::ForceUnlock).to_string(),
            "redis: force-unlock of lock \"job\" got no answer within 5s; its outcome is unknown"
        );
        assert_eq!(
            timeout(Operation::Acquire).kind(),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(timeout(Operation::Connect).kind(), ErrorKind::Unreachable);
    }

    #[test]
    fn an_error_on_no_lock_names_no_lock() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let error = LockError::backend(
            ErrorKind::Unreachable,
            "postgres",
            Operation::Connect,
            "",
            "cannot connect to 127.0.0.1:5432",
            refused,
        );
        assert_eq!(
            error.to_string(),
            "postgres: connect failed: cannot connect to 127.0.0.1:5432"
        );
        let timeout = LockError::Timeout {
            provider: "redis",
            operation: Operation::Connect,
            name: String::new(),
            after: Duration::from_secs(5),
        };
        assert_eq!(
            timeout.to_string(),
            "redis: connect got no answer within 5s; it changed nothing"
        );
        let on_a_lock = LockError::backend_message(
            ErrorKind::CorruptData,
            "redis",
            Operation::Acquire,
            "report",
            "bad",
        );
        assert_eq!(
            on_a_lock.to_string(),
            "redis: acquire of lock \"report\" failed: bad"
        );
    }

    #[test]
    fn a_malformed_request_names_the_provider_the_operation_and_the_rule() {
        let error = LockError::invalid_request(
            "etcd",
            Operation::ForceUnlock,
            "report",
            "the acquisition id \"x\" is not <create revision>.<mod revision>",
        );
        assert_eq!(
            error.to_string(),
            "etcd refused force-unlock of lock \"report\" before sending anything: the \
             acquisition id \"x\" is not <create revision>.<mod revision>"
        );
        let listing = LockError::invalid_request("redis", Operation::List, "", "bad cursor");
        assert_eq!(
            listing.to_string(),
            "redis refused list before sending anything: bad cursor"
        );
        assert!(StdError::source(&listing).is_none());
    }

    #[test]
    fn a_long_name_is_quoted_by_its_head_and_length() {
        // Quoted whole up to 200 characters; past that, the first 64 and the length.
        let longest = "é".repeat(200);
        let error = LockError::invalid_name("etcd", &longest, "a rule");
        assert_eq!(
            error.to_string(),
            format!("lock name {longest:?} is not accepted by the etcd provider: a rule")
        );
        let longer = format!("{longest}x");
        let head = "é".repeat(64);
        let error = LockError::invalid_name("etcd", &longer, "a rule");
        assert_eq!(
            error.to_string(),
            format!(
                "lock name {head:?}... (201 characters) is not accepted by the etcd provider: a rule"
            )
        );
        let LockError::InvalidName { name, .. } = &error else {
            unreachable!()
        };
        assert_eq!(name, &longer, "the field keeps the whole name");
        let timeout = LockError::Timeout {
            provider: "redis",
            operation: Operation::Acquire,
            name: longer.clone(),
            after: Duration::from_secs(1),
        };
        assert_eq!(
            timeout.to_string(),
            format!(
                "redis: acquire of lock {head:?}... (201 characters) got no answer within 1s; its outcome is unknown"
            )
        );
        let unsupported = LockError::Unsupported {
            provider: "memory",
            operation: Operation::Extend,
            name: longer,
        };
        assert_eq!(
            unsupported.to_string(),
            format!("memory does not support extend (lock {head:?}... (201 characters))")
        );
    }

    #[test]
    fn each_cause_appears_once_in_the_chain() {
        let refused = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let backend = LockError::backend(
            ErrorKind::OutcomeUnknown,
            "postgres",
            Operation::Acquire,
            "job",
            "no answer",
            refused,
        );
        assert_eq!(chain(&backend).len(), 2);
        assert_said_once(&backend);

        let configuration: LockError = LockConfiguration::parse("job", "10", "0")
            .unwrap_err()
            .into();
        assert_eq!(chain(&configuration).len(), 1);
        assert!(
            configuration.to_string().contains("\"10s\""),
            "{configuration}"
        );
        assert_said_once(&configuration);
    }
}
