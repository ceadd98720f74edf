//! The provider's settings ([`ZookeeperLockProviderBuilder`]), checked when the provider is
//! built, and the connect that opens its first session.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[cfg(doc)]
use shedlock_core::Capabilities;
use shedlock_core::raw::{
    DEFAULT_NAME_CACHE_CAPACITY, RecentNames, check_positive_duration, invalid_setting,
};
use shedlock_core::{ErrorKind, LockError, Operation};
use tokio::time::Instant;

use crate::credentials::{self, ConnectString, DigestCredentials};
use crate::paths;
use crate::provider::ZookeeperLockProvider;
use crate::session::{Inner, SessionSlot};
#[cfg(feature = "tls-rustls")]
use crate::tls;
use crate::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_CLOCK_UNCERTAINTY, DEFAULT_OPERATION_TIMEOUT,
    DEFAULT_ROOT, DEFAULT_SESSION_TIMEOUT, PROVIDER,
};

/// Settings for a [`ZookeeperLockProvider`]; finish with [`connect`](Self::connect) or
/// [`connect_lazy`](Self::connect_lazy).
#[derive(Debug, Clone)]
pub struct ZookeeperLockProviderBuilder {
    root: String,
    operation_timeout: Duration,
    connect_timeout: Duration,
    session_timeout: Duration,
    max_clock_uncertainty: Duration,
    credentials: Option<DigestCredentials>,
    #[cfg(feature = "tls-rustls")]
    tls: tls::TlsPem,
}

impl Default for ZookeeperLockProviderBuilder {
    fn default() -> Self {
        Self {
            root: DEFAULT_ROOT.to_owned(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_clock_uncertainty: DEFAULT_MAX_CLOCK_UNCERTAINTY,
            credentials: None,
            #[cfg(feature = "tls-rustls")]
            tls: tls::TlsPem::default(),
        }
    }
}

impl ZookeeperLockProviderBuilder {
    /// The node under which lock nodes live, `/shedlock` as in ShedLock: an absolute path,
    /// created with its parents when missing. Services that share a ZooKeeper but not their
    /// locks use different roots.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// The longest one lock operation (all its requests) may take before it fails with
    /// [`LockError::Timeout`].
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The longest opening a session may take, at connect and whenever an expired session is
    /// replaced.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The session timeout asked of ZooKeeper: how long the client may be cut off before the
    /// server ends its session.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How uncertain the provider lets its knowledge of the server's clock become before it
    /// learns it again with a write to the root. Twice this, plus 1 ms, is the declared
    /// [`Capabilities::time_precision`]: how late a lock may be seen to expire.
    pub fn max_clock_uncertainty(mut self, limit: Duration) -> Self {
        self.max_clock_uncertainty = limit;
        self
    }

    /// Authenticates with ZooKeeper's `digest` scheme (instead of credentials in the connect
    /// string). The password is never printed, logged or put into an error.
    pub fn digest_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(DigestCredentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Trusts this CA (PEM; several certificates, and revocation lists, may follow one another)
    /// for the servers of a `zk+tls://` connect string, which needs it: ZooKeeper over TLS
    /// trusts no public roots. With a plain connect string it is an error rather than ignored.
    #[cfg(feature = "tls-rustls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_certificate = Some(pem.into());
        self
    }

    /// Presents this certificate (PEM chain, the client's first) and private key (PEM: PKCS#8,
    /// PKCS#1 or SEC1) to the servers of a `zk+tls://` connect string, which ask for one unless
    /// configured with `ssl.clientAuth=none`. The key is never printed, logged or put into an
    /// error. With a plain connect string it is an error rather than ignored.
    #[cfg(feature = "tls-rustls")]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_identity = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// Connects to `connect_string` (`[user:password@]host:2181[,host:2181...][/chroot]`, an
    /// optional `zk://` or `zookeeper://` in front, or `zk+tls://` or `zookeeper+tls://` for
    /// TLS; a URL of another scheme is refused), opens a session within the connect timeout,
    /// and learns the server's clock with one write to the root node, creating the root if it
    /// is missing. Fails with a [`LockError`] naming the redacted connect string otherwise.
    pub async fn connect(self, connect_string: &str) -> Result<ZookeeperLockProvider, LockError> {
        let provider = self.connect_lazy(connect_string).await?;
        let inner = &provider.inner;
        let session = inner.session(Operation::Connect, "").await?;
        let deadline = Instant::now() + inner.operation_timeout;
        inner
            .calibrated(&session.client, Operation::Connect, "", deadline)
            .await?;
        Ok(provider)
    }

