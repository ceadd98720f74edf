//! The unit test every SQL backend's statement binding answers to: a node time that contradicts
//! the storage's time source is refused before anything is bound, with an error that says so.
//! Each backend passes a closure that binds one of its own statements.

use std::time::{Duration, SystemTime};

use shedlock_core::raw::NodeTime;
use shedlock_core::{LockError, TimeSource};
use shedlock_sql::{TableSchema, TimestampLimit};

/// A table with millisecond times and no fencing column, whose `lock_until` column is declared
/// as `lock_until_type` and reaches `lock_until_limit`.
pub fn millisecond_schema(lock_until_type: &str, lock_until_limit: TimestampLimit) -> TableSchema {
    TableSchema {
        max_name_chars: Some(64),
        max_locked_by_chars: Some(255),
        time_precision: Duration::from_millis(1),
        timestamps_with_time_zone: false,
        fencing: false,
        lock_until_type: lock_until_type.to_owned(),
        lock_until_limit,
    }
}

/// Calls `bind` with each pairing of a time source and a node time, and asserts that it binds
/// exactly the two that agree (server time with no node time, client time with the node's clock)
/// and refuses the other two naming the time source.
pub fn a_node_time_that_contradicts_the_time_source_is_refused(
    bind: impl Fn(TimeSource, NodeTime) -> Result<(), LockError>,
) {
    let node_clock = NodeTime::ClientTime(SystemTime::now());
    for (time_source, now, agrees) in [
        (TimeSource::Server, NodeTime::ServerTime, true),
        (TimeSource::Client, node_clock, true),
        (TimeSource::Server, node_clock, false),
        (TimeSource::Client, NodeTime::ServerTime, false),
    ] {
        match bind(time_source, now) {
            Ok(()) => assert!(agrees, "{time_source:?} bound {now:?}"),
            Err(error) => {
                assert!(!agrees, "{time_source:?} refused {now:?}: {error}");
                assert!(error.to_string().contains("time source"), "{error}");
            }
        }
    }
}
