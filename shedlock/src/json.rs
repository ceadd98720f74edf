//! Locks as JSON, one shape for every consumer: `shedlock list --json` prints it and the HTTP
//! view serves it, so a script written against one reads the other.

use std::time::{Duration, SystemTime};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;
use shedlock_core::{LockInfo, LockPage};

/// One lock: times as RFC 3339 UTC with microseconds (`2026-12-01T04:05:06.123456Z`),
/// `remaining_ms` by the backend's clock, absent fields as `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockJson {
    /// The lock's name.
    pub name: String,
    /// `"held"` or `"free"`.
    pub state: String,
    /// The last holder's identity.
    pub locked_by: Option<String>,
    /// When the last holder took it.
    pub locked_at: Option<String>,
    /// When it frees (or freed) itself.
    pub held_until: Option<String>,
    /// Milliseconds it stays held, by the backend's clock; `null` when free.
    pub remaining_ms: Option<u64>,
    /// The last acquisition's fencing token, where kept.
    pub fencing_token: Option<u64>,
    /// What a force-unlock of this very acquisition passes back.
    pub acquisition: String,
}

/// A page of locks and where the next one starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LockPageJson {
    /// The locks of this page.
    pub locks: Vec<LockJson>,
    /// The cursor for the next page (`after=`), `null` after the last.
    pub next: Option<String>,
}

/// An instant as RFC 3339 UTC with microseconds, the precision the SQL backends store.
pub fn rfc3339(instant: SystemTime) -> String {
    DateTime::<Utc>::from(instant).to_rfc3339_opts(SecondsFormat::Micros, true)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl From<&LockInfo> for LockJson {
    fn from(lock: &LockInfo) -> Self {
        Self {
            name: lock.name.clone(),
            state: lock.state.to_string(),
            locked_by: lock.locked_by.clone(),
            locked_at: lock.locked_at.map(rfc3339),
            held_until: lock.held_until.map(rfc3339),
            remaining_ms: lock.remaining.map(millis),
            fencing_token: lock.fencing_token,
            acquisition: lock.acquisition.to_string(),
        }
    }
}

impl From<&LockPage> for LockPageJson {
    fn from(page: &LockPage) -> Self {
        Self {
            locks: page.locks.iter().map(LockJson::from).collect(),
            next: page.next.as_ref().map(|cursor| cursor.as_str().to_owned()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_core::{AcquisitionId, LockState};

    #[test]
    fn a_held_lock_reads_as_documented() {
        let locked_at = SystemTime::UNIX_EPOCH + Duration::from_micros(1_764_561_906_123_456);
        let lock = LockInfo::new("report", LockState::Free, AcquisitionId::new("7@1/host#ab"))
            .with_locked_by("host#ab")
            .with_locked_at(locked_at)
            .with_fencing_token(7)
            .judged_at(locked_at + Duration::from_secs(60), locked_at);
        let json = serde_json::to_value(LockJson::from(&lock)).unwrap();
        assert_eq!(
            json,
            serde_json::json!({
                "name": "report",
                "state": "held",
                "locked_by": "host#ab",
                "locked_at": "2025-12-01T04:05:06.123456Z",
                "held_until": "2025-12-01T04:06:06.123456Z",
                "remaining_ms": 60000,
                "fencing_token": 7,
                "acquisition": "7@1/host#ab",
            })
        );
    }

    #[test]
    fn a_free_lock_has_no_remaining_time() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000);
        let lock = LockInfo::new("gone", LockState::Held, AcquisitionId::new("x"))
            .judged_at(now - Duration::from_secs(1), now);
        let json = LockJson::from(&lock);
        assert_eq!(json.state, "free");
        assert_eq!(json.remaining_ms, None);
        assert_eq!(json.locked_by, None);
    }
}
