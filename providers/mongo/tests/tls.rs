//! The Mongo provider over TLS, against a server that serves TLS only and whose certificate a
//! test CA signed for `localhost` only (ci/start-mongo-tls.sh starts it, with the CA
//! ci/start-backends.sh makes): `SHEDLOCK_TEST_MONGO_TLS_URL` (with the host `localhost`, no
//! query) and `SHEDLOCK_TEST_TLS_CA_FILE`. The URL's TLS options go to the driver as they are;
//! these tests check that they reach it and that its refusals read well through the provider.

use std::time::Duration;

use shedlock_core::{ErrorKind, LockError};
use shedlock_mongo::{MongoLockProvider, MongoLockProviderBuilder};
use shedlock_test_support::kv::errors::full_text;
use shedlock_test_support::kv::tls::{locks_excludes_and_releases, within};
use shedlock_test_support::settings;
use tokio::time::Instant;

const DATABASE: &str = "shedlock_tls_tests";
/// A password put in URLs whose connection fails before any password is checked, so that each
/// refusal can be checked for leaking it.
const PASSWORD: &str = "tls-test-secret";

/// The TLS-only server's URL with `query`. A direct connection: the server announces a
/// one-node replica set under a name of its own, which the certificate need not list.
fn url(query: &str) -> String {
    let base = settings::MONGO_TLS.value();
    format!(
        "{}/?directConnection=true&{query}",
        base.trim_end_matches('/')
    )
}

fn verified() -> String {
    format!("tls=true&tlsCAFile={}", settings::TLS_CA.value())
}

/// `url` with its host replaced by `host` and user `app` with [`PASSWORD`] in front of it.
fn with_host_and_password(url: &str, host: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let host_end = rest.find([':', '/', '?']).unwrap_or(rest.len());
    format!("{scheme}://app:{PASSWORD}@{host}{}", &rest[host_end..])
}

fn builder() -> MongoLockProviderBuilder {
    MongoLockProvider::builder()
        .database(DATABASE)
        .collection(format!("locks_{}", uuid::Uuid::new_v4().simple()))
        .server_selection_timeout(Duration::from_secs(2))
}

/// The error's whole chain and `Debug` output, which must not show the URL's password.
fn chain(error: &LockError) -> String {
    let text = full_text(error);
    assert!(
        !text.contains(PASSWORD),
        "the error shows the URL's password: {text}"
    );
    text
}

#[tokio::test]
async fn tls_with_the_servers_ca_locks_and_releases() {
    let provider = within(builder().connect(&url(&verified()))).await.unwrap();
    locks_excludes_and_releases(&provider, &provider.node()).await;
    within(provider.collection().drop().into_future())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_tls_only_server_refuses_a_connection_without_tls() {
    let started = Instant::now();
    let error = within(builder().connect(&url("tls=false")))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused within the server selection timeout, took {:?}",
        started.elapsed()
    );
    let text = chain(&error);
    assert!(text.contains("localhost:27018"), "{text}");
    assert!(text.contains("erver selection"), "{text}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
}

#[tokio::test]
async fn a_host_name_the_certificate_does_not_name_is_refused() {
    // The certificate names localhost; 127.0.0.1 is the same server under another name. The
    // handshake fails before any credential is sent.
    let url = with_host_and_password(&url(&verified()), "127.0.0.1");
    let error = within(builder().connect(&url)).await.unwrap_err();
    let text = chain(&error);
    assert!(
        text.contains("invalid peer certificate: certificate not valid for name \"127.0.0.1\""),
        "the error says the certificate is not for this name: {text}"
    );
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
}

#[tokio::test]
async fn a_certificate_no_trusted_ca_signed_is_refused() {
    // No tlsCAFile: the trusted roots are the public ones, and the test CA is not among them.
    let url = with_host_and_password(&url("tls=true"), "localhost");
    let error = within(builder().connect(&url)).await.unwrap_err();
    let text = chain(&error);
    assert!(
        text.contains("certificate") && text.contains("UnknownIssuer"),
        "the error says who signed the certificate is not trusted: {text}"
    );
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
}
