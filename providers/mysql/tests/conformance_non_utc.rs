//! The conformance kit against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`) far
//! from UTC, on a ShedLock table with the fencing column, in server time: the process in
//! `America/Los_Angeles`, every session at `+05:30`, the table's times `DATETIME(3)`.

#[path = "kit/non_utc_sessions.rs"]
mod non_utc_sessions;
#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::MySqlKit;

fn main() -> std::process::ExitCode {
    conformance_harness::non_utc::run::<MySqlKit>(
        backends::mysql_url(),
        2,
        KitRun::SERVER_TIME_WITH_FENCING_NON_UTC,
    )
}
