//! The operator's view of the lock nodes ([`LockAdmin`]): list, inspect and force-unlock.
//!
//! Everything is read from the nodes under the root, as ShedLock's Curator provider leaves
//! them: a lock node holds its `lock_until` and nothing else, so no holder and no acquisition
//! time are shown (`locked_by` and `locked_at` stay `None`), only what ZooKeeper stamps on the
//! node itself.
//!
//! - **State** is judged as [`try_lock`](shedlock_core::LockProvider::try_lock) judges it:
//!   `lock_until` against the earliest the server's clock can read (the provider's estimate,
//!   raised to the node's own `mtime`), so a lock that an acquire would refuse is never shown
//!   free. `held_until` is `lock_until` as stored. A node whose data is not an instant (empty,
//!   as the parents Curator creates for a name with `/`, or written by something else) is
//!   shown held with no `held_until`: acquire refuses it, and Java ShedLock treats it as held
//!   for ever.
//! - **Listing** reads the root's children (ZooKeeper has no paging, so every page reads the
//!   whole list of names, without data), keeps the names under the prefix after the cursor,
//!   takes the `limit` first in name order, and reads those nodes with multi-read requests
//!   (ZooKeeper 3.6 or later), all sent at once: two requests per page, whatever the page
//!   size. The cursor is the node name of the page's last lock. Node names that are not an
//!   escape this provider writes (someone else's node, or a Java lock whose name holds a `%`)
//!   name no lock this provider can take, inspect or free, and are left out.
//! - **An acquisition** is the `mzxid` and version of the node's last write,
//!   `<mzxid>:<version>`. Every write changes both, so an id goes stale as soon as anyone
//!   writes the node, its holder's extend included: force-unlock then answers `false`, and the
//!   operator inspects again. The `mzxid` also tells a node deleted and created again apart.
//! - **The fencing token** shown is the `mzxid`: the token of the acquisition that wrote the
//!   node, until its holder extends or releases it (ZooKeeper keeps no record of which write
//!   acquired), and always below the next acquisition's token.
//! - **Force-unlock** reads the node (one request) and, if it is still at the acquisition's
//!   `mzxid` and version and held, writes `lock_until` = the earliest the server's clock can
//!   read, at that version (one compare-and-set request). The node is kept, as a release keeps
//!   it, so the next acquisition's token is larger and Java nodes read a released lock. A
//!   write that lands after the lock ran out (its `mtime` tells) answers `false`: that
//!   acquisition no longer held it, and the write only moved a passed `lock_until` earlier.

use std::future::Future;

use async_trait::async_trait;
use shedlock_core::{
    AcquisitionId, ErrorKind, LockAdmin, LockError, LockInfo, LockPage, LockState, Operation,
    PageCursor, PageRequest,
};
use tokio::time::Instant;
use zookeeper_client::{Client, MultiReadResult, Stat};

use crate::calibration::system_time;
use crate::failure::session_ended;
use crate::server_clock::ServerMicros;
use crate::session::Session;
use crate::{PROVIDER, ZookeeperLockProvider, paths, storage};

/// How many bytes of paths one multi-read request carries at most: far below ZooKeeper's
/// default request limit (`jute.maxbuffer`, 1 MiB), so a page of long names is split over a few
/// requests rather than refused.
const MULTI_READ_BYTES: usize = 512 * 1024;

/// What one getData adds to a multi-read besides its path: the operation header, the path's
/// length and the watch flag.
const MULTI_READ_OP_BYTES: usize = 18;

/// The node's last write, which names one acquisition: any later write, by anyone, changes
/// both numbers, and `mzxid` also differs for a node deleted and created again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct NodeWrite {
    mzxid: i64,
    version: i32,
}

impl NodeWrite {
    fn of(stat: &Stat) -> Self {
        Self {
            mzxid: stat.mzxid,
            version: stat.version,
        }
    }

    fn id(self) -> AcquisitionId {
        AcquisitionId::new(format!("{}:{}", self.mzxid, self.version))
    }

