//! The MySQL/MariaDB provider over TLS, against a server that accepts TLS connections only
//! (`require_secure_transport=ON`) and whose certificate a test CA signed for `localhost` only
//! (ci/start-mariadb-tls.sh starts it, with the CA ci/start-backends.sh makes):
//! `SHEDLOCK_TEST_MYSQL_TLS_URL` (with the host `localhost`) and `SHEDLOCK_TEST_TLS_CA_FILE`.

use std::time::Duration;

use shedlock_core::{LockConfiguration, LockProvider};
use shedlock_mysql::MySqlBackend;
use shedlock_test_support::settings;
use shedlock_test_support::sql::provider_tests::unique;
use shedlock_test_support::sql::tls::{self, connect, with_host, with_password, within};
use sqlx::{Connection, MySqlConnection};

/// The TLS-only server's URL with `query` appended.
fn url(query: &str) -> String {
    let base = settings::MYSQL_TLS.value();
    let separator = if base.contains('?') { '&' } else { '?' };
    format!("{base}{separator}{query}")
}

fn verify_identity() -> String {
    format!(
        "ssl-mode=VERIFY_IDENTITY&ssl-ca={}",
        settings::TLS_CA.value()
    )
}

async fn drop_table(table: &str) {
    let mut connection = MySqlConnection::connect(&url(&verify_identity()))
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&mut connection)
        .await
        .unwrap();
}

/// Acquires, is refused a second time, releases and acquires again through a provider
/// connected to `url`, on a table of its own.
async fn lock_cycle(url: &str) {
    let table = unique("my_tls");
    let provider = connect::<MySqlBackend>(url, &table).await.unwrap();
    let config =
        LockConfiguration::new(unique("job"), Duration::from_secs(60), Duration::ZERO).unwrap();
    let handle = provider
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .expect("a fresh lock is acquired over TLS");
    assert!(
        !provider
            .node()
            .try_lock(&config)
            .await
            .unwrap()
            .is_acquired(),
        "the held lock excludes another node"
    );
    assert!(handle.unlock().await.unwrap(), "released over TLS");
    assert!(
        provider.try_lock(&config).await.unwrap().is_acquired(),
        "the released lock can be taken again"
    );
    drop(provider);
    drop_table(&table).await;
}

#[tokio::test]
async fn verify_identity_with_the_servers_ca_locks_and_releases() {
    within(lock_cycle(&url(&verify_identity()))).await;
}

#[tokio::test]
async fn required_without_a_ca_locks_and_releases() {
    // REQUIRED encrypts without checking the certificate, so the test CA is not needed.
    within(lock_cycle(&url("ssl-mode=REQUIRED"))).await;
}

#[tokio::test]
async fn the_url_with_verify_identity_gets_an_encrypted_session() {
    let mut connection = within(MySqlConnection::connect(&url(&verify_identity())))
        .await
        .unwrap();
    let (_, version): (String, String) = sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_version'")
        .fetch_one(&mut connection)
        .await
        .unwrap();
    assert!(version.starts_with("TLSv1."), "TLS version {version:?}");
}

#[tokio::test]
async fn the_tls_only_server_refuses_a_connection_without_tls() {
    let text = tls::refusal::<MySqlBackend>(&url("ssl-mode=DISABLED")).await;
    // The error names the URL with the mode that was asked for, so a reader sees TLS was off.
    assert!(
        text.contains("?ssl-mode=DISABLED: cannot connect"),
        "{text}"
    );
    // MySQL 8 says why (3159, "Connections using insecure transport are prohibited"); MariaDB
    // 10.11 answers a plain connection to a server with require_secure_transport=ON with 1045
    // "Access denied" for the same user that gets in over TLS (the tests above, no password).
    assert!(
        text.contains("3159") && text.contains("insecure transport")
            || text.contains("1045") && text.contains("Access denied for user"),
        "the server refuses the plain connection: {text}"
    );
}

#[tokio::test]
async fn verify_identity_refuses_a_host_name_the_certificate_does_not_name() {
    // The certificate names localhost; 127.0.0.1 is the same server under another name. The
    // handshake fails before any password is sent, so the one in the URL is never checked.
    let url = with_password(&with_host(&url(&verify_identity()), "127.0.0.1"));
    tls::a_certificate_for_another_name_is_refused::<MySqlBackend>(&url).await;

    // VERIFY_CA checks the CA only, so the same name is accepted.
    let query = format!("ssl-mode=VERIFY_CA&ssl-ca={}", settings::TLS_CA.value());
    let url = with_host(&self::url(&query), "127.0.0.1");
    within(lock_cycle(&url)).await;
}

#[tokio::test]
async fn verify_ca_without_the_ca_file_refuses_a_certificate_no_trusted_ca_signed() {
    // No ssl-ca: the trusted roots are the public ones, and the test CA is not among them.
    let url = with_password(&url("ssl-mode=VERIFY_CA"));
    tls::a_certificate_no_trusted_ca_signed_is_refused::<MySqlBackend>(&url).await;
}
