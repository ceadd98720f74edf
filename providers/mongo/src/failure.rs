//! How the driver's errors and the provider's refusals become [`LockError`]s: the kind of
//! each failure, and what it means for the lock.

use mongodb::error::{Error as DriverError, ErrorKind as DriverErrorKind, WriteFailure};
use shedlock_core::raw::consequence;
use shedlock_core::{ErrorKind, LockError, Operation};

use crate::PROVIDER;
use crate::storage::MongoStorage;

/// An error of connecting (or of the builder's settings), with no lock name.
pub(crate) fn connect_error(kind: ErrorKind, message: String) -> LockError {
    LockError::backend_message(kind, PROVIDER, Operation::Connect, "", message)
}

impl MongoStorage {
    /// The driver's error, saying what happened at which server and what that leaves behind
    /// for the lock, which follows from its kind (see [`kind_of`]).
    pub(crate) fn driver_error(
        &self,
        operation: Operation,
        name: &str,
        error: DriverError,
    ) -> LockError {
        let target = &self.target;
        let what = match &*error.kind {
            DriverErrorKind::ServerSelection { .. } => format!(
                "no usable MongoDB server at {target} answered in time (server selection): is it \
                 running and reachable, and is there a primary?"
            ),
            DriverErrorKind::Io(_) | DriverErrorKind::ConnectionPoolCleared { .. } => {
                format!("the connection to {target} failed")
            }
            DriverErrorKind::Authentication { .. } => {
                format!("authentication at {target} failed")
            }
            // The driver answers so before selecting a server: nothing reached the server.
            DriverErrorKind::Shutdown => format!(
                "the MongoDB client of {target} was shut down (MongoLockProvider::shutdown or \
                 Client::shutdown), so nothing was sent"
            ),
            DriverErrorKind::Command(command) => format!(
                "{target} refused the command: {} ({}): {}",
                command.code, command.code_name, command.message
            ),
            DriverErrorKind::Write(WriteFailure::WriteError(write)) => format!(
                "{target} refused the write: {}: {}",
                write.code, write.message
            ),
            DriverErrorKind::Write(WriteFailure::WriteConcernError(concern)) => format!(
                "{target} did not confirm the write concern: {} ({}): {}",
                concern.code, concern.code_name, concern.message
            ),
            _ => format!("the command to {target} failed"),
        };
        let kind = kind_of(operation, &error);
        LockError::backend(
            kind,
            PROVIDER,
            operation,
            name,
            format!("{what}; {}", consequence(operation, kind)),
            error,
        )
    }
}

/// What kind of failure a driver error is, for an error met during `operation`: the one place
/// this provider reads the driver's error kinds and the server's error codes.
///
/// The driver reports "no server selected" only when no earlier attempt of the command failed
/// after being sent (else it returns that attempt's error), so it means nothing was sent. Any
/// other failure of a command already sent leaves its outcome unknown. While connecting, every
/// failure that is not the credentials, the settings, the data or a limit means the server
/// could not be reached.
pub(crate) fn kind_of(operation: Operation, error: &DriverError) -> ErrorKind {
    let kind = match &*error.kind {
        DriverErrorKind::ServerSelection { .. }
        | DriverErrorKind::ConnectionPoolCleared { .. }
        | DriverErrorKind::DnsResolve { .. } => ErrorKind::Unreachable,
        DriverErrorKind::Io(io) => ErrorKind::of_io(io.kind(), operation),
        DriverErrorKind::Authentication { .. } => ErrorKind::CredentialsRefused,
        // Refused by the driver before sending: the URL's or the builder's settings, or a
        // server without what the provider needs. A shut-down client never sends again: the
        // application must not use the provider after `shutdown`.
        DriverErrorKind::InvalidArgument { .. }
        | DriverErrorKind::InvalidTlsConfig { .. }
        | DriverErrorKind::IncompatibleServer { .. }
        | DriverErrorKind::SessionsNotSupported
        | DriverErrorKind::Shutdown => ErrorKind::Configuration,
        // A document the driver cannot read as BSON: not one this provider wrote.
        DriverErrorKind::BsonDeserialization(_) => ErrorKind::CorruptData,
        DriverErrorKind::Command(command) => kind_of_code(command.code),
        DriverErrorKind::Write(WriteFailure::WriteError(write)) => kind_of_code(write.code),
        // A write concern the server could not confirm comes after the primary applied the
        // write, whatever its code: even one the deployment can never meet (an unknown tag
        // set, more members than it has) leaves a write behind, so the outcome is unknown.
        // Refused before writing, the same codes come as a command error, a configuration.
        _ => ErrorKind::OutcomeUnknown,
    };
    kind.during(operation)
}

