//! The conformance kit for shedlock-rs lock providers.
//!
//! A provider author implements [`ConformanceHarness`] (how to make a node on the backend, and
//! a few optional hooks) and calls [`run`] from a `harness = false` test target. `cargo test`
//! then lists one test per check; a check that does not apply to the provider shows as
//! ignored with the reason, and a failure names the check, quotes the rule it broke and shows
//! the timeline of requests with their times:
//!
//! ```no_run
//! use std::sync::Arc;
//! use shedlock_conformance::{ConformanceHarness, SetupError, async_trait};
//! use shedlock_core::Clock;
//! use shedlock_memory::{MemoryLockProvider, MemoryLockStore};
//!
//! struct Memory(MemoryLockStore);
//!
//! #[async_trait]
//! impl ConformanceHarness for Memory {
//!     type Node = MemoryLockProvider;
//!     fn name(&self) -> &str { "memory" }
//!     async fn node(&self, clock: Arc<dyn Clock>) -> Result<MemoryLockProvider, SetupError> {
//!         Ok(self.0.node_with("conformance", clock))
//!     }
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     shedlock_conformance::run(|| async { Ok(Memory(MemoryLockStore::new())) })
//! }
//! ```
//!
//! Each check is also a plain public async function ([`check_at_most_expiry`] and so on), as
//! in `object_store`'s integration tests, and [`Check`] lists them all. Lock durations are
//! short multiples of a unit derived from the provider's declared precision ([`Timing`]), so
//! a full run takes seconds. [`backends`] finds a backend for each provider of this repository.

pub mod backends;
mod checks;
mod failure;
pub mod faults;
mod first_use;
mod harness;
mod names;
mod relay;
mod report;
pub mod rules;
mod runner;
mod timing;
mod trace;
mod wire;

pub use async_trait::async_trait;
pub use checks::{
    CASES_VARIABLE, DEEP_VARIABLE, EDGE_CASE_NAMES, ModelSettings, SEED_VARIABLE, UNREACHABLE_LIMIT,
};
pub use checks::{
    Check, check_acquire_skip_release, check_admin_concurrent_force_unlock,
    check_admin_force_unlock, check_admin_listing, check_at_least_hold, check_at_most_expiry,
    check_backend_lost, check_backend_unreachable, check_clock_skew, check_concurrent_release,
    check_extend, check_extend_refused_when_not_declared, check_fencing_tokens_increase,
    check_generated_names, check_long_durations_and_counts, check_model, check_model_with,
    check_mutual_exclusion, check_name_cache_cleared_midway, check_name_edge_cases,
    check_name_length_limit, check_ownership_after_expiry, check_shedlock_record_takeover,
    check_stale_call_at_expiry, check_stale_handle_answers,
};
pub use failure::{CheckFailure, Event, Rule, Verdict};
pub use first_use::{FIRST_USE_NODES, check_first_use};
pub use harness::{ConformanceHarness, PlantedRecord, SetupError, Support};
pub use libtest_mimic::Arguments;
pub use names::NameSpace;
pub use report::{
    CheckResult, REPORT_DIR_VARIABLE, Report, Status, merged_markdown, merged_report, read_reports,
};
pub use runner::{run, run_and_report, run_configurations, run_with_args};
/// The core crate, so a harness needs no second import for its types.
pub use shedlock_core;
pub use shedlock_core::{Clock, LockError};
pub use timing::Timing;
pub use wire::CountingProxy;
