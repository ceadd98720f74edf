//! The etcd lock provider for shedlock-rs, wire-compatible with Java ShedLock's
//! `EtcdLockProvider`.
//!
//! A lock is one key, `shedlock:<env>:<name>` (env `default` unless set), attached to a lease
//! granted for this acquisition alone:
//!
//! - **acquire** grants a lease of `ceil(lock_at_most_for)` seconds, then runs one transaction:
//!   if the key does not exist, put it on the lease (ShedLock's own condition, so Java and Rust
//!   nodes exclude each other), else read who holds it;
//! - **release** and **extend** are transactions that compare the key's value, unique per
//!   acquisition, so they only ever act on this acquisition (ShedLock checks nothing). Extend
//!   moves the key onto a new lease of `ceil(new lock_at_most_for)`; release deletes the key, or
//!   while `lock_at_least_for` still runs, moves it onto a lease of the rest, rounded up;
//! - **time** is etcd's: leases expire on the server, so a node whose clock is wrong cannot
//!   break exclusion ([`TimeSource::Server`]). The one duration measured here, how much of
//!   `lock_at_least_for` is left at release, uses this process's monotonic clock from the moment
//!   the acquire was answered, which can only overestimate it;
//! - **fencing tokens** are the revision of the acquiring put: etcd raises its revision with
//!   every write, so tokens strictly increase per name (and across names).
//!
//! A key under `shedlock:<env>:` whose value is not ShedLock's (`ADDED:<time>@<holder>`, as
//! Java and this provider write it) is another application's, or was set by hand: an acquire
//! of its lock fails with an error naming the key and what it holds, and writes nothing (Java
//! ShedLock would skip that lock for as long as the key lives, for ever without a lease).
//! Names are at most [`MAX_NAME_CHARS`] characters.
//!
//! Each operation is its minimum of gRPC calls: an acquire is two (a lease, then the
//! transaction: a key can only be put on a lease that already exists), a release one
//! transaction, and a release within `lock_at_least_for` or an extend two (a lease of the new
//! TTL, then the owner-checked move; etcd cannot change a lease's TTL, and a keep-alive of the
//! current lease alone would not tell whether the key on it is still ours). Leases that a
//! transaction leaves without a key (after a release, a move, or a refused acquire) are kept, a
//! few per TTL, and the next operation needing that TTL restarts one with a keep-alive instead
//! of granting a new one: a lock cycle sends no revoke, and keyless leases never pile up (a
//! spare nobody reuses ends at its TTL, as every lease does).
//!
//! Leases count whole seconds, so every duration is rounded up to a second, and etcd raises a
//! lease below its minimum TTL (2 s with default settings) to that minimum and revokes expired
//! leases on a 500 ms tick: a lock is never shorter than asked, but the shortest locks may be
//! held up to about 2 s longer. The provider declares this as its
//! [`Capabilities::time_precision`]: the minimum TTL the server grants, measured by
//! [`EtcdLockProviderBuilder::connect`] (a 1 s lease, granted and revoked), at least 1 s, and
//! etcd's default of 2 s when the provider is built without that check.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_etcd::EtcdLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = EtcdLockProvider::builder()
//!     .env("production")
//!     .connect("http://127.0.0.1:2379")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("nightly-report", Duration::from_secs(600), Duration::ZERO)?;
//! let _ = executor.execute(&config, async { /* the task */ }).await?;
//! # Ok(()) }
//! ```
//!
//! # Building: `protoc`
//!
//! The `etcd-client` crate compiles etcd's protobuf definitions when it is built, which needs
//! the `protoc` compiler: on Debian or Ubuntu `apt-get install protobuf-compiler`, elsewhere
//! install it from <https://github.com/protocolbuffers/protobuf/releases> or point the `PROTOC`
//! environment variable at a `protoc` binary. Without it the build stops in `etcd-client`'s
//! build script with "Could not find `protoc`" (Cargo runs that script before this crate's
//! own build script, which repeats the advice where it gets the chance).
//!
//! # Seeing and freeing locks
//!
//! [`EtcdLockProvider`] implements [`LockAdmin`](shedlock_core::LockAdmin) for operators. A
//! lock is a key only while held (release deletes it, an ended lease takes it away), so a
//! listing shows held locks; a key whose lease has just ended and which etcd has not yet
//! deleted shows as free. The remaining time is the lease's TTL by etcd's clock, rounded up to
//! a whole second (etcd reports whole seconds); `held_until` is this process's clock plus
//! that. An acquisition id is `<create_revision>/<value>` (the revision is also the fencing
//! token), and force-unlock is one transaction deleting the key if both still match. Costs: a
//! page is one `Range` plus one `LeaseTimeToLive` per held lock on it (sent concurrently:
//! etcd has no call reading several leases), inspect two calls, force-unlock one.
//!
//! # Unknown outcomes
//!
//! Every operation is bounded by the operation timeout (5 s unless set), applied per request by
//! the client and to the operation as a whole. An acquire whose transaction got no answer may
//! or may not have taken the lock, so [`LockProvider::try_lock`] returns an error, never "not
//! acquired", and the executor does not run the task; the provider then revokes the lease it
//! granted for that attempt, in the background, which removes the key if the put did land. The
//! lease belongs to that attempt alone, so this can never free anyone else's lock.
//!
//! # TLS
//!
//! `https://` endpoints connect over TLS, with the `tls-rustls` feature (on by default): rustls
//! on ring, trusting Mozilla's roots, compiled in (`tls-rustls-native-roots`: the system's store
//! instead). A cluster whose certificates a private CA signed, as etcd's own TLS guides set up,
//! needs that CA: [`EtcdLockProviderBuilder::tls_ca_certificate`]. All endpoints use TLS or none
//! do. A build without TLS refuses `https://` with an error naming the feature.
//!
//! # Credentials
//!
//! A user and password may come in the URL (`http://user:password@host:2379`, percent-encoded)
//! or from [`EtcdLockProviderBuilder::credentials`]. The provider keeps only a redacted copy of
//! the URL for its `Debug` output, error messages and log lines.

