//! [`EtcdLockProvider`]: the state every clone shares, and acquiring a lock.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::Client;
use shedlock_core::raw::HandleState;
use shedlock_core::{
    Acquisition, Capabilities, ConfigurationError, ErrorKind, LockConfiguration, LockError,
    LockHolder, LockProvider, Operation, TimeSource,
};
use tokio::time::Instant;

use crate::builder::EtcdLockProviderBuilder;
use crate::handle::EtcdLockHandle;
use crate::lease::{AtLeastLease, Lease, lease_secs};
use crate::storage::{self, AcquireOutcome};
use crate::{MAX_NAME_CHARS, PROVIDER};

/// Locks in etcd, one key and one lease per acquisition; see the crate docs for the layout and
/// the guarantees. Cheap to clone (the client is shared).
#[derive(Clone)]
pub struct EtcdLockProvider {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) client: Client,
    pub(crate) key_prefix: String,
    pub(crate) env: String,
    pub(crate) holder: String,
    pub(crate) operation_timeout: Duration,
    /// The shortest lease the server grants (at least 1 s): the declared time precision.
    pub(crate) time_precision: Duration,
    /// Where the client goes, with any password masked.
    pub(crate) endpoint: String,
    /// Leases of ours that carry no key, by granted TTL in seconds, for the next operation that
    /// needs a lease of that TTL: see [`Inner::recycle`].
    pub(crate) spare_leases: Mutex<HashMap<i64, Vec<Lease>>>,
    /// Whether the background keeper of long spares runs ([`Inner::recycle`] starts it).
    pub(crate) spare_keeper_started: AtomicBool,
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

impl EtcdLockProvider {
    /// The acquire transaction on a young spare lease, sent together with the keep-alive that
    /// restarts the lease: one round trip where the two in turn take two. The lease is alive
    /// whenever etcd applies the transaction ([`Inner::young_spare`]), so the key is put on it
    /// or refused exactly as after a keep-alive. A key put on a lease whose keep-alive then
    /// failed would end with the lease's old life, sooner than `lock_at_most_for` allows from
    /// now: whatever the transaction found, that lease is revoked (deleting any key on it) and
    /// the acquire answers the keep-alive's error, so no task runs on it.
    ///
    /// `None` when etcd said the lease had ended (revoked by hand, say): whatever the
    /// transaction did ended with it, nothing of ours is left, and the caller acquires as if
    /// there had been no spare.
    async fn acquire_beside_keep_alive(
        &self,
        name: &str,
        key: &str,
        value: &str,
        spare: Lease,
    ) -> Result<Option<(Lease, Result<AcquireOutcome, LockError>)>, LockError> {
        let inner = &self.inner;
        let (mut keep_alive_client, mut client) = (inner.client.clone(), inner.client.clone());
        let sent = Instant::now();
        let (restarted, outcome) = tokio::join!(
            inner.call(
                Operation::Acquire,
                name,
                storage::refresh_lease(&mut keep_alive_client, spare.id),
            ),
            inner.call(
                Operation::Acquire,
                name,
                storage::acquire(&mut client, key, value, spare.id),
            ),
        );
        match restarted {
            Ok(true) => Ok(Some((Lease::new(spare.id, spare.ttl, sent), outcome))),
            Ok(false) => Ok(None),
            Err(failure) => {
                // Revoking also deletes a key the transaction put on the lease.
                inner.revoke_in_background(vec![spare], "its keep-alive failed beside the acquire");
                Err(failure)
            }
        }
    }
}

#[async_trait]
impl LockProvider for EtcdLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let started = Instant::now();
        let name = config.name();
        let key = self.lock_key(name)?;
        let inner = &self.inner;
        let ttl = lease_secs(Operation::Acquire, name, config.lock_at_most_for())?;
        let value = storage::lock_value(&inner.holder);
        let mut client = inner.client.clone();
        let beside = match inner.young_spare(ttl) {
            Some(spare) => {
                self.acquire_beside_keep_alive(name, &key, &value, spare)
                    .await?
            }
            None => None,
        };
        let (lease, outcome) = match beside {
            Some(sent_together) => sent_together,
            None => {
                let lease = inner.lease(Operation::Acquire, name, ttl).await?;
                let outcome = inner
                    .call(
                        Operation::Acquire,
                        name,
                        storage::acquire(&mut client, &key, &value, lease.id),
                    )
                    .await;
                (lease, outcome)
            }
        };
        let acquired_at = Instant::now();
        match outcome {
            Ok(AcquireOutcome::Acquired { revision }) => {
                let at_least_lease =
                    AtLeastLease::start(inner, name, config.lock_at_least_for(), started);
                Ok(Acquisition::Acquired(Box::new(EtcdLockHandle {
                    inner: self.inner.clone(),
                    name: name.to_owned(),
                    key,
                    value,
                    fencing_token: u64::try_from(revision).ok(),
                    acquired_at,
                    lock_at_least_for: config.lock_at_least_for(),
                    at_least_lease,
                    state: HandleState::new(vec![lease]),
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
                Ok(Acquisition::NotAcquired(Some(LockHolder::from_stored(
                    value.as_deref(),
                    None,
                ))))
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
