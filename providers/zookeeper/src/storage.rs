//! What a lock node holds, and the ZooKeeper requests that read and write it.
//!
//! A lock is the persistent node `<root>/<escaped name>` whose data is the UTF-8 ISO-8601
//! instant until which it is held (`2026-11-29T10:15:30.123Z`), exactly what ShedLock's
//! Curator provider writes and reads: no owner, no other field. Ownership lives in the node's
//! version instead (every write checks the version this acquisition's last write produced), and
//! the fencing token is the node's `mzxid`.

use chrono::{DateTime, SecondsFormat, Utc};
use zookeeper_client::{Acls, Client, CreateMode, Error, Stat};

use crate::server_clock::ServerMicros;

/// `lock_until` as ShedLock writes it: UTC, milliseconds, `Z`.
pub(crate) fn format_lock_until(until: ServerMicros) -> String {
    let millis = until.div_euclid(1000);
    DateTime::<Utc>::from_timestamp_millis(millis)
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
        .to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// `lock_until` from a node's data: any RFC 3339 instant (Java's `Instant.toString()` drops
/// zero fractions, other writers add an offset). `None` if the data is not one.
pub(crate) fn parse_lock_until(data: &[u8]) -> Option<ServerMicros> {
    let text = std::str::from_utf8(data).ok()?;
    Some(DateTime::parse_from_rfc3339(text).ok()?.timestamp_micros())
}

/// Up to 80 characters of unreadable data, for an error message.
pub(crate) fn describe_data(data: &[u8]) -> String {
    let text = String::from_utf8_lossy(data);
    if text.chars().count() <= 80 {
        return format!("{text:?}");
    }
    let head: String = text.chars().take(80).collect();
    format!("{head:?}... ({} bytes)", data.len())
}

/// Rounds a server time up to the millisecond ShedLock's format can carry, so a written
/// `lock_until` is never earlier than computed.
pub(crate) fn ceil_to_millis(micros: ServerMicros) -> ServerMicros {
    // Saturating: the provider refuses durations that come near the limit, and a time past
    // it must never wrap into the past.
    micros
        .div_euclid(1000)
        .saturating_mul(1000)
        .saturating_add(if micros.rem_euclid(1000) == 0 {
            0
        } else {
            1000
        })
}

/// Rounds a server time down to the millisecond.
pub(crate) fn floor_to_millis(micros: ServerMicros) -> ServerMicros {
    micros.div_euclid(1000) * 1000
}

/// The persistent node options ShedLock's Curator provider uses: open ACL.
const PERSISTENT: zookeeper_client::CreateOptions<'static> =
    CreateMode::Persistent.with_acls(Acls::anyone_all());

/// The node's `lock_until` data and stat, or `Error::NoNode`.
pub(crate) async fn read(client: &Client, path: &str) -> Result<(Vec<u8>, Stat), Error> {
    client.get_data(path).await
}

/// Creates the lock node with `data`; `Error::NodeExists` if someone was first,
/// `Error::NoNode` if the root is missing.
pub(crate) async fn create(client: &Client, path: &str, data: &str) -> Result<Stat, Error> {
    let (stat, _) = client.create(path, data.as_bytes(), &PERSISTENT).await?;
    Ok(stat)
}

/// Writes `data` if the node is still at `version`; `Error::BadVersion` if someone wrote since,
/// `Error::NoNode` if it was deleted.
pub(crate) async fn write(
    client: &Client,
    path: &str,
    data: &str,
    version: i32,
) -> Result<Stat, Error> {
    client.set_data(path, data.as_bytes(), Some(version)).await
}

/// Creates the root and its parents, as Curator's `creatingParentsIfNeeded` does: empty data,
/// open ACL. Nodes that exist already are left alone.
pub(crate) async fn create_root(client: &Client, root: &str) -> Result<(), Error> {
    client.mkdir(root, &PERSISTENT).await
}

/// The cheapest write that says what time the server's clock reads: empty data written to the
/// root, which ShedLock never gives data. `Error::NoNode` if the root is missing.
pub(crate) async fn stamp_root(client: &Client, root: &str) -> Result<Stat, Error> {
    client.set_data(root, &[], None).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_until_is_written_as_shedlock_writes_it_and_read_in_any_rfc3339_form() {
        let micros = 1_795_000_000_123_000;
        let text = format_lock_until(micros);
        assert_eq!(text, "2026-11-18T11:06:40.123Z");
        assert_eq!(parse_lock_until(text.as_bytes()), Some(micros));
        assert_eq!(
            parse_lock_until(b"2026-11-18T11:06:40Z"),
            Some(1_795_000_000_000_000)
        );
        assert_eq!(
            parse_lock_until(b"2026-11-18T12:06:40.000123+01:00"),
            Some(1_795_000_000_000_123)
        );
        for bad in [&b""[..], b"tomorrow", b"\xff\xfe", b"1795000000123"] {
            assert_eq!(parse_lock_until(bad), None);
        }
    }

    #[test]
    fn rounding_to_milliseconds_goes_the_safe_way() {
        assert_eq!(ceil_to_millis(1_000), 1_000);
        assert_eq!(ceil_to_millis(1_001), 2_000);
        assert_eq!(floor_to_millis(1_999), 1_000);
        assert_eq!(format_lock_until(1_999), "1970-01-01T00:00:00.001Z");
        // Near the limit it saturates: never wraps into the past.
        assert_eq!(ceil_to_millis(ServerMicros::MAX), ServerMicros::MAX);
    }

    #[test]
    fn long_data_is_described_briefly() {
        let described = describe_data(&[b'x'; 500]);
        assert!(described.ends_with("... (500 bytes)"), "{described}");
        assert_eq!(describe_data(b"abc"), "\"abc\"");
    }
}
