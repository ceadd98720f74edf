//! The leases a lock's key is attached to: granting them, keeping keyless ones as spares for
//! the next operation of the same TTL, and revoking the rest.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use shedlock_core::{LockError, Operation};
use tokio::sync::oneshot;
use tokio::time::Instant;
use tracing::debug;

use crate::provider::Inner;
use crate::{PROVIDER, storage};

/// At most this many TTLs keep spare leases, and at most [`SPARES_PER_TTL`] each (enough for
/// a few locks of one TTL held at once, each extended now and then); a spare past them is
/// revoked instead, so keyless leases never pile up.
const MAX_SPARE_TTLS: usize = 32;
const SPARES_PER_TTL: usize = 4;

/// A spare lease is only reused while this much of its life is surely left, so that the
/// keep-alive reaches etcd before the lease ends.
const SPARE_MARGIN: Duration = Duration::from_secs(1);

/// Spares of at least this TTL, in seconds, are kept alive in the background (see
/// [`Inner::refresh_ending_spares`]); one keep-alive per spare about once a TTL, so at most one
/// a minute.
const KEPT_ALIVE_FROM_TTL: i64 = 60;

/// How often the background keeper looks for spares about to end.
const KEEPER_TICK: Duration = Duration::from_secs(10);

/// A lease this provider granted.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lease {
    pub(crate) id: i64,
    /// The TTL asked for, in seconds: what a keep-alive restarts it at (etcd may have raised
    /// it to its minimum, the same for every lease asked with this TTL).
    pub(crate) ttl: i64,
    /// Before this the lease has surely not ended: its TTL counted from when the grant or
    /// keep-alive was sent, which is no later than when etcd applied it.
    pub(crate) alive_until: Instant,
}

impl Lease {
    pub(crate) fn new(id: i64, ttl: i64, sent: Instant) -> Self {
        Self {
            id,
            ttl,
            alive_until: sent + Duration::from_secs(ttl.unsigned_abs()),
        }
    }
}

impl Inner {
    /// The freshest spare lease of `ttl`, taken, if it surely lives past any request sent now
    /// and answered within the operation timeout: its keep-alive may then travel beside the
    /// transaction that puts a key on it, rather than before, since the transaction finds the
    /// lease alive whichever of the two etcd applies first.
    pub(crate) fn young_spare(&self, ttl: i64) -> Option<Lease> {
        let mut spares = self.spare_leases.lock().ok()?;
        let kept = spares.get_mut(&ttl)?;
        let outlasts = Instant::now() + self.operation_timeout + SPARE_MARGIN;
        if kept.last()?.alive_until > outlasts {
            kept.pop()
        } else {
            None
        }
    }

    /// A lease of `ttl` seconds for a key to be put on: a spare one restarted by one keep-alive,
    /// else a new grant. Either is one request.
    pub(crate) async fn lease(
        &self,
        operation: Operation,
        name: &str,
        ttl: i64,
    ) -> Result<Lease, LockError> {
        let mut client = self.client.clone();
        let spare = self.spare_leases.lock().map_or(None, |mut spares| {
            // The freshest is last; any before it that are too old are left to end.
            let spare = spares.get_mut(&ttl)?.pop();
            spare.filter(|spare| spare.alive_until > Instant::now() + SPARE_MARGIN)
        });
        if let Some(spare) = spare {
            let sent = Instant::now();
            // An error leaves a keyless lease that ends at its TTL; nothing to clean up.
            if self
                .call(
                    operation,
                    name,
                    storage::refresh_lease(&mut client, spare.id),
                )
                .await?
            {
                return Ok(Lease::new(spare.id, ttl, sent));
            }
        }
        let sent = Instant::now();
        let id = self
            .call(operation, name, storage::grant_lease(&mut client, ttl))
            .await?;
        Ok(Lease::new(id, ttl, sent))
    }