    fn parse(name: &str, acquisition: &AcquisitionId) -> Result<Self, LockError> {
        let text = acquisition.as_str();
        text.split_once(':')
            .and_then(|(mzxid, version)| {
                Some(Self {
                    mzxid: mzxid.parse().ok()?,
                    version: version.parse().ok()?,
                })
            })
            .filter(|write| write.mzxid > 0 && write.version >= 0)
            .ok_or_else(|| {
                LockError::invalid_request(
                    PROVIDER,
                    Operation::ForceUnlock,
                    name,
                    format!(
                        "acquisition id {text:?} is not one the zookeeper provider produced \
                         (<mzxid>:<version> of the lock node, as a listing or inspect shows it); \
                         nothing was changed"
                    ),
                )
            })
    }
}

/// The lock node `data`/`stat` stands for, judged at `server_now` (the earliest the server's
/// clock could read once the node was read), raised to the node's `mtime`, as acquire judges.
fn lock_info(name: &str, data: &[u8], stat: &Stat, server_now: ServerMicros) -> LockInfo {
    let mut info = LockInfo::new(name, LockState::Held, NodeWrite::of(stat).id());
    if let Ok(token) = u64::try_from(stat.mzxid) {
        info = info.with_fencing_token(token);
    }
    match storage::parse_lock_until(data) {
        Some(until) => {
            let now = server_now.max(stat.mtime.saturating_mul(1000));
            info.judged_at(system_time(until), system_time(now))
        }
        None => info,
    }
}

/// The lock name a cursor (the node name of a page's last lock) stands for.
fn cursor_name(cursor: &PageCursor) -> Result<String, LockError> {
    paths::lock_name(cursor.as_str()).ok_or_else(|| {
        LockError::invalid_request(
            PROVIDER,
            Operation::List,
            "",
            format!(
                "page cursor {:?} is not one this provider returned (the node name of the last \
                 lock listed); nothing was read: start the listing again without one",
                cursor.as_str()
            ),
        )
    })
}

#[async_trait]
impl LockAdmin for ZookeeperLockProvider {
    /// One page in name order: the root's children (one request, every name), then the data
    /// of this page's nodes (one multi-read request per 512 KiB of paths, all sent at once;
    /// one for any ordinary page). Needs ZooKeeper 3.6 or later.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let after = request.after.as_ref().map(cursor_name).transpose()?;
        self.in_session(Operation::List, "", |session| {
            self.list_in(session, request, after.as_deref())
        })
        .await
    }

    /// One getData.
    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let path = self.lock_path(name)?;
        self.in_session(Operation::Inspect, name, |session| {
            self.inspect_in(session, name, &path)
        })
        .await
    }

    /// A getData, then a setData at the version read if that is still the acquisition's and
    /// the lock is held: two requests.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let path = self.lock_path(name)?;
        let expected = NodeWrite::parse(name, acquisition)?;
        self.in_session(Operation::ForceUnlock, name, |session| {
            self.force_unlock_in(session, name, &path, expected)
        })
        .await
    }
}

impl ZookeeperLockProvider {
    /// Runs `attempt` in the provider's session, and once more in a new session if ZooKeeper
    /// refused one of its requests because the session had ended: that request did not run,
    /// and the ones before it only read (or wrote the root to learn the clock).
    async fn in_session<T, F, Attempt>(
        &self,
        operation: Operation,
        name: &str,
        attempt: F,
    ) -> Result<T, LockError>
    where
        F: Fn(Session) -> Attempt,
        Attempt: Future<Output = Result<T, LockError>>,
    {
        let session = self.inner.session(operation, name).await?;
        match attempt(session).await {
            Err(error) if session_ended(&error) => {
                attempt(self.inner.session(operation, name).await?).await
            }
            outcome => outcome,
        }
    }