mod admin;
mod credentials;
mod storage;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, ConnectOptions};
use shedlock_core::{
    Acquisition, Capabilities, ConfigurationError, ErrorKind, LockConfiguration, LockError,
    LockHandle, LockHolder, LockProvider, Operation, TimeSource,
};
use tokio::time::Instant;
use tracing::debug;

use storage::AcquireOutcome;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "etcd";

/// ShedLock's key prefix: keys are `shedlock:<env>:<name>`.
pub const DEFAULT_KEY_PREFIX: &str = "shedlock";

/// ShedLock's default environment segment of the key.
pub const DEFAULT_ENV: &str = "default";

/// The time precision declared until [`EtcdLockProviderBuilder::connect`] measures the
/// server's: etcd's default minimum lease TTL.
pub const DEFAULT_TIME_PRECISION: Duration = Duration::from_secs(2);

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::DEFAULT_OPERATION_TIMEOUT;

/// The longest lock name accepted, in characters. An acquire sends its key three times in one
/// request (the transaction's compare, put and read), which etcd refuses past its request limit
/// (1.5 MiB unless set): 4096 characters keep a key under 16 KiB whatever they are, far below
/// it. A longer name is refused with [`LockError::InvalidName`] before anything is sent, never
/// truncated.
pub const MAX_NAME_CHARS: usize = 4096;

/// User name and password for etcd's authentication, never printed.
#[derive(Clone)]
struct Credentials {
    user: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

/// Settings for an [`EtcdLockProvider`]; finish with [`connect`](Self::connect) or
/// [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct EtcdLockProviderBuilder {
    key_prefix: String,
    env: String,
    holder: String,
    operation_timeout: Duration,
    credentials: Option<Credentials>,
    #[cfg(feature = "tls")]
    tls_ca_certificate: Option<Vec<u8>>,
}

impl Default for EtcdLockProviderBuilder {
    fn default() -> Self {
        Self {
            key_prefix: DEFAULT_KEY_PREFIX.to_owned(),
            env: DEFAULT_ENV.to_owned(),
            holder: shedlock_core::default_holder(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            credentials: None,
            #[cfg(feature = "tls")]
            tls_ca_certificate: None,
        }
    }
}

impl EtcdLockProviderBuilder {
    /// The first segment of every key, `shedlock` as in ShedLock. It must not be empty or
    /// contain `:`, so that a key names exactly one prefix, env and lock.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// The environment segment, `default` as in ShedLock: services that share an etcd but not
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

    /// The longest one lock operation may take before it fails with [`LockError::Timeout`]; also
    /// the client's connect timeout and per-request timeout.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// Authenticates as `user` (instead of credentials in the URL). The password is never
    /// printed, logged or put into an error.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Trusts only this CA (PEM) for `https://` endpoints, instead of the roots the crate's TLS
    /// feature brings: for a cluster whose certificates a private CA signed, as etcd's own
    /// TLS setup guides do. [`connect`](Self::connect) refuses it with `http://` endpoints, which
    /// would not use it.
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use shedlock_etcd::EtcdLockProvider;
    ///
    /// let provider = EtcdLockProvider::builder()
    ///     .tls_ca_certificate(std::fs::read("/etc/etcd/ca.pem")?)
    ///     .connect("https://etcd-0.internal:2379,https://etcd-1.internal:2379")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_ca_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_ca_certificate = Some(pem.into());
        self
    }

