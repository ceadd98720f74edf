//! The TLS tests' settings (the test CA that `ci/start-backends.sh` makes, and each server's
//! TLS URL) and the lock round trip they make over TLS.

use std::time::Duration;

use shedlock_core::LockProvider;

use super::locks::config;

/// The file of the CA that signed the TLS test servers' certificates.
pub const CA_FILE_VAR: &str = "SHEDLOCK_TEST_TLS_CA_FILE";

/// The setting in `var`; a test without it fails, saying it needs `what`, with an `example`.
pub fn required_var(var: &str, what: &str, example: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: these tests need {what}, e.g. {var}={example}")
    })
}

/// The contents of the file named in `var` (see [`required_var`]).
pub fn read_file(var: &str, what: &str, example: &str) -> Vec<u8> {
    let path = required_var(var, what, example);
    std::fs::read(&path).unwrap_or_else(|e| panic!("read {what} {path}: {e}"))
}

/// The path of the test CA's certificate.
pub fn ca_file() -> String {
    required_var(
        CA_FILE_VAR,
        "the CA that signed the TLS test servers' certificates",
        "/var/tmp/shedlock-ci/tls/ca.pem",
    )
}

/// The test CA's certificate (PEM).
pub fn ca() -> Vec<u8> {
    let path = ca_file();
    std::fs::read(&path).unwrap_or_else(|e| panic!("read the test CA {path}: {e}"))
}

/// `future`, which a TLS handshake that hangs must not turn into a test that hangs.
pub async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .expect("within 30 s")
}

/// A lock taken over TLS is held, excluded to `another` node (which may be `provider` itself),
/// released, and taken again. The fencing token of the first acquisition.
pub async fn locks_excludes_and_releases(
    provider: &dyn LockProvider,
    another: &dyn LockProvider,
) -> Option<u64> {
    let config = config("report", Duration::from_secs(60));
    let handle = within(provider.try_lock(&config))
        .await
        .unwrap()
        .into_handle()
        .expect("a fresh lock is acquired over TLS");
    let token = handle.fencing_token();
    assert!(
        !within(another.try_lock(&config))
            .await
            .unwrap()
            .is_acquired(),
        "the held lock excludes another attempt"
    );
    assert!(within(handle.unlock()).await.unwrap(), "released over TLS");
    assert!(
        within(provider.try_lock(&config))
            .await
            .unwrap()
            .is_acquired(),
        "the released lock can be taken again"
    );
    token
}
