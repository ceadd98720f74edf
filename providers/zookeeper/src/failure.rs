//! How ZooKeeper's errors and running out of time become [`LockError`]s: the kind of each
//! failure, and what it leaves behind for the operation that met it.

use shedlock_core::raw::{bounded, consequence, failure_message};
use shedlock_core::{ErrorKind, LockError, Operation};
use tokio::time::Instant;
use zookeeper_client::Client;

use crate::PROVIDER;
use crate::session::Inner;

/// A request's answer: ZooKeeper's own errors (`NoNode`, `BadVersion`...) are answers the
/// caller looks at; running out of time is a [`LockError`] already.
pub(crate) type Answer<T> = Result<Result<T, zookeeper_client::Error>, LockError>;

impl Inner {
    /// Runs one request within what is left before the operation's `deadline`. Running out is
    /// reported as the operation's timeout, the bound the application set, rather than the
    /// part of it this request had left.
    pub(crate) async fn request<T>(
        &self,
        operation: Operation,
        name: &str,
        deadline: Instant,
        request: impl Future<Output = Result<T, zookeeper_client::Error>>,
    ) -> Answer<T> {
        let left = deadline.saturating_duration_since(Instant::now());
        bounded(PROVIDER, operation, name, left, request)
            .await
            .map_err(|_| LockError::timeout(PROVIDER, operation, name, self.operation_timeout))
    }

    /// A ZooKeeper error that is not an answer about the lock, as the caller reports it.
    pub(crate) async fn failure(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        error: zookeeper_client::Error,
    ) -> LockError {
        self.forget_ended_session(client, &error).await;
        let kind = kind_of(&error);
        LockError::backend(
            kind,
            PROVIDER,
            operation,
            name,
            failure_message("ZooKeeper", &self.endpoint, "failed", operation, kind),
            error,
        )
    }
}

/// `message` followed by what a failure of `kind` leaves behind, for an operation on a lock.
/// A failed connect leaves nothing behind, and `message` already says why it failed.
pub(crate) fn after_failure(message: String, operation: Operation, kind: ErrorKind) -> String {
    match operation {
        Operation::Connect => message,
        other => format!("{message}; {}", consequence(other, kind)),
    }
}

/// What kind of failure a ZooKeeper error is, for a request sent in an open session.
///
/// - refused authentication (`AuthFailed`) or an ACL that denies the user (`NoAuth`):
///   [`ErrorKind::CredentialsRefused`];
/// - no server reachable (`NoHosts`), and a session that had ended (`SessionExpired`,
///   `SessionMoved`, `ClientClosed`): [`ErrorKind::Unreachable`]. ZooKeeper runs no request of
///   an ended session: the client fails those it had not sent, and the server answers the ones
///   it had with this error after having answered every earlier one, so nothing was written
///   (the premise on which an acquire or release refused this way is sent again in a new
///   session);
/// - a path or ACL the client or server refuses (`BadArguments`, `InvalidAcl`), and a request
///   the server does not implement (`Unimplemented`, a server too old):
///   [`ErrorKind::Configuration`];
/// - a quota on the root (`QuotaExceeded`): [`ErrorKind::Limit`];
/// - everything else, a lost connection (`ConnectionLoss`) above all, is an error after the
///   request may have been sent: [`ErrorKind::OutcomeUnknown`].
///
/// Opening a session classifies its errors with [`connect_kind`].
fn kind_of(error: &zookeeper_client::Error) -> ErrorKind {
    use zookeeper_client::Error;
    match error {
        Error::AuthFailed | Error::NoAuth => ErrorKind::CredentialsRefused,
        Error::NoHosts | Error::SessionExpired | Error::SessionMoved | Error::ClientClosed => {
            ErrorKind::Unreachable
        }
        Error::BadArguments(_) | Error::InvalidAcl | Error::Unimplemented => {
            ErrorKind::Configuration
        }
        Error::QuotaExceeded => ErrorKind::Limit,
        _ => ErrorKind::OutcomeUnknown,
    }
}

/// What kind of failure an error opening a session is: refused credentials and a connect
/// string the client refuses keep their kind; anything else means no session was opened, so
/// no request was sent: [`ErrorKind::Unreachable`].
pub(crate) fn connect_kind(error: &zookeeper_client::Error) -> ErrorKind {
    match kind_of(error) {
        kind @ (ErrorKind::CredentialsRefused | ErrorKind::Configuration) => kind,
        _ => ErrorKind::Unreachable,
    }
}

/// Whether `error` says the session it was sent in had ended, in which case ZooKeeper did not
/// run the request.
pub(crate) fn session_ended(error: &LockError) -> bool {
    use zookeeper_client::Error::{ClientClosed, SessionExpired, SessionMoved};
    let LockError::Backend {
        source: Some(source),
        ..
    } = error
    else {
        return false;
    };
    matches!(
        source.downcast_ref::<zookeeper_client::Error>(),
        Some(SessionExpired | SessionMoved | ClientClosed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_client::Error;

    #[test]
    fn zookeeper_errors_are_classified_by_what_they_say_of_the_request() {
        for (error, kind) in [
            (Error::AuthFailed, ErrorKind::CredentialsRefused),
            (Error::NoAuth, ErrorKind::CredentialsRefused),
            (Error::NoHosts, ErrorKind::Unreachable),
            (Error::SessionExpired, ErrorKind::Unreachable),
            (Error::SessionMoved, ErrorKind::Unreachable),
            (Error::ClientClosed, ErrorKind::Unreachable),
            (Error::Unimplemented, ErrorKind::Configuration),
            (Error::InvalidAcl, ErrorKind::Configuration),
            (Error::QuotaExceeded, ErrorKind::Limit),
            (Error::ConnectionLoss, ErrorKind::OutcomeUnknown),
            (Error::Timeout, ErrorKind::OutcomeUnknown),
            (Error::Throttled, ErrorKind::OutcomeUnknown),
            (Error::MarshallingError, ErrorKind::OutcomeUnknown),
            (Error::UnexpectedErrorCode(-999), ErrorKind::OutcomeUnknown),
        ] {
            assert_eq!(kind_of(&error), kind, "{error:?}");
        }
    }

    #[test]
    fn a_session_that_could_not_be_opened_sent_nothing() {
        for (error, kind) in [
            (Error::ConnectionLoss, ErrorKind::Unreachable),
            (Error::Timeout, ErrorKind::Unreachable),
            (Error::NoHosts, ErrorKind::Unreachable),
            (Error::SessionExpired, ErrorKind::Unreachable),
            (Error::QuotaExceeded, ErrorKind::Unreachable),
            (Error::AuthFailed, ErrorKind::CredentialsRefused),
            (Error::InvalidAcl, ErrorKind::Configuration),
        ] {
            assert_eq!(connect_kind(&error), kind, "{error:?}");
        }
    }
}
