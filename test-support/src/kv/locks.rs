//! Taking locks in a test, with the outcome the test expects, through any provider.

use std::time::Duration;

use shedlock_core::{Acquisition, LockConfiguration, LockError, LockHandle, LockProvider};
use tokio::time::Instant;

/// A password put in the URLs and settings of the credential tests, which every error, log and
/// `Debug` output is searched for.
pub const SECRET: &str = "sup3rs3cret-pw";

/// Lock `name` for at most `at_most`, released at once when its holder is done.
pub fn config(name: &str, at_most: Duration) -> LockConfiguration {
    config_with_at_least(name, at_most, Duration::ZERO)
}

/// Lock `name` for at most `at_most`, and held for at least `at_least` after it is acquired.
pub fn config_with_at_least(
    name: &str,
    at_most: Duration,
    at_least: Duration,
) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

/// Acquires `config` on `provider`; anything else fails the test.
pub async fn acquire(
    provider: &(impl LockProvider + ?Sized),
    config: &LockConfiguration,
) -> Box<dyn LockHandle> {
    match provider.try_lock(config).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("expected to acquire {:?}, got {other:?}", config.name()),
    }
}

/// `provider` answers "not acquired" for `config`: someone else holds it.
pub async fn assert_not_acquired(
    provider: &(impl LockProvider + ?Sized),
    config: &LockConfiguration,
) {
    let outcome = provider.try_lock(config).await.unwrap();
    assert!(
        !outcome.is_acquired(),
        "{:?} should be held by someone else, but was acquired",
        config.name()
    );
}

/// An operation against an unreachable server must give up within its timeout, not hang.
pub fn assert_answered_within(started: Instant, limit: Duration) {
    let took = started.elapsed();
    assert!(took < limit, "took {took:?}");
}

/// Two acquires of `job` on `lazy`, a provider connected lazily to a server nothing answers:
/// each must be an error (a backend error or a timeout, never "not acquired") that names the
/// lock, within 3 s. The errors, for what each provider says about their kind.
pub async fn acquires_of_an_unreachable_server_fail(lazy: &dyn LockProvider) -> Vec<LockError> {
    let mut errors = Vec::new();
    for _ in 0..2 {
        let started = Instant::now();
        let error = lazy
            .try_lock(&config("job", Duration::from_secs(5)))
            .await
            .unwrap_err();
        assert_answered_within(started, Duration::from_secs(3));
        assert!(
            matches!(error, LockError::Backend { .. } | LockError::Timeout { .. }),
            "{error:?}"
        );
        assert!(error.to_string().contains("job"), "{error}");
        errors.push(error);
    }
    errors
}
