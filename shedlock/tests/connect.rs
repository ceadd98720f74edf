//! `shedlock::connect` against the real servers named by `SHEDLOCK_TEST_<BACKEND>_URL`: every
//! scheme reaches its backend (a lock taken through the facade is seen by the provider crate's
//! own `connect`), and every refusal names the scheme and what to do, never a password.
//!
//! Each backend's tests exist only when its feature is on; when it is off, a test checks that
//! its schemes name the feature to enable instead. Run both halves with
//! `cargo test -p shedlock --all-features` and `cargo test -p shedlock` (default features).

// The helpers serve the backends whose features are on; in a build without some of them, some
// helpers have no caller.
#![cfg_attr(not(every_backend), allow(dead_code, unused_imports))]

mod support;

use shedlock_test_support::settings;
use std::time::Duration;

use shedlock::{
    Acquisition, AnyLockProvider, ConnectError, LockAdmin, LockConfiguration, LockError,
    LockProvider,
};
use support::{bounded, unique, with_scheme};

/// A password no message or `Debug` output may contain.
const SECRET: &str = "s3cretPa55";

/// Asserts that neither the text nor its source chain shows the password.
fn assert_no_secret(what: &str, text: &str) {
    assert!(!text.contains(SECRET), "{what} shows the password: {text}");
}

/// Takes a lock through `any` and checks that `own`, connected by the provider crate itself,
/// sees it held and can take it once it is released: both are the same backend.
async fn assert_same_backend(any: &AnyLockProvider, own: &dyn LockProvider) {
    let config =
        LockConfiguration::new(unique("facade"), Duration::from_secs(30), Duration::ZERO).unwrap();
    let held = any
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .expect("a fresh name is acquired through the facade");
    assert!(
        !own.try_lock(&config).await.unwrap().is_acquired(),
        "the provider crate's own connection must see the lock the facade took"
    );
    assert!(held.unlock().await.unwrap(), "the facade's release");
    let again = own
        .try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .expect("released through the facade, the lock is free for the provider crate");
    assert!(again.unlock().await.unwrap());
}

/// Connects to each of `urls` through `shedlock::connect`, and checks that each is the backend
/// `is_backend` accepts and the same one as `own`.
async fn assert_urls_reach(
    urls: impl IntoIterator<Item = String>,
    own: &dyn LockProvider,
    is_backend: fn(&AnyLockProvider) -> bool,
) {
    for url in urls {
        let any = shedlock::connect(&url)
            .await
            .unwrap_or_else(|error| panic!("{url}: {error}"));
        assert!(is_backend(&any), "{url}: {any:?}");
        assert_same_backend(&any, own).await;
    }
}

/// What a connect shows a user: the provider's `Debug`, or the error's message and `Debug`.
fn shown(outcome: &Result<AnyLockProvider, ConnectError>) -> String {
    match outcome {
        Ok(any) => format!("{any:?}"),
        Err(error) => format!("{error} {error:?}"),
    }
}

/// Asserts that `error` is `provider`'s own error of `kind` and shows no password.
fn assert_provider_error(error: &ConnectError, provider: &str, kind: shedlock::ErrorKind) {
    assert!(
        matches!(error, ConnectError::Provider(LockError::Backend { provider: named, .. }) if *named == provider),
        "{error:?}"
    );
    assert_eq!(error.kind(), kind, "{error}");
    assert_no_secret("the error", &error.to_string());
    assert_no_secret("the error's Debug", &format!("{error:?}"));
}

/// `url` with `user:password` put in front of its host.
fn with_password(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    format!("{scheme}://{user}:{SECRET}@{rest}")
}

#[tokio::test]
async fn text_without_a_scheme_is_not_a_url_and_is_never_quoted() {
    for text in ["localhost:5432", "app:s3cretPa55@db/app", "", "s3cretPa55"] {
        let error = shedlock::connect(text).await.unwrap_err();
        assert!(matches!(error, ConnectError::NotAUrl), "{text}: {error:?}");
        let message = error.to_string();
        assert!(message.contains("not a URL"), "{message}");
        assert!(message.contains("postgres, postgresql, mysql"), "{message}");
        assert_no_secret("the not-a-URL error", &message);
    }
}

