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
//! Providers live in their own crates (`shedlock-memory`, `shedlock-postgres`, ...). A backend
//! with records implements [`LockStorage`] and gets the algorithm from
//! [`StorageBasedLockProvider`]; others implement [`LockProvider`] directly.

mod admin;
mod clock;
mod credentials;
mod error;
mod executor;
mod identity;
mod log_fields;
mod provider;
pub mod scheme;
mod storage;

pub use admin::{
    AcquisitionId, DEFAULT_PAGE_SIZE, LockAdmin, LockInfo, LockPage, LockState, PageCursor,
    PageRequest, list_all_locks,
};
/// The attribute a [`LockStorage`] or [`LockProvider`] implementation puts on its `impl`
/// block, re-exported so a provider crate needs no dependency of its own for it.
pub use async_trait::async_trait;
pub use clock::{Clock, ManualClock, MonotonicClock, SkewedClock, SystemClock};
pub use credentials::redact_url;
pub use error::{BoxError, ErrorKind, LockError, Operation};
pub use executor::{
    LockingTaskExecutor, TaskOutcome, active_fencing_token, assert_locked, extend_active_lock,
};
pub use identity::{holder_of, is_acquisition_locked_by, new_locked_by};
pub use log_fields::Rfc3339;
pub use provider::{Acquisition, Capabilities, LockHandle, LockHolder, LockProvider, TimeSource};
pub use shedlock_configuration::{
    ConfigurationError, DurationParseError, LockConfiguration, parse_duration,
};
pub use storage::{
    DEFAULT_NAME_CACHE_CAPACITY, DEFAULT_OPERATION_TIMEOUT, HeldRecord, LockRecord, LockStorage,
    NodeTime, RecordOutcome, StorageBasedLockProvider, default_holder,
};
pub use tokio_util::sync::CancellationToken;
