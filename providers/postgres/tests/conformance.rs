//! The conformance kit against a real PostgreSQL server (`SHEDLOCK_TEST_POSTGRES_URL`), on a
//! ShedLock table with the fencing column, in server time.

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::PostgresKit;

fn main() -> std::process::ExitCode {
    conformance_harness::run::<PostgresKit>(
        backends::postgres_url(),
        2,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
