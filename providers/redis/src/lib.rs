//! The Redis lock provider for shedlock-rs, wire-compatible with Java ShedLock's
//! `RedisLockProvider`.
//!
//! A lock is one string key, `job-lock:<env>:<name>` (env `default` unless set), whose value is
//! ShedLock's `ADDED:<ISO-8601 UTC>@<holder>:<uuid>`, unique per acquisition, and whose TTL is
//! the lock's expiry:
//!
//! - **acquire** is one `SET key value NX PX <lock_at_most_for>`, exactly ShedLock's command, so
//!   a Java node and a Rust node exclude each other on the same key;
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

mod admin;
mod connection;
mod sentinel;
mod storage;
mod topology;

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, ConnectionAddr};
use shedlock_core::{
    Acquisition, Capabilities, ConfigurationError, ErrorKind, LockConfiguration, LockError,
    LockHandle, LockHolder, LockProvider, Operation, TimeSource,
};
use tokio::time::Instant;
use tracing::debug;

use sentinel::SentinelConnection;
use storage::Scripts;
use topology::Topology;

pub use connection::RedisConnection;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "redis";

/// ShedLock's key prefix: keys are `job-lock:<env>:<name>`.
pub const DEFAULT_KEY_PREFIX: &str = "job-lock";

/// ShedLock's default environment segment of the key.
pub const DEFAULT_ENV: &str = "default";

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::DEFAULT_OPERATION_TIMEOUT;

/// Settings for a [`RedisLockProvider`]; finish with [`connect`](Self::connect),
/// [`connect_lazy`](Self::connect_lazy) or [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct RedisLockProviderBuilder {
    key_prefix: String,
    env: String,
    holder: String,
    operation_timeout: Duration,
    fencing: bool,
    replica_wait: Option<(u32, Duration)>,
    #[cfg(feature = "tls")]
    tls_root_certificate: Option<Vec<u8>>,
}

impl Default for RedisLockProviderBuilder {
    fn default() -> Self {
        Self {
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            env: DEFAULT_ENV.to_owned(),
            holder: shedlock_core::default_holder(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            fencing: false,
            replica_wait: None,
            #[cfg(feature = "tls")]
            tls_root_certificate: None,
        }
    }
}

impl RedisLockProviderBuilder {
    /// The first segment of every key, `job-lock` as in ShedLock. It must not be empty or
    /// contain `:`, so that a key names exactly one prefix, env and lock.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The environment segment, `default` as in ShedLock: services that share a Redis but not
    /// their locks use different envs. It must not be empty or contain `:`.
    pub fn env(mut self, env: impl Into<String>) -> Self {
        self.env = env.into();
        self
    }

    /// Who this node is, written into each lock's value for people reading the keys (the host
    /// name unless set). Ownership does not depend on it: every acquisition's value also
    /// carries a fresh UUID, so two processes on one host never release each other's locks.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// The longest one lock operation may take, including reconnecting, before it fails with
    /// [`LockError::Timeout`]. The connection manager built by [`connect`](Self::connect) uses it
    /// as its response and connection timeout too.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Issues fencing tokens: each acquisition increments the counter `{<lock key>}:fencing` in
    /// the same script as its `SET NX`, and the handle carries the new value. Off by default,
    /// because it adds one counter key per lock name that never expires, and because with it
    /// names may not contain `{` or `}` (see the crate docs on Redis Cluster).
    pub fn fencing(mut self, enabled: bool) -> Self {
        self.fencing = enabled;
        self
    }

    /// Answers "acquired" only once `replicas` replicas have acknowledged the lock, waiting at
    /// most `timeout` for them (Redis' `WAIT`, sent behind the acquire in the same round trip);
    /// an extend likewise. Off by default.
    ///
    /// Redis replicates asynchronously: without this, a lock written to a master that fails
    /// before its replicas received it is lost in the failover, and another node can take it
    /// while the first still runs its task (crate docs, "Failover and lost locks"). With it, an
    /// acquire that the replicas did not acknowledge in time answers an error instead, so the
    /// task does not run, and the lock is deleted again in the background. An extend they did
    /// not acknowledge answers an error too (the master has the new expiry, a promoted replica
    /// may not). The price is availability: while fewer replicas answer, every acquire fails.
    ///
    /// `WAIT` makes a lost lock much less likely, not impossible: a replica that acknowledged
    /// may still not be the one promoted. `replicas` must be at least 1 and `timeout` shorter
    /// than the operation timeout, so the acquire can tell what happened. Not available on a
    /// Redis Cluster URL yet: the cluster client may send the `WAIT` to another node than the
    /// key's master. A connection given to [`build`](Self::build) must send a pipeline to one
    /// server, as a single server's or a sentinel master's connection does.
    pub fn wait_for_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_wait = Some((replicas, timeout));
        self
    }