    /// Like [`connect`](Self::connect) without talking to ZooKeeper: an application can start
    /// while ZooKeeper is down, and each lock operation fails (bounded by the connect and
    /// operation timeouts) until it answers. The first operation learns the server's clock.
    /// Asynchronous, as every provider's `connect_lazy`, though nothing here waits.
    pub async fn connect_lazy(
        self,
        connect_string: &str,
    ) -> Result<ZookeeperLockProvider, LockError> {
        let parsed = credentials::parse(connect_string);
        self.validate(&parsed)?;
        #[cfg(feature = "tls-rustls")]
        let tls = self.tls_for(&parsed)?;
        let ConnectString {
            servers,
            credentials,
            redacted,
            ..
        } = parsed;
        Ok(ZookeeperLockProvider {
            inner: Arc::new(Inner {
                servers,
                endpoint: redacted,
                #[cfg(feature = "tls-rustls")]
                tls,
                credentials: self.credentials.or(credentials),
                root: self.root,
                operation_timeout: self.operation_timeout,
                connect_timeout: self.connect_timeout,
                session_timeout: self.session_timeout,
                max_clock_uncertainty: self.max_clock_uncertainty,
                session: tokio::sync::Mutex::new(SessionSlot::default()),
                clock: Mutex::new(None),
                root_checked: AtomicBool::new(false),
                freed_versions: Mutex::new(RecentNames::new(DEFAULT_NAME_CACHE_CAPACITY)),
            }),
        })
    }

    fn validate(&self, connect_string: &ConnectString) -> Result<(), LockError> {
        paths::validate_root(&self.root)?;
        if let Some(scheme) = &connect_string.foreign_scheme {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the connect string's scheme is {scheme:?}, which is not ZooKeeper's: the \
                     zookeeper provider accepts host:port[,host:port...][/chroot], optionally \
                     after zk:// or zookeeper://"
                ),
            ));
        }
        for (what, value) in [
            ("operation timeout", self.operation_timeout),
            ("connect timeout", self.connect_timeout),
            ("session timeout", self.session_timeout),
            ("max clock uncertainty", self.max_clock_uncertainty),
        ] {
            check_positive_duration(PROVIDER, what, value)?;
        }
        let servers = connect_string.servers.split('/').next().unwrap_or_default();
        // A scheme comes before any `/`; a chroot's own `://` is no server's scheme.
        let own_scheme = |server: &str| {
            server
                .split_once("://")
                .is_some_and(|(scheme, _)| !scheme.contains('/'))
        };
        if connect_string.servers.split(',').any(own_scheme) {
            return Err(invalid_setting(
                PROVIDER,
                "connect string",
                &connect_string.redacted,
                "a server must not carry a scheme of its own (tcp://, tcp+tls://): zk+tls:// \
                 in front makes every server TLS, zk:// none",
            ));
        }
        if let Some((_, chroot)) = connect_string.servers.split_once('/') {
            let chroot = format!("/{chroot}");
            if let Some(rule) = paths::path_rule(&chroot) {
                return Err(invalid_setting(
                    PROVIDER,
                    "connect string",
                    &connect_string.redacted,
                    &format!("its chroot {chroot:?} is not a ZooKeeper path: {rule}"),
                ));
            }
        }
        if servers.split(',').any(|server| server.trim().is_empty()) {
            return Err(invalid_setting(
                PROVIDER,
                "connect string",
                &connect_string.redacted,
                "it must list at least one host:port, separated by commas, before any /chroot",
            ));
        }
        #[cfg(not(feature = "tls-rustls"))]
        if connect_string.tls {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "{} asks for TLS, which this build leaves out: enable the \"tls-rustls\" \
                     feature of shedlock-zookeeper (on by default), or the \"rustls\" feature \
                     of shedlock",
                    connect_string.redacted
                ),
            ));
        }
        Ok(())
    }

    /// The TLS settings a `zk+tls://` connect string needs, checked; `None` for a plain one,
    /// which must come without any.
    #[cfg(feature = "tls-rustls")]
    fn tls_for(&self, connect_string: &ConnectString) -> Result<Option<tls::Tls>, LockError> {
        if !connect_string.tls {
            if self.tls.is_set() {
                return Err(invalid_setting(
                    PROVIDER,
                    "connect string",
                    &connect_string.redacted,
                    "a TLS root or client certificate was set, but the connect string does not \
                     use TLS: write zk+tls:// in front of it",
                ));
            }
            return Ok(None);
        }
        tls::Tls::new(&self.tls).map(Some).map_err(|rule| {
            LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!("cannot connect to {}: {rule}", connect_string.redacted),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_settings_are_configuration_errors() {
        let builder = ZookeeperLockProvider::builder;
        for lazy in [
            builder()
                .root("relative")
                .connect_lazy("127.0.0.1:2181")
                .await,
            builder()
                .operation_timeout(Duration::ZERO)
                .connect_lazy("127.0.0.1:2181")
                .await,
            builder().connect_lazy("redis://127.0.0.1:6379").await,
            builder().connect_lazy("127.0.0.1:2181/a//b").await,
        ] {
            let error = lazy.unwrap_err();
            assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
        }
    }
}
