//! The fault suite against a real Redis server (`SHEDLOCK_TEST_REDIS_URL`), restarted by the
//! command in `SHEDLOCK_TEST_REDIS_RESTART`, with fencing on so the soak's ledger checks the
//! tokens too. The server keeps nothing on disk, so the restart check notes the locks it loses.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use conformance_harness::{Settings, Topology};

fn main() -> std::process::ExitCode {
    conformance_harness::run_faults(Settings {
        fencing: true,
        topology: Topology::Server,
    })
}
