//! [`EtcdLockHandle`]: one acquisition, released or extended by owner-checked transactions.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::raw::{HandleState, Ongoing, check_extend};
use shedlock_core::{LockError, LockHandle, Operation, TimeSource};
use tokio::time::Instant;

use crate::lease::{AtLeastLease, Lease, lease_secs};
use crate::provider::Inner;
use crate::storage;

/// One acquisition of an etcd lock: the key, the unique value written to it, and the leases
/// it may be attached to.
pub(crate) struct EtcdLockHandle {
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: String,
    pub(crate) key: String,
    pub(crate) value: String,
    pub(crate) fencing_token: Option<u64>,
    /// When the acquire was answered (monotonic): the rest of lock_at_least_for is counted from
    /// here, which can only overestimate it, since etcd applied the put before answering.
    pub(crate) acquired_at: Instant,
    pub(crate) lock_at_least_for: Duration,
    /// A lease for the rest of `lock_at_least_for`, made ready while the task runs, for a
    /// release within it.
    pub(crate) at_least_lease: Option<AtLeastLease>,
    /// The leases our key may be attached to: one, unless a move to a new lease got no answer,
    /// in which case the key is on one of them and the others are freed once it moves again.
    /// Also serializes this handle's release and extend.
    pub(crate) state: HandleState<Vec<Lease>>,
}

impl fmt::Debug for EtcdLockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdLockHandle")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("value", &self.value)
            .field("fencing_token", &self.fencing_token)
            .field("state", &self.state)
            .finish()
    }
}

impl EtcdLockHandle {
    /// Moves our key onto `lease` if it is still ours. `Ok(true)`: moved, and the old leases
    /// are kept as spares. `Ok(false)`: not ours; nothing changed.
    async fn move_to_lease(
        &self,
        operation: Operation,
        leases: &mut Ongoing<'_, Vec<Lease>>,
        lease: Lease,
    ) -> Result<bool, LockError> {
        let inner = &self.inner;
        let mut client = inner.client.clone();
        let moved = inner
            .call(
                operation,
                &self.name,
                storage::move_to_lease(&mut client, &self.key, &self.value, lease.id),
            )
            .await;
        match moved {
            Ok(true) => {
                let old = std::mem::replace(&mut **leases, vec![lease]);
                inner.recycle(old);
                Ok(true)
            }
            Ok(false) => {
                // Whatever is on our old leases now is not ours to reuse (a key put there by
                // hand, say): end them. The new one never got the key.
                let old = std::mem::take(&mut **leases);
                inner.revoke_in_background(old, "lock no longer ours");
                inner.recycle(vec![lease]);
                leases.end();
                Ok(false)
            }
            Err(error) => {
                // The key may now be on the new lease or still on the old ones: keep them all.
                leases.push(lease);
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
        let Some(mut leases) = self.state.ongoing().await else {
            return Ok(false);
        };
        let remaining = self
            .lock_at_least_for
            .saturating_sub(self.acquired_at.elapsed());
        let inner = &self.inner;
        let ready = self.at_least_lease.as_ref().and_then(AtLeastLease::take);
        if !remaining.is_zero() {
            let lease = match ready {
                Some(lease) => lease,
                None => {
                    let ttl = lease_secs(Operation::Release, &self.name, remaining)?;
                    inner.lease(Operation::Release, &self.name, ttl).await?
                }
            };
            let released = self
                .move_to_lease(Operation::Release, &mut leases, lease)
                .await?;
            leases.end();
            return Ok(released);
        }
        if let Some(unused) = ready {
            inner.recycle(vec![unused]);
        }
        let mut client = inner.client.clone();
        let deleted = inner
            .call(
                Operation::Release,
                &self.name,
                storage::delete_if_ours(&mut client, &self.key, &self.value),
            )
            .await?;
        let ended = std::mem::take(&mut *leases);
        if deleted {
            inner.recycle(ended);
        } else {
            inner.revoke_in_background(ended, "lock no longer ours");
        }
        leases.end();
        Ok(deleted)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        check_extend(&self.name, lock_at_most_for)?;
        let ttl = lease_secs(Operation::Extend, &self.name, lock_at_most_for)?;
        let Some(mut leases) = self.state.ongoing().await else {
            return Ok(false);
        };
        let lease = self.inner.lease(Operation::Extend, &self.name, ttl).await?;
        self.move_to_lease(Operation::Extend, &mut leases, lease)
            .await
    }
}
