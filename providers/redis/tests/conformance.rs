//! The whole conformance kit against a real Redis (`SHEDLOCK_TEST_REDIS_URL`) with the default
//! configuration, the one most applications run: fencing off, so the acquire is ShedLock's plain
//! `SET NX PX` and any name is accepted. `tests/conformance_fencing.rs` runs the kit with
//! fencing on.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use conformance_harness::{Settings, Topology};

fn main() -> std::process::ExitCode {
    conformance_harness::run(Settings {
        fencing: false,
        topology: Topology::Server,
    })
}