    /// Keeps leases that surely carry no key (a transaction just deleted our key, moved it off
    /// them, or never put it) for the next acquire, extend or release of the same TTL, instead
    /// of revoking them: a lock cycle then costs no revoke, and keyless leases do not pile up,
    /// one spare per TTL at most. A lease too close to its end is left to end by itself (etcd
    /// expires it); one that finds its TTL's place taken is revoked in the background.
    pub(crate) fn recycle(self: &Arc<Self>, leases: Vec<Lease>) {
        let mut surplus = Vec::new();
        match self.spare_leases.lock() {
            Ok(mut spares) => {
                let soon = Instant::now() + SPARE_MARGIN;
                spares.retain(|_, kept| {
                    kept.retain(|spare| spare.alive_until > soon);
                    !kept.is_empty()
                });
                if leases.iter().any(|lease| lease.ttl >= KEPT_ALIVE_FROM_TTL) {
                    self.start_spare_keeper();
                }
                for lease in leases.into_iter().filter(|lease| lease.alive_until > soon) {
                    if !spares.contains_key(&lease.ttl) && spares.len() >= MAX_SPARE_TTLS {
                        surplus.push(lease);
                        continue;
                    }
                    let kept = spares.entry(lease.ttl).or_default();
                    kept.push(lease);
                    kept.sort_by_key(|spare| spare.alive_until);
                    if kept.len() > SPARES_PER_TTL {
                        surplus.push(kept.remove(0));
                    }
                }
            }
            Err(_) => surplus = leases,
        }
        self.revoke_in_background(surplus, "a spare lease of that TTL is kept already");
    }

    /// Starts the background keeper of spare leases, once, on the current runtime. It holds the
    /// provider weakly and ends when the provider is gone.
    fn start_spare_keeper(self: &Arc<Self>) {
        if self.spare_keeper_started.swap(true, Ordering::Relaxed) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.spare_keeper_started.store(false, Ordering::Relaxed);
            return;
        };
        let inner: Weak<Self> = Arc::downgrade(self);
        runtime.spawn(async move {
            let mut ticks = tokio::time::interval(KEEPER_TICK);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(inner) = Weak::upgrade(&inner) else {
                    return;
                };
                inner.refresh_ending_spares().await;
            }
        });
    }

    /// Restarts, by one keep-alive each, the spares of a TTL of at least a minute that would
    /// otherwise end before the keeper's next look while still young enough to be used.
    ///
    /// A spare lives for its TTL, `lock_at_most_for`: a job idle for longer than that (an hourly
    /// job with a 10-minute `lock_at_most_for`) would find none, and its acquire would grant a
    /// lease, then send its transaction, two round trips in turn where a young spare's
    /// keep-alive goes beside the transaction in one. Kept alive here, off the caller's path,
    /// the spare is young whenever the job comes back. A spare under refresh is out of the
    /// map, so no acquire uses it meanwhile (that acquire grants a lease instead); one whose
    /// keep-alive fails or finds it ended is dropped, and ends at its TTL.
    async fn refresh_ending_spares(self: &Arc<Self>) {
        let ending_before = Instant::now() + self.operation_timeout + SPARE_MARGIN + KEEPER_TICK;
        let ending: Vec<Lease> = match self.spare_leases.lock() {
            Ok(mut spares) => spares
                .iter_mut()
                .filter(|(ttl, _)| **ttl >= KEPT_ALIVE_FROM_TTL)
                .flat_map(|(_, kept)| {
                    let (ending, young): (Vec<Lease>, Vec<Lease>) = kept
                        .drain(..)
                        .partition(|spare| spare.alive_until <= ending_before);
                    *kept = young;
                    ending
                })
                .collect::<Vec<_>>(),
            Err(_) => return,
        };
        let mut refreshed = Vec::with_capacity(ending.len());
        for spare in ending {
            let mut client = self.client.clone();
            let sent = Instant::now();
            let outcome = tokio::time::timeout(
                self.operation_timeout,
                storage::refresh_lease(&mut client, spare.id),
            )
            .await;
            match outcome {
                Ok(Ok(true)) => refreshed.push(Lease::new(spare.id, spare.ttl, sent)),
                Ok(Ok(false)) => debug!(lease = spare.id, "spare lease had ended; dropped"),
                Ok(Err(error)) => debug!(
                    lease = spare.id, endpoint = %self.endpoint, %error,
                    "could not keep a spare lease alive; dropped, it ends at its TTL"
                ),
                Err(_) => debug!(
                    lease = spare.id, endpoint = %self.endpoint,
                    "keeping a spare lease alive timed out; dropped, it ends at its TTL"
                ),
            }
        }
        self.recycle(refreshed);
    }

    /// Revokes leases in the background: spares beyond what is kept, leases of an acquisition
    /// found no longer ours (what is on them now is not known), or leases that may carry the key
    /// of an attempt whose answer never came. Each lease is
    /// this provider's own, so revoking it can only delete our own key. A revoke that fails
    /// changes nothing: the lease ends at its TTL anyway.
    pub(crate) fn revoke_in_background(self: &Arc<Self>, leases: Vec<Lease>, why: &'static str) {
        if leases.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = self.clone();
        runtime.spawn(async move {
            for Lease { id: lease, .. } in leases {
                let mut client = inner.client.clone();
                let outcome = tokio::time::timeout(
                    inner.operation_timeout,
                    storage::revoke_lease(&mut client, lease),
                )
                .await;
                match outcome {
                    Ok(Ok(())) => debug!(lease, why, "revoked lease"),
                    Ok(Err(error)) => debug!(
                        lease, why, endpoint = %inner.endpoint, %error,
                        "could not revoke lease; it ends at its TTL"
                    ),
                    Err(_) => debug!(
                        lease, why, endpoint = %inner.endpoint,
                        "revoking lease timed out; it ends at its TTL"
                    ),
                }
            }
        });
    }
}

