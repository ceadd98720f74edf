//! A build without TLS (`--no-default-features`): a URL that asks for TLS is refused with the
//! feature to turn on, not sqlx's "built without TLS support", which names none of ours.

use shedlock_mysql::MySqlBackend;
use shedlock_test_support::settings;
use shedlock_test_support::sql::tls;

#[tokio::test]
async fn ssl_mode_required_without_tls_names_the_feature_to_enable() {
    let url = tls::with_password(&settings::MYSQL_TLS.value());
    tls::urls_asking_for_tls_name_the_feature_to_enable::<MySqlBackend>(
        ["REQUIRED", "VERIFY_CA", "VERIFY_IDENTITY"].map(|mode| format!("{url}?ssl-mode={mode}")),
        "shedlock-mysql",
    )
    .await;
}
