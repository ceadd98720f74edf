//! The conformance kit against a real PostgreSQL server (`SHEDLOCK_TEST_POSTGRES_URL`) far from
//! UTC, in both configurations of `conformance.rs`: the process and every session in
//! `America/Los_Angeles`, on pools that set the zone on connect.

#[path = "kit/non_utc_sessions.rs"]
mod non_utc_sessions;
#[path = "kit/planted_records.rs"]
mod planted_records;

use shedlock_conformance::backends;
use shedlock_test_support::sql::conformance_harness::{self, KitRun};

use planted_records::PostgresKit;

fn main() -> std::process::ExitCode {
    conformance_harness::non_utc::run::<PostgresKit, _>(
        backends::postgres_url,
        2,
        &[
            KitRun::SERVER_TIME_WITH_FENCING_NON_UTC,
            KitRun::CLIENT_TIME_WITHOUT_FENCING_NON_UTC,
        ],
    )
}
