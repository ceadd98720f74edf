//! The ZooKeeper provider over TLS, against a ZooKeeper whose only client port is its secure
//! one, with a certificate a test CA signed for `localhost` only, and which asks every client
//! for a certificate of that CA (ZooKeeper's default `ssl.clientAuth=need`).
//! ci/start-zookeeper-tls.sh starts it and makes the client certificate, with the CA
//! ci/start-backends.sh makes: `SHEDLOCK_TEST_ZOOKEEPER_TLS_URL` (`zk+tls://localhost:2282`),
//! `SHEDLOCK_TEST_TLS_CA_FILE`, `SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_CERT` and
//! `SHEDLOCK_TEST_ZOOKEEPER_TLS_CLIENT_KEY`.

#[cfg(not(feature = "tls-rustls"))]
#[tokio::test]
async fn zk_tls_without_tls_names_the_feature_to_enable() {
    let error = shedlock_zookeeper::ZookeeperLockProvider::builder()
        .connect_lazy("zk+tls://app:secret-pass@localhost:2282")
        .await
        .unwrap_err();
    let message = error.to_string();
    assert_eq!(
        error.kind(),
        shedlock_core::ErrorKind::Configuration,
        "{message}"
    );
    assert!(
        message.ends_with(
            "zk+tls://app:***@localhost:2282 asks for TLS, which this build leaves out: enable \
             the \"tls-rustls\" feature of shedlock-zookeeper (on by default), or the \
             \"rustls\" feature of shedlock"
        ),
        "{message}"
    );
    assert!(
        !format!("{message} {error:?}").contains("secret-pass"),
        "{error:?}"
    );
}

/// Over TLS: needs this crate's TLS feature (on by default).
#[cfg(feature = "tls-rustls")]
mod over_tls {
    use std::time::Duration;

    use shedlock_core::{ErrorKind, LockError};
    use shedlock_test_support::kv::errors::full_text;
    use shedlock_test_support::kv::tls::{ca, locks_excludes_and_releases, within};
    use shedlock_test_support::settings;
    use shedlock_zookeeper::{ZookeeperLockProvider, ZookeeperLockProviderBuilder};
    use tokio::time::Instant;

    /// A CA certificate that signed nothing the test servers use (its key was thrown away).
    const OTHER_CA: &str = "-----BEGIN CERTIFICATE-----
MIIByjCCAXGgAwIBAgIUOL30cV2WT2sHVMEoYQZaRR5XAiIwCgYIKoZIzj0EAwIw
MjEwMC4GA1UEAwwnc2hlZGxvY2stcnMgdGVzdCBDQSB0aGF0IHNpZ25lZCBub3Ro
aW5nMCAXDTI2MTIwMTA0MzE1M1oYDzIxMjYxMTA3MDQzMTUzWjAyMTAwLgYDVQQD
DCdzaGVkbG9jay1ycyB0ZXN0IENBIHRoYXQgc2lnbmVkIG5vdGhpbmcwWTATBgcq
hkjOPQIBBggqhkjOPQMBBwNCAARP8nkAdFEt0/aEgHFwtKeoqrzLsXc4oeHwvhvT
uRlI4QB0moh/pEvaew1ZdgYJ/YIhhqrfXw6fe7iTZJgg85BRo2MwYTAdBgNVHQ4E
FgQU/uj4dRv1xbu5UGlmI4eZZgZTcGAwHwYDVR0jBBgwFoAU/uj4dRv1xbu5UGlm
I4eZZgZTcGAwDwYDVR0TAQH/BAUwAwEB/zAOBgNVHQ8BAf8EBAMCAQYwCgYIKoZI
zj0EAwIDRwAwRAIgXwfRs2NepQvPWF5M2WmT05DTHDKnEb9baX1lafFq2ksCIGaj
ik+b74K7ARvt3npTbx3I/iBZCxY0frzcmzsvTGVR
-----END CERTIFICATE-----
";

    /// Digest credentials put in connect strings whose connection fails before they are sent,
    /// so that each error can be checked for leaking the password.
    const PASSWORD: &str = "tls-test-secret";

    /// The connect timeout of the tests that fail: a failed TLS connect takes it twice (the
    /// client's attempts, then the provider's own handshake), and more is a failure.
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

    fn client_certificate() -> (Vec<u8>, Vec<u8>) {
        (
            settings::ZOOKEEPER_TLS_CLIENT_CERT.file_contents(),
            settings::ZOOKEEPER_TLS_CLIENT_KEY.file_contents(),
        )
    }