#[tokio::test]
async fn an_unknown_scheme_is_named_with_the_supported_ones() {
    let error = shedlock::connect(&format!("ftp://app:{SECRET}@files/x"))
        .await
        .unwrap_err();
    let ConnectError::UnknownScheme { scheme } = &error else {
        panic!("expected UnknownScheme, got {error:?}");
    };
    assert_eq!(scheme, "ftp");
    let message = error.to_string();
    assert_no_secret("the unknown-scheme error", &message);
    assert_no_secret("the unknown-scheme error's Debug", &format!("{error:?}"));
    assert!(message.contains("\"ftp\""), "{message}");
    for scheme in [
        "memory",
        "sqlite",
        "postgres",
        "postgresql",
        "mysql",
        "mariadb",
        "redis",
        "rediss",
        "etcd",
        "etcds",
        "mongodb",
        "mongodb+srv",
        "zk",
        "zk+tls",
        "zookeeper+tls",
    ] {
        assert!(message.contains(scheme), "{scheme} missing from: {message}");
    }
}

#[tokio::test]
async fn an_unknown_plus_form_of_a_known_scheme_is_an_unknown_scheme() {
    for scheme in [
        "redis+shard",
        "rediss+replica",
        "valkey+proxy",
        "postgres+srv",
    ] {
        let error = shedlock::connect(&format!("{scheme}://app:{SECRET}@h1:1,h2:2/x"))
            .await
            .unwrap_err();
        let ConnectError::UnknownScheme { scheme: named } = &error else {
            panic!("{scheme}: expected UnknownScheme, got {error:?}");
        };
        assert_eq!(named, scheme);
        let message = error.to_string();
        for known in [
            "redis+cluster",
            "rediss+cluster",
            "redis+sentinel",
            "rediss+sentinel",
        ] {
            assert!(message.contains(known), "{known} missing from: {message}");
        }
        assert_no_secret("the unknown-scheme error", &format!("{message} {error:?}"));
    }
}

/// One test per provider feature that is off in this build: its schemes name the feature.
macro_rules! disabled_feature_test {
    ($feature:literal, $test:ident, [$($scheme:literal),+]) => {
        #[cfg(not(feature = $feature))]
        #[tokio::test]
        async fn $test() {
            for scheme in [$($scheme),+] {
                let url = format!("{scheme}://app:{SECRET}@host:1/x");
                let error = shedlock::connect(&url).await.unwrap_err();
                assert!(
                    matches!(
                        &error,
                        ConnectError::FeatureDisabled { scheme: named, feature }
                            if named == scheme && *feature == $feature
                    ),
                    "{scheme}: {error:?}"
                );
                let message = error.to_string();
                assert!(
                    message.contains(concat!("enable the \"", $feature, "\" feature of shedlock")),
                    "{message}"
                );
                assert_no_secret("the disabled-feature error", &message);
            }
        }
    };
}

disabled_feature_test!("memory", memory_urls_name_the_memory_feature, ["memory"]);
disabled_feature_test!("sqlite", sqlite_urls_name_the_sqlite_feature, ["sqlite"]);
disabled_feature_test!(
    "postgres",
    postgres_urls_name_the_postgres_feature,
    ["postgres", "postgresql"]
);
disabled_feature_test!(
    "mysql",
    mysql_urls_name_the_mysql_feature,
    ["mysql", "mariadb"]
);
disabled_feature_test!(
    "redis",
    redis_urls_name_the_redis_feature,
    [
        "redis",
        "rediss",
        "redis+unix",
        "unix",
        "redis+cluster",
        "rediss+cluster",
        "redis+sentinel",
        "rediss+sentinel",
        "valkey",
        "valkeys",
        "valkey+unix",
        "valkey+cluster",
        "valkeys+cluster",
        "valkey+sentinel",
        "valkeys+sentinel"
    ]
);
disabled_feature_test!("etcd", etcd_urls_name_the_etcd_feature, ["etcd", "etcds"]);
disabled_feature_test!(
    "mongo",
    mongo_urls_name_the_mongo_feature,
    ["mongodb", "mongodb+srv"]
);
disabled_feature_test!(
    "zookeeper",
    zookeeper_urls_name_the_zookeeper_feature,
    ["zk", "zookeeper", "zk+tls", "zookeeper+tls"]
);

