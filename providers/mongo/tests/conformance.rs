//! The whole conformance kit against a MongoDB server (`SHEDLOCK_TEST_MONGO_URL`, else the
//! official `mongo` image through testcontainers where Docker runs). Each node is its own
//! provider with its own client, as a separate process would be; all runs share one
//! collection, each with its own name prefix.

#[path = "shared/conformance_harness.rs"]
mod conformance_harness;

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(conformance_harness::harness)
}
