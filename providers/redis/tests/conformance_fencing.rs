//! The whole conformance kit against a real Redis (`SHEDLOCK_TEST_REDIS_URL`) with fencing on,
//! so the kit's fencing check runs too and the acquire is the script that also increments the
//! counter. `tests/conformance.rs` runs the kit with the default configuration.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use conformance_harness::{Settings, Topology};

fn main() -> std::process::ExitCode {
    conformance_harness::run(Settings {
        fencing: true,
        topology: Topology::Server,
    })
}
