//! The unique part of `locked_by`: `<holder>#<id>`, one id per acquisition.
//!
//! The id is 32 lowercase hex digits, as long as the simple-format UUID it replaces, so
//! `locked_by` columns sized for it (SQL `VARCHAR(255)`) still fit. It is not a UUID: the first
//! 16 digits are a prefix drawn at random once per process, the last 16 a per-process counter
//! that starts at a random value. Drawing randomness once instead of per acquisition keeps a
//! `getrandom` system call off every acquisition, where it was most of an in-memory lock's
//! cost.
//!
//! Why it stays unique: within one process the counter gives 2^64 distinct values before it
//! repeats. Two processes (on any hosts) can only produce the same id if they drew the same
//! prefix (60 random bits) and their counters, started at independent random points, ran
//! into each other's range; and `locked_by` also carries the holder, usually the host name. (A
//! child forked without `exec` after its parent's first acquisition would repeat the parent's
//! ids; a tokio runtime does not survive such a fork either.)

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

/// The length of the id after `#`.
pub(crate) const ID_LEN: usize = 32;

/// A source of acquisition ids: one random prefix and a counter.
#[derive(Debug)]
pub(crate) struct AcquisitionIds {
    prefix: u64,
    next: AtomicU64,
}

impl AcquisitionIds {
    /// A source with a prefix and counter start of its own, as a new process would draw them.
    pub(crate) fn fresh() -> Self {
        let (prefix, start) = uuid::Uuid::new_v4().as_u64_pair();
        Self {
            prefix,
            next: AtomicU64::new(start),
        }
    }

    /// The source every provider of this process shares, so two providers in one process
    /// never hand out the same id either.
    pub(crate) fn process() -> &'static Self {
        static PROCESS: OnceLock<AcquisitionIds> = OnceLock::new();
        PROCESS.get_or_init(Self::fresh)
    }

    /// `<holder>#<id>` for a new acquisition, in one allocation.
    pub(crate) fn locked_by(&self, holder: &str) -> String {
        // Only uniqueness matters, not order, so no ordering with other memory is needed.
        let count = self.next.fetch_add(1, Ordering::Relaxed);
        let mut bytes = [0; ID_LEN / 2];
        bytes[..8].copy_from_slice(&self.prefix.to_be_bytes());
        bytes[8..].copy_from_slice(&count.to_be_bytes());
        let id = hex_id(bytes);
        let mut locked_by = String::with_capacity(holder.len() + 1 + ID_LEN);
        locked_by.push_str(holder);
        locked_by.push('#');
        locked_by.push_str(std::str::from_utf8(&id).expect("hex digits are ASCII"));
        locked_by
    }
}

/// A new `locked_by` for one acquisition: `<holder>#<id>`, where the id (32 lowercase hex
/// digits) is unique to this acquisition across processes and hosts.
///
/// For providers that implement [`LockProvider`](crate::LockProvider) directly: release and
/// extend compare the whole value, so two acquisitions by one holder (one host, one process,
/// even one node) never act on each other's lock, and a Java ShedLock record, whose `locked_by`
/// is the bare host name, is never mistaken for this node's. (`StorageBasedLockProvider` makes
/// it for you.)
pub fn new_locked_by(holder: &str) -> String {
    AcquisitionIds::process().locked_by(holder)
}

/// The holder named in a stored `locked_by` or lock value, as every provider shows it: the name
/// the node was given (its host name by default), without what makes the value unique to one
/// acquisition. From
///
/// - `<holder>#<id>`, as [`new_locked_by`] writes it: `<holder>`;
/// - ShedLock's key-value format, `ADDED:<time>@<holder>` (Java's Redis and etcd values), with
///   `:<uuid>` after the holder as Java's Redis provider and this workspace's Redis and etcd
///   providers write it: `<holder>`;
/// - anything else (Java ShedLock's bare host name in a SQL or MongoDB record, a value set by
///   hand): the whole value. A holder may itself contain `#`, `:` or `@`; only a suffix that is
///   an id is taken off.
pub fn holder_of(locked_by: &str) -> &str {
    let holder = locked_by
        .strip_prefix("ADDED:")
        .and_then(|added| added.split_once('@'))
        .map_or(locked_by, |(_, holder)| holder);
    if let Some((name, id)) = holder.rsplit_once('#')
        && is_acquisition_id(id)
    {
        return name;
    }
    match holder.rsplit_once(':') {
        Some((name, id)) if uuid::Uuid::try_parse(id).is_ok() => name,
        _ => holder,
    }
}

