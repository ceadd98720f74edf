//! What a provider's author uses; an application needs none of it.
//!
//! The root of this crate is what an application calls: the executor, the lock configuration,
//! the [`LockProvider`](crate::LockProvider) trait it holds providers by, the operator's view
//! and the errors. This module is the other side of that trait, apart so neither audience reads
//! the other's API (OpenDAL keeps its implementor's API in `raw` the same way):
//!
//! - a backend with records implements [`LockStorage`] (read a record, write one if it is
//!   still as read) and gets the whole lock algorithm from [`StorageBasedLockProvider`];
//! - a backend with its own lock primitive implements [`LockProvider`](crate::LockProvider)
//!   directly, and uses [`new_locked_by`], [`holder_of`] and [`is_acquisition_locked_by`] to
//!   write the holder the way every provider does;
//! - every provider turns a failed or unanswered call into a [`LockError`](crate::LockError)
//!   the same way, through [`bounded`] and [`consequence`];
//! - a provider's own handle keeps what its next release or extend needs in a
//!   [`HandleState`], which answers `false` unasked once the acquisition is over;
//! - what a provider remembers per lock name to save work later goes in [`RecentNames`],
//!   bounded, since an application may use a new name for every order or tenant;
//! - [`ManualClock`] and [`SkewedClock`] are the clocks the conformance kit and a provider's
//!   own tests set nodes' time with.
//!
//! `shedlock-conformance` proves a provider built on these against the rules every provider
//! keeps.
//!
//! # Words
//!
//! Every provider names things the same way, so an application can move between them:
//!
//! - **Methods keep Java ShedLock's names** (`try_lock`, `unlock`, `extend`), which is what an
//!   application ported from Java looks for; **the act is named in prose, logs and errors**
//!   (acquire, release, extend, force-unlock), which is what
//!   [`Operation`](crate::Operation) says. So `LockHandle::unlock` fails with
//!   `Operation::Release`, as `try_lock` fails with `Operation::Acquire`.
//! - **`lock_until`, `locked_at` and `locked_by` name the stored record**, ShedLock's columns
//!   and fields that Java nodes read too; **`held_until` is the API's view** of the same
//!   moment ([`LockHolder`](crate::LockHolder), [`LockInfo`](crate::LockInfo)).
//! - **A builder's setters are bare** (`holder`, `operation_timeout`, `table_name`), and
//!   every builder finishes with `connect(url)`, `connect_lazy(url)` or `build(...)` on a pool or
//!   client of the application's; **a value that is not a builder derives a changed copy with
//!   `with_`** (`StorageBasedLockProvider::with_holder`, `ProviderSettings::with_holder`),
//!   and keeps bare names for what it reports (`ProviderSettings::holder`).
//! - **A TLS root is `tls_root_certificate`**, on every builder that takes one.

mod failure;
mod handle_state;
mod recent_names;
mod settings;

/// The attribute a [`LockStorage`] or [`LockProvider`](crate::LockProvider) implementation
/// puts on its `impl` block, re-exported so a provider crate needs no dependency of its own
/// for it.
pub use async_trait::async_trait;

pub use crate::clock::{ManualClock, SkewedClock};
pub use crate::identity::{holder_of, is_acquisition_locked_by, new_locked_by};
pub use crate::log_fields::Rfc3339;
pub use crate::storage::{
    DEFAULT_NAME_CACHE_CAPACITY, DEFAULT_OPERATION_TIMEOUT, HeldRecord, LockRecord, LockStorage,
    NodeTime, RecordOutcome, StorageBasedLockProvider, default_holder,
};
pub use failure::{bounded, consequence, failure_message};
pub use handle_state::{HandleState, Ongoing, check_extend};
pub use recent_names::RecentNames;
pub use settings::{
    KeyNamespace, ProviderSettings, check_positive_duration, invalid_setting,
    unused_tls_root_certificate,
};
