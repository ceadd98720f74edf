//! The Redis lock provider for shedlock-rs, wire-compatible with Java ShedLock's
//! `RedisLockProvider`.
//!
//! A lock is one string key, `job-lock:<env>:<name>` (env `default` unless set), whose value is
//! ShedLock's `ADDED:<ISO-8601 UTC>@<holder>:<uuid>`, unique per acquisition, and whose TTL is
//! the lock's expiry:
//!
//! - **acquire** is ShedLock's `SET key value NX PX <lock_at_most_for>`, so a Java node and a
//!   Rust node exclude each other on the same key. It carries `GET`, so a refused attempt learns
//!   the holder's value, and a `PTTL` is pipelined behind it for the time left: two plain
//!   commands in one round trip, no script. Redis before 7.0 does not take `GET` beside `NX`
//!   (it answers an error and writes nothing): a provider's first acquire learns that, and every
//!   acquire of that provider then runs one Lua script that does the same, still one round trip;
//! - **release** and **extend** are one Lua script each that first compares the whole value, so
//!   they only ever touch this acquisition (ShedLock checks nothing unless `safeUpdate` is on);
//!   release keeps the key for the rest of `lock_at_least_for`, computed from the key's TTL on
//!   the server, and deletes it otherwise;
//! - **time** is Redis' own: TTLs decide expiry, so a node whose clock is wrong cannot break
//!   exclusion ([`TimeSource::Server`]);
//! - **fencing tokens** are opt-in ([`RedisLockProviderBuilder::fencing`]): the acquire becomes one
//!   script that also increments a per-name counter, `{<lock key>}:fencing`.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_redis::RedisLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = RedisLockProvider::builder()
//!     .env("production")
//!     .connect("redis://127.0.0.1:6379")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("nightly-report", Duration::from_secs(600), Duration::ZERO)?;
//! let _ = executor.execute(&config, async { /* the task */ }).await?;
//! # Ok(()) }
//! ```
//!
//! The same `connect` takes a Redis Cluster (`redis+cluster://host:6379,host:6379`) or the
//! master a set of sentinels names (`redis+sentinel://host:26379,host:26379/<master name>`); see
//! below. The provider's type is the same whatever the URL.
//!
//! # Seeing and freeing locks
//!
//! The provider implements [`LockAdmin`](shedlock_core::LockAdmin). A listing reads the lock
//! keys under a name prefix by `SCAN` inside one script per page, with each key's value and
//! `PTTL` and the server's `TIME`: held locks only (released and expired keys are gone), in no
//! order, and a key may come twice if Redis resizes its keyspace meanwhile (`SCAN`'s own
//! guarantee). On a Redis Cluster it goes master by master. A lock's acquisition id is its
//! key's whole value, unique per acquisition, and
//! [`force_unlock`](shedlock_core::LockAdmin::force_unlock) deletes the key in one script only
//! if it still holds that value, leaving the fencing counter.
//!
//! # Keys this provider did not write
//!
//! A lock key that holds another Redis type (a hash, a list: another application's key under
//! the same prefix and env) is never read as a lock nor overwritten: an acquire fails with an
//! error naming the key and its type and writes nothing, a release or extend answers `false`
//! (the key is not this acquisition's any more), inspect fails naming it, force-unlock never
//! deletes it, and a listing leaves it out. A string in another format than ShedLock's is held
//! by whoever wrote it, until its TTL ends (a key set by hand without one holds until it is
//! deleted). With fencing on, a counter that is not a decimal number refuses the acquire before
//! anything is written: a token counted from it could repeat one already handed out.
//!
//! # Unknown outcomes
//!
//! Every operation is bounded by the operation timeout (5 s unless set) and by the connection's
//! own response timeout. The connection manager does not retry a command that failed. A `SET`
//! whose answer never came may or may not have been applied, so [`LockProvider::try_lock`]
//! returns an error ([`LockError::Timeout`] or [`LockError::Backend`]), never "not acquired", and
//! the executor does not run the task. In the background the provider then sends one
//! compare-and-delete for the value it tried to write: if the `SET` did land, the lock is freed
//! at once instead of at `lock_at_most_for`; if not, nothing happens. The value is unique to that
//! attempt, so this can never free anyone else's lock.
//!
//! # Redis Cluster
//!
//! `redis+cluster://[user:password@]host[:port][,host[:port]...]` (`rediss+cluster://` over TLS;
//! port 6379 unless given) connects to a Redis Cluster through its seed nodes: any few of its
//! nodes, from which the client learns the rest and which master serves which slot. It follows
//! slot moves (`MOVED`, `ASK`) and a replica promoted after a master failed. A cluster has
//! database 0 only, so the URL has no database; it takes no query parameters.
//!
//! Each lock is one key, and every script touches only that key, so locks work on a cluster
//! unchanged. With fencing on, the acquire script also touches the counter key
//! `{<lock key>}:fencing`; the braces are a hash tag, which makes Redis Cluster hash the counter
//! to the lock key's own slot, so the script never crosses slots. That works only if the lock
//! key has no braces of its own, so with fencing on a name (or env, or prefix) containing `{` or
//! `}` is refused with [`LockError::InvalidName`]. Without fencing any name is accepted.
//!
//! The cluster client sends a command again after a redirect, and also after its connection
//! dropped before the answer came, when the first attempt may have run. An acquire that finds
//! its own value in the key is such a repeat: its first run took the lock, whose answer (and
//! fencing token) was lost, so the acquire fails as an unknown outcome (see below) and the lock
//! is freed at once. A repeated release or extend answers `false`, as for a lock no longer held.
//!
//! Over TLS each node is reached under the address the cluster announces for it (an IP address
//! unless the nodes announce host names, `cluster-preferred-endpoint-type hostname`), which
//! their certificates must name.
//!
//! # Redis Sentinel
//!
//! `redis+sentinel://[user:password@]host[:port][,host[:port]...]/<master name>[/<db>]`
//! (`rediss+sentinel://` over TLS, to the sentinels and the master; port 26379 unless given)
//! asks the sentinels which node is the master of `<master name>`, checks that the node says so
//! (`ROLE`), and sends every operation there. The user and password are the master's;
//! sentinels that want their own are given `?sentinel_username=...&sentinel_password=...`.
//!
//! The provider follows a failover: once a command fails in a way that says the master may have
//! moved (the connection closed, as the sentinels close it when they demote a master, or timed
//! out, or the node answered `READONLY` as a replica), the next operation asks the sentinels
//! again. A command the node refused as a replica was not run, so it is sent again at once to
//! the new master. In the steady state an operation is one round trip, as on a single server.
//!
//! A connection to the master built by hand (the `redis` crate's `SentinelClient`) and given to
//! [`RedisLockProviderBuilder::build`] stays on that node after a failover; use the URL.
//!
//! # Failover and lost locks
//!
//! Redis replicates asynchronously, Sentinel and Cluster alike: a lock written to a master
//! that fails before its replica received it is lost with it, and after the failover another
//! node can take the same lock while the first still runs its task. Until the old master is
//! demoted (after a failover ordered while it still runs, the sentinels do that within their
//! INFO period, 10 s by default), a node still connected to it can even take a lock there
//! that the new master never sees. This is Redis' limitation, shared by ShedLock. Where it
//! matters, turn fencing on and have the resource the task writes to keep the highest token it
//! has seen and refuse any token not above it. The counter lives on the same master, so a
//! failover can lose its last increments too and hand out a token again; a resource that
//! refuses tokens not above the highest it saw refuses that second holder as well.
//!
//! [`RedisLockProviderBuilder::wait_for_replicas`] narrows the window: each acquire (and
//! extend) is followed by Redis' `WAIT` in the same round trip, and one that too few replicas
//! acknowledged in time answers an error, so the task does not run. Tested with a replica that
//! receives nothing while its master takes locks, then is promoted: without it every such lock
//! was lost; with it no acquire answered "acquired", and a lock acknowledged before the lag
//! survived the promotion. Not on a Redis Cluster URL yet.
//!
//! # TLS
//!
//! `rediss://` (or `valkeys://`) connects over TLS, with the `tls-rustls` feature (on by
//! default): rustls on ring, trusting Mozilla's roots, compiled in (`tls-rustls-native-roots`:
//! the system's store instead). A server whose certificate a private CA signed, as managed Redis
//! services and self-signed setups have, needs that CA:
//! [`RedisLockProviderBuilder::tls_root_certificate`]. A build without TLS refuses `rediss://`
//! with an error naming the feature.
//!
//! # Credentials
//!
//! Connection URLs may contain a password. The provider keeps only a redacted copy
//! (`redis://user:***@host`) for its `Debug` output, error messages and log lines.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod builder;
mod clients;
mod connection;
mod failure;
mod handle;
mod provider;
mod scheme;
mod sentinel;
mod storage;
mod topology;

use std::time::Duration;

#[cfg(doc)]
use shedlock_core::{LockError, LockProvider, TimeSource};

pub use builder::RedisLockProviderBuilder;
pub use connection::RedisConnection;
pub use provider::RedisLockProvider;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "redis";

/// ShedLock's key prefix: keys are `job-lock:<env>:<name>`.
pub const DEFAULT_KEY_PREFIX: &str = "job-lock";

/// ShedLock's default environment segment of the key.
pub const DEFAULT_ENV: &str = "default";

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::raw::DEFAULT_OPERATION_TIMEOUT;
