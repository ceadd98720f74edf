//! The conformance kit on a SQLite database file (`SHEDLOCK_TEST_SQLITE_URL`, else a fresh
//! file in the temp folder), on a ShedLock table with the fencing column, in server time.

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::SqliteKit;

fn main() -> std::process::ExitCode {
    // One admin connection: SQLite has one writer at a time anyway.
    conformance_harness::run::<SqliteKit>(
        backends::sqlite_url(),
        1,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