    /// `url` with its host replaced by `host`, and digest credentials with [`PASSWORD`].
    fn with_host_and_password(url: &str, host: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a zk+tls:// URL");
        let rest = rest.rsplit_once('@').map_or(rest, |(_, servers)| servers);
        let host_end = rest.find([':', '/', ',']).unwrap_or(rest.len());
        format!("{scheme}://app:{PASSWORD}@{host}{}", &rest[host_end..])
    }

    /// A builder on a root of its own, trusting the test CA and presenting the client
    /// certificate.
    fn builder() -> ZookeeperLockProviderBuilder {
        let (certificate, key) = client_certificate();
        ZookeeperLockProvider::builder()
            .root(format!("/shedlock-tls-{}", uuid::Uuid::new_v4().simple()))
            .tls_root_certificate(ca())
            .tls_client_certificate(certificate, key)
    }

    /// The error's whole chain and `Debug` output, which must not show the connect string's
    /// password.
    fn chain(error: &LockError) -> String {
        let text = full_text(error);
        assert!(
            !text.contains(PASSWORD),
            "the error shows the connect string's password: {text}"
        );
        text
    }

    /// Connects with `builder` to `url`, which must fail; the error's text and kind, after
    /// checking it came within twice the connect timeout (plus a margin for a slow machine).
    async fn refused(builder: ZookeeperLockProviderBuilder, url: &str) -> (String, ErrorKind) {
        let started = Instant::now();
        let error = within(builder.connect_timeout(CONNECT_TIMEOUT).connect(url))
            .await
            .unwrap_err();
        let took = started.elapsed();
        assert!(
            took < 2 * CONNECT_TIMEOUT + Duration::from_secs(2),
            "refused in {took:?}"
        );
        (chain(&error), error.kind())
    }

    #[tokio::test]
    async fn zk_tls_with_the_ca_and_a_client_certificate_locks_and_releases() {
        let provider = within(builder().connect(&settings::ZOOKEEPER_TLS.value()))
            .await
            .unwrap();
        assert!(
            format!("{provider:?}").contains("tls: true"),
            "{provider:?}"
        );
        let token = locks_excludes_and_releases(&provider, &provider).await;
        assert!(token.is_some());
    }

    #[tokio::test]
    async fn a_certificate_the_given_ca_did_not_sign_is_refused() {
        let (certificate, key) = client_certificate();
        let builder = ZookeeperLockProvider::builder()
            .tls_root_certificate(OTHER_CA)
            .tls_client_certificate(certificate, key);
        let (text, kind) = refused(
            builder,
            &with_host_and_password(&settings::ZOOKEEPER_TLS.value(), "localhost"),
        )
        .await;
        assert!(
            text.contains(
                "could not open a TLS session with ZooKeeper at zk+tls://app:***@localhost:"
            ) && text.contains("the TLS handshake with localhost:")
                && text.contains("invalid peer certificate: UnknownIssuer"),
            "the error says the server's certificate is not from the trusted CA: {text}"
        );
        // A failed handshake: no request was sent.
        assert_eq!(kind, ErrorKind::Unreachable, "{text}");
    }

    #[tokio::test]
    async fn a_host_name_the_certificate_does_not_name_is_refused() {
        // The certificate names localhost; 127.0.0.1 is the same server under another name.
        let (text, kind) = refused(
            builder(),
            &with_host_and_password(&settings::ZOOKEEPER_TLS.value(), "127.0.0.1"),
        )
        .await;
        assert!(
            text.contains("the TLS handshake with 127.0.0.1:")
                && text.contains("certificate not valid for name \"127.0.0.1\""),
            "the error says the certificate is not for this name: {text}"
        );
        assert_eq!(kind, ErrorKind::Unreachable, "{text}");
    }

    #[tokio::test]
    async fn the_server_refuses_a_client_without_a_certificate() {
        let builder = ZookeeperLockProvider::builder().tls_root_certificate(ca());
        let (text, kind) = refused(builder, &settings::ZOOKEEPER_TLS.value()).await;
        assert_eq!(kind, ErrorKind::CredentialsRefused, "{text}");
        // TLS 1.2 refuses it within the handshake, TLS 1.3 right after.
        assert!(
            text.contains("localhost:2282")
                && (text.contains("BadCertificate") || text.contains("CertificateRequired"))
                && text.contains(
                    "the server asks for a client certificate: give one to \
                     ZookeeperLockProviderBuilder::tls_client_certificate"
                ),
            "the error says the server wants a client certificate: {text}"
        );
    }