    async fn list_in(
        &self,
        session: Session,
        request: &PageRequest,
        after: Option<&str>,
    ) -> Result<LockPage, LockError> {
        let inner = &self.inner;
        let client = &session.client;
        let operation = Operation::List;
        let deadline = Instant::now() + inner.operation_timeout;
        let clock = inner.calibrated(client, operation, "", deadline).await?;
        let children = match inner
            .request(operation, "", deadline, client.list_children(&inner.root))
            .await?
        {
            Ok(children) => children,
            Err(zookeeper_client::Error::NoNode) => Vec::new(),
            Err(error) => return Err(inner.failure(client, operation, "", error).await),
        };
        // (lock name, node name): sorted by lock name, which is unique per node.
        let mut page: Vec<(String, String)> = children
            .into_iter()
            .filter_map(|node| {
                let name = paths::lock_name(&node)?;
                let wanted = name.starts_with(&request.prefix)
                    && after.is_none_or(|after| name.as_str() > after);
                wanted.then_some((name, node))
            })
            .collect();
        let limit = request.limit.max(1);
        let more = page.len() > limit;
        if more {
            page.select_nth_unstable(limit);
            page.truncate(limit);
        }
        page.sort_unstable();
        let reads = self.read_nodes(client, &page, deadline).await?;
        let server_now = clock.earliest(std::time::Instant::now());
        let locks = page
            .iter()
            .zip(reads)
            .filter_map(|((name, _), read)| {
                let (data, stat) = read?;
                Some(lock_info(name, &data, &stat, server_now))
            })
            .collect();
        let next = match page.last() {
            Some((_, node)) if more => Some(PageCursor::new(node.clone())),
            _ => None,
        };
        Ok(LockPage { locks, next })
    }

    /// The data and stat of each of `nodes`, in order; `None` for a node deleted since it was
    /// listed. Every multi-read is sent before any answer is awaited, so a page split over
    /// several costs about one round trip.
    async fn read_nodes(
        &self,
        client: &Client,
        nodes: &[(String, String)],
        deadline: Instant,
    ) -> Result<Vec<Option<(Vec<u8>, Stat)>>, LockError> {
        let inner = &self.inner;
        let operation = Operation::List;
        let mut reader = client.new_multi_reader();
        let mut pending = Vec::new();
        let mut batched = 0;
        for (_, node) in nodes {
            let path = format!("{}/{node}", inner.root);
            if batched > 0 && batched + path.len() > MULTI_READ_BYTES {
                pending.push(reader.commit());
                batched = 0;
            }
            if let Err(error) = reader.add_get_data(&path) {
                return Err(inner.failure(client, operation, "", error).await);
            }
            batched += path.len() + MULTI_READ_OP_BYTES;
        }
        if batched > 0 {
            pending.push(reader.commit());
        }
        let mut reads = Vec::with_capacity(nodes.len());
        for answer in pending {
            let results = match inner.request(operation, "", deadline, answer).await? {
                Ok(results) => results,
                Err(error @ zookeeper_client::Error::Unimplemented) => {
                    // A server too old for the request: the deployment must change.
                    return Err(LockError::backend(
                        ErrorKind::Configuration,
                        PROVIDER,
                        operation,
                        "",
                        format!(
                            "ZooKeeper at {} does not implement multi-read, which listing \
                             uses to read a page in one request: it needs ZooKeeper 3.6 or later",
                            inner.endpoint
                        ),
                        error,
                    ));
                }
                Err(error) => return Err(inner.failure(client, operation, "", error).await),
            };
            for result in results {
                reads.push(match result {
                    MultiReadResult::Data { data, stat } => Some((data, stat)),
                    MultiReadResult::Error {
                        err: zookeeper_client::Error::NoNode,
                    } => None,
                    MultiReadResult::Error { err } => {
                        return Err(inner.failure(client, operation, "", err).await);
                    }
                    other => {
                        // An answer of another kind than asked, to a request already sent.
                        return Err(LockError::backend_message(
                            ErrorKind::OutcomeUnknown,
                            PROVIDER,
                            operation,
                            "",
                            format!(
                                "ZooKeeper at {} answered a node read with {other:?}",
                                inner.endpoint
                            ),
                        ));
                    }
                });
            }
        }
        Ok(reads)
    }

    async fn inspect_in(
        &self,
        session: Session,
        name: &str,
        path: &str,
    ) -> Result<Option<LockInfo>, LockError> {
        let inner = &self.inner;
        let client = &session.client;
        let operation = Operation::Inspect;
        let deadline = Instant::now() + inner.operation_timeout;
        let clock = inner.calibrated(client, operation, name, deadline).await?;
        match inner
            .request(operation, name, deadline, storage::read(client, path))
            .await?
        {
            Ok((data, stat)) => {
                let server_now = clock.earliest(std::time::Instant::now());
                Ok(Some(lock_info(name, &data, &stat, server_now)))
            }
            Err(zookeeper_client::Error::NoNode) => Ok(None),
            Err(error) => Err(inner.failure(client, operation, name, error).await),
        }
    }

