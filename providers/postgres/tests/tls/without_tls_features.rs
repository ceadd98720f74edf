//! A build without TLS (`--no-default-features`): a URL that asks for TLS is refused with the
//! feature to turn on, not sqlx's "built without TLS support", which names none of ours.

use std::time::Duration;

use shedlock_postgres::PostgresLockProvider;

#[tokio::test]
async fn sslmode_require_without_tls_names_the_feature_to_enable() {
    let base = std::env::var("SHEDLOCK_TEST_POSTGRES_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "SHEDLOCK_TEST_POSTGRES_TLS_URL is not set: this test needs a PostgreSQL server that \
             accepts TLS connections only, e.g. postgres://postgres@localhost:5433/test"
        )
    });
    let url = base.replacen("://postgres@", "://postgres:tls-test-secret@", 1);
    let error = tokio::time::timeout(
        Duration::from_secs(30),
        PostgresLockProvider::builder().connect(format!("{url}?sslmode=require")),
    )
    .await
    .expect("within 30 s")
    .unwrap_err();
    let message = error.to_string();
    assert!(
        message.ends_with(
            "asks for TLS, which this build leaves out: enable the \"tls-rustls\" feature of \
             shedlock-postgres (on by default), or the \"rustls\" feature of shedlock"
        ),
        "{message}"
    );
    assert!(
        !format!("{message} {error:?}").contains("tls-test-secret"),
        "{error:?}"
    );
}
