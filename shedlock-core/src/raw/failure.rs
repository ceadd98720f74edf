//! How a provider turns a call that failed or never answered into the [`LockError`] its caller
//! reports: one bound on time for every call, and one sentence per operation saying what the
//! failure leaves behind, so every provider words a lost connection the same way.

use std::time::Duration;

use crate::{ErrorKind, LockError, Operation};

/// Runs `call`, a request `provider` makes for `operation` on the lock `name`, and gives up
/// after `timeout`: then the answer is [`LockError::Timeout`], whose outcome is unknown.
///
/// A provider bounds every request this way, so no lock operation outlives its operation
/// timeout however the backend or the network stalls; the client's own error inside the
/// `Ok` stays the provider's to classify.
pub async fn bounded<F: Future>(
    provider: &'static str,
    operation: Operation,
    name: &str,
    timeout: Duration,
    call: F,
) -> Result<F::Output, LockError> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| LockError::timeout(provider, operation, name, timeout))
}

/// What a failure of `kind` during `operation` leaves behind, as the end of its error message
/// ("Redis at … failed; whether the lock was taken is unknown, so the task must not run").
///
/// Only an [`ErrorKind::OutcomeUnknown`] may have written: every other kind was refused or
/// never reached the backend, so nothing was. A failed connect concerns no lock and asks
/// whether the backend is there at all.
pub fn consequence(operation: Operation, kind: ErrorKind) -> &'static str {
    let may_have_written = kind == ErrorKind::OutcomeUnknown;
    match (operation, may_have_written) {
        (Operation::Connect, _) => "is it running and reachable?",
        (Operation::Acquire, true) => {
            "whether the lock was taken is unknown, so the task must not run"
        }
        (Operation::Acquire, false) => "nothing was written and the task must not run",
        (Operation::Release, true) => {
            "whether it was released is unknown: it stays held until lock_at_most_for at the latest"
        }
        (Operation::Release, false) => {
            "nothing was written: the lock stays held until lock_at_most_for at the latest"
        }
        (Operation::Extend, true) => {
            "whether the lock was extended is unknown: it keeps its previous expiry or the new one"
        }
        (Operation::Extend, false) => "nothing was written: the lock keeps its previous expiry",
        (Operation::ForceUnlock, true) => {
            "whether the lock was freed is unknown: inspect it again before retrying"
        }
        (Operation::ForceUnlock, false) => "nothing was written: the lock was not freed",
        (Operation::List | Operation::Inspect, _) => "nothing was changed",
    }
}

/// The message of a failed request, `<backend> at <endpoint> <cause>; <consequence>` ("Redis at
/// redis://cache:6379 is unreachable; nothing was written and the task must not run"), the
/// consequence being [`consequence`] of `operation` and `kind`: every provider says where the
/// request went, what happened to it and what that leaves behind, in that order.
///
/// `endpoint` is shown as given, so it must already be redacted; `cause` is the provider's own
/// words for what its client reported ("failed", "is unreachable").
pub fn failure_message(
    backend: &str,
    endpoint: &str,
    cause: &str,
    operation: Operation,
    kind: ErrorKind,
) -> String {
    format!(
        "{backend} at {endpoint} {cause}; {}",
        consequence(operation, kind)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unknown_outcome_may_have_written() {
        let writes = [
            Operation::Acquire,
            Operation::Release,
            Operation::Extend,
            Operation::ForceUnlock,
        ];
        for operation in writes {
            let unknown = consequence(operation, ErrorKind::OutcomeUnknown);
            assert!(unknown.contains("unknown"), "{operation}: {unknown}");
            for kind in [
                ErrorKind::Unreachable,
                ErrorKind::CredentialsRefused,
                ErrorKind::Configuration,
                ErrorKind::Limit,
            ] {
                let refused = consequence(operation, kind);
                assert!(
                    refused.starts_with("nothing was written"),
                    "{operation} {kind}: {refused}"
                );
            }
        }
        assert_eq!(
            consequence(Operation::Connect, ErrorKind::Unreachable),
            "is it running and reachable?"
        );
        assert_eq!(
            consequence(Operation::List, ErrorKind::OutcomeUnknown),
            "nothing was changed"
        );
        assert_eq!(
            consequence(Operation::Acquire, ErrorKind::OutcomeUnknown),
            "whether the lock was taken is unknown, so the task must not run"
        );
    }

    #[test]
    fn a_failure_message_names_the_backend_then_the_cause_then_the_consequence() {
        assert_eq!(
            failure_message(
                "etcd",
                "http://root:***@etcd:2379",
                "is unreachable",
                Operation::Release,
                ErrorKind::Unreachable,
            ),
            "etcd at http://root:***@etcd:2379 is unreachable; nothing was written: the lock \
             stays held until lock_at_most_for at the latest"
        );
        assert_eq!(
            failure_message(
                "Redis",
                "redis://cache:6379",
                "failed",
                Operation::Acquire,
                ErrorKind::OutcomeUnknown,
            ),
            "Redis at redis://cache:6379 failed; whether the lock was taken is unknown, so the \
             task must not run"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_past_its_timeout_is_a_timeout_of_that_operation() {
        let slow = tokio::time::sleep(Duration::from_secs(10));
        let error = bounded(
            "test",
            Operation::Extend,
            "job",
            Duration::from_secs(2),
            slow,
        )
        .await
        .expect_err("the call outlived its timeout");
        assert!(matches!(
            error,
            LockError::Timeout { operation: Operation::Extend, ref name, after, .. }
                if name == "job" && after == Duration::from_secs(2)
        ));
        assert_eq!(
            bounded(
                "test",
                Operation::Extend,
                "job",
                Duration::from_secs(2),
                async { 7 }
            )
            .await
            .expect("answered in time"),
            7
        );
    }
}
