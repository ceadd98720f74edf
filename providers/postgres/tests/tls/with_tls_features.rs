//! The PostgreSQL provider over TLS, against a server that accepts TLS connections only and
//! whose certificate a test CA signed for `localhost` only (ci/start-backends.sh makes both):
//! `SHEDLOCK_TEST_POSTGRES_TLS_URL` (with the host `localhost`) and `SHEDLOCK_TEST_TLS_CA_FILE`.

use std::time::Duration;

use shedlock_core::{LockConfiguration, LockProvider};
use shedlock_postgres::PostgresBackend;
use shedlock_test_support::settings;
use shedlock_test_support::sql::provider_tests::unique;
use shedlock_test_support::sql::tls::{self, PASSWORD, connect, with_host, within};
use sqlx::{Connection, PgConnection};

/// The TLS-only server's URL as `user` with [`PASSWORD`], and `query` appended.
fn url_as(user: &str, query: &str) -> String {
    let base = settings::POSTGRES_TLS.value();
    let (scheme, rest) = base.split_once("://").expect("the TLS URL has a scheme");
    let rest = rest.split_once('@').map_or(rest, |(_, host)| host);
    let separator = if rest.contains('?') { '&' } else { '?' };
    format!("{scheme}://{user}:{PASSWORD}@{rest}{separator}{query}")
}

/// The TLS-only server's URL as `postgres`.
fn url(query: &str) -> String {
    url_as("postgres", query)
}

/// Acquires and releases one lock, and checks that the server saw the provider's connection
/// encrypted: `pg_stat_ssl` for the backends of a role made for this test alone.
async fn lock_cycle_is_encrypted(query: &str) {
    let mut inspector = PgConnection::connect(&url(&format!(
        "sslmode=verify-full&sslrootcert={}",
        settings::TLS_CA.value()
    )))
    .await
    .unwrap();
    let role = unique("shedlock_tls");
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {role} LOGIN SUPERUSER"
    )))
    .execute(&mut inspector)
    .await
    .unwrap();
    let table = unique("pg_tls");
    let provider = connect::<PostgresBackend>(&url_as(&role, query), &table)
        .await
        .unwrap();

    let config =
        LockConfiguration::new(unique("job"), Duration::from_secs(60), Duration::ZERO).unwrap();
    let handle = provider
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .expect("a fresh lock is acquired over TLS");
    let second = provider.node().try_lock(&config).await.unwrap();
    assert!(!second.is_acquired(), "the held lock excludes another node");

    let encrypted: Vec<(bool, String)> = sqlx::query_as(
        "SELECT s.ssl, coalesce(s.version, '') FROM pg_stat_ssl s \
         JOIN pg_stat_activity a USING (pid) WHERE a.usename = $1",
    )
    .bind(&role)
    .fetch_all(&mut inspector)
    .await
    .unwrap();
    assert!(
        !encrypted.is_empty(),
        "the provider's connection is open on the server"
    );
    for (ssl, version) in &encrypted {
        assert!(*ssl, "the provider's connection is not encrypted");
        assert!(version.starts_with("TLSv1."), "TLS version {version:?}");
    }

    assert!(handle.unlock().await.unwrap(), "released over TLS");
    assert!(
        provider.try_lock(&config).await.unwrap().is_acquired(),
        "the released lock can be taken again"
    );
    drop(provider);
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&mut inspector)
        .await
        .unwrap();
    // The role's connections close as the provider is dropped; the role goes when they have.
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = '{role}'"
    )))
    .execute(&mut inspector)
    .await;
    let _ = sqlx::query(sqlx::AssertSqlSafe(format!("DROP ROLE {role}")))
        .execute(&mut inspector)
        .await;
}

#[tokio::test]
async fn sslmode_require_locks_and_releases_over_an_encrypted_connection() {
    within(lock_cycle_is_encrypted("sslmode=require")).await;
}

#[tokio::test]
async fn verify_full_with_the_servers_ca_locks_over_an_encrypted_connection() {
    let query = format!(
        "sslmode=verify-full&sslrootcert={}",
        settings::TLS_CA.value()
    );
    within(lock_cycle_is_encrypted(&query)).await;
}

#[tokio::test]
async fn verify_full_refuses_a_host_name_the_certificate_does_not_name() {
    // The certificate names localhost; 127.0.0.1 is the same server under another name.
    let url = with_host(
        &url(&format!(
            "sslmode=verify-full&sslrootcert={}",
            settings::TLS_CA.value()
        )),
        "127.0.0.1",
    );
    tls::a_certificate_for_another_name_is_refused::<PostgresBackend>(&url).await;

    // verify-ca checks the CA only, so the same name is accepted.
    let url = with_host(
        &self::url(&format!(
            "sslmode=verify-ca&sslrootcert={}",
            settings::TLS_CA.value()
        )),
        "127.0.0.1",
    );
    let table = unique("pg_tls_verify_ca");
    let provider = connect::<PostgresBackend>(&url, &table).await.unwrap();
    let config = LockConfiguration::new("job", Duration::from_secs(60), Duration::ZERO).unwrap();
    assert!(provider.try_lock(&config).await.unwrap().is_acquired());
    let mut inspector = PgConnection::connect(&self::url("sslmode=require"))
        .await
        .unwrap();
    sqlx::query(sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&mut inspector)
        .await
        .unwrap();
}

#[tokio::test]
async fn verify_full_refuses_a_certificate_no_trusted_ca_signed() {
    // No sslrootcert: the trusted roots are the public ones, and the test CA is not among them.
    tls::a_certificate_no_trusted_ca_signed_is_refused::<PostgresBackend>(&url(
        "sslmode=verify-full",
    ))
    .await;
}

#[tokio::test]
async fn the_tls_only_server_refuses_a_connection_without_tls() {
    let text = tls::refusal::<PostgresBackend>(&url("sslmode=disable")).await;
    assert!(text.contains("no encryption"), "{text}");
}
