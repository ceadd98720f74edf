//! What the SQL providers' TLS tests share: the test CA, URLs rewritten to another host or with
//! a password, and how a refusal reads, checked never to show that password.

use std::future::Future;
use std::time::Duration;

use shedlock_core::LockError;
use shedlock_sql::{SqlBackend, SqlLockProvider};

/// A password put in URLs whose connection fails before the server checks any password (or
/// whose server ignores it), so that each refusal can be checked for leaking it.
pub const PASSWORD: &str = "tls-test-secret";

/// `url` with its host replaced by `host`.
pub fn with_host(url: &str, host: &str) -> String {
    let (front, rest) = url.split_once('@').expect("the URL has a user");
    let host_end = match rest.strip_prefix('[') {
        Some(bracketed) => bracketed.find(']').expect("a closing bracket") + 2,
        None => rest.find([':', '/', '?']).unwrap_or(rest.len()),
    };
    format!("{front}@{host}{}", &rest[host_end..])
}

/// `url` with [`PASSWORD`] as its user's password.
pub fn with_password(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("the URL has a scheme");
    let (user_info, rest) = rest.split_once('@').expect("the URL has a user");
    let user = user_info.split(':').next().unwrap_or(user_info);
    format!("{scheme}://{user}:{PASSWORD}@{rest}")
}

/// `future`'s output, which must come within 30 s.
pub async fn within<T>(future: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), future)
        .await
        .expect("within 30 s")
}

/// The error's whole chain, as a person reading a log sees it, which must not show
/// [`PASSWORD`].
fn chain(error: &LockError) -> String {
    let mut text = format!("{error} / {error:?}");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        text.push_str(&format!(" / {cause}"));
        source = cause.source();
    }
    assert!(
        !text.contains(PASSWORD),
        "the error shows the URL's password: {text}"
    );
    text
}

/// In a build without TLS, each of `urls`, which ask for TLS, is refused with an error that
/// names the feature of `package` to turn on, not sqlx's "built without TLS support", which
/// names none of ours, and never shows [`PASSWORD`].
pub async fn urls_asking_for_tls_name_the_feature_to_enable<B: SqlBackend>(
    urls: impl IntoIterator<Item = String>,
    package: &str,
) {
    for url in urls {
        let error = within(SqlLockProvider::<B>::builder().connect(url.clone()))
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(
            message.ends_with(&format!(
                "asks for TLS, which this build leaves out: enable the \"tls-rustls\" feature \
                 of {package} (on by default), or the \"rustls\" feature of shedlock"
            )),
            "{url}: {message}"
        );
        assert!(
            !format!("{message} {error:?}").contains(PASSWORD),
            "{error:?}"
        );
    }
}

/// A provider connected to `url` (giving up after 10 s), on `table`, which it creates if it is
/// missing.
pub async fn connect<B: SqlBackend>(
    url: &str,
    table: &str,
) -> Result<SqlLockProvider<B>, LockError> {
    SqlLockProvider::<B>::builder()
        .table_name(table)
        .create_table_if_missing()
        .connect_timeout(Duration::from_secs(10))
        .connect(url)
        .await
}

/// Why a provider could not connect to `url`: the error's whole chain, which must not show
/// [`PASSWORD`].
pub async fn refusal<B: SqlBackend>(url: &str) -> String {
    let error = within(connect::<B>(url, "shedlock")).await.unwrap_err();
    chain(&error)
}

/// A connection to `url`, whose host the server's certificate does not name, is refused for
/// that reason.
pub async fn a_certificate_for_another_name_is_refused<B: SqlBackend>(url: &str) {
    let text = refusal::<B>(url).await;
    assert!(text.contains("cannot connect"), "{text}");
    assert!(
        text.contains("certificate") && text.contains("NotValidForName"),
        "the error says the certificate is not for this name: {text}"
    );
}

/// A connection to `url`, which trusts the public roots only, is refused because none of them
/// signed the server's certificate.
pub async fn a_certificate_no_trusted_ca_signed_is_refused<B: SqlBackend>(url: &str) {
    let text = refusal::<B>(url).await;
    assert!(
        text.contains("certificate") && text.contains("UnknownIssuer"),
        "the error says who signed the certificate is not trusted: {text}"
    );
}