    /// Trusts only this CA (PEM, one or more certificates) for a `rediss://` server, instead of
    /// the roots the crate's TLS feature brings: for a server whose certificate a private CA
    /// signed, such as a self-signed test server or a cloud provider's own CA.
    /// [`connect`](Self::connect) refuses it with a plain `redis://` URL, which would not use it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use shedlock_redis::RedisLockProvider;
    ///
    /// let provider = RedisLockProvider::builder()
    ///     .tls_root_certificate(std::fs::read("/etc/redis/ca.pem")?)
    ///     .connect("rediss://redis.internal:6380")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
        self
    }

    /// Connects to `url` and waits until the backend answers. A URL of any other scheme is
    /// refused before anything connects; one that breaks its form's rules is refused naming the
    /// rule. Fails with a [`LockError::Backend`] naming the redacted URL when the backend cannot
    /// be reached within the operation timeout.
    ///
    /// - `redis://[user:password@]host[:port][/db]`, `rediss://` (TLS), `redis+unix://`,
    ///   `unix://`, and the same under Valkey's names: one server, through a connection manager
    ///   that reconnects in the background;
    /// - `redis+cluster://[user:password@]host[:port][,host[:port]...]`, `rediss+cluster://`:
    ///   a Redis Cluster, from its seed nodes (crate docs, "Redis Cluster");
    /// - `redis+sentinel://[user:password@]host[:port][,host[:port]...]/<master name>[/<db>]`,
    ///   `rediss+sentinel://`: the master the sentinels name, followed across failovers (crate
    ///   docs, "Redis Sentinel").
    pub async fn connect(self, url: &str) -> Result<RedisLockProvider, LockError> {
        let endpoint = shedlock_core::redact_url(url);
        self.validate()?;
        let scheme = check_url_scheme(url)?;
        self.check_tls_settings(&endpoint, scheme)?;
        self.check_replica_wait(scheme)?;
        let connection = match scheme.topology {
            Topology::Server => {
                let (client, config) = self.client(url, &endpoint, scheme.tls)?;
                let manager = ConnectionManager::new_with_config(client, config);
                RedisConnection::from(self.bounded_connect(&endpoint, scheme, manager).await?)
            }
            Topology::Cluster => {
                let (client, config) = self.cluster_client(url, &endpoint, scheme.tls)?;
                let cluster = client.get_async_connection_with_config(config);
                RedisConnection::from(self.bounded_connect(&endpoint, scheme, cluster).await?)
            }
            Topology::Sentinel => {
                let master = self.sentinel_connection(url, &endpoint, scheme.tls)?;
                self.bounded_connect(&endpoint, scheme, master.connect())
                    .await?;
                RedisConnection::sentinel(master)
            }
        };
        // One PING: a server that wants a password accepts a connection without one and
        // refuses every command after, which is best said now, as refused credentials, than as
        // an unknown outcome at every acquire.
        let mut probe = connection.clone();
        self.bounded_connect(&endpoint, scheme, async move {
            redis::cmd("PING").query_async::<String>(&mut probe).await
        })
        .await?;
        Ok(self.finish(connection, endpoint))
    }

    /// Like [`connect`](Self::connect) but connects on first use, so an application can start
    /// while Redis is down; each lock operation then fails (bounded by the operation timeout)
    /// until Redis answers. The URL is checked at once all the same. Must be called inside a
    /// Tokio runtime.
    pub fn connect_lazy(self, url: &str) -> Result<RedisLockProvider, LockError> {
        let endpoint = shedlock_core::redact_url(url);
        self.validate()?;
        let scheme = check_url_scheme(url)?;
        self.check_tls_settings(&endpoint, scheme)?;
        self.check_replica_wait(scheme)?;
        let connection = match scheme.topology {
            Topology::Server => {
                let (client, config) = self.client(url, &endpoint, scheme.tls)?;
                let manager =
                    ConnectionManager::new_lazy_with_config(client, config).map_err(|error| {
                        // Nothing connects yet: only the client's own settings can be refused.
                        LockError::backend(
                            ErrorKind::Configuration,
                            PROVIDER,
                            Operation::Connect,
                            "",
                            format!("could not set up a connection to Redis at {endpoint}"),
                            error,
                        )
                    })?;
                RedisConnection::from(manager)
            }
            Topology::Cluster => {
                let (client, config) = self.cluster_client(url, &endpoint, scheme.tls)?;
                RedisConnection::from(client.get_pending_async_connection_with_config(config))
            }
            Topology::Sentinel => {
                RedisConnection::sentinel(self.sentinel_connection(url, &endpoint, scheme.tls)?)
            }
        };
        Ok(self.finish(connection, endpoint))
    }

    /// Uses a connection the application already has: a [`ConnectionManager`], a
    /// `MultiplexedConnection`, a Redis Cluster connection, or any other. Each operation clones
    /// it, so it must be cheap to clone and safe to share. Wrapped in [`RedisConnection`] (it
    /// converts from a `ConnectionManager` or a `ClusterConnection`), the provider has the same
    /// type as one from [`connect`](Self::connect).
    ///
    /// A connection to a master found through Sentinel by hand stays on that node after a
    /// failover; a `redis+sentinel://` URL given to [`connect`](Self::connect) follows the master.
    pub fn build<C>(self, connection: C) -> Result<RedisLockProvider<C>, LockError>
    where
        C: ConnectionLike + Clone + Send + Sync + 'static,
    {
        self.validate()?;
        Ok(self.finish(
            connection,
            "a connection given by the application".to_owned(),
        ))
    }

    /// Waits for `connecting` within the operation timeout, turning its failure into an error
    /// that names the redacted URL and what to check.
    async fn bounded_connect<T>(
        &self,
        endpoint: &str,
        scheme: UrlScheme,
        connecting: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        let target = connect_target(scheme.topology);
        let started = Instant::now();
        tokio::time::timeout(self.operation_timeout, connecting)
            .await
            .map_err(|_| {
                LockError::backend_message(
                    ErrorKind::Unreachable,
                    PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "{target} at {endpoint} did not answer within {:?}: is it running and \
                         reachable?",
                        self.operation_timeout
                    ),
                )
            })?
            .map_err(|error| {
                let hint = if refused_credentials(&error) {
                    "it refused the credentials: check the user name and password in the URL"
                } else if scheme.tls && error.to_string().contains("certificate") {
                    "its TLS certificate was not accepted (for a certificate a private CA signed, \
                     give that CA to RedisLockProviderBuilder::tls_root_certificate)"
                } else if error.to_string().contains("DB index is out of range") {
                    "the server has no database of the number the URL's path gives (it has 0 up \
                     to its `databases` setting minus one, 16 by default)"
                } else if error.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
                    "the sentinels name no reachable master of that name: check the master name \
                     (the URL's path) against SENTINEL MASTERS"
                } else if scheme.topology == Topology::Sentinel
                    && error.kind() == redis::ErrorKind::InvalidClientConfig
                {
                    // The redis crate's words for a listed host whose ROLE is not sentinel.
                    "a listed host answered but is not a sentinel: check the ports (a \
                     sentinel's is 26379 unless set)"
                } else if scheme.topology == Topology::Cluster
                    && error.to_string().contains("cluster support disabled")
                {
                    "the server is not in cluster mode: use a redis:// URL for a single server"
                } else {
                    "is it running and reachable?"
                };
                LockError::backend(
                    kind_of(&error, Operation::Connect, false),
                    PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "could not connect to {target} at {endpoint} (gave up after {:?}): {hint}",
                        started.elapsed()
                    ),
                    error,
                )
            })
    }

    fn client(
        &self,
        url: &str,
        endpoint: &str,
        tls: bool,
    ) -> Result<(redis::Client, ConnectionManagerConfig), LockError> {
        let client = self.open_client(url, tls).map_err(|error| {
            LockError::backend(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!("invalid Redis URL {endpoint}: {error}"),
                error,
            )
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.operation_timeout))
            .set_connection_timeout(Some(self.operation_timeout))
            .set_number_of_retries(2);
        Ok((client, config))
    }

    /// The `redis` crate's client for `url`, over TLS when `tls` (the URL's scheme asked for it).
    #[cfg(feature = "tls")]
    fn open_client(&self, url: &str, tls: bool) -> redis::RedisResult<redis::Client> {
        if tls {
            install_ring_provider();
        }
        match self.tls_certificates() {
            Some(certificates) => redis::Client::build_with_tls(url, certificates),
            None => redis::Client::open(url),
        }
    }

    /// The `redis` crate's client for `url`, which [`check_url_scheme`] found not to ask for
    /// TLS: this build has none.
    #[cfg(not(feature = "tls"))]
    fn open_client(&self, url: &str, _tls: bool) -> redis::RedisResult<redis::Client> {
        redis::Client::open(url)
    }

    /// The CA given to [`tls_root_certificate`](Self::tls_root_certificate), as the `redis`
    /// crate takes it.
    #[cfg(feature = "tls")]
    fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        self.tls_root_certificate
            .as_ref()
            .map(|pem| redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            })
    }

    /// A cluster client for a `redis+cluster://` URL, with the operation timeout as each
    /// node's connection and response timeout and as the bound of a command with its retries.
    fn cluster_client(
        &self,
        url: &str,
        endpoint: &str,
        tls: bool,
    ) -> Result<(ClusterClient, ClusterConfig), LockError> {
        let parsed = topology::parse_cluster_url(url)
            .map_err(|rule| invalid_url(Topology::Cluster, endpoint, &rule))?;
        let seeds = parsed.seeds.into_iter().map(|node| address(node, tls));
        // The builder's response timeout also bounds a command's retries and redirects; the
        // config repeats both timeouts, as the connection takes its own over the builder's.
        let mut builder = ClusterClientBuilder::new(seeds)
            .connection_timeout(self.operation_timeout)
            .response_timeout(self.operation_timeout);
        if let Some(username) = &parsed.credentials.username {
            builder = builder.username(username);
        }
        if let Some(password) = &parsed.credentials.password {
            builder = builder.password(password);
        }
        #[cfg(feature = "tls")]
        if tls {
            install_ring_provider();
            if let Some(certificates) = self.tls_certificates() {
                builder = builder.certs(certificates);
            }
        }
        let client = builder
            .build()
            .map_err(|error| invalid_url_error(Topology::Cluster, endpoint, error))?;
        let config = ClusterConfig::new()
            .set_connection_timeout(self.operation_timeout)
            .set_response_timeout(self.operation_timeout);
        Ok((client, config))
    }

    /// The connection to the master a `redis+sentinel://` URL names, not connected yet.
    fn sentinel_connection(
        &self,
        url: &str,
        endpoint: &str,
        tls: bool,
    ) -> Result<SentinelConnection, LockError> {
        let parsed = topology::parse_sentinel_url(url)
            .map_err(|rule| invalid_url(Topology::Sentinel, endpoint, &rule))?;
        let sentinels = parsed.sentinels.into_iter().map(|node| address(node, tls));
        let mut builder =
            SentinelClientBuilder::new(sentinels, &parsed.master_name, SentinelServerType::Master)
                .map_err(|error| invalid_url_error(Topology::Sentinel, endpoint, error))?
                .set_client_to_redis_db(parsed.db);
        if let Some(username) = &parsed.master_credentials.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &parsed.master_credentials.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &parsed.sentinel_credentials.username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &parsed.sentinel_credentials.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        #[cfg(feature = "tls")]
        if tls {
            install_ring_provider();
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(certificates) = self.tls_certificates() {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        let client = builder
            .build()
            .map_err(|error| invalid_url_error(Topology::Sentinel, endpoint, error))?;
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(self.operation_timeout))
            .set_connection_timeout(Some(self.operation_timeout));
        Ok(SentinelConnection::new(client, config, parsed.db))
    }

    fn validate(&self) -> Result<(), LockError> {
        for (what, value) in [("key prefix", &self.key_prefix), ("env", &self.env)] {
            let rule = if value.is_empty() {
                Some("it must not be empty".to_owned())
            } else if value.contains(':') {
                Some(
                    "it must not contain ':', the separator of the key layout <prefix>:<env>:<name>; \
                     otherwise two different env/name pairs could map to one key"
                        .to_owned(),
                )
            } else if self.fencing && value.contains(['{', '}']) {
                Some(FENCING_BRACES_RULE.to_owned())
            } else {
                None
            };
            if let Some(rule) = rule {
                return Err(invalid_setting(what, value, &rule));
            }
        }
        if self.operation_timeout.is_zero() {
            return Err(invalid_setting(
                "operation timeout",
                "0s",
                "it must be greater than zero",
            ));
        }
        if let Some((replicas, timeout)) = self.replica_wait {
            if replicas == 0 {
                return Err(invalid_setting(
                    "number of replicas to wait for",
                    "0",
                    "it must be at least 1 (leave wait_for_replicas out to wait for none)",
                ));
            }
            if timeout.is_zero() || timeout >= self.operation_timeout {
                return Err(invalid_setting(
                    "replica wait timeout",
                    &format!("{timeout:?}"),
                    &format!(
                        "it must be greater than zero (Redis' WAIT 0 waits forever) and shorter \
                         than the operation timeout ({:?}), so an acquire can tell what happened",
                        self.operation_timeout
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Refuses [`wait_for_replicas`](Self::wait_for_replicas) on a Redis Cluster URL, where the
    /// cluster client routes a `WAIT` (which names no key) to a node of its choice.
    fn check_replica_wait(&self, scheme: UrlScheme) -> Result<(), LockError> {
        if self.replica_wait.is_some() && scheme.topology == Topology::Cluster {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "wait_for_replicas is not available with a {}:// URL: the cluster client may \
                     send Redis' WAIT to another node than the lock key's master, which would \
                     confirm nothing; use a single server or a Sentinel URL, or leave it out",
                    scheme.name
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a TLS root certificate with a URL that does not use TLS, where it would be
    /// silently ignored.
    fn check_tls_settings(&self, endpoint: &str, scheme: UrlScheme) -> Result<(), LockError> {
        #[cfg(feature = "tls")]
        if self.tls_root_certificate.is_some() && !scheme.tls {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "a TLS root certificate was set but {endpoint} does not use TLS: use \
                     rediss:// (or rediss+cluster://, rediss+sentinel://, or valkeys... for \
                     Valkey), or leave the certificate out"
                ),
            ));
        }
        let _ = (endpoint, scheme);
        Ok(())
    }

    fn finish<C: 'static>(self, connection: C, endpoint: String) -> RedisLockProvider<C> {
        RedisLockProvider {
            inner: Arc::new(Inner {
                resends: may_resend(&connection),
                connection,
                scripts: Scripts::new(),
                key_prefix: self.key_prefix,
                env: self.env,
                holder: self.holder,
                operation_timeout: self.operation_timeout,
                fencing: self.fencing,
                replica_wait: self
                    .replica_wait
                    .map(|(replicas, timeout)| storage::ReplicaWait {
                        replicas,
                        timeout_ms: storage::ceil_millis(timeout).unwrap_or(storage::MAX_TTL_MS),
                    }),
                endpoint,
            }),
        }
    }
}

/// A URL scheme this crate connects with: what it names, and whether over TLS.
#[derive(Debug, Clone, Copy)]
struct UrlScheme {
    name: &'static str,
    topology: Topology,
    tls: bool,
}

const fn scheme(name: &'static str, topology: Topology, tls: bool) -> UrlScheme {
    UrlScheme {
        name,
        topology,
        tls,
    }
}

/// Every URL scheme accepted: the `redis` crate's own (one server over plain TCP, over TLS with
/// this crate's `tls-rustls` feature, or over a Unix socket), and this crate's cluster and
/// sentinel forms ([`topology`]), under Redis' and Valkey's names.
const URL_SCHEMES: &[UrlScheme] = &[
    scheme("redis", Topology::Server, false),
    scheme("rediss", Topology::Server, true),
    scheme("valkey", Topology::Server, false),
    scheme("valkeys", Topology::Server, true),
    scheme("redis+unix", Topology::Server, false),
    scheme("valkey+unix", Topology::Server, false),
    scheme("unix", Topology::Server, false),
    scheme("redis+cluster", Topology::Cluster, false),
    scheme("rediss+cluster", Topology::Cluster, true),
    scheme("valkey+cluster", Topology::Cluster, false),
    scheme("valkeys+cluster", Topology::Cluster, true),
    scheme("redis+sentinel", Topology::Sentinel, false),
    scheme("rediss+sentinel", Topology::Sentinel, true),
    scheme("valkey+sentinel", Topology::Sentinel, false),
    scheme("valkeys+sentinel", Topology::Sentinel, true),
];

/// The entry of [`URL_SCHEMES`] for `url`'s scheme, if it has one.
fn url_scheme(url: &str) -> Option<UrlScheme> {
    let (name, _) = url.split_once("://")?;
    URL_SCHEMES
        .iter()
        .find(|accepted| name.eq_ignore_ascii_case(accepted.name))
        .copied()
}

/// Refuses a URL meant for another backend before anything reads it, naming its scheme (never
/// the rest of the URL, which may hold a password) and the accepted ones; and a TLS URL when
/// this build has no TLS, naming the feature that adds it.
fn check_url_scheme(url: &str) -> Result<UrlScheme, LockError> {
    let name = url
        .split_once("://")
        .map(|(scheme, _)| scheme)
        .filter(|scheme| is_url_scheme(scheme));
    let refused = match (name, url_scheme(url)) {
        (Some(name), Some(scheme)) => {
            if scheme.tls && !cfg!(feature = "tls") {
                return Err(LockError::backend_message(
                    ErrorKind::Configuration,
                    PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "the URL's scheme {name:?} asks for TLS, which this build leaves out: \
                         enable the \"tls-rustls\" feature of shedlock-redis (on by default), or \
                         the \"rustls\" feature of shedlock"
                    ),
                ));
            }
            return Ok(scheme);
        }
        (Some(name), None) => format!("the URL's scheme is {name:?}"),
        (None, _) => "the text is not a URL (no scheme:// in front)".to_owned(),
    };
    Err(LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!(
            "{refused}, which is not a Redis URL: the redis provider accepts {}",
            URL_SCHEMES
                .iter()
                .map(|scheme| format!("{}://...", scheme.name))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// What a URL of `topology` reaches, as the subject of a connection error.
fn connect_target(topology: Topology) -> &'static str {
    match topology {
        Topology::Server => "Redis",
        Topology::Cluster => "the Redis Cluster",
        Topology::Sentinel => "the Redis master named by the sentinels",
    }
}

/// A URL of `topology` that broke `rule`; nothing was connected.
fn invalid_url(topology: Topology, endpoint: &str, rule: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {} URL {endpoint}: {rule}", topology.what()),
    )
}

/// A URL of `topology` that the `redis` crate refused; nothing was connected.
fn invalid_url_error(topology: Topology, endpoint: &str, error: redis::RedisError) -> LockError {
    LockError::backend(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {} URL {endpoint}: {error}", topology.what()),
        error,
    )
}

/// `node` as the `redis` crate addresses it; over TLS, the host name must match the node's
/// certificate.
fn address(node: topology::Node, tls: bool) -> ConnectionAddr {
    if tls {
        ConnectionAddr::TcpTls {
            host: node.host,
            port: node.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(node.host, node.port)
    }
}

/// Makes ring the process's rustls crypto provider unless the application chose one: the
/// `redis` crate asks rustls for the default one, and an application whose other dependencies
/// turn on aws-lc-rs too has two and no default, where rustls would panic.
#[cfg(feature = "tls")]
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Whether `text` has the form of a URL scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_url_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

const FENCING_BRACES_RULE: &str = "with fencing on it must not contain '{' or '}': Redis Cluster \
     reads them as a hash tag, and the fencing counter {<lock key>}:fencing must hash to the lock \
     key's own slot";

fn invalid_setting(what: &str, value: &str, rule: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {what} {value:?}: {rule}"),
    )
}

/// Locks in Redis, one key per lock; see the crate docs for the layout and the guarantees.
///
/// Cheap to clone (the connection is shared); `C` is the connection type, the
/// [`RedisConnection`] [`connect`](RedisLockProviderBuilder::connect) makes for any URL unless
/// built from another connection.
pub struct RedisLockProvider<C = RedisConnection> {
    inner: Arc<Inner<C>>,
}

impl<C> Clone for RedisLockProvider<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

struct Inner<C> {
    connection: C,
    scripts: Scripts,
    key_prefix: String,
    env: String,
    holder: String,
    operation_timeout: Duration,
    fencing: bool,
    /// The replicas each acquire and extend waits for, if any.
    replica_wait: Option<storage::ReplicaWait>,
    /// Where the connection goes, with any password masked.
    endpoint: String,
    /// Whether the connection may send a command again after its connection dropped
    /// ([`may_resend`]).
    resends: bool,
}

impl<C> fmt::Debug for RedisLockProvider<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("RedisLockProvider")
            .field("endpoint", &inner.endpoint)
            .field("key_prefix", &inner.key_prefix)
            .field("env", &inner.env)
            .field("holder", &inner.holder)
            .field("operation_timeout", &inner.operation_timeout)
            .field("fencing", &inner.fencing)
            .field("replica_wait", &inner.replica_wait)
            .finish()
    }
}

impl RedisLockProvider {
    /// Settings with ShedLock's defaults: prefix `job-lock`, env `default`, the host name as
    /// holder, a 5 s operation timeout, no fencing.
    pub fn builder() -> RedisLockProviderBuilder {
        RedisLockProviderBuilder::default()
    }

    /// Connects to `url` with the default settings; see [`RedisLockProviderBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }
}

impl<C> RedisLockProvider<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// The Redis key of lock `name`, `<prefix>:<env>:<name>`, for operators who want to inspect
    /// or free a lock by hand. Fails like [`LockProvider::try_lock`] for a name this provider
    /// refuses.
    pub fn lock_key(&self, name: &str) -> Result<String, LockError> {
        self.check_name(name)?;
        Ok(storage::lock_key(
            &self.inner.key_prefix,
            &self.inner.env,
            name,
        ))
    }

    /// The key of the fencing counter of lock `name`, `{<lock key>}:fencing`, whether or not
    /// fencing is on (the key exists only once a fencing provider has taken the lock).
    pub fn fencing_key(&self, name: &str) -> Result<String, LockError> {
        Ok(storage::fencing_key(&self.lock_key(name)?))
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        if name.is_empty() {
            return Err(ConfigurationError::EmptyName.into());
        }
        if self.inner.fencing && name.contains(['{', '}']) {
            return Err(LockError::invalid_name(PROVIDER, name, FENCING_BRACES_RULE));
        }
        Ok(())
    }
}

impl<C> Inner<C> {
    /// What was missing when fewer replicas acknowledged a write than
    /// [`wait_for_replicas`](RedisLockProviderBuilder::wait_for_replicas) asks, as the
    /// middle of an error message; `None` when enough did, or none was asked for.
    fn unacknowledged(&self, acknowledged: Option<u32>) -> Option<String> {
        let wait = self.replica_wait?;
        let acknowledged = acknowledged.unwrap_or(0);
        (acknowledged < wait.replicas).then(|| {
            format!(
                "only {acknowledged} of the {} replicas asked for acknowledged it within {} ms",
                wait.replicas, wait.timeout_ms
            )
        })
    }
}

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Runs one Redis call bounded by the operation timeout, turning its failure into the
    /// [`LockError`] the caller reports.
    async fn call<T>(
        &self,
        operation: Operation,
        name: &str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        let result = tokio::time::timeout(self.operation_timeout, call).await;
        let error = match result {
            Ok(Ok(value)) => return Ok(value),
            Err(_) => {
                return Err(LockError::Timeout {
                    provider: PROVIDER,
                    operation,
                    name: name.to_owned(),
                    after: self.operation_timeout,
                });
            }
            Ok(Err(error)) if error.is_timeout() => {
                return Err(LockError::Timeout {
                    provider: PROVIDER,
                    operation,
                    name: name.to_owned(),
                    after: Duration::from_millis(started.elapsed().as_millis() as u64),
                });
            }
            Ok(Err(error)) => error,
        };
        let consequence = match operation {
            // Refused before the command ran: nothing changed, and the task must not run all
            // the same (whether another node holds the lock is unknown).
            _ if refused_credentials(&error) => {
                "the command was refused before it ran, so nothing was changed"
            }
            Operation::Acquire => "whether the lock was taken is unknown, so the task must not run",
            Operation::Release => "the lock stays held until lock_at_most_for at the latest",
            Operation::Extend => "the lock keeps its previous expiry",
            Operation::List | Operation::Inspect => "nothing was changed",
            Operation::ForceUnlock => {
                "whether the lock was freed is unknown: inspect it again before retrying"
            }
            _ => "is it running and reachable?",
        };
        let cause = if refused_credentials(&error) {
            "refused the credentials (check the user name and password in the URL)"
        } else if error.is_io_error() || error.is_connection_refusal() {
            "is unreachable"
        } else {
            "failed"
        };
        Err(LockError::backend(
            kind_of(&error, operation, self.resends),
            PROVIDER,
            operation,
            name,
            format!("Redis at {} {cause}; {consequence}", self.endpoint),
            error,
        ))
    }
}

