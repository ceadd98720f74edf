//! The lock round trip the key-value providers' TLS tests make, bounded in time (the servers
//! and the test CA are in [`settings`](crate::settings)).

use std::time::Duration;

use shedlock_core::LockProvider;

use super::locks::config;
use crate::settings;

/// The test CA's certificate (PEM), for a builder's TLS roots.
pub fn ca() -> Vec<u8> {
    settings::TLS_CA.file_contents()
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
