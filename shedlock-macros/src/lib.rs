//! `#[scheduler_lock]`: every call of an async fn runs under a lock, or is skipped while
//! another node holds it (ShedLock's `@SchedulerLock` in its method mode).
//!
//! Use it through the `shedlock` crate (its `macros` feature), which re-exports it as
//! `shedlock::scheduler_lock`:
//!
//! ```
//! use shedlock::{LockingTaskExecutor, TaskOutcome};
//! # use shedlock_macros::scheduler_lock;
//!
//! #[scheduler_lock(name = "report-{region}", lock_at_most_for = "10m", lock_at_least_for = "30s")]
//! async fn send_report(executor: &LockingTaskExecutor, region: &str) -> usize {
//!     // Runs on one node at a time per region; the others skip the call.
//!     region.len()
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), shedlock::LockError> {
//! let executor = LockingTaskExecutor::new(shedlock::memory::MemoryLockProvider::new());
//! match send_report(&executor, "eu").await? {
//!     TaskOutcome::Executed(sent) => assert_eq!(sent, 2),
//!     _ => println!("another node is sending the eu report"),
//! }
//! # Ok(()) }
//! ```
//!
//! # What the call returns
//!
//! An `async fn f(...) -> T` becomes `async fn f(...) -> Result<TaskOutcome<T>, LockError>`:
//! exactly what [`LockingTaskExecutor::execute`] returns for the body. `TaskOutcome::Executed`
//! holds the body's value, `TaskOutcome::Skipped` means another node holds the lock and the body
//! did not run, and an error means the lock could not be taken or its outcome is unknown, so
//! the body did not run either (the executor fails closed). Nothing is hidden: a skipped call
//! is not a default value, and a body that returns a `Result` gives
//! `Ok(TaskOutcome::Executed(Err(...)))` when it ran and failed. The fn's docs gain a paragraph
//! saying so. `?` and `return` in the body keep their meaning: they leave the body with a `T`.
//!
//! The lock is released when the body ends, also when it panics (the panic then continues, as
//! with the executor). A call inside the body that takes the same lock name on the same
//! executor runs directly, as the executor's re-entrancy rule says.
//!
//! # Calls that may outlast `lock_at_most_for`: `keep_alive`
//!
//! `keep_alive = lost` runs the call with the executor's
//! [`execute_with_keep_alive`](https://docs.rs/shedlock-core/latest/shedlock_core/struct.LockingTaskExecutor.html#method.execute_with_keep_alive),
//! which extends the lock while the call runs, so a call longer than `lock_at_most_for` keeps its lock, and `lost` (a
//! `CancellationToken`, the name is yours) is cancelled if the lock is lost anyway (an extend
//! refused or failing): the body checks `lost.is_cancelled()` between steps and stops, since
//! another node may be running the same work by then. `lock_at_most_for` then only bounds how
//! long a dead node keeps the lock. The provider must support extend; one that does not makes
//! every call an error rather than a run without the promised protection.
//!
//! ```
//! use shedlock::LockingTaskExecutor;
//! # use shedlock_macros::scheduler_lock;
//!
//! #[scheduler_lock(name = "import", lock_at_most_for = "1m", keep_alive = lost)]
//! async fn import(executor: &LockingTaskExecutor, batches: &[u32]) -> usize {
//!     let mut imported = 0;
//!     for _batch in batches {
//!         if lost.is_cancelled() {
//!             break; // another node may be importing now
//!         }
//!         imported += 1;
//!     }
//!     imported
//! }
//! ```
//!
//! # How the call finds its executor
//!
//! From a parameter, not from a global: the executor (and so the provider, the backend and its
//! connection) is whatever the caller passes, so two services, or a test and the real program,
//! never share a hidden default, and nothing has to be set before the first call. Either:
//!
//! - the fn has exactly one parameter whose type is `LockingTaskExecutor` behind references
//!   (`&LockingTaskExecutor`, `&shedlock::LockingTaskExecutor`), and that is the one; or
//! - the attribute names it: `executor = jobs` (a parameter of any type that derefs to a
//!   `LockingTaskExecutor`, such as `Arc<LockingTaskExecutor>`), or
//!   `executor = self.executor` (a field of the receiver, for a method of a service that keeps
//!   its executor).
//!
//! The body can use the executor parameter too (for a nested lock, say).
//!
//! ```
//! use shedlock::LockingTaskExecutor;
//! # use shedlock_macros::scheduler_lock;
//!
//! struct Billing {
//!     executor: LockingTaskExecutor,
//! }
//!
//! impl Billing {
//!     #[scheduler_lock(name = "invoice-run", lock_at_most_for = "PT15M", executor = self.executor)]
//!     async fn invoice_run(&self, day: u32) -> u32 {
//!         day
//!     }
//! }
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), shedlock::LockError> {
//! # let billing = Billing { executor: LockingTaskExecutor::new(shedlock::memory::MemoryLockProvider::new()) };
//! # assert_eq!(billing.invoice_run(3).await?.executed(), Some(3));
//! # Ok(()) }
//! ```
//!
//! # The attribute
//!
//! | key | value | |
//! |---|---|---|
//! | `name` | `"report"`, `"report-{region}"` | required, not empty |
//! | `lock_at_most_for` | `"10m"`, `"PT10M"`, `"1h30m"`, `"500ms"` | required |
//! | `lock_at_least_for` | same forms | default none; not above `lock_at_most_for` |
//! | `executor` | an argument, or `self.<field>` | see above |
//! | `crate` | a path, default `::shedlock` | see below |
//!
//! `lock_at_most_for` is required: it is the safety net if this node dies during the call, and
//! must be well above the longest call, so it is written where the call is (ShedLock's
//! `defaultLockAtMostFor` has no counterpart here).
//!
//! Durations are read by [`LockConfiguration::parse`]'s own parser and rules, while
//! the fn compiles: a duration that does not parse, a zero `lock_at_most_for`,
//! `lock_at_least_for` above `lock_at_most_for`, a missing or empty name, an unknown key, a
//! placeholder that is not an argument, a fn that is not async and one with no executor are
//! compile errors that point at the attribute.
//!
//! A name's placeholders are `format!`'s named ones, `{argument}` or `{argument:spec}`, filled
//! with the argument's `Display` on each call, so `report-{region}` is one lock per region.
//! `{{` and `}}` are braces. Positional placeholders (`{}`, `{0}`) are refused. A filled-in name
//! that comes out empty is a [`LockError`] for that call, and the body does not run; a
//! provider's own limits (an SQL name is at most 64 characters) are checked when the lock is
//! taken, as for any name.
//!
//! # Which crate the expansion names
//!
//! The expansion names `::shedlock::LockConfiguration`, `::shedlock::TaskOutcome` and
//! `::shedlock::LockError`: the facade an application depends on. Code that depends on
//! `shedlock-core` alone (a provider's own tests, say) sets `crate = ::shedlock_core`; a crate
//! that renamed the dependency sets its name.
//!
//! [`LockingTaskExecutor::execute`]: https://docs.rs/shedlock-core/latest/shedlock_core/struct.LockingTaskExecutor.html#method.execute
//! [`LockConfiguration::parse`]: shedlock_configuration::LockConfiguration::parse
//! [`LockError`]: https://docs.rs/shedlock-core/latest/shedlock_core/enum.LockError.html

mod attribute;
mod expand;
mod name;

use proc_macro::TokenStream;

/// Runs each call of the async fn under a lock; see the [crate docs](crate) for the keys, the
/// return type and how the executor is found.
///
/// ```
/// use shedlock::LockingTaskExecutor;
/// # use shedlock_macros::scheduler_lock;
///
/// #[scheduler_lock(name = "cleanup", lock_at_most_for = "5m", lock_at_least_for = "10s")]
/// async fn cleanup(executor: &LockingTaskExecutor) -> Result<u64, std::io::Error> {
///     shedlock::assert_locked().expect("the body runs under the lock");
///     Ok(7)
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let executor = LockingTaskExecutor::new(shedlock::memory::MemoryLockProvider::new());
/// if let Some(removed) = cleanup(&executor).await?.executed() {
///     println!("removed {} files", removed?);
/// }
/// # Ok(()) }
/// ```
#[proc_macro_attribute]
pub fn scheduler_lock(attribute: TokenStream, item: TokenStream) -> TokenStream {
    let function = syn::parse_macro_input!(item as syn::ItemFn);
    attribute::LockAttribute::parse(attribute)
        .and_then(|attribute| expand::expand(attribute, function))
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