/// Whether `connection` may send a command again after its connection dropped before the
/// answer came, as the cluster client does: then a refused connection at the end does not prove
/// that the first attempt never ran. A connection type this crate does not know is assumed to.
fn may_resend<C: 'static>(connection: &C) -> bool {
    let connection: &dyn Any = connection;
    if let Some(connection) = connection.downcast_ref::<RedisConnection>() {
        return connection.may_resend();
    }
    !(connection.is::<ConnectionManager>() || connection.is::<redis::aio::MultiplexedConnection>())
}

/// What kind of failure the client error `error` is, met during `operation` on a connection
/// that [`may_resend`] (`resends`) commands: from the `redis` crate's error kinds and the
/// server's error codes. The message says the same in words; this is what callers branch on.
fn kind_of(error: &redis::RedisError, operation: Operation, resends: bool) -> ErrorKind {
    use redis::ErrorKind as Client;
    let text = error.to_string();
    // A server error code, as the reply's code or inside a script's error (Redis before 7
    // words a script's failed call as `ERR Error running script ...: WRONGTYPE ...`).
    let code = |code: &str| error.code() == Some(code) || text.contains(code);
    if refused_credentials(error) || code("NOPERM") {
        return ErrorKind::CredentialsRefused;
    }
    // A host name that resolves to nothing, which the redis crate words as a client setting
    // when the lookup answered no address.
    let unresolved = text.contains("failed to lookup address information")
        || text.contains("No address found for host");
    let misconfigured = matches!(
        error.kind(),
        Client::InvalidClientConfig | Client::EmptySentinelList | Client::RESP3NotSupported
    )
        // The URL's database past the server's `databases`, a cluster URL for a single server.
        || text.contains("DB index is out of range")
        || text.contains("cluster support disabled");
    if misconfigured && !unresolved {
        return ErrorKind::Configuration;
    }
    // Every command here acts on a lock key or its fencing counter, so a key of another type
    // is another application's data under the lock's key.
    if code("WRONGTYPE") {
        return ErrorKind::CorruptData;
    }
    if operation == Operation::Connect {
        return ErrorKind::Unreachable;
    }
    // No connection to send on: the connection manager's reconnect was refused, the cluster
    // has no node for the slot, the sentinels name no master.
    let unsent = unresolved
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            Client::ClusterConnectionNotFound
                | Client::MasterNameNotFoundBySentinel
                | Client::NoValidReplicasFoundBySentinel
        );
    if unsent && !resends {
        ErrorKind::Unreachable
    } else {
        ErrorKind::OutcomeUnknown
    }
}

