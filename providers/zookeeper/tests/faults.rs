//! The conformance kit's fault suite against a real ZooKeeper (`SHEDLOCK_TEST_ZOOKEEPER_URL`):
//! a holder killed with SIGKILL, the network stalling during acquire, release and extend, the
//! server restarting (with `SHEDLOCK_TEST_ZOOKEEPER_RESTART` set to a command that restarts
//! it, e.g. `ci/restart-backend.sh zookeeper`), and a soak of several node processes. The
//! binary is also those node processes: `faults::run` comes first in `main`.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use shedlock_test_support::kv::conformance::Suite;

fn main() -> std::process::ExitCode {
    shedlock_conformance::faults::run(|| conformance_harness::harness(Suite::Faults))
}
