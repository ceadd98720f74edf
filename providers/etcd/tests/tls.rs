//! The etcd provider over TLS, against a member that serves clients over TLS only and whose
//! certificate a test CA signed for `localhost` only (ci/start-backends.sh makes both):
//! `SHEDLOCK_TEST_ETCD_TLS_URL` (with the host `localhost`) and `SHEDLOCK_TEST_TLS_CA_FILE`.
#![cfg(feature = "tls")]

use std::time::Duration;

use shedlock_core::ErrorKind;
use shedlock_etcd::{EtcdLockProvider, EtcdLockProviderBuilder};
use shedlock_test_support::kv::errors::error_chain;
use shedlock_test_support::kv::tls::{ca, locks_excludes_and_releases, within};
use shedlock_test_support::settings;

fn builder() -> EtcdLockProviderBuilder {
    EtcdLockProvider::builder()
        .env(format!("tls-{}", uuid::Uuid::new_v4().simple()))
        .operation_timeout(Duration::from_secs(3))
}

#[tokio::test]
async fn https_with_the_clusters_ca_locks_and_releases() {
    let provider = within(
        builder()
            .tls_root_certificate(ca())
            .connect(&settings::ETCD_TLS.value()),
    )
    .await
    .unwrap();
    locks_excludes_and_releases(&provider, &provider).await;
}

#[tokio::test]
async fn the_tls_member_refuses_plain_http() {
    let plain = format!(
        "http://{}",
        settings::ETCD_TLS.value().split_once("://").unwrap().1
    );
    let error = within(builder().connect(&plain)).await.unwrap_err();
    assert!(
        error_chain(&error).contains("etcd"),
        "{}",
        error_chain(&error)
    );
    assert_eq!(
        error.kind(),
        ErrorKind::Unreachable,
        "{}",
        error_chain(&error)
    );
}

#[tokio::test]
async fn a_certificate_no_trusted_ca_signed_is_refused() {
    // Without the test CA the trusted roots are the public ones, which did not sign it.
    let error = within(builder().connect(&settings::ETCD_TLS.value()))
        .await
        .unwrap_err();
    let text = error_chain(&error);
    assert!(text.contains("UnknownIssuer"), "{text}");
    // A failed handshake: nothing was sent.
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
}

#[tokio::test]
async fn a_host_name_the_certificate_does_not_name_is_refused() {
    // The certificate names localhost; 127.0.0.1 is the same member under another name.
    let url = settings::ETCD_TLS
        .value()
        .replacen("localhost", "root:tls-test-secret@127.0.0.1", 1);
    let error = within(builder().tls_root_certificate(ca()).connect(&url))
        .await
        .unwrap_err();
    let text = error_chain(&error);
    assert!(
        text.contains("certificate not valid for name") && text.contains("127.0.0.1"),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
    assert!(
        !format!("{text} {error:?}").contains("tls-test-secret"),
        "{text}"
    );
}

#[tokio::test]
async fn a_ca_certificate_with_plain_endpoints_is_refused_before_connecting() {
    let error = builder()
        .tls_root_certificate(ca())
        .connect("http://root:tls-test-secret@localhost:1")
        .await
        .unwrap_err();
    let text = error_chain(&error);
    assert!(
        text.contains(
            "a TLS root certificate was set but http://root:***@localhost:1 does not use TLS"
        ),
        "{text}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
}
