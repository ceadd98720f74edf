//! The provider's settings ([`RedisLockProviderBuilder`]): what they may be, and the three ways
//! to finish them into a provider.

use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use shedlock_core::raw::{
    KeyNamespace, ProviderSettings, invalid_setting, unused_tls_root_certificate,
};
use shedlock_core::{ErrorKind, LockError, Operation};

use crate::connection::RedisConnection;
use crate::failure::may_resend;
use crate::provider::{Inner, RedisLockProvider};
use crate::scheme::{UrlScheme, check_url_scheme};
use crate::storage::{self, Scripts};
use crate::topology::Topology;
use crate::{DEFAULT_ENV, DEFAULT_KEY_PREFIX, PROVIDER};

/// Settings for a [`RedisLockProvider`]; finish with [`connect`](Self::connect),
/// [`connect_lazy`](Self::connect_lazy) or [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct RedisLockProviderBuilder {
    keys: KeyNamespace,
    pub(crate) settings: ProviderSettings,
    fencing: bool,
    replica_wait: Option<(u32, Duration)>,
    /// Set only through [`tls_root_certificate`](Self::tls_root_certificate), which a build
    /// without TLS leaves out.
    pub(crate) tls_root_certificate: Option<Vec<u8>>,
}

impl Default for RedisLockProviderBuilder {
    fn default() -> Self {
        Self {
            keys: KeyNamespace::new(DEFAULT_KEY_PREFIX, DEFAULT_ENV),
            settings: ProviderSettings::default(),
            fencing: false,
            replica_wait: None,
            tls_root_certificate: None,
        }
    }
}