#[tokio::test]
async fn a_client_certificate_serves_zookeeper_only() {
    for url in [
        "memory://client-cert",
        "rediss://cache:6380",
        "postgres://db/app?sslmode=require",
    ] {
        let error = AnyLockProvider::builder()
            .tls_client_certificate("-----BEGIN CERTIFICATE-----", SECRET)
            .connect(url)
            .await
            .unwrap_err();
        let message = error.to_string();
        assert!(
            matches!(error, ConnectError::InvalidUrl { .. }),
            "{url}: {error:?}"
        );
        assert!(message.contains("serves zk+tls:// only"), "{message}");
        assert_no_secret(
            "the client-certificate error",
            &format!("{message} {error:?}"),
        );
    }
}

#[cfg(not(feature = "sqlite"))]
#[tokio::test]
async fn sqlites_colon_form_names_the_sqlite_feature_too() {
    let error = shedlock::connect("sqlite:locks.db").await.unwrap_err();
    assert!(
        matches!(
            &error,
            ConnectError::FeatureDisabled {
                feature: "sqlite",
                ..
            }
        ),
        "{error:?}"
    );
}

/// Every backend whose feature is on, as `(a URL nothing answers at, the test server's URL)`.
fn lazy_cases() -> Vec<(&'static str, String)> {
    vec![
        #[cfg(feature = "sqlite")]
        (
            "sqlite:///nonexistent-dir-shedlock/locks.db",
            format!(
                "sqlite://{}/{}.db?mode=rwc",
                std::env::temp_dir().display(),
                unique("lazy")
            ),
        ),
        #[cfg(feature = "postgres")]
        ("postgres://app@127.0.0.1:1/app", settings::POSTGRES.value()),
        #[cfg(feature = "mysql")]
        ("mysql://app@127.0.0.1:1/app", settings::MYSQL.value()),
        #[cfg(feature = "redis")]
        ("redis://127.0.0.1:1", settings::REDIS.value()),
        #[cfg(feature = "etcd")]
        (
            "etcd://127.0.0.1:1",
            with_scheme("etcd", &settings::ETCD.value()),
        ),
        #[cfg(feature = "mongo")]
        (
            "mongodb://127.0.0.1:1/shedlock_facade?directConnection=true",
            format!(
                "{}/shedlock_facade",
                settings::MONGO.value().trim_end_matches('/')
            ),
        ),
        #[cfg(feature = "zookeeper")]
        (
            "zk://127.0.0.1:1",
            format!("zk://{}", settings::ZOOKEEPER.value()),
        ),
    ]
}

/// The builder's holder is what every backend that stores one shows for the lock (an
/// operator's listing, a refused acquire), so replicas on one host name tell apart; ZooKeeper,
/// which stores none, refuses it rather than dropping it.
#[tokio::test]
async fn the_holder_set_on_the_builder_is_the_holder_every_backend_shows_alike() {
    bounded(async {
        let memory = cfg!(feature = "memory").then(|| format!("memory://{}", unique("holder")));
        let cases = lazy_cases().into_iter().map(|(_, real)| real).chain(memory);
        for url in cases {
            let holder = unique("replica");
            let outcome = AnyLockProvider::builder()
                .holder(&holder)
                .create_table_if_missing()
                .connect(&url)
                .await;
            if url.starts_with("zk://") {
                let error = outcome.unwrap_err();
                assert!(
                    matches!(error, ConnectError::InvalidUrl { .. })
                        && error
                            .to_string()
                            .contains("a holder set on the builder has nowhere to go"),
                    "{url}: {error:?}"
                );
                continue;
            }
            let node = outcome.unwrap_or_else(|error| panic!("{url}: {error}"));
            let name = unique("holder");
            let config =
                LockConfiguration::new(&name, Duration::from_secs(30), Duration::ZERO).unwrap();
            let handle = node.try_lock(&config).await.unwrap().into_handle().unwrap();
            // One format on every backend: the holder's name, whatever the value stored.
            let info = node.inspect_lock(&name).await.unwrap().unwrap();
            assert_eq!(
                info.locked_by.as_deref(),
                Some(holder.as_str()),
                "{url}: {info:?}"
            );
            match node.try_lock(&config).await.unwrap() {
                Acquisition::NotAcquired(Some(skipped)) => assert_eq!(
                    skipped.locked_by.as_deref(),
                    Some(holder.as_str()),
                    "{url}: {skipped:?}"
                ),
                // MySQL's refused statement returns no row, so it names no holder.
                Acquisition::NotAcquired(None) => assert!(url.starts_with("mysql"), "{url}"),
                Acquisition::Acquired(_) => panic!("{url}: taken twice"),
            }
            assert!(handle.unlock().await.unwrap(), "{url}");
        }
    })
    .await;
}

