//! From a URL to a provider: the scheme picks the backend, the backend's own crate reads the
//! rest.

use std::fmt;
use std::time::Duration;

use shedlock_core::scheme::{Backend, Scheme, SchemeList};
use shedlock_core::{ErrorKind, LockError};
use thiserror::Error;

use crate::any::AnyLockProvider;

/// Why [`connect`] returned no provider.
///
/// No variant's message contains the URL's credentials: the URL itself is never quoted, only
/// its scheme, and providers' errors show it redacted.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum ConnectError {
    /// The text has no `scheme://` in front, so nothing says which backend it is for.
    #[error(
        "the lock provider URL is not a URL: it does not start with a scheme such as \
         postgres:// (supported schemes: {SchemeList})"
    )]
    NotAUrl,
    /// The scheme names no backend this crate knows.
    #[error("unknown scheme {scheme:?} in the lock provider URL; supported schemes: {SchemeList}")]
    UnknownScheme {
        /// The scheme as given.
        scheme: String,
    },
    /// The scheme's backend is known, but its cargo feature is off in this build.
    #[error(
        "the scheme {scheme:?} needs the {feature:?} provider, which this build leaves out: \
         enable the \"{feature}\" feature of shedlock (Cargo.toml: \
         shedlock = {{ version = \"{version}\", features = [\"{feature}\"] }})",
        version = env!("CARGO_PKG_VERSION")
    )]
    FeatureDisabled {
        /// The scheme as given.
        scheme: String,
        /// The feature that builds the backend's provider in.
        feature: &'static str,
    },
    /// The scheme is known but the rest of the URL breaks a rule of this crate (the provider's
    /// own rules are reported as [`ConnectError::Provider`]).
    #[error("invalid {scheme} URL: {rule}")]
    InvalidUrl {
        /// The scheme as given.
        scheme: String,
        /// The rule the URL broke.
        rule: String,
    },
    /// The provider refused the URL or could not connect; the message names the provider and
    /// the redacted URL.
    #[error(transparent)]
    Provider(#[from] LockError),
}

impl ConnectError {
    /// What kind of failure this is: a URL this build cannot use is
    /// [`ErrorKind::Configuration`]; a provider's error keeps its own kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ConnectError::Provider(error) => error.kind(),
            ConnectError::NotAUrl
            | ConnectError::UnknownScheme { .. }
            | ConnectError::FeatureDisabled { .. }
            | ConnectError::InvalidUrl { .. } => ErrorKind::Configuration,
        }
    }
}

/// Connects to the backend `url` names, with every provider's defaults.
///
/// The scheme picks the provider (see the [crate docs](crate#urls-and-features) for the table)
/// and the provider reads the rest of the URL as its own `connect` does, then checks that the
/// backend answers. Fails with a [`ConnectError`] naming the scheme and what to do: an unknown
/// scheme lists the supported ones, a backend whose feature is off names the feature.
///
/// ```
/// # #[cfg(feature = "memory")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use shedlock::{ConnectError, LockConfiguration, LockProvider};
///
/// let provider = shedlock::connect("memory://billing").await?;
/// let config = LockConfiguration::parse("invoice-run", "PT5M", "0s")?;
/// assert!(provider.try_lock(&config).await?.is_acquired());
///
/// let error = shedlock::connect("ftp://files").await.unwrap_err();
/// assert!(matches!(error, ConnectError::UnknownScheme { .. }));
/// # Ok(()) }
/// # #[cfg(not(feature = "memory"))] fn main() {}
/// ```
pub async fn connect(url: &str) -> Result<AnyLockProvider, ConnectError> {
    AnyLockProvider::builder().connect(url).await
}

impl AnyLockProvider {
    /// Settings every provider shares, then [`connect`](AnyLockProviderBuilder::connect).
    pub fn builder() -> AnyLockProviderBuilder {
        AnyLockProviderBuilder::default()
    }
}

/// The settings every provider shares; anything else is set with the provider's own builder.
///
/// ```
/// # #[cfg(feature = "memory")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), shedlock::ConnectError> {
/// use std::time::Duration;
/// use shedlock::AnyLockProvider;
///
/// let provider = AnyLockProvider::builder()
///     .operation_timeout(Duration::from_secs(2))
///     .connect("memory://jobs")
///     .await?;
/// # let _ = provider; Ok(()) }
/// # #[cfg(not(feature = "memory"))] fn main() {}
/// ```
#[derive(Clone, Default)]
pub struct AnyLockProviderBuilder {
    // Read only by the providers that talk to a server.
    #[cfg_attr(not(server_backend), allow(dead_code))]
    operation_timeout: Option<Duration>,
    #[cfg_attr(not(sql_backend), allow(dead_code))]
    create_table: bool,
    tls_root_certificate: Option<Vec<u8>>,
    tls_client_certificate: Option<ClientCertificate>,
    #[cfg_attr(not(some_backend), allow(dead_code))]
    holder: Option<String>,
}

