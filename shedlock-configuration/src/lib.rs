//! What a shedlock-rs task asks of its lock: [`LockConfiguration`] (a name, `lock_at_most_for`
//! and `lock_at_least_for`, checked once when it is made) and the duration syntax of
//! [`parse_duration`] (`"PT30S"`, `"5m"`, `"500ms"`).
//!
//! Applications use these through `shedlock` or `shedlock-core`, which re-export them. They
//! live in a crate of their own, with no runtime and no dependency but `thiserror`, so that
//! the `#[scheduler_lock]` attribute (a proc macro) applies exactly the same rules at compile
//! time without building tokio, tracing and the rest of the core.

mod configuration;
mod duration;
mod shown_name;

pub use configuration::{ConfigurationError, LockConfiguration};
pub use duration::{DurationParseError, parse_duration};
/// How shedlock-rs messages quote a lock name (whole, or its head and length past 200
/// characters), so `shedlock-core`'s errors quote it as these do. Not meant for applications.
#[doc(hidden)]
pub use shown_name::ShownName;