    /// Connects to `url` (`http://[user:password@]host:2379`, `https://...` for TLS, or
    /// `host:2379` for plain HTTP; several endpoints separated by commas, all over TLS or none;
    /// any other scheme is refused before anything connects)
    /// and checks, within the operation timeout, that etcd answers a read of the lock keys;
    /// then measures the shortest lease etcd grants, the provider's declared time
    /// precision. Fails with a [`LockError::Backend`] naming the redacted URL otherwise.
    pub async fn connect(self, url: &str) -> Result<EtcdLockProvider, LockError> {
        let mut provider = self.connect_lazy(url).await?;
        let inner = &provider.inner;
        let probe_key = storage::lock_key(&inner.key_prefix, &inner.env, "");
        let mut client = inner.client.clone();
        inner
            .call(
                Operation::Connect,
                "",
                storage::probe(&mut client, &probe_key),
            )
            .await?;
        let minimum = inner
            .call(
                Operation::Connect,
                "",
                storage::minimum_lease_secs(&mut client),
            )
            .await?;
        if let Some(inner) = Arc::get_mut(&mut provider.inner) {
            inner.time_precision = Duration::from_secs(minimum.unsigned_abs());
        }
        Ok(provider)
    }

    /// Like [`connect`](Self::connect) without the check: an application can start while etcd
    /// is down, and each lock operation fails (bounded by the operation timeout) until etcd
    /// answers. With credentials, etcd is asked for a token here, so it must answer.
    pub async fn connect_lazy(self, url: &str) -> Result<EtcdLockProvider, LockError> {
        self.validate()?;
        let endpoint = shedlock_core::redact_url(url);
        let mut credentials = self.credentials.clone();
        let mut endpoints = Vec::new();
        for part in url
            .split(',')
            .map(str::trim)
            .filter(|part| !part.is_empty())
        {
            check_endpoint_scheme(part)?;
            let (bare, from_url) = credentials::split_credentials(part);
            if let Some((user, password)) = from_url {
                credentials.get_or_insert(Credentials { user, password });
            }
            endpoints.push(bare);
        }
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.operation_timeout)
            .with_timeout(self.operation_timeout);
        if self.uses_tls(&endpoints, &endpoint)? {
            options = self.with_tls(options);
        }
        if let Some(credentials) = credentials {
            options = options.with_user(credentials.user, credentials.password);
        }
        let timeout = self.operation_timeout;
        let client = tokio::time::timeout(timeout, Client::connect(endpoints, Some(options)))
            .await
            .map_err(|_| {
                // Connecting (and, with credentials, authenticating) got no answer in time.
                LockError::backend_message(
                    ErrorKind::Unreachable,
                    PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "etcd at {endpoint} did not answer within {timeout:?}: is it running and reachable?"
                    ),
                )
            })?
            .map_err(|error| {
                LockError::backend(
                    kind_of(Operation::Connect, &error),
                    PROVIDER,
                    Operation::Connect,
                    "",
                    format!("could not connect to etcd at {endpoint}"),
                    error,
                )
            })?;
        Ok(self.finish(client, endpoint))
    }

    /// Whether `endpoints` (checked by [`check_endpoint_scheme`]) are reached over TLS: all
    /// `https://`, or none. Refuses a mix, TLS without this crate's TLS feature, and a CA
    /// certificate without TLS, where it would be silently ignored.
    fn uses_tls(&self, endpoints: &[String], redacted: &str) -> Result<bool, LockError> {
        let is_https = |endpoint: &String| {
            endpoint
                .get(..HTTPS.len())
                .is_some_and(|scheme| scheme.eq_ignore_ascii_case(HTTPS))
        };
        let tls = endpoints.iter().any(is_https);
        let rule = if tls && !endpoints.iter().all(is_https) {
            "some endpoints are https:// and some are not: a client reaches all of them over TLS, \
             or none"
                .to_owned()
        } else if tls && !cfg!(feature = "tls") {
            "https:// endpoints need TLS, which this build leaves out: enable the \"tls-rustls\" \
             feature of shedlock-etcd (on by default), or the \"rustls\" feature of shedlock"
                .to_owned()
        } else if !tls && self.has_tls_ca_certificate() {
            format!(
                "a TLS CA certificate was set but {redacted} does not use TLS: use https:// \
                 endpoints, or leave the certificate out"
            )
        } else {
            return Ok(tls);
        };
        Err(LockError::backend_message(
            ErrorKind::Configuration,
            PROVIDER,
            Operation::Connect,
            "",
            rule,
        ))
    }

    #[cfg(feature = "tls")]
    fn has_tls_ca_certificate(&self) -> bool {
        self.tls_ca_certificate.is_some()
    }

    #[cfg(not(feature = "tls"))]
    fn has_tls_ca_certificate(&self) -> bool {
        false
    }

    /// `options` with TLS: the CA given to [`tls_ca_certificate`](Self::tls_ca_certificate),
    /// else the roots of this crate's TLS feature. (etcd-client's own default for an
    /// `https://` endpoint trusts no root at all.)
    #[cfg(feature = "tls")]
    fn with_tls(&self, options: ConnectOptions) -> ConnectOptions {
        use etcd_client::{Certificate, TlsOptions};
        let tls = match &self.tls_ca_certificate {
            Some(pem) => TlsOptions::new().ca_certificate(Certificate::from_pem(pem)),
            None => TlsOptions::new().with_enabled_roots(),
        };
        options.with_tls(tls)
    }

    /// Never called: [`uses_tls`](Self::uses_tls) refuses TLS in a build without it.
    #[cfg(not(feature = "tls"))]
    fn with_tls(&self, options: ConnectOptions) -> ConnectOptions {
        options
    }

    /// Uses a client the application already has (credentials and timeouts are the client's;
    /// the operation timeout still bounds every lock operation).
    pub fn build(self, client: Client) -> Result<EtcdLockProvider, LockError> {
        self.validate()?;
        Ok(self.finish(client, "a client given by the application".to_owned()))
    }

    fn validate(&self) -> Result<(), LockError> {
        for (what, value) in [("key prefix", &self.key_prefix), ("env", &self.env)] {
            let rule = if value.is_empty() {
                "it must not be empty"
            } else if value.contains(':') {
                "it must not contain ':', the separator of the key layout <prefix>:<env>:<name>; \
                 otherwise two different env/name pairs could map to one key"
            } else {
                continue;
            };
            return Err(invalid_setting(what, value, rule));
        }
        if self.operation_timeout.is_zero() {
            return Err(invalid_setting(
                "operation timeout",
                "0s",
                "it must be greater than zero",
            ));
        }
        Ok(())
    }

    fn finish(self, client: Client, endpoint: String) -> EtcdLockProvider {
        EtcdLockProvider {
            inner: Arc::new(Inner {
                client,
                key_prefix: self.key_prefix,
                env: self.env,
                holder: self.holder,
                operation_timeout: self.operation_timeout,
                time_precision: DEFAULT_TIME_PRECISION,
                endpoint,
                spare_leases: Mutex::new(HashMap::new()),
            }),
        }
    }
}

