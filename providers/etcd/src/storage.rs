//! Every etcd request this provider sends, and the key layout they act on.
//!
//! One lock is one key, `<prefix>:<env>:<name>` (ShedLock's `shedlock:default:<name>`), put on
//! a lease of its own: the lease's TTL is the lock's expiry, counted by etcd, so no node's wall
//! clock takes part in any decision. The value is ShedLock's `ADDED:<ISO-8601 UTC>@<holder>`
//! plus `:<uuid>`, unique per acquisition: release and extend compare it, so they only ever act
//! on the acquisition that wrote it. The fencing token is the revision of the acquiring put,
//! which etcd increases with every write.

use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};

/// etcd's longest lease, in seconds (`MaxLeaseTTL`, about 285 years).
pub(crate) const MAX_LEASE_SECS: u64 = 9_000_000_000;

/// The key of lock `name`: `<prefix>:<env>:<name>`.
///
/// Neither `prefix` nor `env` may contain `:` (checked when the provider is built), so the key
/// determines prefix, env and name: distinct names stay distinct keys, including names that
/// contain `:` themselves.
pub(crate) fn lock_key(prefix: &str, env: &str, name: &str) -> String {
    format!("{prefix}:{env}:{name}")
}

/// The value of one acquisition: ShedLock's `ADDED:<ISO-8601 UTC, ms>@<holder>`, then
/// `:<uuid>` to make it unique. The time is informational; nothing compares it.
pub(crate) fn lock_value(holder: &str) -> String {
    let added = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    format!("ADDED:{added}@{holder}:{}", uuid::Uuid::new_v4())
}

/// Whether `value` has the layout of a ShedLock lock value, `ADDED:<time>@<holder>`, whoever
/// wrote it (Java ShedLock, or this provider with `:<uuid>` after the holder).
pub(crate) fn is_lock_value(value: &str) -> bool {
    value
        .strip_prefix("ADDED:")
        .is_some_and(|rest| rest.contains('@'))
}

/// `text` quoted, cut to its first 80 characters when longer, for an error message.
pub(crate) fn quoted(text: &str) -> String {
    let head: String = text.chars().take(80).collect();
    if head.len() < text.len() {
        format!("{head:?}... ({} bytes)", text.len())
    } else {
        format!("{text:?}")
    }
}

/// `duration` in whole seconds for a lease, rounded up (leases count whole seconds, and a lock
/// must never be shorter than asked), at least 1; `None` past [`MAX_LEASE_SECS`].
pub(crate) fn lease_secs(duration: Duration) -> Option<i64> {
    let secs = duration.as_nanos().div_ceil(1_000_000_000).max(1);
    u64::try_from(secs)
        .ok()
        .filter(|&secs| secs <= MAX_LEASE_SECS)
        .and_then(|secs| i64::try_from(secs).ok())
}

/// `LeaseGrant(ttl)`: a new lease, returned with the TTL etcd actually granted (etcd raises
/// TTLs below its minimum, about 2 s with default settings).
pub(crate) async fn grant_lease(
    client: &mut Client,
    ttl_secs: i64,
) -> Result<i64, etcd_client::Error> {
    Ok(client.lease_grant(ttl_secs, None).await?.id())
}

/// How long a finished `LeaseKeepAlive` call may take to be closed by etcd before it is reset.
const KEEP_ALIVE_CLOSE_LIMIT: Duration = Duration::from_secs(10);

/// One `LeaseKeepAlive` exchange: restarts `lease` at the TTL it was granted with. `false` when
/// the lease has already ended (etcd answers a TTL of 0), so the caller grants a new one.
pub(crate) async fn refresh_lease(
    client: &mut Client,
    lease: i64,
) -> Result<bool, etcd_client::Error> {
    match client.lease_keep_alive(lease).await {
        // One request, one answer, then the call is ended the way gRPC ends a stream: the
        // sender dropped closes our side, and etcd closes its own, read in the background so
        // the lock operation does not wait for it. Dropping the answers instead resets the
        // HTTP/2 stream, and the client counts resets: after a few thousand (a release build
        // acquiring at full speed), its HTTP/2 layer closed the whole connection (GOAWAY
        // `too_many_internal_resets`) and failed the operation in flight with an unknown
        // outcome.
        Ok((keeper, mut answers)) => {
            drop(keeper);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                runtime.spawn(async move {
                    let closed = async { while let Ok(Some(_)) = answers.message().await {} };
                    // A server that never closes its side gets the reset after all.
                    let _ = tokio::time::timeout(KEEP_ALIVE_CLOSE_LIMIT, closed).await;
                });
            }
            Ok(true)
        }
        Err(etcd_client::Error::LeaseKeepAliveError(_)) => Ok(false),
        Err(error) => Err(error),
    }
}

/// `LeaseRevoke(id)`: ends a lease and deletes any key still attached to it. A lease holds at
/// most one key of ours, so this can only ever delete our own acquisition.
pub(crate) async fn revoke_lease(
    client: &mut Client,
    lease: i64,
) -> Result<(), etcd_client::Error> {
    client.lease_revoke(lease).await.map(|_| ())
}

