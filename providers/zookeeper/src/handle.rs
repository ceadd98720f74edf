//! The handle of one acquisition ([`ZookeeperLockHandle`]): release and extend write only over
//! the acquisition's own last write, compare-and-set on its version.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::raw::{HandleState, check_extend};
use shedlock_core::{LockError, LockHandle, Operation, TimeSource};
use tokio::time::Instant;
use tracing::debug;

use crate::calibration::{Written, held_until, micros};
use crate::failure::session_ended;
use crate::provider::check_duration;
use crate::server_clock::{ServerClock, ServerMicros};
use crate::session::{Inner, Session};
use crate::storage;

/// One acquisition of a ZooKeeper lock: the node, and the version and `lock_until` its last
/// write left there.
pub(crate) struct ZookeeperLockHandle {
    pub(crate) inner: Arc<Inner>,
    pub(crate) name: String,
    pub(crate) path: String,
    pub(crate) fencing_token: Option<u64>,
    /// Server time from which lock_at_least_for counts.
    pub(crate) acquired_at: ServerMicros,
    pub(crate) lock_at_least_for: Duration,
    /// Serializes this handle's release and extend.
    pub(crate) state: HandleState<LastWrite>,
}

/// What this acquisition's last write left on the node.
pub(crate) struct LastWrite {
    /// The node's version after this acquisition's last write: the proof it is still ours.
    pub(crate) version: i32,
    /// The `lock_until` of that write.
    pub(crate) lock_until: ServerMicros,
}

impl fmt::Debug for ZookeeperLockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperLockHandle")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("fencing_token", &self.fencing_token)
            .field("state", &self.state)
            .finish()
    }
}

/// What an owner-checked write found.
enum Owned {
    /// Written while this acquisition still held the lock.
    Written(Written),
    /// The lock was not ours any more (written by someone since, deleted, or expired): nothing
    /// is left changed.
    Lost,
}

impl ZookeeperLockHandle {
    /// Writes `data` (`lock_until` = `until`) over this acquisition's own last write, if the
    /// node is still at that version and the write lands before the lock expired. A write that
    /// lands after expiry (nobody took the lock meanwhile, or the version would have differed)
    /// is undone by writing the expired `lock_until` back, so it neither revives nor moves a
    /// lock that was over.
    async fn write_if_ours(
        &self,
        operation: Operation,
        state: &LastWrite,
        session: &Session,
        until: impl Fn(&ServerClock, Instant) -> ServerMicros,
    ) -> Result<Owned, LockError> {
        let inner = &self.inner;
        let client = &session.client;
        let deadline = Instant::now() + inner.operation_timeout;
        let clock = inner
            .calibrated(client, operation, &self.name, deadline)
            .await?;
        if clock.earliest(std::time::Instant::now()) >= state.lock_until {
            return Ok(Owned::Lost);
        }
        let sent = Instant::now();
        let lock_until = until(&clock, sent);
        let data = storage::format_lock_until(lock_until);
        let written = inner
            .request(
                operation,
                &self.name,
                deadline,
                storage::write(client, &self.path, &data, state.version),
            )
            .await?;
        let stat = match written {
            Ok(stat) => stat,
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => {
                return Ok(Owned::Lost);
            }
            Err(error) => return Err(inner.failure(client, operation, &self.name, error).await),
        };
        inner.observe(sent, Instant::now(), &stat);
        if stat.mtime.saturating_mul(1000) < state.lock_until {
            let written = Written { stat, lock_until };
            return Ok(
                match inner
                    .checked_by_stamp(
                        operation,
                        &self.name,
                        &self.path,
                        client,
                        written,
                        (&clock, sent),
                        until,
                        deadline,
                    )
                    .await?
                {
                    Some(last) => Owned::Written(last),
                    // Taken over since: a release had landed, an extend had not made the
                    // lock last.
                    None if operation == Operation::Release => Owned::Written(written),
                    None => Owned::Lost,
                },
            );
        }
        let expired = storage::format_lock_until(state.lock_until);
        let restored = inner
            .request(
                operation,
                &self.name,
                deadline,
                storage::write(client, &self.path, &expired, stat.version),
            )
            .await?;
        match restored {
            Ok(stat) => inner.observe(sent, Instant::now(), &stat),
            // Someone took the lock in between, as they were free to: nothing of ours is left.
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => {}
            Err(error) => return Err(inner.failure(client, operation, &self.name, error).await),
        }
        Ok(Owned::Lost)
    }

    /// [`Self::write_if_ours`] in the provider's current session, and once more in a new one if
    /// ZooKeeper had ended that session (it then ran nothing of the request). The node's version
    /// proves the acquisition whatever session took it, so a lock taken in a session that ended
    /// since is still released and extended while nobody else took it.
    async fn write_in_any_session(
        &self,
        operation: Operation,
        state: &LastWrite,
        until: impl Fn(&ServerClock, Instant) -> ServerMicros + Copy,
    ) -> Result<Owned, LockError> {
        let session = self.inner.session(operation, &self.name).await?;
        match self.write_if_ours(operation, state, &session, until).await {
            Err(error) if session_ended(&error) => {
                debug!(name = %self.name, ?operation, "the session had ended: sent again in a new one");
                let session = self.inner.session(operation, &self.name).await?;
                self.write_if_ours(operation, state, &session, until).await
            }
            outcome => outcome,
        }
    }
}

#[async_trait]
impl LockHandle for ZookeeperLockHandle {
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
        let at_least_until = (!self.lock_at_least_for.is_zero()).then(|| {
            storage::ceil_to_millis(
                self.acquired_at
                    .saturating_add(micros(self.lock_at_least_for)),
            )
        });
        // "Now" is written as the earliest the server's clock can read, which is no later
        // than this write's own mtime: a reader compares with at least that mtime, so it sees
        // the lock free at once.
        let release_until = |clock: &ServerClock, sent: Instant| {
            let now = storage::floor_to_millis(clock.earliest(sent.into_std()));
            at_least_until.map_or(now, |until| now.max(until))
        };
        let outcome = self
            .write_in_any_session(Operation::Release, &state, release_until)
            .await?;
        state.end();
        match outcome {
            Owned::Written(written) => {
                // The write's own stamp passed the lock_until it left: the lock is free from
                // then on by the server's clock, so this provider's next acquire of the name
                // may compare-and-set on this version without reading the node first.
                if written.stat.mtime.saturating_mul(1000) >= written.lock_until {
                    self.inner.remember_freed(&self.path, written.stat.version);
                }
                Ok(true)
            }
            Owned::Lost => Ok(false),
        }
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        check_extend(&self.name, lock_at_most_for)?;
        check_duration(Operation::Extend, &self.name, lock_at_most_for)?;
        let Some(mut state) = self.state.ongoing().await else {
            return Ok(false);
        };
        let outcome = self
            .write_in_any_session(Operation::Extend, &state, |clock, sent| {
                held_until(clock, sent, lock_at_most_for)
            })
            .await?;
        match outcome {
            Owned::Written(written) => {
                state.version = written.stat.version;
                state.lock_until = written.lock_until;
                Ok(true)
            }
            Owned::Lost => {
                state.end();
                Ok(false)
            }
        }
    }
}
