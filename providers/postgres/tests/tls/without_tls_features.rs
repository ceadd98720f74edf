//! A build without TLS (`--no-default-features`): a URL that asks for TLS is refused with the
//! feature to turn on, not sqlx's "built without TLS support", which names none of ours.

use shedlock_postgres::PostgresBackend;
use shedlock_test_support::sql::provider_tests::url_from_env;
use shedlock_test_support::sql::tls;

#[tokio::test]
async fn sslmode_require_without_tls_names_the_feature_to_enable() {
    let url = tls::with_password(&url_from_env(
        "SHEDLOCK_TEST_POSTGRES_TLS_URL",
        "a PostgreSQL server that accepts TLS connections only",
        "postgres://postgres@localhost:5433/test",
    ));
    tls::urls_asking_for_tls_name_the_feature_to_enable::<PostgresBackend>(
        [format!("{url}?sslmode=require")],
        "shedlock-postgres",
    )
    .await;
}