    #[tokio::test]
    async fn the_server_refuses_a_client_certificate_not_made_for_clients() {
        // The server's own certificate, with its key: the server's CA signed it, but for server
        // authentication only (extendedKeyUsage=serverAuth), so the server refuses it from a
        // client.
        let ca_dir = std::path::Path::new(&settings::TLS_CA.value())
            .parent()
            .unwrap()
            .to_owned();
        let (Ok(certificate), Ok(key)) = (
            std::fs::read(ca_dir.join("server.pem")),
            std::fs::read(ca_dir.join("server.key")),
        ) else {
            panic!("read server.pem and server.key next to the test CA in {ca_dir:?}");
        };
        let builder = ZookeeperLockProvider::builder()
            .tls_root_certificate(ca())
            .tls_client_certificate(certificate, key);
        let (text, kind) = refused(builder, &settings::ZOOKEEPER_TLS.value()).await;
        assert!(
            text.contains("the server did not accept the client certificate"),
            "{text}"
        );
        assert_eq!(kind, ErrorKind::CredentialsRefused, "{text}");
    }

    #[tokio::test]
    async fn a_plain_connection_to_the_tls_port_fails_in_bounded_time() {
        let plain = format!(
            "zk://{}",
            settings::ZOOKEEPER_TLS.value().split_once("://").unwrap().1
        );
        let started = Instant::now();
        let error = within(
            ZookeeperLockProvider::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .connect(&plain),
        )
        .await
        .unwrap_err();
        let took = started.elapsed();
        assert!(
            took < CONNECT_TIMEOUT + Duration::from_secs(2),
            "took {took:?}"
        );
        let text = chain(&error);
        assert!(
            text.contains(&format!(
                "ZooKeeper at {plain} opened no session within 2s (is it running and reachable?)"
            )),
            "{text}"
        );
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
    }

    #[tokio::test]
    async fn zk_tls_without_a_ca_is_refused_before_connecting() {
        let error = ZookeeperLockProvider::builder()
            .connect_lazy(&format!("zk+tls://app:{PASSWORD}@localhost:1"))
            .await
            .unwrap_err();
        let text = chain(&error);
        assert!(
            text.contains(
                "cannot connect to zk+tls://app:***@localhost:1: zk+tls:// needs the CA that \
                 signed the servers' certificates: give it (PEM) to \
                 ZookeeperLockProviderBuilder::tls_root_certificate"
            ),
            "{text}"
        );
        assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
    }

    #[tokio::test]
    async fn pem_without_a_certificate_or_key_is_refused_before_connecting() {
        let error = ZookeeperLockProvider::builder()
            .tls_root_certificate("no PEM here")
            .connect_lazy("zk+tls://localhost:1")
            .await
            .unwrap_err();
        assert!(
            chain(&error).contains("the TLS root certificate holds no CERTIFICATE in PEM"),
            "{error}"
        );
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");

        let (certificate, _) = client_certificate();
        let error = ZookeeperLockProvider::builder()
            .tls_root_certificate(ca())
            .tls_client_certificate(certificate, "not-a-key-but-secret")
            .connect_lazy("zk+tls://localhost:1")
            .await
            .unwrap_err();
        let text = chain(&error);
        assert!(
            text.contains("the TLS client key holds no private key in PEM"),
            "{text}"
        );
        assert!(!text.contains("not-a-key-but-secret"), "{text}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");

        // A key that is not the certificate's.
        let (_, key) = client_certificate();
        let error = ZookeeperLockProvider::builder()
            .tls_root_certificate(ca())
            .tls_client_certificate(OTHER_CA, key)
            .connect_lazy("zk+tls://localhost:1")
            .await
            .unwrap_err();
        assert!(
            chain(&error).contains("the TLS client key does not fit its certificate"),
            "{error}"
        );
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }

    #[tokio::test]
    async fn tls_settings_with_a_plain_connect_string_are_refused() {
        for plain in ["zk://localhost:2181", "localhost:2181"] {
            let error = ZookeeperLockProvider::builder()
                .tls_root_certificate(ca())
                .connect_lazy(plain)
                .await
                .unwrap_err();
            let text = chain(&error);
            assert!(
                text.contains("a TLS root or client certificate was set, but the connect string does not use TLS: write zk+tls:// in front of it"),
                "{text}"
            );
            assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
        }
    }

    #[tokio::test]
    async fn a_server_with_a_scheme_of_its_own_is_refused() {
        for servers in [
            "zk://h1:2181,tcp+tls://h2:2282",
            "zk+tls://h1:2282,tcp://h2:2181",
        ] {
            let error = ZookeeperLockProvider::builder()
                .tls_root_certificate(ca())
                .connect_lazy(servers)
                .await
                .unwrap_err();
            let text = chain(&error);
            assert!(
                text.contains("a server must not carry a scheme of its own"),
                "{text}"
            );
            assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
        }
    }
}