/// Whether Redis refused the URL's credentials (or asked for some): a wrong password is not
/// an unreachable server, and saying "is it running?" sends the operator the wrong way.
fn refused_credentials(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("WRONGPASS" | "NOAUTH"))
        // The cluster client reports its seeds' refusal as text only, the inner error's kind
        // flattened into the detail of an I/O error.
        || (error.kind() == redis::ErrorKind::Io
            && error
                .detail()
                .is_some_and(|detail| detail.contains("AuthenticationFailed")))
}

#[async_trait]
impl<C> LockProvider for RedisLockProvider<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        self.check_name(name)?;
        let inner = &self.inner;
        let at_most_ms = ttl_millis(Operation::Acquire, name, config.lock_at_most_for())?;
        let at_least_ms = ttl_millis(Operation::Acquire, name, config.lock_at_least_for())?;
        let key = storage::lock_key(&inner.key_prefix, &inner.env, name);
        let value = storage::lock_value(&inner.holder);
        let mut connection = inner.connection.clone();
        let counter = inner.fencing.then(|| storage::fencing_key(&key));
        let reply = inner
            .call(
                Operation::Acquire,
                name,
                storage::acquire(
                    &mut connection,
                    &inner.scripts,
                    &key,
                    counter.as_deref(),
                    &value,
                    at_most_ms,
                    inner.replica_wait,
                ),
            )
            .await;
        let fencing_token = match reply {
            Ok((storage::AcquireReply::Acquired(token), acknowledged)) => {
                if let Some(short) = inner.unacknowledged(acknowledged) {
                    self.clean_up_unknown_acquire(key, value);
                    // Written, but whether the write survives a failover is unknown.
                    return Err(LockError::backend_message(
                        ErrorKind::OutcomeUnknown,
                        PROVIDER,
                        Operation::Acquire,
                        name,
                        format!(
                            "Redis at {} took the lock, but {short}: a failover could lose it, \
                             so the task must not run this time, and the lock is being freed",
                            inner.endpoint
                        ),
                    ));
                }
                token
            }
            // The value is unique to this attempt, so finding it means the acquire ran twice
            // and its first run took the lock: a cluster client resends a command whose
            // connection dropped before the answer came. That first answer, and with it the
            // fencing token, is lost, so the outcome is reported as unknown (the task does not
            // run) and the lock is freed at once rather than at lock_at_most_for.
            Ok((storage::AcquireReply::Held { value: held_by, .. }, _)) if held_by == value => {
                self.clean_up_unknown_acquire(key, value);
                return Err(LockError::backend_message(
                    ErrorKind::OutcomeUnknown,
                    PROVIDER,
                    Operation::Acquire,
                    name,
                    format!(
                        "Redis at {} ran a resent acquire whose first run had taken the lock \
                         (its answer was lost with a dropped connection); the lock is being \
                         freed, and the task must not run this time",
                        inner.endpoint
                    ),
                ));
            }
            Ok((
                storage::AcquireReply::Held {
                    value: held_by,
                    ttl_ms,
                },
                _,
            )) => {
                // Redis gives the time left, not an instant: held_until is this node's clock
                // plus it, off by the node's clock error and the reply's travel time.
                let held_until =
                    ttl_ms.map(|ms| std::time::SystemTime::now() + Duration::from_millis(ms));
                return Ok(Acquisition::NotAcquired(Some(LockHolder {
                    locked_by: Some(storage::holder_of(&held_by).to_owned()),
                    held_until,
                })));
            }
            Ok((storage::AcquireReply::OtherType(kind), _)) => {
                return Err(LockError::backend_message(
                    ErrorKind::CorruptData,
                    PROVIDER,
                    Operation::Acquire,
                    name,
                    format!(
                        "the key {key:?} at {} holds a Redis {kind}, not a ShedLock lock (a \
                         string): it is another application's key, or another application \
                         uses this key prefix and env; nothing was written and the lock was \
                         not taken: delete or rename that key, or give this provider an env \
                         of its own",
                        inner.endpoint
                    ),
                ));
            }
            Ok((storage::AcquireReply::BadCounter(found), _)) => {
                return Err(LockError::backend_message(
                    ErrorKind::CorruptData,
                    PROVIDER,
                    Operation::Acquire,
                    name,
                    format!(
                        "the fencing counter {:?} at {} holds {}, not a decimal counter; nothing was \
                         written and the lock was not taken: set the counter to at least the \
                         highest token this lock has handed out (or delete it if no guarded \
                         resource has seen one)",
                        counter.as_deref().unwrap_or_default(),
                        inner.endpoint,
                        found,
                    ),
                ));
            }
            Err(error) => {
                self.clean_up_unknown_acquire(key, value);
                return Err(error);
            }
        };
        Ok(Acquisition::Acquired(Box::new(RedisLockHandle {
            inner: self.inner.clone(),
            name: name.to_owned(),
            key,
            value,
            fencing_token,
            state: tokio::sync::Mutex::new(HandleState {
                finished: false,
                last_ttl_ms: at_most_ms,
                least_remaining_ms: i64::try_from(at_least_ms).unwrap_or(i64::MAX),
            }),
        })))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server)
            .with_fencing(self.inner.fencing)
            .with_extend(true)
            .with_time_precision(Duration::from_millis(1))
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

