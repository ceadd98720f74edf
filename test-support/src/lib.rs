//! Test code shared between the shedlock-rs workspace's crates, so that each crate's tests use
//! one copy of it instead of reaching into another crate's `tests/` folder. Not a product: it is
//! never published, and only `[dev-dependencies]` name it.
//!
//! - [`log_capture`]: everything a test's `tracing` logs say, as text (always built).
//! - [`settings`]: every test server and file, as the environment variable that names it
//!   (always built).
//! - `sql` (the `sql` feature): the SQL providers' shared tests and the conformance kit's
//!   harness for any of them.
//! - `metrics_capture` (the `metrics` feature): what the `metrics` facade recorded, read back.
//! - `kv` (the `kv` feature): the key-value providers' (etcd, Redis, MongoDB, ZooKeeper) shared
//!   test steps and conformance harness pieces.

#[cfg(feature = "kv")]
pub mod kv;
pub mod log_capture;
#[cfg(feature = "metrics")]
pub mod metrics_capture;
pub mod settings;
#[cfg(feature = "sql")]
pub mod sql;
