//! The fault suite against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`), restarted by the
//! command in `SHEDLOCK_TEST_MYSQL_RESTART`: a holder killed with SIGKILL, the network
//! stalled during acquire, release and extend, a restart while locks are held, and a soak of
//! node processes with a ledger (`SHEDLOCK_SOAK_SECONDS` sets its length).

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::MySqlKit;

fn main() -> std::process::ExitCode {
    conformance_harness::run_faults::<MySqlKit>(
        backends::mysql_url(),
        2,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