/// `connect_lazy` makes each backend's provider without contacting it: where nothing answers
/// it succeeds all the same, and the first lock operation is then an error within the
/// operation timeout, never an acquisition or a hang; against the test server it locks the same
/// backend as a provider `connect` made.
#[tokio::test]
async fn connect_lazy_contacts_nothing_until_the_first_lock_operation() {
    bounded(async {
        let timeout = Duration::from_secs(2);
        for (unreachable, real) in lazy_cases() {
            let lazy = AnyLockProvider::builder()
                .operation_timeout(timeout)
                .connect_lazy(unreachable)
                .await
                .unwrap_or_else(|e| panic!("{unreachable}: {e}"));
            let config =
                LockConfiguration::new(unique("lazy"), Duration::from_secs(30), Duration::ZERO)
                    .unwrap();
            let started = std::time::Instant::now();
            let outcome = lazy.try_lock(&config).await;
            assert!(outcome.is_err(), "{unreachable}: {outcome:?}");
            assert!(
                started.elapsed() < 4 * timeout,
                "{unreachable}: the first operation took {:?}",
                started.elapsed()
            );

            let eager = AnyLockProvider::builder()
                .create_table_if_missing()
                .connect(&real)
                .await
                .unwrap_or_else(|e| panic!("{real}: {e}"));
            let lazy = AnyLockProvider::builder()
                .connect_lazy(&real)
                .await
                .unwrap_or_else(|e| panic!("{real}: {e}"));
            assert_same_backend(&lazy, &eager).await;
        }
    })
    .await;
}

/// A table cannot be created without a connection: asking `connect_lazy` for one on a SQL URL
/// is refused up front, naming the setting, rather than a table that silently never comes. A
/// backend without a table ignores the setting, lazily as when connecting.
#[tokio::test]
async fn connect_lazy_refuses_to_create_a_table() {
    // The scheme is known whatever the features: the refusal comes before any provider.
    let error = AnyLockProvider::builder()
        .create_table_if_missing()
        .connect_lazy("postgres://app@127.0.0.1:1/app")
        .await
        .unwrap_err();
    assert!(
        matches!(error, ConnectError::InvalidUrl { .. }),
        "{error:?}"
    );
    let text = error.to_string();
    assert!(
        text.contains("create_table_if_missing() needs a connection"),
        "{text}"
    );
    #[cfg(feature = "memory")]
    assert!(
        AnyLockProvider::builder()
            .create_table_if_missing()
            .connect_lazy("memory://lazy-table")
            .await
            .is_ok()
    );
}

#[cfg(feature = "memory")]
mod memory {
    use super::*;
    use shedlock::{LockingTaskExecutor, TaskOutcome};