/// A certificate chain and its private key (PEM), for a server that asks the client for one.
#[derive(Clone)]
// Read only where ZooKeeper's TLS is built in; elsewhere only its presence is checked.
#[cfg_attr(
    not(all(
        feature = "zookeeper",
        any(feature = "rustls", feature = "rustls-native-roots")
    )),
    allow(dead_code)
)]
struct ClientCertificate {
    certificate_pem: Vec<u8>,
    key_pem: Vec<u8>,
}

impl fmt::Debug for AnyLockProviderBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AnyLockProviderBuilder")
            .field("operation_timeout", &self.operation_timeout)
            .field("create_table", &self.create_table)
            .field("holder", &self.holder)
            .field("tls_root_certificate", &self.tls_root_certificate.is_some())
            // Never the key: whether one was given is all Debug shows.
            .field(
                "tls_client_certificate",
                &self.tls_client_certificate.is_some(),
            )
            .finish()
    }
}

/// Connects one of the SQL providers (the same builder, generic over its backend) with the
/// facade builder's settings.
#[cfg(sql_backend)]
macro_rules! sql_provider {
    ($settings:expr, $provider:ty, $url:expr, $connect:expr) => {{
        let settings = $settings;
        let builder = builder_with_timeout!(settings, $provider);
        let builder = with_holder!(builder, settings.holder);
        let builder = if settings.create_table {
            builder.create_table_if_missing()
        } else {
            builder
        };
        finish!(builder, $url, $connect)
    }};
}

/// `$provider`'s builder with the facade builder's operation timeout, when it has one: the
/// setting every provider's builder takes.
#[cfg(server_backend)]
macro_rules! builder_with_timeout {
    ($settings:expr, $provider:ty) => {{
        let builder = <$provider>::builder();
        match $settings.operation_timeout {
            Some(timeout) => builder.operation_timeout(timeout),
            None => builder,
        }
    }};
}

/// `$builder` with the facade builder's holder, when it has one: the setting every provider's
/// builder whose locks name their holder takes.
#[cfg(any(sql_backend, feature = "redis", feature = "etcd", feature = "mongo"))]
macro_rules! with_holder {
    ($builder:expr, $holder:expr) => {
        match $holder {
            Some(holder) => $builder.holder(holder),
            None => $builder,
        }
    };
}

/// `$builder` with the facade builder's TLS root certificate, when it has one, for the
/// providers that take one (Redis, etcd); a build without TLS refuses it for `$scheme`.
#[cfg(any(feature = "redis", feature = "etcd"))]
macro_rules! with_tls_root {
    ($builder:expr, $pem:expr, $scheme:expr) => {
        match $pem {
            #[cfg(any(feature = "rustls", feature = "rustls-native-roots"))]
            Some(pem) => $builder.tls_root_certificate(pem),
            #[cfg(not(any(feature = "rustls", feature = "rustls-native-roots")))]
            Some(_) => return Err(tls_feature_disabled($scheme)),
            None => $builder,
        }
    };
}

/// Finishes a provider's builder by its `connect` or its `connect_lazy` (every provider has
/// both, with the same shape), as an [`AnyLockProvider`].
#[cfg(server_backend)]
macro_rules! finish {
    ($builder:expr, $url:expr, $connect:expr) => {
        match $connect {
            Connect::Now => $builder.connect($url).await,
            Connect::Lazily => $builder.connect_lazy($url).await,
        }
        .map(AnyLockProvider::from)
        .map_err(ConnectError::from)
    };
}

/// When a provider made by [`AnyLockProviderBuilder`] first talks to its backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Connect {
    /// At once: `connect` fails when the backend does not answer.
    Now,
    /// On the first lock operation: `connect_lazy`.
    Lazily,
}

