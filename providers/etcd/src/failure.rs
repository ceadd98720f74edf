//! How a failed or unanswered etcd request becomes the [`LockError`] an operation reports:
//! its [`ErrorKind`] and what it means for the lock.

use std::time::Duration;

use shedlock_core::raw::{bounded, failure_message};
use shedlock_core::{ErrorKind, LockError, Operation};
use tokio::time::Instant;

use crate::PROVIDER;
use crate::provider::Inner;

impl Inner {
    /// Runs etcd requests bounded by the operation timeout, turning their failure into the
    /// [`LockError`] the caller reports. A deadline etcd itself ran out of (the client's
    /// per-request timeout) is a timeout too, after the time it took.
    pub(crate) async fn call<T>(
        &self,
        operation: Operation,
        name: &str,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        let error = match bounded(PROVIDER, operation, name, self.operation_timeout, call).await? {
            Ok(value) => return Ok(value),
            Err(etcd_client::Error::GRpcStatus(status))
                if status.code() == tonic::Code::DeadlineExceeded =>
            {
                let after = Duration::from_millis(started.elapsed().as_millis() as u64);
                return Err(LockError::timeout(PROVIDER, operation, name, after));
            }
            Err(error) => error,
        };
        let unreachable = match &error {
            etcd_client::Error::GRpcStatus(status) => status.code() == tonic::Code::Unavailable,
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
            _ => false,
        };
        let cause = if unreachable {
            "is unreachable"
        } else {
            "failed"
        };
        let kind = kind_of(operation, &error);
        Err(LockError::backend(
            kind,
            PROVIDER,
            operation,
            name,
            failure_message("etcd", &self.endpoint, cause, operation, kind),
            error,
        ))
    }
}

/// What kind of failure an etcd client error is, for an error met during `operation`: the one
/// place this provider reads the client's errors and etcd's gRPC status codes (etcd's own
/// messages are in `api/v3rpc/rpctypes`).
///
/// Only a connection that never opened (the gRPC stack's connect error: TCP, DNS or the TLS
/// handshake) is unreachable once a lock operation has begun; any other failure of a request
/// already sent leaves its outcome unknown. While connecting, every failure that is not the
/// credentials, the settings or a limit means the server could not be reached.
pub(crate) fn kind_of(operation: Operation, error: &etcd_client::Error) -> ErrorKind {
    use etcd_client::Error;
    let kind = match error {
        // Refused by the client before anything was sent: the endpoints or their TLS settings
        // (etcd-client makes a transport error only while building its channel, before it
        // connects).
        Error::InvalidArgs(_)
        | Error::InvalidUri(_)
        | Error::EndpointError(_)
        | Error::EndpointsNotManaged
        | Error::TransportError(_) => ErrorKind::Configuration,
        Error::IoError(io) => ErrorKind::of_io(io.kind(), operation),
        Error::GRpcStatus(status) => {
            let message = status.message();
            match status.code() {
                // "etcdserver: invalid auth token", "etcdserver: permission denied".
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => {
                    ErrorKind::CredentialsRefused
                }
                tonic::Code::InvalidArgument if message.contains("authentication failed") => {
                    ErrorKind::CredentialsRefused
                }
                // Credentials given to a cluster that has authentication off.
                tonic::Code::FailedPrecondition
                    if message.contains("authentication is not enabled") =>
                {
                    ErrorKind::Configuration
                }
                // "etcdserver: request is too large", "too many operations in txn request".
                tonic::Code::InvalidArgument
                    if message.contains("too large") || message.contains("too many operations") =>
                {
                    ErrorKind::Limit
                }
                // "etcdserver: too many requests" is etcd shedding load for a while, which
                // passes; anything else exhausted is a quota ("mvcc: database space exceeded")
                // or a size limit.
                tonic::Code::ResourceExhausted if message.contains("too many requests") => {
                    ErrorKind::OutcomeUnknown
                }
                tonic::Code::ResourceExhausted => ErrorKind::Limit,
                tonic::Code::Unimplemented => ErrorKind::Configuration,
                // The gRPC stack says Unavailable both for a connection it could not open
                // (nothing sent) and for a server that dropped the request or has no leader.
                tonic::Code::Unavailable if connect_failed(status) => ErrorKind::Unreachable,
                _ => ErrorKind::OutcomeUnknown,
            }
        }
        _ => ErrorKind::OutcomeUnknown,
    };
    kind.during(operation)
}

/// Whether `status` is the gRPC stack's failure to open a connection (TCP, DNS or the TLS
/// handshake), found as a [`tonic::ConnectError`] in its sources: the request was never sent.
fn connect_failed(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if cause.is::<tonic::ConnectError>() {
            return true;
        }
        source = cause.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn client_errors_are_classified_by_what_reached_etcd() {
        use tonic::Code;
        let refused = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        // The gRPC stack's own error for a connection it could not open: nothing was sent.
        let not_connected = etcd_client::Error::GRpcStatus(tonic::Status::from_error(Box::new(
            tonic::ConnectError(Box::new(refused())),
        )));
        let cases = [
            (not_connected, ErrorKind::Unreachable),
            (
                etcd_client::Error::IoError(refused()),
                ErrorKind::Unreachable,
            ),
            (
                etcd_client::Error::IoError(std::io::ErrorKind::ConnectionReset.into()),
                ErrorKind::OutcomeUnknown,
            ),
            // etcd's own Unavailable answers come after the request was sent.
            (
                status(Code::Unavailable, "etcdserver: leader changed"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(Code::Unavailable, "etcdserver: request timed out"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(Code::Cancelled, "Timeout expired"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(Code::Unauthenticated, "etcdserver: invalid auth token"),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(
                    Code::FailedPrecondition,
                    "etcdserver: authentication is not enabled",
                ),
                ErrorKind::Configuration,
            ),
            (
                status(
                    Code::ResourceExhausted,
                    "etcdserver: mvcc: database space exceeded",
                ),
                ErrorKind::Limit,
            ),
            (
                status(Code::ResourceExhausted, "etcdserver: too many requests"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(Code::InvalidArgument, "etcdserver: request is too large"),
                ErrorKind::Limit,
            ),
            (
                etcd_client::Error::InvalidArgs("empty endpoints".to_owned()),
                ErrorKind::Configuration,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(kind_of(Operation::Acquire, &error), kind, "{error}");
        }
        // While connecting, what is not the credentials, the settings or a limit is an
        // unreachable server.
        for (error, kind) in [
            (
                status(Code::Unavailable, "etcdserver: no leader"),
                ErrorKind::Unreachable,
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(
                    Code::FailedPrecondition,
                    "etcdserver: authentication is not enabled",
                ),
                ErrorKind::Configuration,
            ),
        ] {
            assert_eq!(kind_of(Operation::Connect, &error), kind, "{error}");
        }
    }
}
