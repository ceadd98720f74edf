//! What an error says, as a test reads it: for words it must contain, and for a password it
//! must not.

use std::error::Error;

use shedlock_core::{ErrorKind, LockError, Operation};

/// The error's message and each source's, in order: what a person reading a log sees.
pub fn error_chain(error: &dyn Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(" / {cause}"));
        source = cause.source();
    }
    text
}

/// Everything an error could show: its `Debug` output and its whole chain of messages.
pub fn full_text(error: &LockError) -> String {
    format!("{} | {error:?}", error_chain(error))
}

/// `error` is a configuration error whose message says `says`, refused before anything was
/// sent, and neither its message nor its `Debug` output shows `secret`.
pub fn assert_configuration_error(error: &LockError, says: &str, secret: &str) {
    let message = error.to_string();
    assert!(message.contains(says), "{message}");
    assert_eq!(error.kind(), ErrorKind::Configuration, "{message}");
    assert!(
        !format!("{message} {error:?}").contains(secret),
        "{message}"
    );
}

/// `error` refuses a request of `operation` as invalid, and its message says `says`.
pub fn assert_invalid_request(error: &LockError, operation: Operation, says: &str) {
    assert!(error.to_string().contains(says), "{error}");
    assert!(
        matches!(error, LockError::InvalidRequest { operation: refused, .. } if *refused == operation),
        "{error:?}"
    );
}