/// The scheme of an endpoint over TLS, as `etcd-client` reads it.
const HTTPS: &str = "https://";

/// Refuses an endpoint meant for another backend before the client reads it, naming its scheme
/// (never the rest of the URL, which may hold a password). An endpoint without a scheme
/// (`host:2379`) is plain HTTP, as `etcd-client` reads it.
fn check_endpoint_scheme(endpoint: &str) -> Result<(), LockError> {
    let Some((scheme, _)) = endpoint.split_once("://") else {
        return Ok(());
    };
    let rule = if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
        return Ok(());
    } else {
        let scheme = if scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            format!("{scheme:?}")
        } else {
            "not a URL scheme".to_owned()
        };
        format!(
            "the endpoint's scheme is {scheme}, which is not etcd's: the etcd provider accepts \
             http://host:port, https://host:port or host:port, several separated by commas"
        )
    };
    Err(LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        rule,
    ))
}

fn invalid_setting(what: &str, value: &str, rule: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {what} {value:?}: {rule}"),
    )
}

/// Locks in etcd, one key and one lease per acquisition; see the crate docs for the layout and
/// the guarantees. Cheap to clone (the client is shared).
#[derive(Clone)]
pub struct EtcdLockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    key_prefix: String,
    env: String,
    holder: String,
    operation_timeout: Duration,
    /// The shortest lease the server grants (at least 1 s): the declared time precision.
    time_precision: Duration,
    /// Where the client goes, with any password masked.
    endpoint: String,
    /// Leases of ours that carry no key, by granted TTL in seconds, for the next operation that
    /// needs a lease of that TTL: see [`Inner::recycle`].
    spare_leases: Mutex<HashMap<i64, Vec<Lease>>>,
}

/// At most this many TTLs keep spare leases, and at most [`SPARES_PER_TTL`] each (enough for
/// a few locks of one TTL held at once, each extended now and then); a spare past them is
/// revoked instead, so keyless leases never pile up.
const MAX_SPARE_TTLS: usize = 32;
const SPARES_PER_TTL: usize = 4;

/// A spare lease is only reused while this much of its life is surely left, so that the
/// keep-alive reaches etcd before the lease ends.
const SPARE_MARGIN: Duration = Duration::from_secs(1);

/// A lease this provider granted.
#[derive(Debug, Clone, Copy)]
struct Lease {
    id: i64,
    /// The TTL asked for, in seconds: what a keep-alive restarts it at (etcd may have raised
    /// it to its minimum, the same for every lease asked with this TTL).
    ttl: i64,
    /// Before this the lease has surely not ended: its TTL counted from when the grant or
    /// keep-alive was sent, which is no later than when etcd applied it.
    alive_until: Instant,
}

