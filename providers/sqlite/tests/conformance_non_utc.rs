//! The conformance kit against a SQLite file (`SHEDLOCK_TEST_SQLITE_URL`, else a fresh one in the
//! temp folder for each configuration) far from UTC, in both configurations of `conformance.rs`:
//! the process and every session in `America/Los_Angeles`, on pools that set the zone on connect.

#[path = "kit/non_utc_sessions.rs"]
mod non_utc_sessions;
#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::SqliteKit;

fn main() -> std::process::ExitCode {
    // One admin connection: SQLite has one writer at a time anyway.
    conformance_harness::non_utc::run::<SqliteKit, _>(
        backends::sqlite_url,
        1,
        &[
            KitRun::SERVER_TIME_WITH_FENCING_NON_UTC,
            KitRun::CLIENT_TIME_WITHOUT_FENCING_NON_UTC,
        ],
    )
}