impl AnyLockProviderBuilder {
    /// The longest one lock operation may take before it fails with [`LockError::Timeout`]
    /// (each provider's default is 5 s). It also bounds connecting where the provider's own
    /// builder does. In-process `memory://` locks never wait on I/O and have no such bound.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = Some(timeout);
        self
    }

    /// Creates ShedLock's lock table at connect if it does not exist, for a PostgreSQL, MySQL
    /// or SQLite URL (as each SQL provider's `create_table_if_missing`); an existing table is
    /// left as it is. The other backends keep their locks where no table is needed (Redis and
    /// etcd keys, ZooKeeper nodes, a MongoDB collection made on first write), so for their URLs
    /// there is nothing to create and this changes nothing. For a table with the fencing
    /// column, build the provider with its own crate's `create_table_with_fencing_if_missing`.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let provider = shedlock::AnyLockProvider::builder()
    ///     .create_table_if_missing()
    ///     .connect("postgres://app@db.internal/app")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// ```
    pub fn create_table_if_missing(mut self) -> Self {
        self.create_table = true;
        self
    }

    /// Who this node is, written into each lock it takes (the host name unless set), as each
    /// provider's own `holder` setting: what `shedlock list`, the HTTP view and a refused
    /// acquire show as the holder, so replicas on one host (or pods that share a host name) can
    /// be told apart. Ownership does not depend on it: every acquisition also writes an id of
    /// its own. A ZooKeeper lock node holds no holder (ShedLock's layout), so with a `zk://`
    /// URL it is an error rather than silently dropped.
    ///
    /// ```
    /// # #[cfg(feature = "memory")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use shedlock::{Acquisition, AnyLockProvider, LockConfiguration, LockProvider};
    ///
    /// let replica = AnyLockProvider::builder()
    ///     .holder("billing-7f9c")
    ///     .connect("memory://holder-docs")
    ///     .await?;
    /// let config = LockConfiguration::new("invoices", Duration::from_secs(60), Duration::ZERO)?;
    /// let _held = replica.try_lock(&config).await?.into_handle();
    /// let other = shedlock::connect("memory://holder-docs").await?;
    /// let Acquisition::NotAcquired(Some(holder)) = other.try_lock(&config).await? else {
    ///     panic!("the replica holds the lock, and the store says who");
    /// };
    /// assert_eq!(holder.locked_by.as_deref(), Some("billing-7f9c"));
    /// # Ok(()) }
    /// # #[cfg(not(feature = "memory"))] fn main() {}
    /// ```
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// Trusts only this CA (PEM) for a `rediss://` (or `rediss+cluster://`,
    /// `rediss+sentinel://`), `etcds://` or `zk+tls://` server, instead of the roots
    /// the TLS feature brings: for a server whose certificate a private CA signed (ZooKeeper
    /// over TLS needs it: it trusts nothing else). The SQL
    /// databases and MongoDB take their CA in the URL instead (`sslrootcert=/path/ca.pem`,
    /// `ssl-ca=/path/ca.pem`, `tlsCAFile=/path/ca.pem`), so with their URLs, and with any URL
    /// that does not ask for TLS, it is an error rather than silently ignored.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use shedlock::AnyLockProvider;
    ///
    /// let provider = AnyLockProvider::builder()
    ///     .tls_root_certificate(std::fs::read("/etc/ssl/private-ca.pem")?)
    ///     .connect("rediss://redis.internal:6380")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// ```
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// Presents this certificate (PEM chain, the client's first) and private key (PEM) to a
    /// `zk+tls://` ensemble, which asks for one unless configured with `ssl.clientAuth=none`.
    /// The key is never printed or put into an error. With any other URL it is an error rather
    /// than silently ignored.
    ///
    /// ```no_run
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use shedlock::AnyLockProvider;
    ///
    /// let provider = AnyLockProvider::builder()
    ///     .tls_root_certificate(std::fs::read("/etc/zookeeper/ca.pem")?)
    ///     .tls_client_certificate(
    ///         std::fs::read("/etc/zookeeper/client.pem")?,
    ///         std::fs::read("/etc/zookeeper/client.key")?,
    ///     )
    ///     .connect("zk+tls://zk1.internal:2281,zk2.internal:2281/app")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// ```
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls_client_certificate = Some(ClientCertificate {
            certificate_pem: certificate_pem.into(),
            key_pem: key_pem.into(),
        });
        self
    }

    /// Connects to the backend `url` names; see [`connect`](crate::connect).
    pub async fn connect(self, url: &str) -> Result<AnyLockProvider, ConnectError> {
        self.open(url, Connect::Now).await
    }

    /// Makes the provider for `url` without contacting the backend, as each provider's own
    /// `connect_lazy`: a service can start while the backend is down, and each lock operation
    /// fails (bounded by the operation timeout) until it answers. The URL and the settings are
    /// checked at once all the same, and a scheme whose feature is off is refused here. Nothing
    /// is created: [`create_table_if_missing`](Self::create_table_if_missing) needs a
    /// connection, so with it a SQL URL is an error rather than a table that silently never
    /// comes (for the other backends, which have no table, the setting changes nothing).
    ///
    /// ```
    /// # #[cfg(feature = "postgres")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // Nothing listens on port 1: the provider is made all the same.
    /// let provider = shedlock::AnyLockProvider::builder()
    ///     .connect_lazy("postgres://app@127.0.0.1:1/app")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// # #[cfg(not(feature = "postgres"))] fn main() {}
    /// ```
    pub async fn connect_lazy(self, url: &str) -> Result<AnyLockProvider, ConnectError> {
        self.open(url, Connect::Lazily).await
    }

    /// Checks `url` and the settings against each other, then connects as `connect` says.
    async fn open(self, url: &str, connect: Connect) -> Result<AnyLockProvider, ConnectError> {
        let scheme = Scheme::text_of(url).ok_or(ConnectError::NotAUrl)?;
        let Some(known) = Scheme::named(scheme) else {
            return Err(ConnectError::UnknownScheme {
                scheme: scheme.to_owned(),
            });
        };
        let backend = known.backend;
        if self.tls_client_certificate.is_some() && backend != Backend::Zookeeper {
            return Err(ConnectError::InvalidUrl {
                scheme: scheme.to_owned(),
                rule: "a TLS client certificate set on the builder serves zk+tls:// only"
                    .to_owned(),
            });
        }
        if self.holder.is_some() && backend == Backend::Zookeeper {
            return Err(ConnectError::InvalidUrl {
                scheme: scheme.to_owned(),
                rule: "a holder set on the builder has nowhere to go: a ZooKeeper lock node holds \
                       its lock_until only (ShedLock's layout), so no holder is ever shown for \
                       it; leave the holder out for this URL"
                    .to_owned(),
            });
        }
        if self.tls_root_certificate.is_some()
            && !matches!(backend, Backend::Redis | Backend::Etcd | Backend::Zookeeper)
        {
            return Err(ConnectError::InvalidUrl {
                scheme: scheme.to_owned(),
                rule: format!(
                    "a TLS root certificate set on the builder serves rediss://, etcds:// and \
                     zk+tls:// only; give this backend its CA in the URL ({})",
                    match backend {
                        Backend::Postgres => "sslrootcert=/path/ca.pem",
                        Backend::Mysql => "ssl-ca=/path/ca.pem",
                        Backend::Mongo => "tlsCAFile=/path/ca.pem",
                        _ => "this backend is not reached over TLS",
                    }
                ),
            });
        }
        // Only the SQL backends have a table to create; for the others the setting changes
        // nothing, lazily or not.
        let has_table = matches!(
            backend,
            Backend::Sqlite | Backend::Postgres | Backend::Mysql
        );
        if connect == Connect::Lazily && self.create_table && has_table {
            return Err(ConnectError::InvalidUrl {
                scheme: scheme.to_owned(),
                rule: "create_table_if_missing() needs a connection, which connect_lazy does not \
                       open: create the table with connect, or beforehand"
                    .to_owned(),
            });
        }
        self.connect_to(known, scheme, url, connect).await
    }

    // Without any provider feature, every scheme is refused before the URL is read.
    #[cfg_attr(not(some_backend), allow(unused_variables))]
    async fn connect_to(
        self,
        known: &'static Scheme,
        scheme: &str,
        url: &str,
        connect: Connect,
    ) -> Result<AnyLockProvider, ConnectError> {
        // Each arm exists only when its feature is on; the last one answers for the others.
        match known.backend {
            #[cfg(feature = "memory")]
            Backend::Memory => {
                // The in-process store has nothing to connect, now or later.
                let _ = connect;
                let store = named_memory_store(scheme, url)?;
                Ok(match self.holder {
                    Some(holder) => {
                        store.node_with(&holder, std::sync::Arc::new(shedlock_core::SystemClock))
                    }
                    None => store.node(),
                }
                .into())
            }
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => {
                sql_provider!(self, shedlock_sqlite::SqliteLockProvider, url, connect)
            }
            #[cfg(feature = "postgres")]
            Backend::Postgres => {
                sql_provider!(self, shedlock_postgres::PostgresLockProvider, url, connect)
            }
            #[cfg(feature = "mysql")]
            Backend::Mysql => sql_provider!(self, shedlock_mysql::MySqlLockProvider, url, connect),
            #[cfg(feature = "redis")]
            Backend::Redis => {
                let builder = builder_with_timeout!(self, shedlock_redis::RedisLockProvider);
                let builder = with_holder!(builder, self.holder);
                let builder = with_tls_root!(builder, self.tls_root_certificate, scheme);
                finish!(builder, url, connect)
            }
            #[cfg(feature = "etcd")]
            Backend::Etcd => {
                let builder = builder_with_timeout!(self, shedlock_etcd::EtcdLockProvider);
                let builder = with_holder!(builder, self.holder);
                let builder = with_tls_root!(builder, self.tls_root_certificate, scheme);
                finish!(builder, &etcd_endpoints(scheme, url), connect)
            }
            #[cfg(feature = "mongo")]
            Backend::Mongo => {
                let builder = builder_with_timeout!(self, shedlock_mongo::MongoLockProvider);
                let builder = with_holder!(builder, self.holder);
                finish!(builder, url, connect)
            }
            #[cfg(feature = "zookeeper")]
            Backend::Zookeeper => {
                let builder =
                    builder_with_timeout!(self, shedlock_zookeeper::ZookeeperLockProvider);
                #[cfg(any(feature = "rustls", feature = "rustls-native-roots"))]
                let builder = {
                    let builder = match self.tls_root_certificate {
                        Some(pem) => builder.tls_root_certificate(pem),
                        None => builder,
                    };
                    match self.tls_client_certificate {
                        Some(client) => {
                            builder.tls_client_certificate(client.certificate_pem, client.key_pem)
                        }
                        None => builder,
                    }
                };
                #[cfg(not(any(feature = "rustls", feature = "rustls-native-roots")))]
                if self.tls_root_certificate.is_some() || self.tls_client_certificate.is_some() {
                    return Err(tls_feature_disabled(scheme));
                }
                // The provider reads its schemes in lowercase; the rest of the URL is its own.
                let tls = known.tls;
                let rest = &url[scheme.len() + "://".len()..];
                let url = format!("{}://{rest}", if tls { "zk+tls" } else { "zk" });
                finish!(builder, &url, connect)
            }
            disabled => Err(ConnectError::FeatureDisabled {
                scheme: scheme.to_owned(),
                feature: disabled.name(),
            }),
        }
    }
}

