//! The operator's view of the lock keys ([`LockAdmin`]): list, inspect and force-unlock.
//!
//! A lock exists in etcd only while its key does, and a key lives on a lease: released locks
//! (their key deleted) and expired ones (their lease ended, and etcd deleted the key with it)
//! are simply absent. What a listing shows is therefore almost only held locks.
//!
//! - **Listing** is one `Range` per page over `<prefix>:<env>:<name prefix>` up to the
//!   prefix's successor, in key order, `limit` keys at a time; the next page starts just after
//!   the last key read, so a listing of any length never holds more than one page. A range is
//!   byte-exact, so no character of a name prefix is a pattern.
//! - **Remaining time** is the key's lease TTL, by etcd's clock: the key's value holds the
//!   acquisition time but nothing says when it ends (extend and release move the key to other
//!   leases), and etcd has no call that reads several leases' TTLs. So a page also costs one
//!   `LeaseTimeToLive` per distinct lease on it (one per held lock), sent concurrently over the
//!   one connection, and inspecting a lock costs two calls.
//! - **An acquisition** is the key's `create_revision` and its value,
//!   `<create_revision>/<value>`: a new acquisition can only create the key anew (acquire
//!   requires it absent), which raises the revision, and the value names the holder (unique per
//!   acquisition for this provider, the host name and time for Java's). Extending or
//!   releasing within `lock_at_least_for` rewrites neither, so an id stays valid while its
//!   acquisition holds the lock. `create_revision` is also the fencing token this provider
//!   hands out.
//! - **Force-unlock** is one transaction: if the key's `create_revision` and value are still
//!   the acquisition's, delete the key. The holder's lease is not revoked (that would be a
//!   second call, and the lease carries nothing once the key is gone): it ends at its TTL, or
//!   earlier when the holder's next release or extend finds the lock gone and revokes it.
//!   A transaction cannot compare a lease's life, so a key whose lease has just ended but
//!   which etcd has not deleted yet (it does so on a 500 ms tick) is listed as free, yet is
//!   still deleted by a force-unlock of its id (which answers `true`); until then etcd refuses
//!   every acquire of it anyway.

use std::collections::{BTreeSet, HashMap};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use etcd_client::{Client, Compare, CompareOp, GetOptions, KeyValue, Txn, TxnOp};
use futures_util::{StreamExt, TryStreamExt};
use shedlock_core::{
    AcquisitionId, LockAdmin, LockError, LockInfo, LockPage, LockState, Operation, PageCursor,
    PageRequest,
};

use crate::{EtcdLockProvider, PROVIDER, storage};

/// How many `LeaseTimeToLive` calls of one page are in flight at once: enough that a page of
/// hundreds of locks costs a few round-trip times, few enough not to flood the server.
const CONCURRENT_TTL_READS: usize = 64;

/// What etcd said about a lease.
#[derive(Debug, Clone, Copy)]
struct LeaseTtl {
    /// Whole seconds left, truncated; negative once the lease has ended or is gone.
    ttl: i64,
    /// The TTL the lease was granted (or last restarted) with.
    granted: i64,
}