impl Lease {
    fn new(id: i64, ttl: i64, sent: Instant) -> Self {
        Self {
            id,
            ttl,
            alive_until: sent + Duration::from_secs(ttl.unsigned_abs()),
        }
    }
}

impl fmt::Debug for EtcdLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("EtcdLockProvider")
            .field("endpoint", &inner.endpoint)
            .field("key_prefix", &inner.key_prefix)
            .field("env", &inner.env)
            .field("holder", &inner.holder)
            .field("operation_timeout", &inner.operation_timeout)
            .field("time_precision", &inner.time_precision)
            .finish()
    }
}

impl EtcdLockProvider {
    /// Settings with ShedLock's defaults: prefix `shedlock`, env `default`, the host name as
    /// holder, a 5 s operation timeout, no credentials.
    pub fn builder() -> EtcdLockProviderBuilder {
        EtcdLockProviderBuilder::default()
    }

    /// Connects to `url` with the default settings; see [`EtcdLockProviderBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    /// The etcd key of lock `name`, `<prefix>:<env>:<name>`, for operators who want to inspect
    /// or free a lock by hand. Fails like [`LockProvider::try_lock`] for a name this provider
    /// refuses (empty, or longer than [`MAX_NAME_CHARS`]).
    pub fn lock_key(&self, name: &str) -> Result<String, LockError> {
        if name.is_empty() {
            return Err(ConfigurationError::EmptyName.into());
        }
        self.capabilities().check_name_length(PROVIDER, name)?;
        Ok(storage::lock_key(
            &self.inner.key_prefix,
            &self.inner.env,
            name,
        ))
    }
}

impl Inner {
    /// Runs etcd requests bounded by the operation timeout, turning their failure into the
    /// [`LockError`] the caller reports.
    async fn call<T>(
        &self,
        operation: Operation,
        name: &str,
        call: impl Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        let error = match tokio::time::timeout(self.operation_timeout, call).await {
            Ok(Ok(value)) => return Ok(value),
            Err(_) => {
                return Err(LockError::Timeout {
                    provider: PROVIDER,
                    operation,
                    name: name.to_owned(),
                    after: self.operation_timeout,
                });
            }
            Ok(Err(error)) => error,
        };
        let unreachable = match &error {
            etcd_client::Error::GRpcStatus(status) => match status.code() {
                tonic::Code::DeadlineExceeded => {
                    return Err(LockError::Timeout {
                        provider: PROVIDER,
                        operation,
                        name: name.to_owned(),
                        after: Duration::from_millis(started.elapsed().as_millis() as u64),
                    });
                }
                tonic::Code::Unavailable => true,
                _ => false,
            },
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => true,
            _ => false,
        };
        let consequence = match operation {
            Operation::Connect => "is it running and reachable?",
            Operation::Acquire => "whether the lock was taken is unknown, so the task must not run",
            Operation::Release => "the lock stays held until lock_at_most_for at the latest",
            Operation::Extend => "the lock keeps its previous expiry",
            Operation::List | Operation::Inspect => "nothing was changed",
            Operation::ForceUnlock => {
                "whether the lock was freed is unknown: inspect it again before retrying"
            }
            _ => "",
        };
        let cause = if unreachable {
            "is unreachable"
        } else {
            "failed"
        };
        Err(LockError::backend(
            kind_of(operation, &error),
            PROVIDER,
            operation,
            name,
            format!("etcd at {} {cause}; {consequence}", self.endpoint),
            error,
        ))
    }

    /// A lease of `ttl` seconds for a key to be put on: a spare one restarted by one keep-alive,
    /// else a new grant. Either is one request.
    async fn lease(&self, operation: Operation, name: &str, ttl: i64) -> Result<Lease, LockError> {
        let mut client = self.client.clone();
        let spare = self.spare_leases.lock().map_or(None, |mut spares| {
            // The freshest is last; any before it that are too old are left to end.
            let spare = spares.get_mut(&ttl)?.pop();
            spare.filter(|spare| spare.alive_until > Instant::now() + SPARE_MARGIN)
        });
        if let Some(spare) = spare {
            let sent = Instant::now();
            // An error leaves a keyless lease that ends at its TTL; nothing to clean up.
            if self
                .call(
                    operation,
                    name,
                    storage::refresh_lease(&mut client, spare.id),
                )
                .await?
            {
                return Ok(Lease::new(spare.id, ttl, sent));
            }
        }
        let sent = Instant::now();
        let id = self
            .call(operation, name, storage::grant_lease(&mut client, ttl))
            .await?;
        Ok(Lease::new(id, ttl, sent))
    }

