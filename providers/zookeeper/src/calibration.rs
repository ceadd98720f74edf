//! What the provider knows of the server's clock: learnt from the stamps of its own writes to
//! the root (read once first, created when missing), and used to compute and check the
//! `lock_until` it writes.

use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use shedlock_core::{ErrorKind, LockError, Operation};
use tokio::time::Instant;
use tracing::debug;
use zookeeper_client::{Client, Stat};

use crate::server_clock::{ServerClock, ServerMicros};
use crate::session::Inner;
use crate::{PROVIDER, storage};

/// How many root writes one operation spends at most to bring the clock's uncertainty under
/// its limit; past them it goes on with the wider interval, which is safe, only slower to see
/// expiries.
const CALIBRATION_ATTEMPTS: usize = 3;

impl Inner {
    /// Learns from a write of ours what the server's clock reads.
    pub(crate) fn observe(&self, sent: Instant, answered: Instant, stat: &Stat) {
        let sample = ServerClock::from_write(sent.into_std(), answered.into_std(), stat.mtime);
        if let Ok(mut clock) = self.clock.lock() {
            *clock = Some(match *clock {
                Some(known) => known.narrowed_by(&sample),
                None => sample,
            });
        }
    }

    pub(crate) fn known_clock(&self) -> Option<ServerClock> {
        self.clock.lock().ok().and_then(|clock| *clock)
    }

    /// The server's clock, learnt again with writes to the root when it is unknown or more
    /// uncertain than the limit.
    pub(crate) async fn calibrated(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<ServerClock, LockError> {
        for _ in 0..CALIBRATION_ATTEMPTS {
            if let Some(clock) = self.known_clock()
                && clock.uncertainty(std::time::Instant::now()) <= self.max_clock_uncertainty
            {
                return Ok(clock);
            }
            self.stamp(client, operation, name, deadline).await?;
        }
        // Still wide after every attempt (a slow network): a wider interval is safe, only
        // slower to see expiries.
        self.known_clock()
            .ok_or_else(|| self.root_kept_disappearing(operation, name))
    }

    /// Writes the root once, and learns from the write's stamp what the server's clock reads.
    /// Returns the stamp: the server's clock read at least this when the write landed, and
    /// so at least this at any later request. A missing root is created first.
    pub(crate) async fn stamp(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<ServerMicros, LockError> {
        if !self.root_checked.load(Ordering::Relaxed) {
            self.check_root(client, operation, name, deadline).await?;
        }
        for _ in 0..2 {
            let sent = Instant::now();
            match self
                .request(
                    operation,
                    name,
                    deadline,
                    storage::stamp_root(client, &self.root),
                )
                .await?
            {
                Ok(stat) => {
                    self.observe(sent, Instant::now(), &stat);
                    return Ok(stat.mtime.saturating_mul(1000));
                }
                Err(zookeeper_client::Error::NoNode) => {
                    self.ensure_root(client, operation, name, deadline).await?;
                }
                Err(error) => return Err(self.failure(client, operation, name, error).await),
            }
        }
        Err(self.root_kept_disappearing(operation, name))
    }

    fn root_kept_disappearing(&self, operation: Operation, name: &str) -> LockError {
        // Someone deletes the root between the provider's writes: a fault mid-operation, which
        // may be over on the next try. The root nodes it created may remain.
        LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            format!(
                "could not learn the server's clock from ZooKeeper at {}: the root node {} \
                 kept disappearing",
                self.endpoint, self.root
            ),
        )
    }

    /// A `lock_until` this node computed from its estimate of the server's clock, checked by
    /// the stamp of the write that carried it, and written again when the stamp shows it wrong.
    ///
    /// The estimate is carried forward on this node's monotonic clock since the provider's last
    /// write, so a clock running at the wrong rate (a virtual machine's clock gone wrong, a
    /// process under `faketime -f "+0 x2"`) moves it by the error times that time: a slow clock
    /// writes a lock shorter than asked, a fast one a lock, or a release's "now", later than
    /// asked. The write's own `mtime` is the server's clock when it landed. Once observed, it
    /// replaces an estimate it contradicts, and the value computed again from it must be what
    /// was written, within the uncertainty `used` had at `sent`. If it is not, the node is
    /// written again, compare-and-set on the version the write left: one more round trip, only
    /// for a node whose clock misled it. `None` when someone wrote the node in between.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn checked_by_stamp(
        &self,
        operation: Operation,
        name: &str,
        path: &str,
        client: &Client,
        written: Written,
        (used, sent): (&ServerClock, Instant),
        until: impl Fn(&ServerClock, Instant) -> ServerMicros,
        deadline: Instant,
    ) -> Result<Option<Written>, LockError> {
        let Some(clock) = self.known_clock() else {
            return Ok(Some(written));
        };
        let slack = used.uncertainty(sent.into_std()) + Duration::from_millis(1);
        if until(&clock, sent).abs_diff(written.lock_until) <= micros(slack).unsigned_abs() {
            return Ok(Some(written));
        }
        let sent = Instant::now();
        let lock_until = until(&clock, sent);
        debug!(
            name,
            "this node's estimate of the server's clock was off by more than its uncertainty (its \
             monotonic clock runs at another rate than the server's): lock_until written again"
        );
        match self
            .request(
                operation,
                name,
                deadline,
                storage::write(
                    client,
                    path,
                    &storage::format_lock_until(lock_until),
                    written.stat.version,
                ),
            )
            .await?
        {
            Ok(stat) => {
                self.observe(sent, Instant::now(), &stat);
                Ok(Some(Written { stat, lock_until }))
            }
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => Ok(None),
            Err(error) => Err(self.failure(client, operation, name, error).await),
        }
    }