impl<C> RedisLockProvider<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// After an acquire whose answer never came, removes the key if (and only if) it holds the
    /// value we tried to write, so a `SET` that did land does not block the lock until
    /// `lock_at_most_for`. Runs in the background: the caller already has its error.
    fn clean_up_unknown_acquire(&self, key: String, value: String) {
        let inner = self.inner.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            let mut connection = inner.connection.clone();
            let outcome = tokio::time::timeout(
                inner.operation_timeout,
                storage::delete_if_ours(&mut connection, &inner.scripts, &key, &value),
            )
            .await;
            match outcome {
                Ok(Ok(true)) => debug!(
                    key = %key,
                    "removed the lock an unanswered acquire had written after all"
                ),
                Ok(Ok(false)) => debug!(key = %key, "the unanswered acquire left nothing behind"),
                Ok(Err(error)) => debug!(
                    key = %key, endpoint = %inner.endpoint, %error,
                    "could not clean up after an unanswered acquire; the lock frees itself at lock_at_most_for"
                ),
                Err(_) => debug!(
                    key = %key, endpoint = %inner.endpoint,
                    "cleanup after an unanswered acquire timed out; the lock frees itself at lock_at_most_for"
                ),
            }
        });
    }
}

/// A duration as whole milliseconds for a TTL, refusing what Redis cannot store.
fn ttl_millis(operation: Operation, name: &str, duration: Duration) -> Result<u64, LockError> {
    storage::ceil_millis(duration).ok_or_else(|| {
        LockError::backend_message(
            ErrorKind::Limit,
            PROVIDER,
            operation,
            name,
            format!(
                "{duration:?} is longer than a Redis TTL this provider sets (at most {} ms); nothing was written",
                storage::MAX_TTL_MS
            ),
        )
    })
}

