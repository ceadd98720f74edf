//! Locks as JSON, one shape for every consumer: `shedlock list --json` prints it and the HTTP
//! view serves it, so a script written against one reads the other. With the `scheduler`
//! feature, a scheduler's jobs too, as the HTTP view serves them.

use std::time::{Duration, SystemTime};

use serde::Serialize;
use shedlock_core::{LockInfo, LockPage, raw::Rfc3339};

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

/// An instant as RFC 3339 UTC with microseconds, the precision the SQL backends store, written
/// exactly for any instant ([`Rfc3339`]): a year outside 0 to 9999 is signed, and an instant past
/// chrono's calendar (a PostgreSQL row may hold one) is written rather than a panic.
pub fn rfc3339(instant: SystemTime) -> String {
    Rfc3339::micros(instant).to_string()
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

/// A scheduled job as the HTTP view shows it (from a
/// [`JobStatus`](crate::scheduler::JobStatus)): times as RFC 3339 UTC with milliseconds.
#[cfg(feature = "scheduler")]
#[cfg_attr(docsrs, doc(cfg(feature = "scheduler")))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobJson {
    /// The job's name.
    pub name: String,
    /// Whether it is paused.
    pub paused: bool,
    /// Whether a run is in progress on this node.
    pub running: bool,
    /// When its next planned tick is due; `null` while paused.
    pub next_run: Option<String>,
    /// Its last run on this node; `null` before the first.
    pub last: Option<RunJson>,
}

/// One run of a job: its tick and what became of it.
#[cfg(feature = "scheduler")]
#[cfg_attr(docsrs, doc(cfg(feature = "scheduler")))]
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RunJson {
    /// When the tick was due (or the run asked for).
    pub tick: String,
    /// Whether it was asked for out of schedule.
    pub requested: bool,
    /// [`RunOutcome::as_str`](crate::scheduler::RunOutcome::as_str): `executed`, `failed`,
    /// `skipped`, ...
    pub outcome: String,
    /// What went wrong, for `failed`, `lock_failed`, `invalid_lock` and `panicked`; the holder
    /// for `skipped`, where the backend named it.
    pub detail: Option<String>,
}

#[cfg(feature = "scheduler")]
impl From<&crate::scheduler::JobStatus> for JobJson {
    fn from(job: &crate::scheduler::JobStatus) -> Self {
        use crate::scheduler::RunOutcome;
        Self {
            name: job.name.clone(),
            paused: job.paused,
            running: job.running,
            next_run: job
                .next_run
                .map(|time| Rfc3339::millis(time.into()).to_string()),
            last: job.last.as_ref().map(|report| RunJson {
                tick: Rfc3339::millis(report.tick.time.into()).to_string(),
                requested: report.tick.requested,
                outcome: report.outcome.as_str().to_owned(),
                detail: match &report.outcome {
                    RunOutcome::Failed { error }
                    | RunOutcome::LockFailed { error, .. }
                    | RunOutcome::InvalidLock { error } => Some(error.clone()),
                    RunOutcome::Panicked { message } => Some(message.clone()),
                    RunOutcome::Skipped { holder } => holder
                        .as_ref()
                        .and_then(|holder| holder.locked_by.clone())
                        .map(|holder| format!("held by {holder}")),
                    _ => None,
                },
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shedlock_core::{AcquisitionId, LockState};

    use chrono::{DateTime, SecondsFormat, Utc};

    #[test]
    fn instants_chrono_can_print_are_printed_as_chrono_prints_them() {
        let last = SystemTime::from(DateTime::<Utc>::MAX_UTC);
        let first = SystemTime::from(DateTime::<Utc>::MIN_UTC);
        let epoch = SystemTime::UNIX_EPOCH;
        let mut instants = vec![
            epoch,
            last,
            first,
            epoch + Duration::new(1_764_561_906, 123_456_789),
            epoch - Duration::new(1, 1),
            epoch - Duration::new(62_167_219_200, 0), // 0000-01-01
            epoch - Duration::new(62_167_219_201, 0), // -0001-12-31T23:59:59
            epoch + Duration::new(253_402_300_800, 0), // 10000-01-01
            epoch + Duration::new(951_782_400, 0),    // 2000-02-29
        ];
        // Days spread over all of chrono's calendar, each at an odd time of day.
        let span = last.duration_since(first).unwrap().as_secs();
        instants.extend((0..2_000u64).map(|step| {
            first + Duration::new(span / 2_000 * step + step * 7_919 % 86_400, 999_999_999)
        }));
        for instant in instants {
            let chrono =
                DateTime::<Utc>::from(instant).to_rfc3339_opts(SecondsFormat::Micros, true);
            assert_eq!(rfc3339(instant), chrono, "{instant:?}");
        }
    }

    #[test]
    fn instants_past_chronos_calendar_are_printed_exactly_without_a_panic() {
        let last = DateTime::<Utc>::MAX_UTC;
        let next_second =
            SystemTime::UNIX_EPOCH + Duration::from_secs(last.timestamp().unsigned_abs() + 1);
        assert_eq!(rfc3339(next_second), "+262143-01-01T00:00:00.000000Z");
        // PostgreSQL's last instant: 294276-12-31 23:59:59.999999.
        let postgres_last =
            SystemTime::UNIX_EPOCH + Duration::from_micros(9_224_318_015_999_999_999);
        assert_eq!(rfc3339(postgres_last), "+294276-12-31T23:59:59.999999Z");
        let before = SystemTime::from(DateTime::<Utc>::MIN_UTC) - Duration::from_secs(1);
        assert_eq!(rfc3339(before), "-262144-12-31T23:59:59.000000Z");
        let lock = LockInfo::new("far", LockState::Free, AcquisitionId::new("x"))
            .with_locked_at(next_second);
        assert_eq!(
            LockJson::from(&lock).locked_at.as_deref(),
            Some("+262143-01-01T00:00:00.000000Z")
        );
    }

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