    /// Keeps leases that surely carry no key (a transaction just deleted our key, moved it off
    /// them, or never put it) for the next acquire, extend or release of the same TTL, instead
    /// of revoking them: a lock cycle then costs no revoke, and keyless leases do not pile up,
    /// one spare per TTL at most. A lease too close to its end is left to end by itself (etcd
    /// expires it); one that finds its TTL's place taken is revoked in the background.
    fn recycle(self: &Arc<Self>, leases: Vec<Lease>) {
        let mut surplus = Vec::new();
        match self.spare_leases.lock() {
            Ok(mut spares) => {
                let soon = Instant::now() + SPARE_MARGIN;
                spares.retain(|_, kept| {
                    kept.retain(|spare| spare.alive_until > soon);
                    !kept.is_empty()
                });
                for lease in leases.into_iter().filter(|lease| lease.alive_until > soon) {
                    if !spares.contains_key(&lease.ttl) && spares.len() >= MAX_SPARE_TTLS {
                        surplus.push(lease);
                        continue;
                    }
                    let kept = spares.entry(lease.ttl).or_default();
                    kept.push(lease);
                    kept.sort_by_key(|spare| spare.alive_until);
                    if kept.len() > SPARES_PER_TTL {
                        surplus.push(kept.remove(0));
                    }
                }
            }
            Err(_) => surplus = leases,
        }
        self.revoke_in_background(surplus, "a spare lease of that TTL is kept already");
    }

    /// Revokes leases in the background: spares beyond what is kept, leases of an acquisition
    /// found no longer ours (what is on them now is not known), or leases that may carry the key
    /// of an attempt whose answer never came. Each lease is
    /// this provider's own, so revoking it can only delete our own key. A revoke that fails
    /// changes nothing: the lease ends at its TTL anyway.
    fn revoke_in_background(self: &Arc<Self>, leases: Vec<Lease>, why: &'static str) {
        if leases.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        runtime.spawn(async move {
            for Lease { id: lease, .. } in leases {
                let mut client = inner.client.clone();
                let outcome = tokio::time::timeout(
                    inner.operation_timeout,
                    storage::revoke_lease(&mut client, lease),
                )
                .await;
                match outcome {
                    Ok(Ok(())) => debug!(lease, why, "revoked lease"),
                    Ok(Err(error)) => debug!(
                        lease, why, endpoint = %inner.endpoint, %error,
                        "could not revoke lease; it ends at its TTL"
                    ),
                    Err(_) => debug!(
                        lease, why, endpoint = %inner.endpoint,
                        "revoking lease timed out; it ends at its TTL"
                    ),
                }
            }
        });
    }
}

/// What kind of failure an etcd client error is, for an error met during `operation`: the one
/// place this provider reads the client's errors and etcd's gRPC status codes (etcd's own
/// messages are in `api/v3rpc/rpctypes`).
///
/// Only a connection that never opened (the gRPC stack's connect error: TCP, DNS or the TLS
/// handshake) is unreachable once a lock operation has begun; any other failure of a request
/// already sent leaves its outcome unknown. While connecting, every failure that is not the
/// credentials, the settings or a limit means the server could not be reached.
fn kind_of(operation: Operation, error: &etcd_client::Error) -> ErrorKind {
    use etcd_client::Error;
    let kind = match error {
        // Refused by the client before anything was sent: the endpoints or their TLS settings
        // (etcd-client makes a transport error only while building its channel, before it
        // connects).
        Error::InvalidArgs(_)
        | Error::InvalidUri(_)
        | Error::EndpointError(_)
        | Error::EndpointsNotManaged
        | Error::TransportError(_) => ErrorKind::Configuration,
        Error::IoError(io) => ErrorKind::of_io(io.kind(), operation),
        Error::GRpcStatus(status) => {
            let message = status.message();
            match status.code() {
                // "etcdserver: invalid auth token", "etcdserver: permission denied".
                tonic::Code::Unauthenticated | tonic::Code::PermissionDenied => {
                    ErrorKind::CredentialsRefused
                }
                tonic::Code::InvalidArgument if message.contains("authentication failed") => {
                    ErrorKind::CredentialsRefused
                }
                // Credentials given to a cluster that has authentication off.
                tonic::Code::FailedPrecondition
                    if message.contains("authentication is not enabled") =>
                {
                    ErrorKind::Configuration
                }
                // "etcdserver: request is too large", "too many operations in txn request".
                tonic::Code::InvalidArgument
                    if message.contains("too large") || message.contains("too many operations") =>
                {
                    ErrorKind::Limit
                }
                // "etcdserver: too many requests" is etcd shedding load for a while, which
                // passes; anything else exhausted is a quota ("mvcc: database space exceeded")
                // or a size limit.
                tonic::Code::ResourceExhausted if message.contains("too many requests") => {
                    ErrorKind::OutcomeUnknown
                }
                tonic::Code::ResourceExhausted => ErrorKind::Limit,
                tonic::Code::Unimplemented => ErrorKind::Configuration,
                // The gRPC stack says Unavailable both for a connection it could not open
                // (nothing sent) and for a server that dropped the request or has no leader.
                tonic::Code::Unavailable if connect_failed(status) => ErrorKind::Unreachable,
                _ => ErrorKind::OutcomeUnknown,
            }
        }
        _ => ErrorKind::OutcomeUnknown,
    };
    kind.during(operation)
}