/// MongoDB's `Unauthorized`: the user lacks a privilege the command needs.
const UNAUTHORIZED: i32 = 13;
/// MongoDB's `AuthenticationFailed`.
const AUTHENTICATION_FAILED: i32 = 18;
/// A write concern naming a tag set the replica set does not define.
const UNKNOWN_REPL_WRITE_CONCERN: i32 = 79;
/// A write concern asking more members than the deployment has.
const UNSATISFIABLE_WRITE_CONCERN: i32 = 100;

/// What kind of failure a server's refusal with `code` is. This provider's commands compute
/// only on the stored fields, so arithmetic the server refuses means a field of another type
/// than ShedLock's.
fn kind_of_code(code: i32) -> ErrorKind {
    match code {
        UNAUTHORIZED | AUTHENTICATION_FAILED => ErrorKind::CredentialsRefused,
        // A command, stage, operator or option the server lacks, a collection that is a view,
        // or settings the deployment cannot meet: CommandNotFound, InvalidOptions,
        // CommandNotSupported, ReadConcernMajorityNotEnabled, CommandNotSupportedOnView,
        // InvalidPipelineOperator, unrecognized pipeline stage.
        59
        | 72
        | UNKNOWN_REPL_WRITE_CONCERN
        | UNSATISFIABLE_WRITE_CONCERN
        | 115
        | 148
        | 166
        | 168
        | 40324 => ErrorKind::Configuration,
        // TypeMismatch, "$add only supports numeric or date types" (older servers),
        // ConversionFailure: `fencingToken` or `lockedAt` is not a number or a date.
        14 | 16554 | 241 => ErrorKind::CorruptData,
        // BSONObjectTooLarge, a document grown past 16 MiB by an update, OutOfDiskSpace.
        10334 | 17419 | 14031 => ErrorKind::Limit,
        _ => ErrorKind::OutcomeUnknown,
    }
}

/// MongoDB's duplicate key error: two upserts raced to create the same `_id`.
const DUPLICATE_KEY: i32 = 11000;

/// Whether the server refused a write because another one created the same `_id` first.
pub(crate) fn is_duplicate_key(error: &DriverError) -> bool {
    match &*error.kind {
        DriverErrorKind::Command(command) => command.code == DUPLICATE_KEY,
        DriverErrorKind::Write(WriteFailure::WriteError(write)) => write.code == DUPLICATE_KEY,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn driver_errors_are_classified_by_what_reached_the_server() {
        let io = |kind: std::io::ErrorKind| DriverError::from(kind);
        assert_eq!(
            kind_of(
                Operation::Acquire,
                &io(std::io::ErrorKind::ConnectionRefused)
            ),
            ErrorKind::Unreachable
        );
        assert_eq!(
            kind_of(Operation::Acquire, &io(std::io::ErrorKind::ConnectionReset)),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(
            kind_of(Operation::Connect, &io(std::io::ErrorKind::ConnectionReset)),
            ErrorKind::Unreachable
        );
        let shut_down = DriverError::from(DriverErrorKind::Shutdown);
        assert_eq!(
            kind_of(Operation::Release, &shut_down),
            ErrorKind::Configuration
        );
        for (code, kind) in [
            (UNAUTHORIZED, ErrorKind::CredentialsRefused),
            (AUTHENTICATION_FAILED, ErrorKind::CredentialsRefused),
            (166, ErrorKind::Configuration),
            (UNSATISFIABLE_WRITE_CONCERN, ErrorKind::Configuration),
            (14, ErrorKind::CorruptData),
            (241, ErrorKind::CorruptData),
            (10334, ErrorKind::Limit),
            (14031, ErrorKind::Limit),
            (50, ErrorKind::OutcomeUnknown),
            (189, ErrorKind::OutcomeUnknown),
        ] {
            assert_eq!(kind_of_code(code), kind, "{code}");
        }
    }
}
