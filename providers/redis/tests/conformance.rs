//! The whole conformance kit against real Redis, in one test binary, in each configuration:
//! - the default one, the one most applications run, on `SHEDLOCK_TEST_REDIS_URL` (the checks
//!   under their own names): fencing off, so the acquire is ShedLock's plain `SET NX PX` and
//!   any name is accepted;
//! - `fencing::<check>`: fencing on, on the same server;
//! - `cluster::<check>`: through a Redis Cluster URL (`SHEDLOCK_TEST_REDIS_CLUSTER_URL`), with
//!   fencing on, so the counter and the lock share a hash slot;
//! - `sentinel::<check>`: through a Redis Sentinel URL (`SHEDLOCK_TEST_REDIS_SENTINEL_URL`).

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use conformance_harness::{Settings, Topology};

fn main() -> std::process::ExitCode {
    conformance_harness::run(&[
        (
            "",
            Settings {
                fencing: false,
                topology: Topology::Server,
            },
        ),
        (
            "fencing",
            Settings {
                fencing: true,
                topology: Topology::Server,
            },
        ),
        (
            "cluster",
            Settings {
                fencing: true,
                topology: Topology::Cluster,
            },
        ),
        (
            "sentinel",
            Settings {
                fencing: false,
                topology: Topology::Sentinel,
            },
        ),
    ])
}
