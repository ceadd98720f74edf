//! The handle of one acquisition ([`ZookeeperLockHandle`]): release and extend write only over
//! the acquisition's own last write, compare-and-set on its version.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::{ConfigurationError, LockError, LockHandle, Operation, TimeSource};
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
    /// Which of the provider's sessions took the lock.
    pub(crate) generation: u64,
    /// Serializes this handle's release and extend.
    pub(crate) state: tokio::sync::Mutex<HandleState>,
}

pub(crate) struct HandleState {
    /// The node's version after this acquisition's last write: the proof it is still ours.
    pub(crate) version: i32,
    /// The `lock_until` of that write.
    pub(crate) lock_until: ServerMicros,
    /// Released, or found lost: nothing more is sent.
    pub(crate) finished: bool,
}

impl fmt::Debug for ZookeeperLockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperLockHandle")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("fencing_token", &self.fencing_token)
            .field("generation", &self.generation)
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
        state: &HandleState,
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
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
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
        let session = self.inner.session(Operation::Release, &self.name).await?;
        let outcome = match self
            .write_if_ours(Operation::Release, &state, &session, release_until)
            .await
        {
            // The version proves ownership whatever the session: release in the new one.
            Err(error) if session_ended(&error) => {
                let session = self.inner.session(Operation::Release, &self.name).await?;
                self.write_if_ours(Operation::Release, &state, &session, release_until)
                    .await?
            }
            outcome => outcome?,
        };
        state.finished = true;
        Ok(matches!(outcome, Owned::Written(_)))
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if lock_at_most_for.is_zero() {
            return Err(ConfigurationError::ZeroLockAtMostFor {
                name: self.name.clone(),
            }
            .into());
        }
        check_duration(Operation::Extend, &self.name, lock_at_most_for)?;
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
        let session = self.inner.session(Operation::Extend, &self.name).await?;
        if session.generation != self.generation {
            debug!(name = %self.name, "the session that took the lock ended: extend answers lost");
            return Ok(false);
        }
        let outcome = self
            .write_if_ours(Operation::Extend, &state, &session, |clock, sent| {
                held_until(clock, sent, lock_at_most_for)
            })
            .await;
        let outcome = match outcome {
            Err(error) if session_ended(&error) => {
                debug!(name = %self.name, "the session that took the lock ended: extend answers lost");
                return Ok(false);
            }
            outcome => outcome?,
        };
        match outcome {
            Owned::Written(written) => {
                state.version = written.stat.version;
                state.lock_until = written.lock_until;
                Ok(true)
            }
            Owned::Lost => {
                state.finished = true;
                Ok(false)
            }
        }
    }
}
