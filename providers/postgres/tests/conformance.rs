//! The conformance kit against a real PostgreSQL server (`SHEDLOCK_TEST_POSTGRES_URL`), on a
//! ShedLock table with the fencing column, in server time.

#[path = "../../sql/tests/shared/conformance_harness.rs"]
mod conformance_harness;
#[path = "kit/planted_records.rs"]
mod planted_records;

use conformance_harness::KitRun;
use shedlock_conformance::backends;
use shedlock_postgres::PostgresBackend;

fn main() -> std::process::ExitCode {
    conformance_harness::run::<PostgresBackend>(
        backends::postgres_url(),
        2,
        KitRun::SERVER_TIME_WITH_FENCING,
    )
}
