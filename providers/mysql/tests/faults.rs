//! The fault suite against a real MySQL or MariaDB server (`SHEDLOCK_TEST_MYSQL_URL`), restarted by the
//! command in `SHEDLOCK_TEST_MYSQL_RESTART`: a holder killed with SIGKILL, the network
//! stalled during acquire, release and extend, a restart while locks are held, and a soak of
//! node processes with a ledger (`SHEDLOCK_SOAK_SECONDS` sets its length).

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;
#[path = "kit/planted_records.rs"]
mod planted_records;

use conformance_harness::KitRun;
use shedlock_conformance::backends;
use shedlock_mysql::MySqlBackend;

fn main() -> std::process::ExitCode {
    conformance_harness::run_faults::<MySqlBackend>(
        backends::mysql_url(),
        2,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