    /// 16 nodes connecting at the same instant to a store nobody has named yet all get that
    /// one store: it is created once, by whoever is first.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sixteen_nodes_naming_a_new_store_at_once_share_it() {
        use shedlock_conformance::{FIRST_USE_NODES, check_first_use};
        for round in 0..10 {
            let url = format!("memory://{}", unique("first-use"));
            check_first_use(FIRST_USE_NODES, |_| {
                let url = url.clone();
                async move { shedlock::connect(&url).await }
            })
            .await
            .unwrap_or_else(|failure| panic!("round {round}: {failure}"));
        }
    }

    #[tokio::test]
    async fn the_same_name_is_one_store_and_other_names_are_others() {
        let store = unique("store");
        let first = shedlock::connect(&format!("memory://{store}"))
            .await
            .unwrap();
        let second = shedlock::connect(&format!("memory://{store}"))
            .await
            .unwrap();
        let elsewhere = shedlock::connect(&format!("memory://{store}-other"))
            .await
            .unwrap();
        assert!(matches!(first, AnyLockProvider::Memory(_)));
        let config =
            LockConfiguration::new("report", Duration::from_secs(30), Duration::ZERO).unwrap();
        let held = first
            .try_lock(&config)
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        assert!(!second.try_lock(&config).await.unwrap().is_acquired());
        assert!(elsewhere.try_lock(&config).await.unwrap().is_acquired());
        assert!(held.unlock().await.unwrap());
        assert!(second.try_lock(&config).await.unwrap().is_acquired());
    }

    #[tokio::test]
    async fn the_provider_drives_an_executor_and_its_clones_are_the_same_node() {
        let provider = shedlock::connect(&format!("memory://{}", unique("exec")))
            .await
            .unwrap();
        let executor = LockingTaskExecutor::new(provider.clone());
        let config =
            LockConfiguration::new("job", Duration::from_secs(30), Duration::ZERO).unwrap();
        let outcome = executor
            .execute(&config, async {
                // While the executor holds the lock, a clone of its provider cannot take it.
                provider.try_lock(&config).await.unwrap().is_acquired()
            })
            .await
            .unwrap();
        assert!(
            matches!(outcome, TaskOutcome::Executed(false)),
            "{outcome:?}"
        );
        assert!(provider.try_lock(&config).await.unwrap().is_acquired());
    }

    #[tokio::test]
    async fn a_memory_url_names_a_store_and_nothing_else() {
        for url in ["memory://a/b", "memory://a?x=1", "memory://u:s3cretPa55@a"] {
            let error = shedlock::connect(url).await.unwrap_err();
            assert!(
                matches!(&error, ConnectError::InvalidUrl { scheme, .. } if scheme == "memory"),
                "{url}: {error:?}"
            );
            assert!(error.to_string().contains("memory://<name>"), "{error}");
            assert_no_secret("the memory URL error", &error.to_string());
        }
        // An empty name is a store like any other.
        assert!(shedlock::connect("memory://").await.is_ok());
    }

    #[tokio::test]
    async fn a_provider_built_elsewhere_converts_into_the_one_type() {
        let store = shedlock::memory::MemoryLockStore::new();
        let a = AnyLockProvider::from(store.node());
        let b = AnyLockProvider::from(store.node());
        let config =
            LockConfiguration::new("job", Duration::from_secs(30), Duration::ZERO).unwrap();
        assert!(a.try_lock(&config).await.unwrap().is_acquired());
        assert!(!b.try_lock(&config).await.unwrap().is_acquired());
        assert!(format!("{a:?}").starts_with("Memory("), "{a:?}");
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use shedlock::sqlite::SqliteLockProvider;

    #[tokio::test]
    async fn sqlite_urls_and_their_colon_form_reach_the_same_file() {
        bounded(async {
            let dir = std::env::temp_dir().join(unique("shedlock-facade"));
            std::fs::create_dir_all(&dir).unwrap();
            let file = dir.join("locks.db");
            let own = SqliteLockProvider::builder()
                .create_table_if_missing()
                .connect(format!("sqlite://{}?mode=rwc", file.display()))
                .await
                .unwrap();
            let urls = [
                format!("sqlite://{}", file.display()),
                format!("sqlite:{}", file.display()),
            ];
            assert_urls_reach(urls, &own, |any| matches!(any, AnyLockProvider::Sqlite(_))).await;
            std::fs::remove_dir_all(dir).unwrap();
        })
        .await;
    }

    /// A database without the lock table is refused with the way to create it; the builder's
    /// `create_table_if_missing` creates it, and its locks are the provider crate's.
    #[tokio::test]
    async fn the_builder_creates_a_missing_table_on_request_only() {
        bounded(async {
            let dir = std::env::temp_dir().join(unique("shedlock-facade"));
            std::fs::create_dir_all(&dir).unwrap();
            let url = format!("sqlite://{}?mode=rwc", dir.join("locks.db").display());
            let error = shedlock::connect(&url).await.unwrap_err();
            let message = error.to_string();
            assert!(message.contains("does not exist"), "{message}");
            assert!(message.contains("create_table_if_missing()"), "{message}");
            let any = AnyLockProvider::builder()
                .create_table_if_missing()
                .connect(&url)
                .await
                .unwrap();
            let own = SqliteLockProvider::builder()
                .connect(url.as_str())
                .await
                .unwrap();
            assert_same_backend(&any, &own).await;
            std::fs::remove_dir_all(dir).unwrap();
        })
        .await;
    }
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use shedlock::postgres::PostgresLockProvider;

    fn url() -> String {
        settings::POSTGRES.value()
    }

    #[tokio::test]
    async fn postgres_and_postgresql_urls_reach_the_same_database() {
        bounded(async {
            let own = PostgresLockProvider::builder()
                .create_table_if_missing()
                .connect(url())
                .await
                .unwrap();
            let urls = ["postgres", "postgresql"].map(|scheme| with_scheme(scheme, &url()));
            assert_urls_reach(urls, &own, |any| {
                matches!(any, AnyLockProvider::Postgres(_))
            })
            .await;
        })
        .await;
    }

    #[tokio::test]
    async fn a_password_shows_neither_in_debug_nor_in_errors() {
        bounded(async {
            // The test server trusts every login, so the password is accepted and ignored.
            let any = AnyLockProvider::builder()
                .create_table_if_missing()
                .connect(&with_password(&url(), "postgres"))
                .await
                .unwrap();
            assert_no_secret("the provider's Debug", &format!("{any:?}"));
            let error = shedlock::connect(&format!("postgres://app:{SECRET}@127.0.0.1:99999/test"))
                .await
                .unwrap_err();
            let message = error.to_string();
            assert!(message.contains("not a valid PostgreSQL URL"), "{message}");
            assert_no_secret("the malformed URL error", &message);
            assert_no_secret("the malformed URL error's Debug", &format!("{error:?}"));
        })
        .await;
    }
}