/// Whether `status` is the gRPC stack's failure to open a connection (TCP, DNS or the TLS
/// handshake), found as a [`tonic::ConnectError`] in its sources: the request was never sent.
fn connect_failed(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        if cause.is::<tonic::ConnectError>() {
            return true;
        }
        source = cause.source();
    }
    false
}

/// A duration as whole seconds for a lease, refusing what etcd cannot store.
fn lease_secs(operation: Operation, name: &str, duration: Duration) -> Result<i64, LockError> {
    storage::lease_secs(duration).ok_or_else(|| {
        LockError::invalid_request(
            PROVIDER,
            operation,
            name,
            format!(
                "{duration:?} is longer than an etcd lease can be (at most {} s)",
                storage::MAX_LEASE_SECS
            ),
        )
    })
}

#[async_trait]
impl LockProvider for EtcdLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        let key = self.lock_key(name)?;
        let inner = &self.inner;
        let ttl = lease_secs(Operation::Acquire, name, config.lock_at_most_for())?;
        let value = storage::lock_value(&inner.holder);
        let mut client = inner.client.clone();
        let lease = inner.lease(Operation::Acquire, name, ttl).await?;
        let outcome = inner
            .call(
                Operation::Acquire,
                name,
                storage::acquire(&mut client, &key, &value, lease.id),
            )
            .await;
        let acquired_at = Instant::now();
        match outcome {
            Ok(AcquireOutcome::Acquired { revision }) => {
                Ok(Acquisition::Acquired(Box::new(EtcdLockHandle {
                    inner: self.inner.clone(),
                    name: name.to_owned(),
                    key,
                    value,
                    fencing_token: u64::try_from(revision).ok(),
                    acquired_at,
                    lock_at_least_for: config.lock_at_least_for(),
                    state: tokio::sync::Mutex::new(HandleState {
                        finished: false,
                        leases: vec![lease],
                    }),
                })))
            }
            Ok(AcquireOutcome::Held { value: Some(value) }) if !storage::is_lock_value(&value) => {
                inner.recycle(vec![lease]);
                Err(LockError::backend_message(
                    ErrorKind::CorruptData,
                    PROVIDER,
                    Operation::Acquire,
                    name,
                    format!(
                        "the key {key:?} at {} holds {}, which is not a ShedLock lock value \
                         (ADDED:<ISO-8601 time>@<holder>): it is another application's key, \
                         or one set by hand; nothing was written and the lock was not taken. \
                         It blocks this lock while it exists (for ever without a lease): \
                         delete it, or give this provider an env of its own",
                        inner.endpoint,
                        storage::quoted(&value)
                    ),
                ))
            }
            Ok(AcquireOutcome::Held { value }) => {
                inner.recycle(vec![lease]);
                Ok(Acquisition::NotAcquired(Some(LockHolder {
                    locked_by: value.as_deref().and_then(storage::holder_of),
                    held_until: None,
                })))
            }
            Err(error) => {
                inner.revoke_in_background(vec![lease], "acquire outcome unknown");
                Err(error)
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
            .with_max_name_chars(MAX_NAME_CHARS)
            .with_time_precision(self.inner.time_precision)
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// One acquisition of an etcd lock: the key, the unique value written to it, and the leases
/// it may be attached to.
struct EtcdLockHandle {
    inner: Arc<Inner>,
    name: String,
    key: String,
    value: String,
    fencing_token: Option<u64>,
    /// When the acquire was answered (monotonic): the rest of lock_at_least_for is counted from
    /// here, which can only overestimate it, since etcd applied the put before answering.
    acquired_at: Instant,
    lock_at_least_for: Duration,
    /// Serializes this handle's release and extend.
    state: tokio::sync::Mutex<HandleState>,
}

struct HandleState {
    /// Released, or found lost: this acquisition is over and nothing more is sent.
    finished: bool,
    /// The leases our key may be attached to: one, unless a move to a new lease got no answer,
    /// in which case the key is on one of them and the others are freed once it moves again.
    leases: Vec<Lease>,
}

impl fmt::Debug for EtcdLockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockHandle")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("value", &self.value)
            .field("fencing_token", &self.fencing_token)
            .finish()
    }
}

