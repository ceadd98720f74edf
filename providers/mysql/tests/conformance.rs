//! The conformance kit against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`), in both
//! configurations a node runs in, in one test binary: the database's clock on a ShedLock table with
//! the fencing column (the checks under their own names), and each node's clock on exactly
//! ShedLock's table, as beside Java's client-time provider (`client-time::<check>`).

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::MySqlKit;

fn main() -> std::process::ExitCode {
    conformance_harness::run::<MySqlKit, _>(
        backends::mysql_url,
        2,
        &[
            KitRun::SERVER_TIME_WITH_FENCING,
            KitRun::CLIENT_TIME_WITHOUT_FENCING,
        ],
    )
}
