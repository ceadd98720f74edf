//! [`ZookeeperLockProvider`] and its [`LockProvider`] implementation: acquire reads the lock
//! node and takes it with a create or a compare-and-set write.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::raw::HandleState;
use shedlock_core::{
    Acquisition, Capabilities, ConfigurationError, ErrorKind, LockConfiguration, LockError,
    LockHolder, LockProvider, Operation, TimeSource,
};
use tokio::time::Instant;
use zookeeper_client::{Client, Stat};

use crate::builder::ZookeeperLockProviderBuilder;
use crate::calibration::{Written, held_until, system_time};
use crate::failure::{Answer, session_ended};
use crate::handle::{LastWrite, ZookeeperLockHandle};
use crate::server_clock::ServerClock;
use crate::session::{Inner, Session};
use crate::{MAX_LOCK_DURATION, MAX_NAME_CHARS, PROVIDER, paths, storage};

/// Locks in ZooKeeper, one persistent node per name; see the crate docs for the layout, the
/// time source and the guarantees. Cheap to clone (the session is shared).
#[derive(Clone)]
pub struct ZookeeperLockProvider {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for ZookeeperLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("ZookeeperLockProvider")
            .field("endpoint", &inner.endpoint)
            .field("tls", &inner.uses_tls())
            .field("credentials", &inner.credentials)
            .field("root", &inner.root)
            .field("operation_timeout", &inner.operation_timeout)
            .field("connect_timeout", &inner.connect_timeout)
            .field("session_timeout", &inner.session_timeout)
            .field("max_clock_uncertainty", &inner.max_clock_uncertainty)
            .finish()
    }
}

impl ZookeeperLockProvider {
    /// Settings with ShedLock's defaults: root `/shedlock`, 5 s operation and connect
    /// timeouts, a 10 s session, no credentials.
    pub fn builder() -> ZookeeperLockProviderBuilder {
        ZookeeperLockProviderBuilder::default()
    }

    /// Connects to `connect_string` with the default settings; see
    /// [`ZookeeperLockProviderBuilder::connect`].
    pub async fn connect(connect_string: &str) -> Result<Self, LockError> {
        Self::builder().connect(connect_string).await
    }

    /// Forgets the lock nodes this provider's own releases left free, as a restarted node
    /// would: its next acquire of each name reads the node first.
    pub fn clear_name_cache(&self) {
        self.inner.forget_freed_versions();
    }

    /// The node of lock `name`, `<root>/<escaped name>`, for operators who want to inspect or
    /// free a lock by hand. Refuses what [`try_lock`](LockProvider::try_lock) refuses.
    pub fn lock_path(&self, name: &str) -> Result<String, LockError> {
        if name.is_empty() {
            return Err(ConfigurationError::EmptyName.into());
        }
        self.capabilities().check_name_length(PROVIDER, name)?;
        Ok(format!("{}/{}", self.inner.root, paths::node_name(name)))
    }
}

/// Refuses a duration longer than [`MAX_LOCK_DURATION`] before anything is sent.
pub(crate) fn check_duration(
    operation: Operation,
    name: &str,
    duration: Duration,
) -> Result<(), LockError> {
    if duration <= MAX_LOCK_DURATION {
        return Ok(());
    }
    Err(LockError::invalid_request(
        PROVIDER,
        operation,
        name,
        format!(
            "{duration:?} is longer than a lock this provider writes (at most {} s, 1000 \
             years: ShedLock's lock_until must stay a four-digit-year instant)",
            MAX_LOCK_DURATION.as_secs()
        ),
    ))
}

