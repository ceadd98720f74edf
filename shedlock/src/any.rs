//! One provider type for every backend, so code that takes a lock does not change with the URL.

use std::pin::Pin;

use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, LockAdmin, LockConfiguration, LockError, LockInfo,
    LockPage, LockProvider, PageRequest,
};

/// The provider [`connect`](crate::connect) returns, whichever backend the URL named.
///
/// It is a [`LockProvider`] (hand it to
/// [`LockingTaskExecutor::new`](crate::LockingTaskExecutor::new)), cheap to clone (a clone is
/// the same node: same identity, same connections), and its `Debug` output never shows a
/// password. Match on it to reach what only one backend offers, such as
/// Redis' `lock_key`; there is one variant per enabled provider feature.
///
/// A provider built with its own crate's builder converts with `From`, so it can go wherever
/// this type is expected:
///
/// ```
/// # #[cfg(feature = "memory")] {
/// use shedlock::AnyLockProvider;
/// use shedlock::memory::MemoryLockStore;
///
/// let provider = AnyLockProvider::from(MemoryLockStore::new().node());
/// assert!(matches!(provider, AnyLockProvider::Memory(_)));
/// # }
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum AnyLockProvider {
    /// `memory://`: the in-process provider.
    #[cfg(feature = "memory")]
    Memory(std::sync::Arc<shedlock_memory::MemoryLockProvider>),
    /// `sqlite:`: a table in a SQLite file.
    #[cfg(feature = "sqlite")]
    Sqlite(std::sync::Arc<shedlock_sqlite::SqliteLockProvider>),
    /// `postgres://`, `postgresql://`: a PostgreSQL table.
    #[cfg(feature = "postgres")]
    Postgres(std::sync::Arc<shedlock_postgres::PostgresLockProvider>),
    /// `mysql://`, `mariadb://`: a MySQL or MariaDB table.
    #[cfg(feature = "mysql")]
    MySql(std::sync::Arc<shedlock_mysql::MySqlLockProvider>),
    /// `redis://` and the other Redis schemes: one key per lock.
    #[cfg(feature = "redis")]
    Redis(std::sync::Arc<shedlock_redis::RedisLockProvider>),
    /// `etcd://`: one key per lock, on a lease.
    #[cfg(feature = "etcd")]
    Etcd(std::sync::Arc<shedlock_etcd::EtcdLockProvider>),
    /// `mongodb://`, `mongodb+srv://`: one document per lock.
    #[cfg(feature = "mongo")]
    Mongo(std::sync::Arc<shedlock_mongo::MongoLockProvider>),
    /// `zk://`, `zookeeper://`: one node per lock.
    #[cfg(feature = "zookeeper")]
    Zookeeper(std::sync::Arc<shedlock_zookeeper::ZookeeperLockProvider>),
}

/// Runs `$body` with `$provider` bound to the provider inside `$any`, whichever it is.
macro_rules! with_provider {
    ($any:expr, $provider:ident => $body:expr) => {
        match *$any {
            #[cfg(feature = "memory")]
            AnyLockProvider::Memory(ref $provider) => $body,
            #[cfg(feature = "sqlite")]
            AnyLockProvider::Sqlite(ref $provider) => $body,
            #[cfg(feature = "postgres")]
            AnyLockProvider::Postgres(ref $provider) => $body,
            #[cfg(feature = "mysql")]
            AnyLockProvider::MySql(ref $provider) => $body,
            #[cfg(feature = "redis")]
            AnyLockProvider::Redis(ref $provider) => $body,
            #[cfg(feature = "etcd")]
            AnyLockProvider::Etcd(ref $provider) => $body,
            #[cfg(feature = "mongo")]
            AnyLockProvider::Mongo(ref $provider) => $body,
            #[cfg(feature = "zookeeper")]
            AnyLockProvider::Zookeeper(ref $provider) => $body,
        }
    };
}

impl AnyLockProvider {
    /// Ends what the provider keeps open that needs an orderly end before the async runtime
    /// ends; call it once the application is done with locks (after the scheduler stopped).
    ///
    /// Today that is MongoDB's client only: see
    // The link resolves only where the provider is built in (docs.rs builds every feature).
    #[cfg_attr(
        feature = "mongo",
        doc = "[`MongoLockProvider::shutdown`](shedlock_mongo::MongoLockProvider::shutdown),"
    )]
    #[cfg_attr(
        not(feature = "mongo"),
        doc = "`shedlock::mongo::MongoLockProvider::shutdown`,"
    )]
    /// whose answer this returns (without it, the `mongodb` driver may print a panic's backtrace
    /// as the process exits). Every other backend's connections close when the provider is
    /// dropped, and this answers `true` at once. After it, every operation of a shut-down
    /// provider fails with an error, never a wrong answer.
    pub async fn shutdown(&self) -> bool {
        match self {
            #[cfg(feature = "mongo")]
            AnyLockProvider::Mongo(provider) => provider.shutdown().await,
            #[allow(unreachable_patterns)]
            _ => true,
        }
    }
}

impl LockProvider for AnyLockProvider {
    // Written out as `async_trait` expands it, to hand back the provider's own boxed future
    // rather than box a second future around it: no allocation added per acquisition.
    // Without any provider feature there is no variant, and nothing reads `config`.
    #[cfg_attr(not(some_backend), allow(unused_variables))]
    fn try_lock<'provider, 'config, 'async_trait>(
        &'provider self,
        config: &'config LockConfiguration,
    ) -> Pin<Box<dyn Future<Output = Result<Acquisition, LockError>> + Send + 'async_trait>>
    where
        'provider: 'async_trait,
        'config: 'async_trait,
        Self: 'async_trait,
    {
        with_provider!(self, provider => (**provider).try_lock(config))
    }

    fn capabilities(&self) -> Capabilities {
        with_provider!(self, provider => provider.capabilities())
    }

    fn provider_name(&self) -> &'static str {
        with_provider!(self, provider => provider.provider_name())
    }
}

/// Every provider of this family is also its backend's [`LockAdmin`], so the provider an
/// application already holds can list and free locks (the `shedlock` CLI and the HTTP view use
/// exactly this).
#[cfg_attr(not(some_backend), allow(unused_variables))]
#[shedlock_core::raw::async_trait]
impl LockAdmin for AnyLockProvider {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        with_provider!(self, provider => provider.list_locks(request).await)
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        with_provider!(self, provider => provider.inspect_lock(name).await)
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        with_provider!(self, provider => provider.force_unlock(name, acquisition).await)
    }
}

macro_rules! from_provider {
    ($feature:literal, $variant:ident, $provider:ty) => {
        #[cfg(feature = $feature)]
        impl From<$provider> for AnyLockProvider {
            fn from(provider: $provider) -> Self {
                AnyLockProvider::$variant(std::sync::Arc::new(provider))
            }
        }
    };
}

from_provider!("memory", Memory, shedlock_memory::MemoryLockProvider);
from_provider!("sqlite", Sqlite, shedlock_sqlite::SqliteLockProvider);
from_provider!(
    "postgres",
    Postgres,
    shedlock_postgres::PostgresLockProvider
);
from_provider!("mysql", MySql, shedlock_mysql::MySqlLockProvider);
from_provider!("redis", Redis, shedlock_redis::RedisLockProvider);
from_provider!("etcd", Etcd, shedlock_etcd::EtcdLockProvider);
from_provider!("mongo", Mongo, shedlock_mongo::MongoLockProvider);
from_provider!(
    "zookeeper",
    Zookeeper,
    shedlock_zookeeper::ZookeeperLockProvider
);