#[async_trait]
impl LockAdmin for EtcdLockProvider {
    /// One page in key order (which is name order: the key is the name behind a fixed
    /// `<prefix>:<env>:`), from one `Range` and one `LeaseTimeToLive` per distinct lease on the
    /// page. The cursor is the last name read, as hexadecimal bytes. Keys whose name is not
    /// UTF-8 are no lock any ShedLock wrote and are passed over.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let inner = &self.inner;
        let space = storage::lock_key(&inner.key_prefix, &inner.env, "").into_bytes();
        let mut first = space.clone();
        first.extend_from_slice(request.prefix.as_bytes());
        let end = prefix_end(&first);
        let start = match &request.after {
            None => first,
            Some(cursor) => {
                let mut after = space.clone();
                after.extend(decode_cursor(cursor)?);
                // The smallest key greater than the cursor's.
                after.push(0);
                after.max(first)
            }
        };
        if start >= end {
            return Ok(LockPage {
                locks: Vec::new(),
                next: None,
            });
        }
        let limit = i64::try_from(request.limit.max(1)).unwrap_or(i64::MAX);
        let mut client = inner.client.clone();
        let (kvs, more, ttls) = inner
            .call(Operation::List, "", async move {
                let options = GetOptions::new().with_range(end).with_limit(limit);
                let mut page = client.get(start, Some(options)).await?;
                let kvs = page.take_kvs();
                let ttls = lease_ttls(&client, kvs.iter().map(KeyValue::lease)).await?;
                Ok((kvs, page.more(), ttls))
            })
            .await?;
        let now = SystemTime::now();
        let next = match kvs.last() {
            Some(last) if more => Some(PageCursor::new(encode_cursor(&last.key()[space.len()..]))),
            _ => None,
        };
        let locks = kvs
            .iter()
            .filter_map(|kv| {
                let name = std::str::from_utf8(kv.key().strip_prefix(space.as_slice())?).ok()?;
                Some(lock_info(name, kv, ttls.get(&kv.lease()).copied(), now))
            })
            .collect();
        Ok(LockPage { locks, next })
    }

    /// Two calls: the key, then its lease's TTL.
    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let key = self.lock_key(name)?;
        let mut client = self.inner.client.clone();
        let found = self
            .inner
            .call(Operation::Inspect, name, async move {
                let mut found = client.get(key, None).await?;
                let Some(kv) = found.take_kvs().into_iter().next() else {
                    return Ok(None);
                };
                let ttls = lease_ttls(&client, [kv.lease()]).await?;
                Ok(Some((kv, ttls)))
            })
            .await?;
        let now = SystemTime::now();
        Ok(found.map(|(kv, ttls)| lock_info(name, &kv, ttls.get(&kv.lease()).copied(), now)))
    }

    /// One transaction: `if create_revision(key) == id's and value(key) == id's then
    /// delete(key)`.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let key = self.lock_key(name)?;
        let (revision, value) = parse_acquisition(name, acquisition)?;
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.as_str(), CompareOp::Equal, revision),
                Compare::value(key.as_str(), CompareOp::Equal, value),
            ])
            .and_then([TxnOp::delete(key.as_str(), None)]);
        let mut client = self.inner.client.clone();
        let freed = self
            .inner
            .call(Operation::ForceUnlock, name, client.txn(txn))
            .await?;
        Ok(freed.succeeded())
    }
}

/// The TTLs of `leases` (0, no lease, is skipped), read concurrently.
async fn lease_ttls(
    client: &Client,
    leases: impl IntoIterator<Item = i64>,
) -> Result<HashMap<i64, LeaseTtl>, etcd_client::Error> {
    let distinct: BTreeSet<i64> = leases.into_iter().filter(|&lease| lease != 0).collect();
    futures_util::stream::iter(distinct)
        .map(|lease| {
            let mut client = client.clone();
            async move {
                let answer = client.lease_time_to_live(lease, None).await?;
                Ok::<_, etcd_client::Error>((
                    lease,
                    LeaseTtl {
                        ttl: answer.ttl(),
                        granted: answer.granted_ttl(),
                    },
                ))
            }
        })
        .buffer_unordered(CONCURRENT_TTL_READS)
        .try_collect()
        .await
}

/// The lock a key holds, judged by its lease:
///
/// - no lease: held with no end (no lock of ShedLock's is put that way, but a key put by hand
///   keeps every acquire out until it is deleted);
/// - a lease with time left: held. etcd reports whole seconds, truncated, so the remaining
///   time shown is rounded up to the next second (never past the lease's granted TTL): the
///   lock is surely free by then, give or take etcd's 500 ms expiry tick. `held_until` is this
///   process's clock plus that, etcd having no clock to read;
/// - a lease that has ended or is gone: free (etcd is deleting the key, or has since the key
///   was read).
fn lock_info(name: &str, kv: &KeyValue, lease: Option<LeaseTtl>, now: SystemTime) -> LockInfo {
    let value = String::from_utf8_lossy(kv.value());
    let acquisition = AcquisitionId::new(format!("{}/{value}", kv.create_revision()));
    let mut info = LockInfo::new(name, LockState::Held, acquisition);
    if let Ok(token) = u64::try_from(kv.create_revision()) {
        info = info.with_fencing_token(token);
    }
    let (locked_at, locked_by) = parse_value(&value);
    if let Some(locked_at) = locked_at {
        info = info.with_locked_at(locked_at);
    }
    if let Some(locked_by) = locked_by {
        info = info.with_locked_by(locked_by);
    }
    match (kv.lease(), lease) {
        (0, _) => info,
        (_, Some(LeaseTtl { ttl, granted })) if ttl >= 0 => {
            let secs = if granted >= 1 {
                (ttl + 1).min(granted)
            } else {
                ttl + 1
            };
            let remaining = Duration::from_secs(secs.unsigned_abs());
            info.judged_at(now + remaining, now)
        }
        _ => {
            info.state = LockState::Free;
            info
        }
    }
}