#[async_trait]
impl LockProvider for ZookeeperLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let path = self.lock_path(config.name())?;
        for duration in [config.lock_at_most_for(), config.lock_at_least_for()] {
            check_duration(Operation::Acquire, config.name(), duration)?;
        }
        let session = self
            .inner
            .session(Operation::Acquire, config.name())
            .await?;
        match self.try_lock_in(config, &path, &session).await {
            // The server refused the requests of a session it had ended, so nothing was
            // written: try again once, in the new session.
            Err(error) if session_ended(&error) => {
                let session = self
                    .inner
                    .session(Operation::Acquire, config.name())
                    .await?;
                self.try_lock_in(config, &path, &session).await
            }
            outcome => outcome,
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
            .with_max_name_chars(MAX_NAME_CHARS)
            .with_time_precision(2 * self.inner.max_clock_uncertainty + Duration::from_millis(1))
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

impl ZookeeperLockProvider {
    async fn try_lock_in(
        &self,
        config: &LockConfiguration,
        path: &str,
        session: &Session,
    ) -> Result<Acquisition, LockError> {
        let name = config.name();
        let inner = &self.inner;
        let client = &session.client;
        let deadline = Instant::now() + inner.operation_timeout;
        let mut clock = inner
            .calibrated(client, Operation::Acquire, name, deadline)
            .await?;
        // A release of this provider left the node free at a version it knows: the
        // compare-and-set on that version needs no read first. It lands only if nobody wrote
        // the node since, so the node still holds that release's lock_until, which the
        // release's own stamp had already passed. If someone wrote since, the node is read.
        let mut freed_version = inner.take_freed_version(path);
        loop {
            let version = if let Some(version) = freed_version.take() {
                Some(version)
            } else {
                let read = inner
                    .request(
                        Operation::Acquire,
                        name,
                        deadline,
                        storage::read(client, path),
                    )
                    .await?;
                match read {
                    Ok((held, stat)) => {
                        let Some(current_until) = storage::parse_lock_until(&held) else {
                            return Err(LockError::backend_message(
                                ErrorKind::CorruptData,
                                PROVIDER,
                                Operation::Acquire,
                                name,
                                format!(
                                    "node {path} holds {}, which is not an ISO-8601 instant \
                                     (ShedLock's lock_until); nothing was written. Java ShedLock \
                                     treats such a node as held for ever: write a lock_until \
                                     into it or delete it",
                                    storage::describe_data(&held)
                                ),
                            ));
                        };
                        let refused = || {
                            Ok(Acquisition::NotAcquired(Some(LockHolder {
                                locked_by: None,
                                held_until: Some(system_time(current_until)),
                            })))
                        };
                        // The node's last write was stamped before this read was served, so the
                        // server's clock reads at least its mtime: a lock released "now" is seen
                        // free at once, however uncertain this node's own interval is.
                        let stamped = stat.mtime.saturating_mul(1000);
                        if clock.earliest(std::time::Instant::now()).max(stamped) < current_until {
                            return refused();
                        }
                        // The estimate says the lock is over, but it rests on this node's
                        // monotonic clock running at the server's rate, and a take-over is the
                        // decision that must never come early. Unless the node's own stamp shows
                        // it over, the server decides: a write to the root, whose stamp the
                        // server's clock has passed before the take-over is sent.
                        if stamped < current_until {
                            let server_now = inner
                                .stamp(client, Operation::Acquire, name, deadline)
                                .await?;
                            if server_now < current_until {
                                return refused();
                            }
                            clock = inner.known_clock().unwrap_or(clock);
                        }
                        Some(stat.version)
                    }
                    Err(zookeeper_client::Error::NoNode) => None,
                    Err(error) => {
                        return Err(inner.failure(client, Operation::Acquire, name, error).await);
                    }
                }
            };
            let until = |clock: &ServerClock, sent: Instant| {
                held_until(clock, sent, config.lock_at_most_for())
            };
            let sent = Instant::now();
            let lock_until = until(&clock, sent);
            let data = storage::format_lock_until(lock_until);
            let written = match version {
                Some(version) => {
                    inner
                        .request(
                            Operation::Acquire,
                            name,
                            deadline,
                            storage::write(client, path, &data, version),
                        )
                        .await?
                }
                None => {
                    inner
                        .create_node(client, name, path, &data, deadline)
                        .await?
                }
            };
            let stat = match written {
                Ok(stat) => stat,
                // Someone created or wrote the node since it was read (or since this
                // provider's release left it free): read it and judge it again.
                Err(
                    zookeeper_client::Error::NodeExists
                    | zookeeper_client::Error::BadVersion
                    | zookeeper_client::Error::NoNode,
                ) => {
                    clock = inner.known_clock().unwrap_or(clock);
                    continue;
                }
                Err(error) => {
                    return Err(inner.failure(client, Operation::Acquire, name, error).await);
                }
            };
            inner.observe(sent, Instant::now(), &stat);
            let Some(Written {
                stat: last,
                lock_until,
            }) = inner
                .checked_by_stamp(
                    Operation::Acquire,
                    name,
                    path,
                    client,
                    Written { stat, lock_until },
                    (&clock, sent),
                    until,
                    deadline,
                )
                .await?
            else {
                // Someone took it over in between, judging by the server's clock that this
                // node's too short lock_until had passed: nothing of ours is left to run.
                return Ok(Acquisition::NotAcquired(None));
            };
            return Ok(Acquisition::Acquired(Box::new(ZookeeperLockHandle {
                inner: self.inner.clone(),
                name: name.to_owned(),
                path: path.to_owned(),
                fencing_token: u64::try_from(stat.mzxid).ok(),
                // The write was stamped in [mtime, mtime + 1 ms): from the end of that
                // millisecond, lock_at_least_for is never counted short.
                acquired_at: (stat.mtime + 1) * 1000,
                lock_at_least_for: config.lock_at_least_for(),
                state: HandleState::new(LastWrite {
                    version: last.version,
                    lock_until,
                }),
            })));
        }
    }
}

impl Inner {
    /// Creates the lock node holding `data`; what happened, or a failure.
    async fn create_node(
        &self,
        client: &Client,
        name: &str,
        path: &str,
        data: &str,
        deadline: Instant,
    ) -> Answer<Stat> {
        let created = self
            .request(
                Operation::Acquire,
                name,
                deadline,
                storage::create(client, path, data),
            )
            .await?;
        if !matches!(created, Err(zookeeper_client::Error::NoNode)) {
            return Ok(created);
        }
        // The root is missing (deleted by hand since the provider learnt the clock there).
        self.ensure_root(client, Operation::Acquire, name, deadline)
            .await?;
        self.request(
            Operation::Acquire,
            name,
            deadline,
            storage::create(client, path, data),
        )
        .await
    }
}