/// Whether `locked_by` ends as [`new_locked_by`] writes it: `#` and 32 lowercase hex digits
/// after the holder.
pub fn is_acquisition_locked_by(locked_by: &str) -> bool {
    locked_by
        .rsplit_once('#')
        .is_some_and(|(_, id)| is_acquisition_id(id))
}

fn is_acquisition_id(id: &str) -> bool {
    id.len() == ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `bytes` as lowercase hex digits, without going through `fmt`: this runs on every
/// acquisition.
fn hex_id(bytes: [u8; ID_LEN / 2]) -> [u8; ID_LEN] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut id = [0; ID_LEN];
    for (pair, byte) in id.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(byte >> 4)];
        pair[1] = DIGITS[usize::from(byte & 0xf)];
    }
    id
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn the_holder_part_is_what_precedes_an_acquisition_id() {
        let locked_by = new_locked_by("host#7");
        assert!(is_acquisition_locked_by(&locked_by));
        assert_eq!(holder_of(&locked_by), "host#7");
        // Java ShedLock's bare host name, and values that only look alike, are all holder.
        for plain in [
            "host",
            "host#7",
            "host#0123",
            &format!("host#{}", "A".repeat(32)),
        ] {
            assert!(!is_acquisition_locked_by(plain), "{plain}");
            assert_eq!(holder_of(plain), plain);
        }
    }

    #[test]
    fn the_holder_of_a_shedlock_key_value_is_what_follows_the_at_without_its_uuid() {
        let uuid = "dacb5e41-0aea-4a35-aefb-217b9d3c9b92";
        for (value, holder) in [
            (
                format!("ADDED:2026-12-06T15:45:02.511Z@replica-1:{uuid}"),
                "replica-1",
            ),
            (
                "ADDED:2026-12-06T15:45:02.511Z@java-host".to_owned(),
                "java-host",
            ),
            // A holder with `:`, `@` or `#` of its own keeps them.
            (
                format!("ADDED:2026-12-06T15:45:02.511Z@host:8080:{uuid}"),
                "host:8080",
            ),
            (
                "ADDED:2026-12-06T15:45:02.511Z@host:8080".to_owned(),
                "host:8080",
            ),
            (format!("ADDED:t@a@b:{uuid}"), "a@b"),
            (format!("host:{uuid}"), "host"),
        ] {
            assert_eq!(holder_of(&value), holder, "{value}");
        }
        for plain in ["ADDED:no-at-sign", "host:not-a-uuid", "set by hand"] {
            assert_eq!(holder_of(plain), plain);
        }
    }

    fn id(locked_by: &str) -> &str {
        let (_, id) = locked_by.rsplit_once('#').unwrap();
        id
    }

    #[test]
    fn locked_by_is_holder_hash_and_32_lowercase_hex_digits() {
        let ids = AcquisitionIds {
            prefix: 0x0123_4567_89ab_cdef,
            next: AtomicU64::new(u64::MAX),
        };
        assert_eq!(
            ids.locked_by("host-a"),
            "host-a#0123456789abcdefffffffffffffffff"
        );
        // The counter wraps instead of panicking; the prefix keeps the ids apart from the
        // first 2^64 of another source.
        assert_eq!(
            ids.locked_by("host-a"),
            "host-a#0123456789abcdef0000000000000000"
        );
        let random = AcquisitionIds::fresh().locked_by("");
        assert_eq!(id(&random).len(), ID_LEN);
        assert!(
            id(&random)
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }

    #[test]
    fn ids_are_unique_within_a_source_and_across_fresh_sources() {
        let sources = [AcquisitionIds::fresh(), AcquisitionIds::fresh()];
        assert_ne!(sources[0].prefix, sources[1].prefix);
        let mut seen = HashSet::new();
        for source in &sources {
            for _ in 0..10_000 {
                let locked_by = source.locked_by("host");
                assert!(seen.insert(locked_by), "an id was handed out twice");
            }
        }
    }
}
