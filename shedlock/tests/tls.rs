//! `shedlock::connect` over TLS, against the TLS-only PostgreSQL, Redis and etcd servers that
//! ci/start-backends.sh starts (`SHEDLOCK_TEST_POSTGRES_TLS_URL`, `SHEDLOCK_TEST_REDIS_TLS_URL`,
//! `SHEDLOCK_TEST_ETCD_TLS_URL`, all with the host `localhost`, and `SHEDLOCK_TEST_TLS_CA_FILE`):
//! the URL alone turns TLS on. Needs the `postgres`, `redis` and `rustls` features, and `etcd`
//! for its test (`cargo test -p shedlock --all-features`).
#![cfg(all(feature = "postgres", feature = "redis", feature = "rustls"))]

use std::future::Future;
use std::time::Duration;

use shedlock::{AnyLockProvider, ConnectError, LockConfiguration, LockProvider};
use shedlock_test_support::settings;

async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), test)
        .await
        .expect("the test did not finish within 30 s")
}

/// Takes a fresh lock through `provider`, sees it refused a second time, releases it.
async fn assert_lock_cycle(provider: &AnyLockProvider) {
    let name = format!("facade-tls-{}", uuid::Uuid::new_v4().simple());
    let config = LockConfiguration::new(name, Duration::from_secs(30), Duration::ZERO).unwrap();
    let handle = provider
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .expect("a fresh lock is acquired over TLS");
    assert!(!provider.try_lock(&config).await.unwrap().is_acquired());
    assert!(handle.unlock().await.unwrap());
}

#[tokio::test]
async fn postgres_with_sslmode_require_locks_over_tls() {
    let base = settings::POSTGRES_TLS.value();
    bounded(async {
        // The server refuses connections without TLS, so a provider at all means TLS.
        let provider = shedlock::connect(&format!("{base}?sslmode=require"))
            .await
            .unwrap();
        assert!(
            matches!(provider, AnyLockProvider::Postgres(_)),
            "{provider:?}"
        );
        assert_lock_cycle(&provider).await;

        let verified = shedlock::connect(&format!(
            "{base}?sslmode=verify-full&sslrootcert={}",
            settings::TLS_CA.value()
        ))
        .await
        .unwrap();
        assert_lock_cycle(&verified).await;

        let plain = shedlock::connect(&format!("{base}?sslmode=disable"))
            .await
            .unwrap_err();
        assert!(format!("{plain:?}").contains("no encryption"), "{plain:?}");
    })
    .await;
}

#[tokio::test]
async fn rediss_locks_over_tls_with_the_builders_root_certificate() {
    let url = settings::REDIS_TLS.value();
    let ca = settings::TLS_CA.file_contents();
    bounded(async {
        let provider = AnyLockProvider::builder()
            .tls_root_certificate(ca.clone())
            .connect(&url)
            .await
            .unwrap();
        assert!(
            matches!(provider, AnyLockProvider::Redis(_)),
            "{provider:?}"
        );
        assert_lock_cycle(&provider).await;

        // Without the test CA, only public roots are trusted, and none signed this server.
        let untrusted = shedlock::connect(&url).await.unwrap_err();
        assert!(
            format!("{untrusted:?}").contains("UnknownIssuer"),
            "{untrusted:?}"
        );

        // The SQL databases take their CA in the URL: the builder's is refused, not ignored.
        let misplaced = AnyLockProvider::builder()
            .tls_root_certificate(ca)
            .connect("postgres://app:s3cret@localhost:5433/test?sslmode=verify-full")
            .await
            .unwrap_err();
        assert!(
            matches!(&misplaced, ConnectError::InvalidUrl { .. }),
            "{misplaced:?}"
        );
        let message = misplaced.to_string();
        assert!(message.contains("sslrootcert=/path/ca.pem"), "{message}");
        assert!(!message.contains("s3cret"), "{message}");
    })
    .await;
}

#[cfg(feature = "etcd")]
#[tokio::test]
async fn etcds_locks_over_tls_with_the_builders_root_certificate() {
    let url = settings::ETCD_TLS.value();
    let etcds = format!("etcds://{}", url.split_once("://").expect("a URL").1);
    let ca = settings::TLS_CA.file_contents();
    bounded(async {
        let provider = AnyLockProvider::builder()
            .tls_root_certificate(ca)
            .connect(&etcds)
            .await
            .unwrap();
        assert!(matches!(provider, AnyLockProvider::Etcd(_)), "{provider:?}");
        assert_lock_cycle(&provider).await;
    })
    .await;
}
