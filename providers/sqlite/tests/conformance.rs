//! The conformance kit against a SQLite file (`SHEDLOCK_TEST_SQLITE_URL`, else a fresh one in the
//! temp folder for each configuration), in both configurations a node runs in, in one test binary:
//! the database's clock on a ShedLock table with the fencing column (the checks under their own
//! names), and each node's clock on exactly ShedLock's table, as beside Java's client-time provider
//! (`client-time::<check>`).

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::SqliteKit;

fn main() -> std::process::ExitCode {
    // One admin connection: SQLite has one writer at a time anyway.
    conformance_harness::run::<SqliteKit, _>(
        backends::sqlite_url,
        1,
        &[
            KitRun::SERVER_TIME_WITH_FENCING,
            KitRun::CLIENT_TIME_WITHOUT_FENCING,
        ],
    )
}
