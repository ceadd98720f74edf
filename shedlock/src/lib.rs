//! Make a scheduled task run **at most once at a time across a fleet of nodes**: the one crate
//! an application depends on.
//!
//! Before each run a node takes a time-bounded lock in storage the fleet already shares; a node
//! that misses it skips that run and never waits. This crate re-exports the core
//! ([`LockingTaskExecutor`], [`LockConfiguration`], [`TaskOutcome`], [`LockProvider`], ...) and
//! every provider crate behind a cargo feature of its own, and [`connect`] picks the provider
//! from a URL's scheme, so the backend is configuration rather than code:
//!
//! ```
//! use shedlock::{LockConfiguration, LockingTaskExecutor, TaskOutcome};
//! # #[cfg(feature = "memory")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // "postgres://app@db/app", "redis://cache:6379", ... in production, from configuration.
//! let url = std::env::var("LOCK_URL").unwrap_or_else(|_| "memory://docs".to_owned());
//! let executor = LockingTaskExecutor::new(shedlock::connect(&url).await?);
//! // Held at most 10 min if this node dies, at least 30 s so a late node skips this tick too.
//! let config = LockConfiguration::parse("send-newsletter", "PT10M", "30s")?;
//! match executor.execute(&config, async { /* the job */ }).await? {
//!     TaskOutcome::Executed(()) => println!("this node ran the job"),
//!     TaskOutcome::Skipped(holder) => println!("skipped: the lock is held ({holder:?})"),
//! }
//! # Ok(()) }
//! # #[cfg(not(feature = "memory"))] fn main() {}
//! ```
//!
//! With the `scheduler` feature (on by default), `shedlock::scheduler` runs jobs on a cron
//! expression, at a fixed rate or with a fixed delay, each run under its lock, on the provider
//! [`connect`] returned.
//!
//! With the `metrics` feature, every run and every scheduled tick is counted and timed through
//! the `metrics` facade, for the recorder the application installs: [`metrics`] lists the names.
//!
//! # URLs and features
//!
//! | scheme | provider (module) | feature |
//! |---|---|---|
//! | `memory://<name>` | in-process store `<name>` (see below) | `memory` (default) |
//! | `sqlite:`, `sqlite://` | `shedlock::sqlite` | `sqlite` |
//! | `postgres://`, `postgresql://` | `shedlock::postgres` | `postgres` |
//! | `mysql://`, `mariadb://` | `shedlock::mysql` | `mysql` |
//! | `redis://`, `rediss://`, `redis+unix://`, `unix://`, `redis+cluster://`, `rediss+cluster://`, `redis+sentinel://`, `rediss+sentinel://`, and the same under `valkey` | `shedlock::redis` | `redis` |
//! | `etcd://host:2379[,host:2379...]` (plain HTTP), `etcds://` (TLS) | `shedlock::etcd` | `etcd` (needs `protoc` to build) |
//! | `mongodb://`, `mongodb+srv://` | `shedlock::mongo` | `mongo` |
//! | `zk://host:2181[,host:2181...][/chroot]`, `zookeeper://`, `zk+tls://`, `zookeeper+tls://` (TLS) | `shedlock::zookeeper` | `zookeeper` |
//!
//! Of the providers only `memory` is on by default (with `scheduler`): each backend brings its
//! client library and that library's dependencies, so an application turns on the ones it uses
//! (`shedlock = { version = "0.1", features = ["postgres"] }`). A URL whose backend is off is
//! an error naming the feature to turn on ([`ConnectError::FeatureDisabled`]), never a guess.
//!
//! The rest of each URL is read by that provider, exactly as its own `connect` reads it
//! (credentials, database, options; Redis Cluster is `redis+cluster://host:6379,host:6379`,
//! Sentinel `redis+sentinel://host:26379,host:26379/<master name>[/<db>]`). Connection
//! URLs may hold passwords: no error, log line or `Debug` output of this crate or of a provider
//! shows one.
//!
//! TLS is on by default (feature `rustls`; `rustls-native-roots` trusts the system's store
//! instead of Mozilla's roots) and chosen by the URL: PostgreSQL `?sslmode=require` (or
//! `verify-ca`, `verify-full` with `sslrootcert=/path/ca.pem`), MySQL `?ssl-mode=REQUIRED` (or
//! `VERIFY_CA`, `VERIFY_IDENTITY` with `ssl-ca=`), `rediss://`, `etcds://`, MongoDB
//! `?tls=true` (`tlsCAFile=`), `zk+tls://`. A private CA for Redis or etcd goes to
//! [`AnyLockProviderBuilder::tls_root_certificate`]; ZooKeeper over TLS trusts only the CA given
//! there, and presents the client certificate of
//! [`AnyLockProviderBuilder::tls_client_certificate`] to an ensemble that asks for one.
//!
//! Every provider connects with its defaults (ShedLock's table, keys and collection, server
//! time). [`AnyLockProvider::builder`] sets what every provider shares (the operation timeout);
//! for anything else build the provider with its own crate's builder and convert it with
//! `AnyLockProvider::from`.
//!
//! # `memory://`
//!
//! `memory://<name>` is an in-process lock store, created on first use and kept until the
//! process exits: everything in this process that connects to the same name shares its locks,
//! and nothing outside the process sees them. Each [`connect`] is another node on that store,
//! with its own identity. `memory://` (an empty name) is one store like any other. It suits one
//! binary running several schedulers, and tests; a fleet of processes needs a shared backend.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod any;
mod connect;
#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "json")]
pub mod json;

pub use any::AnyLockProvider;
pub use connect::{AnyLockProviderBuilder, ConnectError, connect};
pub use shedlock_core::*;

/// Scheduled jobs (`shedlock-scheduler`): cron, fixed rate and fixed delay, each run under its
/// lock. Hand [`Scheduler::new`](scheduler::Scheduler::new) the provider [`connect`] returns.
#[cfg(feature = "scheduler")]
#[doc(inline)]
pub use shedlock_scheduler as scheduler;

/// Runs each call of an async fn under a lock (ShedLock's method mode), with the executor as a
/// parameter: `#[scheduler_lock(name = "report-{region}", lock_at_most_for = "10m")]`.
#[cfg(feature = "macros")]
pub use shedlock_macros::scheduler_lock;

/// The in-process provider (`shedlock-memory`).
#[cfg(feature = "memory")]
#[doc(inline)]
pub use shedlock_memory as memory;

/// The SQLite provider (`shedlock-sqlite`).
#[cfg(feature = "sqlite")]
#[doc(inline)]
pub use shedlock_sqlite as sqlite;

/// The PostgreSQL provider (`shedlock-postgres`).
#[cfg(feature = "postgres")]
#[doc(inline)]
pub use shedlock_postgres as postgres;

/// The MySQL and MariaDB provider (`shedlock-mysql`).
#[cfg(feature = "mysql")]
#[doc(inline)]
pub use shedlock_mysql as mysql;

/// The Redis provider (`shedlock-redis`).
#[cfg(feature = "redis")]
#[doc(inline)]
pub use shedlock_redis as redis;

/// The etcd provider (`shedlock-etcd`).
#[cfg(feature = "etcd")]
#[doc(inline)]
pub use shedlock_etcd as etcd;

/// The MongoDB provider (`shedlock-mongo`).
#[cfg(feature = "mongo")]
#[doc(inline)]
pub use shedlock_mongo as mongo;

/// The ZooKeeper provider (`shedlock-zookeeper`).
#[cfg(feature = "zookeeper")]
#[doc(inline)]
pub use shedlock_zookeeper as zookeeper;