/// The store `memory://<name>` names, created on first use and shared by every connect to the
/// same name for the life of the process.
#[cfg(feature = "memory")]
fn named_memory_store(
    scheme: &str,
    url: &str,
) -> Result<shedlock_memory::MemoryLockStore, ConnectError> {
    use std::collections::HashMap;
    use std::sync::{LazyLock, Mutex, PoisonError};

    static STORES: LazyLock<Mutex<HashMap<String, shedlock_memory::MemoryLockStore>>> =
        LazyLock::new(Mutex::default);

    let name = &url[scheme.len() + "://".len()..];
    if name.contains(['/', '?', '#', '@', ':']) {
        return Err(ConnectError::InvalidUrl {
            scheme: scheme.to_owned(),
            rule: "it names an in-process store, memory://<name>, and the name may not contain \
                   '/', '?', '#', '@' or ':'"
                .to_owned(),
        });
    }
    let mut stores = STORES.lock().unwrap_or_else(PoisonError::into_inner);
    Ok(stores.entry(name.to_owned()).or_default().clone())
}

/// `etcd://[user:password@]host:2379[,host:2379...]` as `shedlock-etcd` reads it: the same
/// endpoints, each over plain HTTP, or over TLS (`https://`) for `etcds://`.
#[cfg(feature = "etcd")]
fn etcd_endpoints(scheme: &str, url: &str) -> String {
    let prefix = if scheme.eq_ignore_ascii_case("etcds") {
        "https://"
    } else {
        "http://"
    };
    url[scheme.len() + "://".len()..]
        .split(',')
        .map(|endpoint| format!("{prefix}{}", endpoint.trim()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A TLS certificate was given to a build without TLS.
#[cfg(all(
    any(feature = "redis", feature = "etcd", feature = "zookeeper"),
    not(any(feature = "rustls", feature = "rustls-native-roots"))
))]
fn tls_feature_disabled(scheme: &str) -> ConnectError {
    ConnectError::InvalidUrl {
        scheme: scheme.to_owned(),
        rule: "a TLS certificate was set, but this build leaves TLS out: enable the \
               \"rustls\" feature of shedlock"
            .to_owned(),
    }
}
