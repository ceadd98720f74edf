//! The fault suite on a SQLite database file: a holder process killed with SIGKILL, and a soak
//! of node processes with a ledger (`SHEDLOCK_SOAK_SECONDS` sets its length). SQLite has no
//! server and no network, so the restart and stall checks show as ignored.

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::SqliteKit;

fn main() -> std::process::ExitCode {
    conformance_harness::run_faults::<SqliteKit>(
        backends::sqlite_url(),
        1,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
