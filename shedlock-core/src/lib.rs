//! The core of shedlock-rs: make a scheduled task run at most once at a time across many nodes.
//!
//! A node takes a time-bounded lock in storage the nodes share; a node that does not get it
//! skips the run and never waits. The semantics are Java ShedLock's:
//!
//! - a lock is held until `now + lock_at_most_for` unless released, the safety net for a holder
//!   that dies;
//! - a release keeps it until `acquired_at + lock_at_least_for` if that is later;
//! - release and extend act only on the caller's own acquisition.
//!
//! ```
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor, TaskOutcome};
//! # async fn run(provider: impl shedlock_core::LockProvider + 'static) -> Result<(), shedlock_core::LockError> {
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::parse("nightly-report", "PT10M", "30s")?;
//! match executor.execute(&config, async { 42 }).await? {
//!     TaskOutcome::Executed(value) => assert_eq!(value, 42),
//!     TaskOutcome::Skipped(_holder) => { /* another node runs it this time */ }
//! }
//! # Ok(()) }
//! ```
//!
//! Providers live in their own crates (`shedlock-memory`, `shedlock-postgres`, ...). What their
//! authors implement and use is in [`raw`]: a backend with records implements
//! [`raw::LockStorage`] and gets the algorithm from [`raw::StorageBasedLockProvider`]; others
//! implement [`LockProvider`] directly.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod clock;
mod credentials;
mod error;
mod executor;
mod identity;
mod log_fields;
pub mod metrics;
mod provider;
pub mod raw;
pub mod scheme;
mod storage;

pub use admin::{
    AcquisitionId, DEFAULT_PAGE_SIZE, LockAdmin, LockInfo, LockPage, LockState, PageCursor,
    PageRequest, list_all_locks,
};
pub use clock::{Clock, MonotonicClock, SystemClock};
pub use credentials::redact_url;
pub use error::{BoxError, ErrorKind, LockError, Operation};
pub use executor::{
    LockingTaskExecutor, TaskOutcome, active_fencing_token, assert_locked, extend_active_lock,
};
pub use log_fields::ErrorChain;
pub use provider::{Acquisition, Capabilities, LockHandle, LockHolder, LockProvider, TimeSource};
pub use shedlock_configuration::{
    ConfigurationError, DurationParseError, LockConfiguration, parse_duration,
};
pub use tokio_util::sync::CancellationToken;