impl EtcdLockHandle {
    /// Moves our key onto a new lease of `ttl` seconds if it is still ours. `Ok(true)`: moved,
    /// and the old leases are kept as spares. `Ok(false)`: not ours; nothing changed.
    async fn move_to_new_lease(
        &self,
        operation: Operation,
        state: &mut HandleState,
        ttl: i64,
    ) -> Result<bool, LockError> {
        let inner = &self.inner;
        let mut client = inner.client.clone();
        let lease = inner.lease(operation, &self.name, ttl).await?;
        let moved = inner
            .call(
                operation,
                &self.name,
                storage::move_to_lease(&mut client, &self.key, &self.value, lease.id),
            )
            .await;
        match moved {
            Ok(true) => {
                let old = std::mem::replace(&mut state.leases, vec![lease]);
                inner.recycle(old);
                Ok(true)
            }
            Ok(false) => {
                // Whatever is on our old leases now is not ours to reuse (a key put there by
                // hand, say): end them. The new one never got the key.
                let old = std::mem::take(&mut state.leases);
                inner.revoke_in_background(old, "lock no longer ours");
                inner.recycle(vec![lease]);
                state.finished = true;
                Ok(false)
            }
            Err(error) => {
                // The key may now be on the new lease or still on the old ones: keep them all.
                state.leases.push(lease);
                Err(error)
            }
        }
    }
}

#[async_trait]
impl LockHandle for EtcdLockHandle {
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
        let remaining = self
            .lock_at_least_for
            .saturating_sub(self.acquired_at.elapsed());
        if !remaining.is_zero() {
            let ttl = lease_secs(Operation::Release, &self.name, remaining)?;
            let released = self
                .move_to_new_lease(Operation::Release, &mut state, ttl)
                .await?;
            state.finished = true;
            return Ok(released);
        }
        let inner = &self.inner;
        let mut client = inner.client.clone();
        let deleted = inner
            .call(
                Operation::Release,
                &self.name,
                storage::delete_if_ours(&mut client, &self.key, &self.value),
            )
            .await?;
        let leases = std::mem::take(&mut state.leases);
        if deleted {
            inner.recycle(leases);
        } else {
            inner.revoke_in_background(leases, "lock no longer ours");
        }
        state.finished = true;
        Ok(deleted)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if lock_at_most_for.is_zero() {
            return Err(ConfigurationError::ZeroLockAtMostFor {
                name: self.name.clone(),
            }
            .into());
        }
        let ttl = lease_secs(Operation::Extend, &self.name, lock_at_most_for)?;
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
        self.move_to_new_lease(Operation::Extend, &mut state, ttl)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn client_errors_are_classified_by_what_reached_etcd() {
        use tonic::Code;
        let refused = || std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        // The gRPC stack's own error for a connection it could not open: nothing was sent.
        let not_connected = etcd_client::Error::GRpcStatus(tonic::Status::from_error(Box::new(
            tonic::ConnectError(Box::new(refused())),
        )));
        let cases = [
            (not_connected, ErrorKind::Unreachable),
            (
                etcd_client::Error::IoError(refused()),
                ErrorKind::Unreachable,
            ),
            (
                etcd_client::Error::IoError(std::io::ErrorKind::ConnectionReset.into()),
                ErrorKind::OutcomeUnknown,
            ),
            // etcd's own Unavailable answers come after the request was sent.
            (
                status(Code::Unavailable, "etcdserver: leader changed"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(Code::Unavailable, "etcdserver: request timed out"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(Code::Cancelled, "Timeout expired"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(
                    Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(Code::Unauthenticated, "etcdserver: invalid auth token"),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(
                    Code::FailedPrecondition,
                    "etcdserver: authentication is not enabled",
                ),
                ErrorKind::Configuration,
            ),
            (
                status(
                    Code::ResourceExhausted,
                    "etcdserver: mvcc: database space exceeded",
                ),
                ErrorKind::Limit,
            ),
            (
                status(Code::ResourceExhausted, "etcdserver: too many requests"),
                ErrorKind::OutcomeUnknown,
            ),
            (
                status(Code::InvalidArgument, "etcdserver: request is too large"),
                ErrorKind::Limit,
            ),
            (
                etcd_client::Error::InvalidArgs("empty endpoints".to_owned()),
                ErrorKind::Configuration,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(kind_of(Operation::Acquire, &error), kind, "{error}");
        }
        // While connecting, what is not the credentials, the settings or a limit is an
        // unreachable server.
        for (error, kind) in [
            (
                status(Code::Unavailable, "etcdserver: no leader"),
                ErrorKind::Unreachable,
            ),
            (
                status(Code::PermissionDenied, "etcdserver: permission denied"),
                ErrorKind::CredentialsRefused,
            ),
            (
                status(
                    Code::FailedPrecondition,
                    "etcdserver: authentication is not enabled",
                ),
                ErrorKind::Configuration,
            ),
        ] {
            assert_eq!(kind_of(Operation::Connect, &error), kind, "{error}");
        }
    }
}