impl RedisLockProviderBuilder {
    /// The first segment of every key, `job-lock` as in ShedLock (with fencing on, no `{` or
    /// `}` either); see [`KeyNamespace::with_prefix`].
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        Self {
            keys: self.keys.with_prefix(prefix),
            ..self
        }
    }

    /// The environment segment, `default` as in ShedLock (with fencing on, no `{` or `}`); see
    /// [`KeyNamespace::with_env`].
    pub fn env(self, env: impl Into<String>) -> Self {
        Self {
            keys: self.keys.with_env(env),
            ..self
        }
    }

    /// Who this node is, written into each lock's value before the acquisition's own UUID; see
    /// [`ProviderSettings::with_holder`].
    pub fn holder(self, holder: impl Into<String>) -> Self {
        Self {
            settings: self.settings.with_holder(holder),
            ..self
        }
    }

    /// The longest one lock operation may take, reconnecting included; the connection manager
    /// built by [`connect`](Self::connect) uses it as its response and connection timeout too.
    /// See [`ProviderSettings::with_operation_timeout`].
    pub fn operation_timeout(self, timeout: Duration) -> Self {
        Self {
            settings: self.settings.with_operation_timeout(timeout),
            ..self
        }
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
        let (connection, server) = match scheme.topology {
            Topology::Server => {
                let (client, config) = self.client(url, &endpoint, scheme.tls)?;
                let server = client.get_connection_info().addr().clone();
                let manager = ConnectionManager::new_with_config(client, config);
                let connected = self
                    .bounded_connect(&endpoint, scheme, Some(&server), manager)
                    .await?;
                (RedisConnection::from(connected), Some(server))
            }
            Topology::Cluster => {
                let (client, config) = self.cluster_client(url, &endpoint, scheme.tls)?;
                let cluster = client.get_async_connection_with_config(config);
                let connected = self
                    .bounded_connect(&endpoint, scheme, None, cluster)
                    .await?;
                (RedisConnection::from(connected), None)
            }
            Topology::Sentinel => {
                let master = self.sentinel_connection(url, &endpoint, scheme.tls)?;
                self.bounded_connect(&endpoint, scheme, None, master.connect())
                    .await?;
                (RedisConnection::sentinel(master), None)
            }
        };
        // One command, so that what every acquire would meet is said now: a server that wants
        // a password accepts a connection without one and refuses every command after
        // (refused credentials, not an unknown outcome at every acquire); and a single server
        // must be a master, as a replica refuses every write (ROLE says which it is).
        let mut probe = connection.clone();
        if server.is_some() {
            let role = self
                .bounded_connect(&endpoint, scheme, server.as_ref(), async move {
                    match redis::cmd("ROLE")
                        .query_async::<redis::Value>(&mut probe)
                        .await
                    {
                        // A user whose ACL leaves ROLE out (it is an admin command), or a
                        // server without it: what it is stays unknown, and is not refused.
                        Err(error) if role_withheld(&error) => Ok(redis::Value::Nil),
                        answered => answered,
                    }
                })
                .await?;
            check_role(&endpoint, &role)?;
        } else {
            self.bounded_connect(&endpoint, scheme, None, async move {
                redis::cmd("PING").query_async::<String>(&mut probe).await
            })
            .await?;
        }
        Ok(self.finish(connection, endpoint))
    }

    /// Like [`connect`](Self::connect) but connects on first use, so an application can start
    /// while Redis is down; each lock operation then fails (bounded by the operation timeout)
    /// until Redis answers. The URL is checked at once all the same. Asynchronous, as every
    /// provider's `connect_lazy`, though nothing here waits; like every lock operation it runs
    /// on a Tokio runtime.
    pub async fn connect_lazy(self, url: &str) -> Result<RedisLockProvider, LockError> {
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

    fn validate(&self) -> Result<(), LockError> {
        self.keys.check(PROVIDER)?;
        if self.fencing {
            for (what, value) in self.keys.segments() {
                if value.contains(['{', '}']) {
                    return Err(invalid_setting(PROVIDER, what, value, FENCING_BRACES_RULE));
                }
            }
        }
        self.settings.check(PROVIDER)?;
        let operation_timeout = self.settings.operation_timeout();
        if let Some((replicas, timeout)) = self.replica_wait {
            if replicas == 0 {
                return Err(invalid_setting(
                    PROVIDER,
                    "number of replicas to wait for",
                    "0",
                    "it must be at least 1 (leave wait_for_replicas out to wait for none)",
                ));
            }
            if timeout.is_zero() || timeout >= operation_timeout {
                return Err(invalid_setting(
                    PROVIDER,
                    "replica wait timeout",
                    &format!("{timeout:?}"),
                    &format!(
                        "it must be greater than zero (Redis' WAIT 0 waits forever) and shorter \
                         than the operation timeout ({operation_timeout:?}), so an acquire can \
                         tell what happened"
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
        if self.tls_root_certificate.is_some() && !scheme.tls {
            return Err(unused_tls_root_certificate(
                PROVIDER,
                endpoint,
                "use rediss:// (or rediss+cluster://, rediss+sentinel://, or valkeys... for \
                 Valkey)",
            ));
        }
        Ok(())
    }

    fn finish<C: 'static>(self, connection: C, endpoint: String) -> RedisLockProvider<C> {
        let (key_prefix, env) = self.keys.into_parts();
        let operation_timeout = self.settings.operation_timeout();
        RedisLockProvider {
            inner: Arc::new(Inner {
                resends: may_resend(&connection),
                connection,
                scripts: Scripts::new(),
                key_prefix,
                env,
                holder: self.settings.into_holder(),
                operation_timeout,
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

pub(crate) const FENCING_BRACES_RULE: &str = "with fencing on it must not contain '{' or '}': \
     Redis Cluster reads them as a hash tag, and the fencing counter {<lock key>}:fencing must \
     hash to the lock key's own slot";

/// Whether ROLE was refused to this user (`NOPERM`) or is unknown to the server: the server
/// answered, so it is reachable and took the credentials.
fn role_withheld(error: &redis::RedisError) -> bool {
    error.code() == Some("NOPERM") || error.to_string().contains("unknown command")
}

/// Refuses a `redis://` server whose ROLE says it cannot hold locks: a replica refuses every
/// write (`READONLY`), and a sentinel holds no keys. Anything else (a master, or a role withheld)
/// is taken.
fn check_role(endpoint: &str, role: &redis::Value) -> Result<(), LockError> {
    let redis::Value::Array(fields) = role else {
        return Ok(());
    };
    let text = |at: usize| match fields.get(at) {
        Some(redis::Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(redis::Value::Int(number)) => number.to_string(),
        _ => String::new(),
    };
    let refusal = match text(0).as_str() {
        "slave" | "replica" => format!(
            "Redis at {endpoint} is a replica of {}:{}, and a replica takes no writes: give the \
             master's address, or a redis+sentinel:// URL to follow the master across failovers",
            text(1),
            text(2)
        ),
        "sentinel" => format!(
            "Redis at {endpoint} is a sentinel, which holds no keys: use a \
             redis+sentinel://<host>:26379/<master name> URL to reach the master it watches"
        ),
        _ => return Ok(()),
    };
    Err(LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        refusal,
    ))
}