    /// Reads the root once before the provider first writes to it: ShedLock's root holds no
    /// data, so a root that does is another application's node, whose data the writes that
    /// learn the clock would wipe. Refused with an error naming it; a missing root is created.
    async fn check_root(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<(), LockError> {
        match self
            .request(operation, name, deadline, storage::read(client, &self.root))
            .await?
        {
            Ok((data, _)) if !data.is_empty() => {
                // The configured root is another application's node: the setting must change.
                return Err(LockError::backend_message(
                    ErrorKind::Configuration,
                    PROVIDER,
                    operation,
                    name,
                    format!(
                        "the root node {} at {} holds {} ({} bytes), and ShedLock's root holds \
                         no data: it looks like another application's node, whose data the \
                         provider's writes to its root would wipe, so nothing was written; give \
                         the provider a root of its own (ZookeeperLockProviderBuilder::root)",
                        self.root,
                        self.endpoint,
                        storage::describe_data(&data),
                        data.len()
                    ),
                ));
            }
            Ok(_) => {}
            Err(zookeeper_client::Error::NoNode) => {
                self.ensure_root(client, operation, name, deadline).await?;
            }
            Err(error) => return Err(self.failure(client, operation, name, error).await),
        }
        self.root_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    pub(crate) async fn ensure_root(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<(), LockError> {
        match self
            .request(
                operation,
                name,
                deadline,
                storage::create_root(client, &self.root),
            )
            .await?
        {
            Ok(()) => Ok(()),
            Err(error) => Err(self.failure(client, operation, name, error).await),
        }
    }
}

/// A write of a lock node that landed: the node's stat after it, and the `lock_until` it
/// carries.
#[derive(Clone, Copy)]
pub(crate) struct Written {
    pub(crate) stat: Stat,
    pub(crate) lock_until: ServerMicros,
}

pub(crate) fn micros(duration: Duration) -> ServerMicros {
    ServerMicros::try_from(duration.as_micros()).unwrap_or(ServerMicros::MAX)
}

pub(crate) fn system_time(micros: ServerMicros) -> SystemTime {
    match u64::try_from(micros) {
        Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_micros(after),
        Err(_) => SystemTime::UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs()),
    }
}

/// `lock_until` for a lock of `duration` from a request sent at `sent`: the latest the
/// server's clock can read then, plus `duration`, rounded up to ShedLock's milliseconds.
pub(crate) fn held_until(clock: &ServerClock, sent: Instant, duration: Duration) -> ServerMicros {
    storage::ceil_to_millis(
        clock
            .latest(sent.into_std())
            .saturating_add(micros(duration)),
    )
}
