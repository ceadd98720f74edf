//! How a connect that failed becomes the [`LockError`] the builder reports: of which
//! [`ErrorKind`], naming the database (its URL without the password) and, for TLS this build
//! lacks, the feature to turn on.

use shedlock_core::{ErrorKind, LockError, Operation};

use crate::backend::SqlBackend;
use crate::identifier::IdentifierError;

/// A connect that failed with `error`, naming the TLS feature to turn on when the URL asked for
/// TLS that this build of sqlx lacks (sqlx's own message names none of this crate's features).
pub(crate) fn cannot_connect<B: SqlBackend>(target: &str, error: sqlx::Error) -> LockError {
    if matches!(&error, sqlx::Error::Tls(tls) if tls.to_string().contains("without TLS support")) {
        return connect_error::<B>(
            ErrorKind::Configuration,
            format!(
                "{target} asks for TLS, which this build leaves out: enable the \"tls-rustls\" \
             feature of shedlock-{provider} (on by default), or the \"rustls\" feature of shedlock",
                provider = B::PROVIDER
            ),
        );
    }
    LockError::backend(
        crate::backend::kind_of(Operation::Connect, &error),
        B::PROVIDER,
        Operation::Connect,
        "",
        format!("{target}: cannot connect"),
        crate::backend::cause_of(error),
    )
}

/// A connect that failed for a reason of `kind` with no client error behind it.
pub(crate) fn connect_error<B: SqlBackend>(kind: ErrorKind, message: String) -> LockError {
    LockError::backend_message(kind, B::PROVIDER, Operation::Connect, "", message)
}

/// A lock table configuration that [`LockTable`](crate::LockTable) refused.
pub(crate) fn bad_table<B: SqlBackend>(error: IdentifierError) -> LockError {
    connect_error::<B>(
        ErrorKind::Configuration,
        format!("bad lock table configuration: {error}"),
    )
}

/// Prefixes a connect error with the redacted target, so the message says which database.
pub(crate) fn add_target(error: LockError, target: &str) -> LockError {
    match error {
        LockError::Backend {
            kind,
            provider,
            operation,
            name,
            message,
            source,
        } => LockError::Backend {
            kind,
            provider,
            operation,
            name,
            message: format!("{target}: {message}"),
            source,
        },
        other => other,
    }
}
