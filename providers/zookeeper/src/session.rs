//! The provider's shared state ([`Inner`]) and its ZooKeeper session: opened on first use,
//! over TLS for a `zk+tls://` connect string, and replaced once ZooKeeper ends it.

use std::sync::atomic::AtomicBool;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use shedlock_core::raw::{RecentNames, consequence};
use shedlock_core::{ErrorKind, LockError, Operation};
#[cfg(feature = "tls-rustls")]
use tokio::time::Instant;
use tracing::debug;
use zookeeper_client::{Client, SessionState};

use crate::PROVIDER;
use crate::credentials::DigestCredentials;
use crate::failure::{after_failure, connect_kind};
use crate::server_clock::ServerClock;
#[cfg(feature = "tls-rustls")]
use crate::tls;

pub(crate) struct Inner {
    /// What the client connects to: hosts and chroot, without credentials.
    pub(crate) servers: String,
    /// The connect string as given, password masked: the only form ever shown.
    pub(crate) endpoint: String,
    /// Set for a `zk+tls://` connect string: every server is reached over TLS.
    #[cfg(feature = "tls-rustls")]
    pub(crate) tls: Option<tls::Tls>,
    pub(crate) credentials: Option<DigestCredentials>,
    pub(crate) root: String,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) session_timeout: Duration,
    pub(crate) max_clock_uncertainty: Duration,
    /// The session, opened on first use and replaced once ZooKeeper ends it. Held across the
    /// opening so concurrent operations share one new session.
    pub(crate) session: tokio::sync::Mutex<SessionSlot>,
    /// What this provider knows of the server's clock, from its own writes.
    pub(crate) clock: Mutex<Option<ServerClock>>,
    /// Whether the root was read once and found empty (or missing), before the first of the
    /// writes that learn the clock there.
    pub(crate) root_checked: AtomicBool,
    /// Per lock node, the version this provider's own release left there when that release
    /// made the lock free at once. The next acquire of the name tries its compare-and-set on
    /// that version instead of reading the node first; it lands only if nobody wrote since.
    /// `None` once tried. Bounded like the storage providers' name cache: a forgotten node is
    /// read first, as before.
    pub(crate) freed_versions: Mutex<RecentNames<Option<i32>>>,
}

#[derive(Default)]
pub(crate) struct SessionSlot {
    client: Option<Client>,
}

/// A live session.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) client: Client,
}

impl Inner {
    /// Remembers that this provider's release left `path` free at `version`.
    pub(crate) fn remember_freed(&self, path: &str, version: i32) {
        self.freed_versions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(path, Some(version));
    }

    /// The version a release of this provider left `path` free at, forgotten as it is
    /// handed out: one acquire tries it, and whatever happens the node is read next time.
    pub(crate) fn take_freed_version(&self, path: &str) -> Option<i32> {
        self.freed_versions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_mut(path)
            .and_then(Option::take)
    }

    /// Forgets every version remembered by [`remember_freed`](Self::remember_freed).
    pub(crate) fn forget_freed_versions(&self) {
        self.freed_versions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
    }

    pub(crate) fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls-rustls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls-rustls"))]
        false
    }

    /// Opens a session with the servers, over TLS for a `zk+tls://` connect string.
    async fn open_session(&self) -> Result<Client, zookeeper_client::Error> {
        let mut connector = Client::connector().with_session_timeout(self.session_timeout);
        if let Some(credentials) = &self.credentials {
            connector = connector.with_auth("digest", &credentials.auth_bytes());
        }
        #[cfg(feature = "tls-rustls")]
        if let Some(tls) = &self.tls {
            return connector
                .with_tls(tls.options())
                .secure_connect(&self.servers)
                .await;
        }
        connector.connect(&self.servers).await
    }

    /// Why a TLS session could not be opened, and what kind of failure that is, when a
    /// handshake of the provider's own can tell (see the `tls` module); `None` for plain
    /// connections.
    async fn tls_failure(&self) -> Option<(ErrorKind, String)> {
        #[cfg(feature = "tls-rustls")]
        if let Some(tls) = &self.tls {
            return tls
                .explain(&self.servers, Instant::now() + self.connect_timeout)
                .await;
        }
        None
    }

    /// The current session, or a new one if there is none yet or ZooKeeper ended the last.
    pub(crate) async fn session(
        &self,
        operation: Operation,
        name: &str,
    ) -> Result<Session, LockError> {
        let mut slot = self.session.lock().await;
        if let Some(client) = &slot.client {
            if !matches!(
                client.state(),
                SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
            ) {
                return Ok(Session {
                    client: client.clone(),
                });
            }
            debug!(endpoint = %self.endpoint, state = ?client.state(), "ZooKeeper session ended; opening a new one");
        }
        slot.client = None;
        let connected = tokio::time::timeout(self.connect_timeout, self.open_session()).await;
        let failure = match &connected {
            Ok(Ok(_)) => None,
            _ => self.tls_failure().await,
        };
        if let Some((kind, reason)) = failure {
            let message = after_failure(
                format!(
                    "could not open a TLS session with ZooKeeper at {}: {reason}",
                    self.endpoint
                ),
                operation,
                kind,
            );
            return Err(match connected {
                Ok(Err(error)) => {
                    LockError::backend(kind, PROVIDER, operation, name, message, error)
                }
                _ => LockError::backend_message(kind, PROVIDER, operation, name, message),
            });
        }
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                let kind = connect_kind(&error);
                let message = format!(
                    "could not open a session with ZooKeeper at {}; {}",
                    self.endpoint,
                    consequence(operation, kind)
                );
                return Err(LockError::backend(
                    kind, PROVIDER, operation, name, message, error,
                ));
            }
            Err(_) => {
                return Err(LockError::backend_message(
                    ErrorKind::Unreachable,
                    PROVIDER,
                    operation,
                    name,
                    after_failure(
                        format!(
                            "ZooKeeper at {} opened no session within {:?} (is it running and \
                             reachable?)",
                            self.endpoint, self.connect_timeout
                        ),
                        operation,
                        ErrorKind::Unreachable,
                    ),
                ));
            }
        };
        slot.client = Some(client.clone());
        Ok(Session { client })
    }

    /// Forgets `client`'s session if ZooKeeper said it is over, so the next operation opens a
    /// new one even before the client's state shows it.
    pub(crate) async fn forget_ended_session(
        &self,
        client: &Client,
        error: &zookeeper_client::Error,
    ) {
        use zookeeper_client::Error::{AuthFailed, ClientClosed, SessionExpired, SessionMoved};
        if matches!(
            error,
            SessionExpired | SessionMoved | ClientClosed | AuthFailed
        ) {
            let mut slot = self.session.lock().await;
            if slot
                .client
                .as_ref()
                .is_some_and(|current| current.session_id() == client.session_id())
            {
                slot.client = None;
            }
        }
    }
}