/// What the acquire transaction found.
pub(crate) enum AcquireOutcome {
    /// The key is ours; the put's revision is the fencing token.
    Acquired { revision: i64 },
    /// The key exists; its value names the holder.
    Held { value: Option<String> },
}

/// Acquire, one transaction:
///
/// ```text
/// if create_revision(key) == 0            -- the key does not exist
/// then put(key, value, lease)             -- ours until the lease ends
/// else get(key)                           -- say who holds it
/// ```
pub(crate) async fn acquire(
    client: &mut Client,
    key: &str,
    value: &str,
    lease: i64,
) -> Result<AcquireOutcome, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::create_revision(key, CompareOp::Equal, 0)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )])
        .or_else([TxnOp::get(key, None::<GetOptions>)]);
    let response = client.txn(txn).await?;
    if response.succeeded() {
        let revision = response.header().map_or(0, |header| header.revision());
        return Ok(AcquireOutcome::Acquired { revision });
    }
    let value = response.op_responses().into_iter().find_map(|op| match op {
        TxnOpResponse::Get(get) => get
            .kvs()
            .first()
            .map(|kv| String::from_utf8_lossy(kv.value()).into_owned()),
        _ => None,
    });
    Ok(AcquireOutcome::Held { value })
}

/// Moves our key onto another lease (extend, or release that keeps the rest of
/// lock_at_least_for), one transaction:
///
/// ```text
/// if value(key) == our value              -- still this acquisition
/// then put(key, our value, new lease)     -- now expires with the new lease
/// ```
///
/// `true` when the key was ours and moved.
pub(crate) async fn move_to_lease(
    client: &mut Client,
    key: &str,
    value: &str,
    lease: i64,
) -> Result<bool, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::value(key, CompareOp::Equal, value)])
        .and_then([TxnOp::put(
            key,
            value,
            Some(PutOptions::new().with_lease(lease)),
        )]);
    Ok(client.txn(txn).await?.succeeded())
}

/// Release once lock_at_least_for has passed, one transaction:
///
/// ```text
/// if value(key) == our value
/// then delete(key)
/// ```
///
/// `true` when the key was ours and is gone.
pub(crate) async fn delete_if_ours(
    client: &mut Client,
    key: &str,
    value: &str,
) -> Result<bool, etcd_client::Error> {
    let txn = Txn::new()
        .when([Compare::value(key, CompareOp::Equal, value)])
        .and_then([TxnOp::delete(key, None)]);
    Ok(client.txn(txn).await?.succeeded())
}

/// The shortest lease etcd grants, in seconds: it raises shorter requests to its minimum TTL
/// (2 s with default settings, derived from the election timeout). Grants a 1 s lease, reads
/// the TTL it actually got, and revokes it.
pub(crate) async fn minimum_lease_secs(client: &mut Client) -> Result<i64, etcd_client::Error> {
    let granted = client.lease_grant(1, None).await?;
    client.lease_revoke(granted.id()).await?;
    Ok(granted.ttl().max(1))
}

/// A cheap read that proves the server answers and the credentials may read the lock keys.
pub(crate) async fn probe(client: &mut Client, key: &str) -> Result<(), etcd_client::Error> {
    client
        .get(key, Some(GetOptions::new().with_keys_only()))
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout_is_shedlocks() {
        assert_eq!(
            lock_key("shedlock", "default", "report"),
            "shedlock:default:report"
        );
    }

    #[test]
    fn value_is_shedlocks_format_plus_a_uuid() {
        let a = lock_value("host-1");
        assert_ne!(a, lock_value("host-1"));
        assert!(a.starts_with("ADDED:"));
        assert_eq!(shedlock_core::raw::holder_of(&a), "host-1");
    }

    #[test]
    fn shedlocks_values_are_told_from_others() {
        for value in [
            lock_value("host-1"),
            "ADDED:2024-01-01T00:00:00.000Z@java-host".to_owned(),
            "ADDED:2024-01-01T00:00:00Z@host:8080".to_owned(),
        ] {
            assert!(is_lock_value(&value), "{value}");
        }
        for value in [
            "",
            "garbage",
            "ADDED:2024-01-01",
            "java-host@ADDED:x",
            "added:x@h",
        ] {
            assert!(!is_lock_value(value), "{value}");
        }
        assert_eq!(quoted("a\0b"), "\"a\\0b\"");
        let long = "é".repeat(100);
        assert_eq!(
            quoted(&long),
            format!("{:?}... (200 bytes)", "é".repeat(80))
        );
    }

    #[test]
    fn lease_seconds_round_up() {
        assert_eq!(lease_secs(Duration::from_millis(1)), Some(1));
        assert_eq!(lease_secs(Duration::from_millis(1000)), Some(1));
        assert_eq!(lease_secs(Duration::from_millis(1001)), Some(2));
        assert_eq!(lease_secs(Duration::ZERO), Some(1));
        assert_eq!(
            lease_secs(Duration::from_secs(MAX_LEASE_SECS)),
            Some(MAX_LEASE_SECS as i64)
        );
        assert_eq!(lease_secs(Duration::from_secs(MAX_LEASE_SECS + 1)), None);
    }
}