/// A lease for the rest of one acquisition's `lock_at_least_for`, made ready in the background
/// while its task runs. A release within that time must leave the key on a lease that ends
/// when `lock_at_least_for` does; made at the release, the lease is a call the move of the key
/// then waits for (two round trips in turn). Made ready beforehand, the release is the move
/// alone, one round trip.
///
/// Used only where that stays exact:
/// - never early: it is made after the acquire was answered, for at least `lock_at_least_for`,
///   so it ends no sooner than the acquisition's held-until after a release;
/// - late by no more than the declared precision: a lease whose answer came too long after the
///   acquire started is not used, and the release makes one then, as without it;
/// - alive when the move reaches etcd: one that would end within the operation timeout is not
///   used either.
///
/// A lease not used is kept as a spare for the next acquisition's, or revoked.
pub(crate) struct AtLeastLease {
    inner: Arc<Inner>,
    /// Where the lease arrives once made; closed by the first [`take`](Self::take), after which
    /// one that arrives goes back to the spares.
    made: Mutex<oneshot::Receiver<ReadyLease>>,
    /// A key on the lease must be free by then: the acquire's start, plus `lock_at_least_for`,
    /// plus the declared precision.
    free_by: Instant,
}

impl AtLeastLease {
    /// Starts making the lease of `acquisition_started`'s acquisition of `name`, just answered;
    /// `None` when there is no rest to cover (`lock_at_least_for` is zero) or no runtime to run
    /// it on.
    pub(crate) fn start(
        inner: &Arc<Inner>,
        name: &str,
        lock_at_least_for: Duration,
        acquisition_started: Instant,
    ) -> Option<Self> {
        if lock_at_least_for.is_zero() {
            return None;
        }
        let ttl = storage::lease_secs(lock_at_least_for)?;
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (arrive, made) = oneshot::channel();
        let (maker, name) = (inner.clone(), name.to_owned());
        runtime.spawn(async move {
            match maker.lease(Operation::Release, &name, ttl).await {
                Ok(lease) => {
                    let ready = ReadyLease::answered(lease, Instant::now(), maker.time_precision);
                    if let Err(unwanted) = arrive.send(ready) {
                        maker.recycle(vec![unwanted.lease]);
                    }
                }
                Err(error) => {
                    debug!(%error, "no lease made ready for the rest of lock_at_least_for");
                }
            }
        });
        Some(Self {
            inner: inner.clone(),
            made: Mutex::new(made),
            free_by: acquisition_started + lock_at_least_for + inner.time_precision,
        })
    }

    /// The lease, if it has arrived and is fit for a release sent now (see the type's docs);
    /// else `None`, and none is waited for any more (an unfit one is kept as a spare).
    pub(crate) fn take(&self) -> Option<Lease> {
        let ready = {
            let mut made = self.made.lock().ok()?;
            made.close();
            made.try_recv().ok()?
        };
        let now = Instant::now();
        if ready.fit(self.free_by, now, self.inner.operation_timeout) {
            Some(ready.lease)
        } else {
            self.inner.recycle(vec![ready.lease]);
            None
        }
    }
}

