//! The conformance kit against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`) in
//! client time, on exactly ShedLock's table (no fencing column).

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::MySqlKit;

fn main() -> std::process::ExitCode {
    conformance_harness::run::<MySqlKit>(
        backends::mysql_url(),
        2,
        KitRun::CLIENT_TIME_WITHOUT_FENCING,
    )
}
