//! The Redis provider over TLS, against a server that listens for TLS only and whose
//! certificate a test CA signed for `localhost` only (ci/start-backends.sh makes both):
//! `SHEDLOCK_TEST_REDIS_TLS_URL` (with the host `localhost`), `SHEDLOCK_TEST_TLS_CA_FILE`, and
//! the plain server `SHEDLOCK_TEST_REDIS_URL`.

#[cfg(not(feature = "tls"))]
#[tokio::test]
async fn rediss_without_tls_names_the_feature_to_enable() {
    for (scheme, rest) in [
        ("rediss", "localhost:6380"),
        ("rediss+cluster", "localhost:7000,localhost:7001"),
        ("rediss+sentinel", "localhost:26379/shedlock"),
    ] {
        let error =
            shedlock_redis::RedisLockProvider::connect(&format!("{scheme}://:secret-pass@{rest}"))
                .await
                .unwrap_err();
        let message = error.to_string();
        assert_eq!(
            error.kind(),
            shedlock_core::ErrorKind::Configuration,
            "{message}"
        );
        assert!(
            message.ends_with(&format!(
                "the URL's scheme \"{scheme}\" asks for TLS, which this build leaves out: enable \
                 the \"tls-rustls\" feature of shedlock-redis (on by default), or the \"rustls\" \
                 feature of shedlock"
            )),
            "{message}"
        );
        assert!(
            !format!("{message} {error:?}").contains("secret-pass"),
            "{error:?}"
        );
    }
}

/// Over TLS: needs this crate's TLS feature (on by default).
#[cfg(feature = "tls")]
mod over_tls {
    use std::time::Duration;

    use shedlock_core::ErrorKind;
    use shedlock_redis::{RedisLockProvider, RedisLockProviderBuilder};
    use shedlock_test_support::kv::errors::error_chain;
    use shedlock_test_support::kv::tls::{ca, locks_excludes_and_releases, within};
    use shedlock_test_support::settings;

    /// `url` with its scheme replaced by `scheme`.
    fn with_scheme(url: &str, scheme: &str) -> String {
        format!("{scheme}://{}", url.split_once("://").expect("a URL").1)
    }

    /// `url` with its host replaced by `host`.
    fn with_host(url: &str, host: &str) -> String {
        let (scheme, rest) = url.split_once("://").expect("a URL");
        let (user_info, rest) = match rest.split_once('@') {
            Some((user_info, rest)) => (format!("{user_info}@"), rest),
            None => (String::new(), rest),
        };
        let host_end = rest.find([':', '/', '?', '#']).unwrap_or(rest.len());
        format!("{scheme}://{user_info}{host}{}", &rest[host_end..])
    }

    fn builder() -> RedisLockProviderBuilder {
        RedisLockProvider::builder()
            .env(format!("tls-{}", uuid::Uuid::new_v4().simple()))
            .operation_timeout(Duration::from_secs(5))
    }

    #[tokio::test]
    async fn rediss_with_the_servers_ca_locks_and_releases() {
        let provider = within(
            builder()
                .tls_root_certificate(ca())
                .connect(&settings::REDIS_TLS.value()),
        )
        .await
        .unwrap();
        locks_excludes_and_releases(&provider, &provider).await;
    }

    #[tokio::test]
    async fn the_tls_port_refuses_plain_redis_and_the_plain_port_refuses_tls() {
        // The TLS-only server's port does not speak plain Redis, and the error says what to
        // check...
        let plain_to_tls =
            within(builder().connect(&with_scheme(&settings::REDIS_TLS.value(), "redis")))
                .await
                .unwrap_err();
        let text = error_chain(&plain_to_tls);
        assert!(
            text.contains("could not connect to Redis")
                && text.contains("or use rediss:// if this Redis takes TLS only"),
            "{text}"
        );
        assert_eq!(plain_to_tls.kind(), ErrorKind::Configuration, "{text}");
        // ...and the plain server does not speak TLS, so what works above really is TLS. (It
        // answers the TLS greeting with nothing, so the server is asked in plain RESP while the
        // handshake waits, and the answer says it is a Redis without TLS.)
        let tls_to_plain = within(
            builder()
                .operation_timeout(Duration::from_secs(1))
                .tls_root_certificate(ca())
                .connect(&with_scheme(&settings::REDIS.value(), "rediss")),
        )
        .await
        .unwrap_err();
        let text = error_chain(&tls_to_plain);
        assert!(
            text.contains("could not connect to Redis")
                && text.contains("it answers in plain Redis, without TLS"),
            "{text}"
        );
        assert_eq!(tls_to_plain.kind(), ErrorKind::Configuration, "{text}");
    }