/// One acquisition of a Redis lock: the key and the unique value written to it.
struct RedisLockHandle<C> {
    inner: Arc<Inner<C>>,
    name: String,
    key: String,
    value: String,
    fencing_token: Option<u64>,
    /// Serializes this handle's release and extend, which both read and update it.
    state: tokio::sync::Mutex<HandleState>,
}

/// What release needs to compute the rest of `lock_at_least_for` on the server's clock.
struct HandleState {
    /// Released, or found lost: this acquisition is over and nothing more is sent.
    finished: bool,
    /// The TTL the key was last given (at acquire, or by the last extend), in ms.
    last_ttl_ms: u64,
    /// How much of `lock_at_least_for` remained when that TTL was set (may be negative).
    least_remaining_ms: i64,
}

impl<C> fmt::Debug for RedisLockHandle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockHandle")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("value", &self.value)
            .field("fencing_token", &self.fencing_token)
            .finish()
    }
}

#[async_trait]
impl<C> LockHandle for RedisLockHandle<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    fn name(&self) -> &str {
        &self.name
    }

    fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
        let inner = &self.inner;
        let mut connection = inner.connection.clone();
        let released = inner
            .call(
                Operation::Release,
                &self.name,
                storage::release(
                    &mut connection,
                    &inner.scripts,
                    &self.key,
                    &self.value,
                    state.last_ttl_ms,
                    state.least_remaining_ms,
                ),
            )
            .await?;
        // Released now, or not ours any more: either way this acquisition is over.
        state.finished = true;
        Ok(released)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if lock_at_most_for.is_zero() {
            return Err(ConfigurationError::ZeroLockAtMostFor {
                name: self.name.clone(),
            }
            .into());
        }
        let new_ttl_ms = ttl_millis(Operation::Extend, &self.name, lock_at_most_for)?;
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
        let inner = &self.inner;
        let mut connection = inner.connection.clone();
        let (before, acknowledged) = inner
            .call(
                Operation::Extend,
                &self.name,
                storage::extend(
                    &mut connection,
                    &inner.scripts,
                    &self.key,
                    &self.value,
                    new_ttl_ms,
                    inner.replica_wait,
                ),
            )
            .await?;
        let Some(before_ms) = before else {
            state.finished = true;
            return Ok(false);
        };
        // The previous TTL ran for (last_ttl - before) ms on the server's clock.
        let ran_ms = i64::try_from(state.last_ttl_ms.saturating_sub(before_ms)).unwrap_or(0);
        state.least_remaining_ms = state.least_remaining_ms.saturating_sub(ran_ms);
        state.last_ttl_ms = new_ttl_ms;
        // The master has the new expiry either way (a release computes from it), but a
        // promoted replica may still have the old one.
        if let Some(short) = inner.unacknowledged(acknowledged) {
            // Written, but whether the new expiry survives a failover is unknown.
            return Err(LockError::backend_message(
                ErrorKind::OutcomeUnknown,
                PROVIDER,
                Operation::Extend,
                &self.name,
                format!(
                    "Redis at {} extended the lock, but {short}: a failover could bring back \
                     the previous expiry, so do not count on the extension",
                    inner.endpoint
                ),
            ));
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(kind: std::io::ErrorKind, text: &str) -> redis::RedisError {
        std::io::Error::new(kind, text.to_owned()).into()
    }

    fn server(code: &str, detail: &str) -> redis::RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn client_errors_are_classified_by_what_happened() {
        let refused = || io(std::io::ErrorKind::ConnectionRefused, "refused");
        let reset = || io(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let cases = [
            (
                server("WRONGPASS", "invalid username-password pair"),
                Operation::Acquire,
                false,
                ErrorKind::CredentialsRefused,
            ),
            (
                server(
                    "NOPERM",
                    "this user has no permissions to run the 'evalsha' command",
                ),
                Operation::Release,
                false,
                ErrorKind::CredentialsRefused,
            ),
            (
                redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "refused")),
                Operation::Connect,
                false,
                ErrorKind::CredentialsRefused,
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "Address does not point to a sentinel node",
                )),
                Operation::Connect,
                false,
                ErrorKind::Configuration,
            ),
            (
                server("ERR", "DB index is out of range"),
                Operation::Connect,
                false,
                ErrorKind::Configuration,
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "No address found for host",
                )),
                Operation::Connect,
                false,
                ErrorKind::Unreachable,
            ),
            (
                server(
                    "WRONGTYPE",
                    "Operation against a key holding the wrong kind of value",
                ),
                Operation::Inspect,
                false,
                ErrorKind::CorruptData,
            ),
            (
                server(
                    "ERR",
                    "Error running script: @user_script:3: WRONGTYPE Operation",
                ),
                Operation::List,
                false,
                ErrorKind::CorruptData,
            ),
            (reset(), Operation::Connect, false, ErrorKind::Unreachable),
            // A reconnect refused: the command was never sent...
            (refused(), Operation::Acquire, false, ErrorKind::Unreachable),
            // ...unless the connection resends commands, as a cluster's does after a drop.
            (
                refused(),
                Operation::Acquire,
                true,
                ErrorKind::OutcomeUnknown,
            ),
            (
                reset(),
                Operation::Acquire,
                false,
                ErrorKind::OutcomeUnknown,
            ),
            (
                server("BUSY", "Redis is busy running a script"),
                Operation::Extend,
                false,
                ErrorKind::OutcomeUnknown,
            ),
        ];
        for (error, operation, resends, kind) in cases {
            assert_eq!(
                kind_of(&error, operation, resends),
                kind,
                "{error} during {operation} (resends: {resends})"
            );
        }
    }

    #[test]
    fn only_a_cluster_connection_or_an_unknown_one_may_resend() {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let cluster = ClusterClient::new(vec!["redis://127.0.0.1:1"]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let manager =
                ConnectionManager::new_lazy_with_config(client, ConnectionManagerConfig::new())
                    .unwrap();
            assert!(!may_resend(&manager));
            assert!(!may_resend(&RedisConnection::from(manager)));
            let cluster = cluster.get_pending_async_connection_with_config(ClusterConfig::new());
            assert!(may_resend(&cluster));
            assert!(may_resend(&RedisConnection::from(cluster)));
            assert!(may_resend(&"a connection of the application's own type"));
        });
    }
}