#[cfg(feature = "mysql")]
mod mysql {
    use super::*;
    use shedlock::mysql::MySqlLockProvider;

    fn url() -> String {
        settings::MYSQL.value()
    }

    #[tokio::test]
    async fn mysql_and_mariadb_urls_reach_the_same_database() {
        bounded(async {
            let own = MySqlLockProvider::builder()
                .create_table_if_missing()
                .connect(url())
                .await
                .unwrap();
            let urls = ["mysql", "mariadb"].map(|scheme| with_scheme(scheme, &url()));
            assert_urls_reach(urls, &own, |any| matches!(any, AnyLockProvider::MySql(_))).await;
        })
        .await;
    }

    #[tokio::test]
    async fn a_refused_password_does_not_show_in_the_error() {
        bounded(async {
            let error = shedlock::connect(&with_password(&url(), "nobody"))
                .await
                .unwrap_err();
            assert_provider_error(&error, "mysql", shedlock::ErrorKind::CredentialsRefused);
        })
        .await;
    }
}

#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use shedlock::redis::RedisLockProvider;

    fn url() -> String {
        settings::REDIS.value()
    }

    #[tokio::test]
    async fn redis_urls_reach_the_same_server() {
        bounded(async {
            let own = RedisLockProvider::connect(&url()).await.unwrap();
            assert_urls_reach([url()], &own, |any| {
                matches!(any, AnyLockProvider::Redis(_))
            })
            .await;
        })
        .await;
    }

    #[tokio::test]
    async fn a_password_shows_neither_in_debug_nor_in_errors() {
        bounded(async {
            let outcome = shedlock::connect(&with_password(&url(), "default")).await;
            assert_no_secret("the provider or its error", &shown(&outcome));
            // The plain server does not answer a TLS greeting: the attempt is bounded, and
            // its error shows the URL redacted.
            let error = AnyLockProvider::builder()
                .operation_timeout(Duration::from_millis(500))
                .connect(&format!("rediss://:{SECRET}@127.0.0.1:6379"))
                .await
                .unwrap_err();
            let message = format!("{error} {error:?}");
            assert!(
                message.contains("rediss://:***@127.0.0.1:6379"),
                "{message}"
            );
            assert_no_secret("the rediss error", &message);
        })
        .await;
    }

    #[tokio::test]
    async fn cluster_and_sentinel_urls_reach_the_same_backends_as_the_provider_crate() {
        bounded(async {
            for setting in [settings::REDIS_CLUSTER, settings::REDIS_SENTINEL] {
                let url = setting.value();
                let (form, rest) = url.split_once("://").unwrap();
                let valkey_form = format!("{}://{rest}", form.replacen("redis", "valkey", 1));
                let own = RedisLockProvider::connect(&url).await.unwrap();
                assert_urls_reach([url, valkey_form], &own, |any| {
                    matches!(any, AnyLockProvider::Redis(_))
                })
                .await;
            }
        })
        .await;
    }

    #[tokio::test]
    async fn cluster_and_sentinel_passwords_show_neither_in_debug_nor_in_errors() {
        bounded(async {
            for setting in [settings::REDIS_CLUSTER, settings::REDIS_SENTINEL] {
                // The test servers know no such user: refused, and the error is clean.
                let url = with_password(&setting.value(), "nobody");
                let outcome = AnyLockProvider::builder()
                    .operation_timeout(Duration::from_secs(2))
                    .connect(&url)
                    .await;
                let shown = shown(&outcome);
                assert!(
                    outcome.is_err(),
                    "{}: the servers have no user 'nobody'",
                    setting.var
                );
                assert_no_secret("the provider's error", &shown);
                assert!(shown.contains("nobody:***@"), "{shown}");
            }
            // A malformed URL is the provider's error, naming the rule, without the password.
            let error = shedlock::connect(&format!("redis+sentinel://app:{SECRET}@h1,h2"))
                .await
                .unwrap_err();
            assert!(matches!(error, ConnectError::Provider(_)), "{error:?}");
            let message = error.to_string();
            assert!(message.contains("it names no master"), "{message}");
            assert_no_secret(
                "the malformed sentinel URL error",
                &format!("{message} {error:?}"),
            );
        })
        .await;
    }

    #[tokio::test]
    async fn unix_socket_urls_go_to_the_redis_provider() {
        for url in [
            "unix:///nonexistent/redis.sock",
            "redis+unix:///nonexistent/redis.sock",
        ] {
            let error = AnyLockProvider::builder()
                .operation_timeout(Duration::from_secs(2))
                .connect(url)
                .await
                .unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, ConnectError::Provider(_))
                    && message.contains("could not connect to Redis at"),
                "{url}: {message}"
            );
        }
    }

    #[tokio::test]
    async fn the_builders_operation_timeout_reaches_the_provider() {
        bounded(async {
            // A port nobody listens on answers at once; an unroutable address does not, so
            // connecting waits for the operation timeout, which the message names.
            let error = AnyLockProvider::builder()
                .operation_timeout(Duration::from_millis(300))
                .connect("redis://10.255.255.1:6379")
                .await
                .unwrap_err();
            let message = error.to_string();
            assert!(
                message.contains("300ms"),
                "the redis provider's connect must be bounded by the builder's 300 ms: {message}"
            );
        })
        .await;
    }
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use shedlock::etcd::EtcdLockProvider;

    fn url() -> String {
        settings::ETCD.value()
    }

    #[tokio::test]
    async fn etcd_urls_reach_the_same_cluster() {
        bounded(async {
            let own = EtcdLockProvider::connect(&url()).await.unwrap();
            assert_urls_reach([with_scheme("etcd", &url())], &own, |any| {
                matches!(any, AnyLockProvider::Etcd(_))
            })
            .await;
        })
        .await;
    }

    /// `etcds://` reaches every endpoint over TLS: the test cluster speaks plain HTTP only, so
    /// each attempt fails, and never falls back to plain HTTP.
    #[tokio::test]
    async fn etcds_urls_reach_every_endpoint_over_tls() {
        bounded(async {
            let endpoint = url().trim_start_matches("http://").to_owned();
            for etcds in [
                format!("etcds://root:{SECRET}@{endpoint}"),
                format!("etcds://{endpoint},{endpoint}"),
            ] {
                let error = AnyLockProvider::builder()
                    .operation_timeout(Duration::from_secs(2))
                    .connect(&etcds)
                    .await
                    .unwrap_err();
                let message = format!("{error} {error:?}");
                assert!(matches!(error, ConnectError::Provider(_)), "{message}");
                assert!(message.contains("https://"), "{message}");
                assert!(
                    !message.contains("http://"),
                    "fell back to plain HTTP: {message}"
                );
                assert_no_secret("the etcds error", &message);
            }
        })
        .await;
    }

    #[tokio::test]
    async fn a_password_shows_neither_in_debug_nor_in_errors() {
        bounded(async {
            let outcome =
                shedlock::connect(&with_password(&with_scheme("etcd", &url()), "root")).await;
            assert_no_secret("the provider or its error", &shown(&outcome));
        })
        .await;
    }
}