/// The acquisition time and holder of a value in ShedLock's `ADDED:<ISO-8601>@<holder>`
/// layout; this provider's holder part carries `:<uuid>` too, shown as stored since it is what
/// tells its acquisitions apart. `None` for a part that is not there or not a time.
fn parse_value(value: &str) -> (Option<SystemTime>, Option<&str>) {
    let Some((added, holder)) = value.split_once('@') else {
        return (None, None);
    };
    let locked_at = added
        .strip_prefix("ADDED:")
        .and_then(|time| chrono::DateTime::parse_from_rfc3339(time).ok())
        .map(SystemTime::from);
    (locked_at, Some(holder))
}

/// The smallest key after every key that starts with `prefix`: `prefix` with its last byte
/// below 0xff raised by one and what follows it cut off (etcd's own prefix rule). Lock keys
/// start with `<prefix>:`, so such a byte always exists.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Only an all-0xff prefix gets here: every key from it on (etcd's "\0" range end).
    vec![0]
}

/// A position as printable text: the name's bytes in hexadecimal, so that any key, even one
/// that is not UTF-8, can be resumed after exactly.
fn encode_cursor(name: &[u8]) -> String {
    name.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn decode_cursor(cursor: &PageCursor) -> Result<Vec<u8>, LockError> {
    let text = cursor.as_str();
    let bytes = (text.len().is_multiple_of(2) && text.is_ascii())
        .then(|| {
            (0..text.len())
                .step_by(2)
                .map(|at| {
                    let pair = &text[at..at + 2];
                    pair.bytes()
                        .all(|b| b.is_ascii_hexdigit())
                        .then(|| u8::from_str_radix(pair, 16).ok())
                        .flatten()
                })
                .collect::<Option<Vec<u8>>>()
        })
        .flatten();
    bytes.ok_or_else(|| {
        LockError::invalid_request(
            PROVIDER,
            Operation::List,
            "",
            format!(
                "page cursor {text:?} is not one this provider returned (the hexadecimal bytes \
                 of the last name listed); nothing was read: start the listing again without one"
            ),
        )
    })
}

/// `<create_revision>/<value>` back into its parts.
fn parse_acquisition<'id>(
    name: &str,
    acquisition: &'id AcquisitionId,
) -> Result<(i64, &'id str), LockError> {
    let text = acquisition.as_str();
    text.split_once('/')
        .and_then(|(revision, value)| Some((revision.parse::<i64>().ok()?, value)))
        .filter(|(revision, _)| *revision > 0)
        .ok_or_else(|| {
            LockError::invalid_request(
                PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "acquisition id {text:?} is not one the etcd provider produced \
                     (<create_revision>/<value>, as a listing or inspect shows it); nothing was \
                     changed"
                ),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_raises_the_last_byte_below_0xff() {
        assert_eq!(prefix_end(b"shedlock:e:ab"), b"shedlock:e:ac");
        assert_eq!(prefix_end(b"shedlock:e:"), b"shedlock:e;");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn cursors_round_trip_any_bytes() {
        for name in [&b""[..], b"report", b"\x00\xff\xc3", "é:%_".as_bytes()] {
            let cursor = PageCursor::new(encode_cursor(name));
            assert_eq!(decode_cursor(&cursor).unwrap(), name);
        }
        for bad in ["abc", "zz", "é0"] {
            assert!(decode_cursor(&PageCursor::new(bad)).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_give_time_and_holder() {
        let (at, by) = parse_value("ADDED:2024-01-02T03:04:05.678Z@java-host");
        assert_eq!(by, Some("java-host"));
        let expected = SystemTime::UNIX_EPOCH + Duration::from_millis(1_704_164_645_678);
        assert_eq!(at, Some(expected));
        let (at, by) = parse_value("ADDED:2024-01-02T03:04:05.678Z@host:8080:uuid");
        assert_eq!((at.is_some(), by), (true, Some("host:8080:uuid")));
        assert_eq!(parse_value("by hand"), (None, None));
        assert_eq!(parse_value("ADDED:yesterday@me"), (None, Some("me")));
    }

    #[test]
    fn acquisition_ids_parse_or_are_refused() {
        let id = AcquisitionId::new("42/ADDED:2024-01-02T03:04:05.678Z@h/x");
        assert_eq!(
            parse_acquisition("n", &id).unwrap(),
            (42, "ADDED:2024-01-02T03:04:05.678Z@h/x")
        );
        for bad in ["", "42", "x/y", "0/v", "-3/v"] {
            let error = parse_acquisition("n", &AcquisitionId::new(bad)).unwrap_err();
            assert!(
                error
                    .to_string()
                    .contains("is not one the etcd provider produced")
            );
        }
    }
}
