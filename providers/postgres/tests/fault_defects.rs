//! The fault suite's own proof on PostgreSQL: nodes with one defect each (locks shorter than
//! asked, errors answered as refusals, a release that frees any holder, no reconnect after a
//! restart, an extend that never reaches the server, expiry judged by the node's clock), each
//! run against the fault check that exists to catch it. Every check must fail. Needs what
//! `tests/faults.rs` needs (`ci/test.sh` sets it), and `faketime`.

#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::PostgresKit;

fn main() -> std::process::ExitCode {
    conformance_harness::run_fault_defects::<PostgresKit>(
        backends::postgres_url(),
        2,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
