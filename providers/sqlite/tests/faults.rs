//! The fault suite on a SQLite database file: a holder process killed with SIGKILL, and a soak
//! of node processes with a ledger (`SHEDLOCK_SOAK_SECONDS` sets its length). SQLite has no
//! server and no network, so the restart and stall checks show as ignored.

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;
#[path = "kit/planted_records.rs"]
mod planted_records;

use conformance_harness::KitRun;
use shedlock_conformance::backends::{Backend, LaunchError};
use shedlock_sqlite::SqliteBackend;

/// `SHEDLOCK_TEST_SQLITE_URL`, else one file in the temp folder: the suite's node processes
/// must all open the same file, so it cannot be a fresh one per process.
async fn shared_url() -> Result<String, LaunchError> {
    match std::env::var(Backend::Sqlite.env_var()) {
        Ok(url) if !url.trim().is_empty() => Ok(url),
        _ => Ok(format!(
            "sqlite://{}?mode=rwc",
            std::env::temp_dir().join("shedlock-faults.db").display()
        )),
    }
}

fn main() -> std::process::ExitCode {
    conformance_harness::run_faults::<SqliteBackend>(
        shared_url(),
        1,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
