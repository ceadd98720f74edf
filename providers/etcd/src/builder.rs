//! [`EtcdLockProviderBuilder`]: the provider's settings, checked and turned into a connected
//! client.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use shedlock_core::raw::{KeyNamespace, ProviderSettings, unused_tls_root_certificate};
use shedlock_core::{ErrorKind, LockError, Operation};

use crate::credentials::Credentials;
use crate::failure::kind_of;
use crate::provider::{EtcdLockProvider, Inner};
use crate::url::{HTTPS, split_endpoints};
use crate::{DEFAULT_ENV, DEFAULT_KEY_PREFIX, DEFAULT_TIME_PRECISION, PROVIDER, storage};

#[cfg(doc)]
use crate::url::check_endpoint_scheme;

/// Settings for an [`EtcdLockProvider`]; finish with [`connect`](Self::connect) or
/// [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct EtcdLockProviderBuilder {
    keys: KeyNamespace,
    settings: ProviderSettings,
    credentials: Option<Credentials>,
    /// Set only through [`tls_root_certificate`](Self::tls_root_certificate), which a build
    /// without TLS leaves out.
    tls_root_certificate: Option<Vec<u8>>,
}

impl Default for EtcdLockProviderBuilder {
    fn default() -> Self {
        Self {
            keys: KeyNamespace::new(DEFAULT_KEY_PREFIX, DEFAULT_ENV),
            settings: ProviderSettings::default(),
            credentials: None,
            tls_root_certificate: None,
        }
    }
}

impl EtcdLockProviderBuilder {
    /// The first segment of every key, `shedlock` as in ShedLock; see
    /// [`KeyNamespace::with_prefix`].
    pub fn key_prefix(self, prefix: impl Into<String>) -> Self {
        Self {
            keys: self.keys.with_prefix(prefix),
            ..self
        }
    }

    /// The environment segment, `default` as in ShedLock; see [`KeyNamespace::with_env`].
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

    /// The longest one lock operation may take, also the client's connect timeout and
    /// per-request timeout; see [`ProviderSettings::with_operation_timeout`].
    pub fn operation_timeout(self, timeout: Duration) -> Self {
        Self {
            settings: self.settings.with_operation_timeout(timeout),
            ..self
        }
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
    ///     .tls_root_certificate(std::fs::read("/etc/etcd/ca.pem")?)
    ///     .connect("https://etcd-0.internal:2379,https://etcd-1.internal:2379")
    ///     .await?;
    /// # let _ = provider; Ok(()) }
    /// ```
    #[cfg(feature = "tls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_certificate = Some(pem.into());
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
        let (endpoints, from_url) = split_endpoints(url)?;
        let credentials = self.credentials.clone().or(from_url);
        let mut options = ConnectOptions::new()
            .with_connect_timeout(self.settings.operation_timeout())
            .with_timeout(self.settings.operation_timeout());
        if self.uses_tls(&endpoints, &endpoint)? {
            options = self.with_tls(options);
        }
        if let Some(credentials) = credentials {
            options = options.with_user(credentials.user, credentials.password);
        }
        let timeout = self.settings.operation_timeout();
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
    /// `https://`, or none. Refuses a mix, TLS without this crate's TLS feature, and a root
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
        } else if tls && !cfg!(feature = "tls") {
            "https:// endpoints need TLS, which this build leaves out: enable the \"tls-rustls\" \
             feature of shedlock-etcd (on by default), or the \"rustls\" feature of shedlock"
        } else if !tls && self.tls_root_certificate.is_some() {
            return Err(unused_tls_root_certificate(
                PROVIDER,
                redacted,
                "use https:// endpoints",
            ));
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

    /// `options` with TLS: the CA given to [`tls_root_certificate`](Self::tls_root_certificate),
    /// else the roots of this crate's TLS feature. (etcd-client's own default for an
    /// `https://` endpoint trusts no root at all.)
    #[cfg(feature = "tls")]
    fn with_tls(&self, options: ConnectOptions) -> ConnectOptions {
        use etcd_client::{Certificate, TlsOptions};
        let tls = match &self.tls_root_certificate {
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
        self.keys.check(PROVIDER)?;
        self.settings.check(PROVIDER)
    }

    fn finish(self, client: Client, endpoint: String) -> EtcdLockProvider {
        let (key_prefix, env) = self.keys.into_parts();
        let operation_timeout = self.settings.operation_timeout();
        EtcdLockProvider {
            inner: Arc::new(Inner {
                client,
                key_prefix,
                env,
                holder: self.settings.into_holder(),
                operation_timeout,
                time_precision: DEFAULT_TIME_PRECISION,
                endpoint,
                spare_leases: Mutex::new(HashMap::new()),
                spare_keeper_started: AtomicBool::new(false),
            }),
        }
    }
}
