//! The conformance kit against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`) in
//! client time, on exactly ShedLock's table (no fencing column).

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;
#[path = "kit/planted_records.rs"]
mod planted_records;

use conformance_harness::KitRun;
use shedlock_conformance::backends;
use shedlock_mysql::MySqlBackend;

fn main() -> std::process::ExitCode {
    conformance_harness::run::<MySqlBackend>(
        backends::mysql_url(),
        2,
        KitRun::CLIENT_TIME_WITHOUT_FENCING,
    )
}