#[cfg(feature = "mongo")]
mod mongo {
    use super::*;
    use shedlock::mongo::MongoLockProvider;

    /// The test server's URL with the database the locks live in.
    fn url() -> String {
        format!(
            "{}/shedlock_facade",
            settings::MONGO.value().trim_end_matches('/')
        )
    }

    #[tokio::test]
    async fn mongodb_urls_reach_the_same_server() {
        bounded(async {
            let own = MongoLockProvider::connect(&url()).await.unwrap();
            assert_urls_reach([url()], &own, |any| {
                matches!(any, AnyLockProvider::Mongo(_))
            })
            .await;
        })
        .await;
    }

    #[tokio::test]
    async fn mongodb_srv_urls_go_to_the_mongo_provider_without_their_password() {
        bounded(async {
            // No SRV record exists for this name, so the MongoDB driver's lookup fails.
            let error = AnyLockProvider::builder()
                .operation_timeout(Duration::from_secs(3))
                .connect(&format!("mongodb+srv://app:{SECRET}@locks.invalid/app"))
                .await
                .unwrap_err();
            assert_provider_error(&error, "mongo", shedlock::ErrorKind::Unreachable);
        })
        .await;
    }
}

#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use shedlock::zookeeper::ZookeeperLockProvider;

    fn connect_string() -> String {
        settings::ZOOKEEPER.value()
    }

    #[tokio::test]
    async fn zk_urls_reach_the_same_ensemble() {
        bounded(async {
            let own = ZookeeperLockProvider::connect(&connect_string())
                .await
                .unwrap();
            let urls = ["zk", "zookeeper"].map(|scheme| format!("{scheme}://{}", connect_string()));
            assert_urls_reach(urls, &own, |any| {
                matches!(any, AnyLockProvider::Zookeeper(_))
            })
            .await;
        })
        .await;
    }

    /// `zk+tls://` and `zookeeper+tls://` reach the TLS ensemble `ci/` starts with the builder's
    /// CA and client certificate, as the provider crate's own TLS connection does; its key never
    /// shows in `Debug`.
    #[cfg(any(feature = "rustls", feature = "rustls-native-roots"))]
    #[tokio::test]
    async fn zk_tls_urls_reach_the_tls_ensemble_with_the_builders_ca_and_client_certificate() {
        bounded(async {
            let url = settings::ZOOKEEPER_TLS.value();
            let ca = settings::TLS_CA.file_contents();
            let certificate = settings::ZOOKEEPER_TLS_CLIENT_CERT.file_contents();
            let key = settings::ZOOKEEPER_TLS_CLIENT_KEY.file_contents();
            let own = ZookeeperLockProvider::builder()
                .tls_root_certificate(ca.clone())
                .tls_client_certificate(certificate.clone(), key.clone())
                .connect(&url)
                .await
                .unwrap();
            let servers = url.split_once("://").expect("a zk+tls:// URL").1;
            for scheme in ["zk+tls", "zookeeper+tls", "ZK+TLS"] {
                let builder = AnyLockProvider::builder()
                    .tls_root_certificate(ca.clone())
                    .tls_client_certificate(certificate.clone(), key.clone());
                let key_text = String::from_utf8_lossy(&key).into_owned();
                assert!(!format!("{builder:?}").contains(key_text.trim()));
                let any = builder
                    .connect(&format!("{scheme}://{servers}"))
                    .await
                    .unwrap();
                assert!(matches!(any, AnyLockProvider::Zookeeper(_)), "{any:?}");
                assert_same_backend(&any, &own).await;
            }
            // The plain ensemble does not speak TLS: zk+tls:// never falls back to plain TCP.
            let plain = AnyLockProvider::builder()
                .operation_timeout(Duration::from_secs(2))
                .tls_root_certificate(ca)
                .connect(&format!("zk+tls://{}", connect_string()))
                .await;
            assert!(plain.is_err(), "zk+tls:// reached the plain ensemble");
        })
        .await;
    }

    /// A build without TLS refuses a certificate for `zk+tls://` rather than ignore it.
    #[cfg(not(any(feature = "rustls", feature = "rustls-native-roots")))]
    #[tokio::test]
    async fn a_build_without_tls_names_the_feature_for_a_zk_tls_certificate() {
        let error = AnyLockProvider::builder()
            .tls_root_certificate("-----BEGIN CERTIFICATE-----")
            .connect("zk+tls://zk1:2281")
            .await
            .unwrap_err();
        assert!(
            matches!(error, ConnectError::InvalidUrl { .. }),
            "{error:?}"
        );
        assert!(
            error.to_string().contains("enable the \"rustls\" feature"),
            "{error}"
        );
    }

    #[tokio::test]
    async fn a_digest_password_does_not_show_in_debug() {
        bounded(async {
            let any =
                shedlock::connect(&with_password(&format!("zk://{}", connect_string()), "app"))
                    .await
                    .unwrap();
            assert_no_secret("the provider's Debug", &format!("{any:?}"));
        })
        .await;
    }
}
