//! The conformance kit on a SQLite database file (`SHEDLOCK_TEST_SQLITE_URL`, else a fresh
//! file in the temp folder) far from UTC, in client time, on exactly ShedLock's table (no fencing
//! column): the process in `America/Los_Angeles`.

#[path = "kit/non_utc_sessions.rs"]
mod non_utc_sessions;
#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::SqliteKit;

fn main() -> std::process::ExitCode {
    // One admin connection: SQLite has one writer at a time anyway.
    conformance_harness::non_utc::run::<SqliteKit>(
        backends::sqlite_url(),
        1,
        KitRun::CLIENT_TIME_WITHOUT_FENCING_NON_UTC,
    )
}
