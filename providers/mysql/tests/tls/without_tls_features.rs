//! A build without TLS (`--no-default-features`): a URL that asks for TLS is refused with the
//! feature to turn on, not sqlx's "built without TLS support", which names none of ours.

use std::time::Duration;

use shedlock_mysql::MySqlLockProvider;

#[tokio::test]
async fn ssl_mode_required_without_tls_names_the_feature_to_enable() {
    let base = std::env::var("SHEDLOCK_TEST_MYSQL_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "SHEDLOCK_TEST_MYSQL_TLS_URL is not set: this test needs a MySQL or MariaDB server \
             that accepts TLS connections only, e.g. mysql://root@localhost:3307/test"
        )
    });
    let (scheme, rest) = base.split_once("://").expect("the URL has a scheme");
    let (user, host) = rest.split_once('@').expect("the URL has a user");
    let user = user.split(':').next().unwrap_or(user);
    let url = format!("{scheme}://{user}:tls-test-secret@{host}");
    for mode in ["REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"] {
        let error = tokio::time::timeout(
            Duration::from_secs(30),
            MySqlLockProvider::builder().connect(format!("{url}?ssl-mode={mode}")),
        )
        .await
        .expect("within 30 s")
        .unwrap_err();
        let message = error.to_string();
        assert!(
            message.ends_with(
                "asks for TLS, which this build leaves out: enable the \"tls-rustls\" feature of \
                 shedlock-mysql (on by default), or the \"rustls\" feature of shedlock"
            ),
            "{mode}: {message}"
        );
        assert!(
            !format!("{message} {error:?}").contains("tls-test-secret"),
            "{error:?}"
        );
    }
}
