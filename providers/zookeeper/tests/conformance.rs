//! The whole conformance kit against a real ZooKeeper (`SHEDLOCK_TEST_ZOOKEEPER_URL`). Each
//! node is its own provider with its own session, as a separate process would be; each run
//! uses a root of its own, deleted at the end.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use shedlock_test_support::kv::conformance::Suite;

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| conformance_harness::harness(Suite::Conformance))
}