    async fn force_unlock_in(
        &self,
        session: Session,
        name: &str,
        path: &str,
        expected: NodeWrite,
    ) -> Result<bool, LockError> {
        let inner = &self.inner;
        let client = &session.client;
        let operation = Operation::ForceUnlock;
        let deadline = Instant::now() + inner.operation_timeout;
        let clock = inner.calibrated(client, operation, name, deadline).await?;
        let (data, stat) = match inner
            .request(operation, name, deadline, storage::read(client, path))
            .await?
        {
            Ok(read) => read,
            Err(zookeeper_client::Error::NoNode) => return Ok(false),
            Err(error) => return Err(inner.failure(client, operation, name, error).await),
        };
        if NodeWrite::of(&stat) != expected {
            return Ok(false);
        }
        // `None`: not an instant, which acquire refuses and Java treats as held for ever.
        let until = storage::parse_lock_until(&data);
        let sent = Instant::now();
        let now = clock
            .earliest(sent.into_std())
            .max(stat.mtime.saturating_mul(1000));
        if until.is_some_and(|until| now >= until) {
            return Ok(false);
        }
        // "Now" as a release writes it: never later than this write's own mtime, so the next
        // reader sees the lock free at once; and below `until`, so it never lengthens a lock.
        let free = storage::format_lock_until(storage::floor_to_millis(now));
        let written = match inner
            .request(
                operation,
                name,
                deadline,
                storage::write(client, path, &free, stat.version),
            )
            .await?
        {
            Ok(written) => written,
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => {
                return Ok(false);
            }
            Err(error) => return Err(inner.failure(client, operation, name, error).await),
        };
        inner.observe(sent, Instant::now(), &written);
        // Landed after the lock ran out: that acquisition no longer held it. The write only
        // moved a lock_until that had passed to an earlier instant, so the lock is as free as
        // it was and nothing needs undoing.
        Ok(until.is_none_or(|until| written.mtime.saturating_mul(1000) < until))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acquisition_ids_round_trip_or_are_refused() {
        let write = NodeWrite {
            mzxid: 0x1_0000_002a,
            version: 3,
        };
        assert_eq!(write.id().as_str(), "4294967338:3");
        assert_eq!(NodeWrite::parse("n", &write.id()).unwrap(), write);
        for bad in [
            "", "42", "42:", ":3", "x:3", "42:y", "0:3", "42:-1", "42:3:4",
        ] {
            let error = NodeWrite::parse("n", &AcquisitionId::new(bad)).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("is not one the zookeeper provider produced"),
                "{bad:?}: {error}"
            );
        }
    }

    #[test]
    fn a_node_is_judged_by_the_later_of_the_clock_estimate_and_its_mtime() {
        let stat = Stat {
            czxid: 5,
            mzxid: 7,
            pzxid: 5,
            ctime: 900,
            mtime: 1_000,
            version: 2,
            cversion: 0,
            aversion: 0,
            ephemeral_owner: 0,
            data_length: 24,
            num_children: 0,
        };
        let data = storage::format_lock_until(1_500_000);
        let held = lock_info("job", data.as_bytes(), &stat, 0);
        assert_eq!(held.state, LockState::Held);
        assert_eq!(held.remaining, Some(std::time::Duration::from_millis(500)));
        assert_eq!(held.fencing_token, Some(7));
        assert_eq!(held.acquisition.as_str(), "7:2");
        assert_eq!(held.locked_by, None);
        let free = lock_info("job", data.as_bytes(), &stat, 1_500_000);
        assert_eq!((free.state, free.remaining), (LockState::Free, None));
        let unreadable = lock_info("job", b"", &stat, 9_000_000);
        assert_eq!(unreadable.state, LockState::Held);
        assert_eq!(unreadable.held_until, None);
    }

    #[test]
    fn cursors_are_node_names() {
        assert_eq!(cursor_name(&PageCursor::new("a%2Fb")).unwrap(), "a/b");
        let error = cursor_name(&PageCursor::new("%zz")).unwrap_err();
        assert!(
            error
                .to_string()
                .contains("is not one this provider returned")
        );
    }
}
