//! The whole conformance kit against a real etcd (`SHEDLOCK_TEST_ETCD_URL`). Each node is its
//! own provider with its own client, as a separate process would be; each run uses its own env
//! segment of the key.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

use shedlock_test_support::kv::conformance::Suite;

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| conformance_harness::harness(Suite::Conformance))
}
