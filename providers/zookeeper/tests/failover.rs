//! The fault suite against the 3-server ensemble of `ci/start-clusters.sh` (`SHEDLOCK_TEST_ZOOKEEPER_ENSEMBLE_URL`), whose "restart" is a follower killed with SIGKILL, then the leader, each started again once the rest serves: a holder killed with SIGKILL, the failover while
//! one node holds a lock and three keep asking, and a soak of node processes through a failover
//! at half time. The stall checks show as ignored: the nodes know every member, so there is no
//! one address to stall. The binary is also the soak's node processes: `faults::run` comes
//! first in `main`.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use shedlock_test_support::kv::conformance::Suite;

fn main() -> std::process::ExitCode {
    shedlock_conformance::faults::run(|| conformance_harness::harness(Suite::Cluster))
}