impl Drop for AtLeastLease {
    /// A lease made ready and not used carries no key: it is kept as a spare.
    fn drop(&mut self) {
        if let Some(lease) = self.take() {
            self.inner.recycle(vec![lease]);
        }
    }
}

/// A lease made for the rest of `lock_at_least_for`, and when etcd ends it at the latest.
#[derive(Debug)]
struct ReadyLease {
    lease: Lease,
    ends_by: Instant,
}

impl ReadyLease {
    /// `lease`, granted or restarted by a request answered at `answered`: etcd counts its TTL
    /// from some moment before that, raised to the server's minimum, `precision`.
    fn answered(lease: Lease, answered: Instant, precision: Duration) -> Self {
        let lasts = Duration::from_secs(lease.ttl.unsigned_abs()).max(precision);
        Self {
            lease,
            ends_by: answered + lasts,
        }
    }

    /// Whether a release sent at `now` may move the key onto it: it ends by `free_by`, and it
    /// surely lives until the move, answered within `operation_timeout`, has reached etcd.
    fn fit(&self, free_by: Instant, now: Instant, operation_timeout: Duration) -> bool {
        self.ends_by <= free_by && self.lease.alive_until > now + operation_timeout + SPARE_MARGIN
    }
}

/// A duration as whole seconds for a lease, refusing what etcd cannot store.
pub(crate) fn lease_secs(
    operation: Operation,
    name: &str,
    duration: Duration,
) -> Result<i64, LockError> {
    storage::lease_secs(duration).ok_or_else(|| {
        LockError::invalid_request(
            PROVIDER,
            operation,
            name,
            format!(
                "{duration:?} is longer than an etcd lease can be (at most {} s)",
                storage::MAX_LEASE_SECS
            ),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: Duration = Duration::from_secs(1);

    /// A lease of `ttl` seconds sent at `sent`, answered `answered_after` later.
    fn ready(ttl: i64, sent: Instant, answered_after: Duration, precision: Duration) -> ReadyLease {
        ReadyLease::answered(Lease::new(7, ttl, sent), sent + answered_after, precision)
    }

    #[test]
    fn a_lease_answered_too_late_to_end_within_the_precision_is_not_fit() {
        let started = Instant::now();
        let (at_least, precision) = (20 * SEC, 2 * SEC);
        let free_by = started + at_least + precision;
        // Sent when the acquire was answered, 10 ms after it started.
        let sent = started + Duration::from_millis(10);
        let timeout = 5 * SEC;
        let on_time = ready(20, sent, 2 * SEC - Duration::from_millis(10), precision);
        assert_eq!(on_time.ends_by, free_by);
        assert!(
            on_time.fit(free_by, sent, timeout),
            "ends exactly at free_by"
        );
        let late = ready(20, sent, 2 * SEC, precision);
        assert!(
            !late.fit(free_by, sent, timeout),
            "ends 10 ms after free_by"
        );
    }

    #[test]
    fn a_ttl_under_the_servers_minimum_lasts_the_minimum() {
        let sent = Instant::now();
        let short = ready(1, sent, Duration::ZERO, 2 * SEC);
        assert_eq!(short.ends_by, sent + 2 * SEC);
        let long = ready(30, sent, Duration::ZERO, 2 * SEC);
        assert_eq!(long.ends_by, sent + 30 * SEC);
    }

    #[test]
    fn a_lease_that_could_end_before_the_move_reaches_etcd_is_not_fit() {
        let sent = Instant::now();
        let lease = ready(20, sent, Duration::ZERO, 2 * SEC);
        let free_by = sent + 60 * SEC;
        let timeout = 5 * SEC;
        // alive_until is sent + 20 s: fit while more than the timeout and the margin are left.
        let last_moment = sent + 20 * SEC - timeout - SPARE_MARGIN;
        assert!(!lease.fit(free_by, last_moment, timeout));
        assert!(lease.fit(free_by, last_moment - Duration::from_millis(1), timeout));
    }
}
