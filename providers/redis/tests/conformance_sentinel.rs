//! The whole conformance kit through a `redis+sentinel://` URL
//! (`SHEDLOCK_TEST_REDIS_SENTINEL_URL`, sentinels `ci/start-redis-topologies.sh` starts) with
//! the default configuration: every node finds the master through the sentinels.
//! `tests/sentinel_failover.rs` moves the master and checks that the provider follows.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use conformance_harness::{Settings, Topology};

fn main() -> std::process::ExitCode {
    conformance_harness::run(Settings {
        fencing: false,
        topology: Topology::Sentinel,
    })
}
