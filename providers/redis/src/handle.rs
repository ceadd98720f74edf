//! One acquisition's handle ([`RedisLockHandle`]): release and extend, owner-checked by the
//! value the acquire wrote.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionLike;
use shedlock_core::raw::{HandleState, check_extend};
use shedlock_core::{ErrorKind, LockError, LockHandle, Operation, TimeSource};

use crate::PROVIDER;
use crate::provider::{Inner, ttl_millis};
use crate::storage;

/// One acquisition of a Redis lock: the key and the unique value written to it.
pub(crate) struct RedisLockHandle<C> {
    inner: Arc<Inner<C>>,
    name: String,
    key: String,
    value: String,
    fencing_token: Option<u64>,
    /// Serializes this handle's release and extend, which both read and update it.
    state: HandleState<Ttls>,
}

/// What release needs to compute the rest of `lock_at_least_for` on the server's clock.
struct Ttls {
    /// The TTL the key was last given (at acquire, or by the last extend), in ms.
    last_ttl_ms: u64,
    /// How much of `lock_at_least_for` remained when that TTL was set (may be negative).
    least_remaining_ms: i64,
}

impl<C> RedisLockHandle<C> {
    /// The handle of the acquisition that wrote `value` to `key` with a TTL of `at_most_ms`,
    /// when `at_least_ms` of `lock_at_least_for` were left (a release keeps the key that long).
    pub(crate) fn new(
        inner: Arc<Inner<C>>,
        name: String,
        key: String,
        value: String,
        fencing_token: Option<u64>,
        at_most_ms: u64,
        at_least_ms: u64,
    ) -> Self {
        Self {
            inner,
            name,
            key,
            value,
            fencing_token,
            state: HandleState::new(Ttls {
                last_ttl_ms: at_most_ms,
                least_remaining_ms: i64::try_from(at_least_ms).unwrap_or(i64::MAX),
            }),
        }
    }
}

impl<C> fmt::Debug for RedisLockHandle<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisLockHandle")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("value", &self.value)
            .field("fencing_token", &self.fencing_token)
            .field("state", &self.state)
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
        let Some(mut state) = self.state.ongoing().await else {
            return Ok(false);
        };
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
        state.end();
        Ok(released)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        check_extend(&self.name, lock_at_most_for)?;
        let new_ttl_ms = ttl_millis(Operation::Extend, &self.name, lock_at_most_for)?;
        let Some(mut state) = self.state.ongoing().await else {
            return Ok(false);
        };
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
            state.end();
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