    #[tokio::test]
    async fn a_host_name_the_certificate_does_not_name_is_refused() {
        // The certificate names localhost; 127.0.0.1 is the same server under another name. The
        // password (the server asks for none) must not show in the error.
        let url = with_host(&settings::REDIS_TLS.value(), ":tls-test-secret@127.0.0.1");
        let error = within(builder().tls_root_certificate(ca()).connect(&url))
            .await
            .unwrap_err();
        let text = error_chain(&error);
        assert!(
            text.contains("certificate not valid for name \"127.0.0.1\""),
            "the error says the certificate is not for this name: {text}"
        );
        assert!(!text.contains("tls-test-secret"), "{text}");
        // A failed handshake: nothing reached the server.
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
        assert!(
            !format!("{error:?}").contains("tls-test-secret"),
            "{error:?}"
        );
    }

    #[tokio::test]
    async fn a_certificate_no_trusted_ca_signed_is_refused() {
        // Without the test CA the trusted roots are the public ones, which did not sign it.
        let error = within(builder().connect(&settings::REDIS_TLS.value()))
            .await
            .unwrap_err();
        let text = error_chain(&error);
        assert!(
            text.contains("UnknownIssuer") && text.contains("tls_root_certificate"),
            "the error says who signed the certificate is not trusted: {text}"
        );
        assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");
    }

    /// The TLS test server is a plain single server, so a cluster or sentinel URL to it fails
    /// after the handshake, saying what the server is not: proof that the handshake, with the
    /// CA given to the builder, succeeded for the cluster's seeds and for the sentinels.
    #[tokio::test]
    async fn rediss_cluster_and_sentinel_urls_use_tls_with_the_given_ca() {
        let address = with_scheme(&settings::REDIS_TLS.value(), "x")
            .trim_start_matches("x://")
            .trim_end_matches('/')
            .to_owned();
        for (url, past_the_handshake) in [
            (
                format!("rediss+cluster://{address}"),
                "the server is not in cluster mode",
            ),
            (
                format!("rediss+sentinel://{address}/shedlock"),
                "a listed host answered but is not a sentinel",
            ),
        ] {
            let error = within(builder().tls_root_certificate(ca()).connect(&url))
                .await
                .unwrap_err();
            let text = error_chain(&error);
            assert!(text.contains(past_the_handshake), "{url}: {text}");
            // The server is not of the deployment kind the URL names.
            assert_eq!(error.kind(), ErrorKind::Configuration, "{url}: {text}");

            // Without the CA the same handshake is refused, and the error says what to do.
            let error = within(builder().connect(&url)).await.unwrap_err();
            let text = error_chain(&error);
            assert!(
                text.contains("UnknownIssuer") && !text.contains(past_the_handshake),
                "{url}: {text}"
            );
            assert!(
                text.contains("give that CA to RedisLockProviderBuilder::tls_root_certificate"),
                "{url}: {text}"
            );
            assert_eq!(error.kind(), ErrorKind::Unreachable, "{url}: {text}");
        }
    }

    #[tokio::test]
    async fn a_root_certificate_with_a_plain_url_is_refused_before_connecting() {
        let error = builder()
            .tls_root_certificate(ca())
            .connect("redis://:secret-pass@localhost:1")
            .await
            .unwrap_err();
        let text = error_chain(&error);
        assert!(
            text.contains("a TLS root certificate was set but redis://:***@localhost:1 does not use TLS: use rediss://"),
            "{text}"
        );
        assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
    }
}
