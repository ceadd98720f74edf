//! The whole conformance kit through a `redis+cluster://` URL
//! (`SHEDLOCK_TEST_REDIS_CLUSTER_URL`, a cluster `ci/start-redis-topologies.sh` starts), with
//! fencing on: every acquire is the script that also increments the counter
//! `{<lock key>}:fencing`, which must land in the lock key's own slot, and the kit's names
//! spread over every master.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use conformance_harness::{Settings, Topology};

fn main() -> std::process::ExitCode {
    conformance_harness::run(Settings {
        fencing: true,
        topology: Topology::Cluster,
    })
}
