//! The provider ([`RedisLockProvider`]): its shared state, the names it accepts, and the
//! acquire ([`LockProvider`]), with the cleanup after an acquire whose outcome is unknown.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionLike;
use shedlock_core::{
    Acquisition, Capabilities, ConfigurationError, ErrorKind, LockConfiguration, LockError,
    LockHolder, LockProvider, Operation, TimeSource,
};
use tracing::debug;

use crate::PROVIDER;
use crate::builder::{FENCING_BRACES_RULE, RedisLockProviderBuilder};
use crate::connection::RedisConnection;
use crate::handle::RedisLockHandle;
use crate::storage::{self, Scripts};

/// Locks in Redis, one key per lock; see the crate docs for the layout and the guarantees.
///
/// Cheap to clone (the connection is shared); `C` is the connection type, the
/// [`RedisConnection`] [`connect`](RedisLockProviderBuilder::connect) makes for any URL unless
/// built from another connection.
pub struct RedisLockProvider<C = RedisConnection> {
    pub(crate) inner: Arc<Inner<C>>,
}

impl<C> Clone for RedisLockProvider<C> {
    fn clone(&self) -> Self {
        Self {
            inner: self.inner.clone(),
        }
    }
}

pub(crate) struct Inner<C> {
    pub(crate) connection: C,
    pub(crate) scripts: Scripts,
    pub(crate) key_prefix: String,
    pub(crate) env: String,
    pub(crate) holder: String,
    pub(crate) operation_timeout: Duration,
    pub(crate) fencing: bool,
    /// The replicas each acquire and extend waits for, if any.
    pub(crate) replica_wait: Option<storage::ReplicaWait>,
    /// Where the connection goes, with any password masked.
    pub(crate) endpoint: String,
    /// Whether the connection may send a command again after its connection dropped
    /// ([`may_resend`](crate::failure::may_resend)).
    pub(crate) resends: bool,
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
    pub(crate) fn unacknowledged(&self, acknowledged: Option<u32>) -> Option<String> {
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
                return Ok(Acquisition::NotAcquired(Some(LockHolder::from_stored(
                    Some(&held_by),
                    held_until,
                ))));
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
        Ok(Acquisition::Acquired(Box::new(RedisLockHandle::new(
            self.inner.clone(),
            name.to_owned(),
            key,
            value,
            fencing_token,
            at_most_ms,
            at_least_ms,
        ))))
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
pub(crate) fn ttl_millis(
    operation: Operation,
    name: &str,
    duration: Duration,
) -> Result<u64, LockError> {
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
