//! Benchmarks of every shedlock-rs backend beside its floor.
//!
//! A lock operation's latency says little alone: a PostgreSQL cycle of 0.4 ms is good on one
//! machine and poor on another. So every backend is measured twice in the same run, through the
//! facade's [`AnyLockProvider`] (what an application pays) and through the same driver the
//! provider uses, doing the cheapest round trip with the same durability (what the server and
//! the network cost anyway). The ratio of the two is the provider's own cost, and it travels
//! between machines.
//!
//! - [`measure`] times operations for a duration or a count, one at a time, in turns over the
//!   same seconds, or all at once, and summarises the latencies;
//! - [`scenarios`] are the lock operations measured: the cycle on one name, the first acquire of
//!   a new name, a refused acquire, nodes contending for one name, and a cycle over 10,000
//!   names;
//! - [`floors`] are the per-backend floors, and the batched writes that prepare names;
//! - [`suite`] runs every scenario of one backend beside its floor, for the `shedlock bench`
//!   command;
//! - `groups` (feature `criterion`) registers all of them as one criterion group per backend,
//!   the shape every file under `benches/` shares.
//!
//! The library has no criterion in it without that feature, so the `shedlock bench` command can
//! run the same scenarios ([`suite`]) and print their [`measure::Stats`].
//!
//! Servers are found through `SHEDLOCK_TEST_<BACKEND>_URL`, as the workspace's tests find them
//! ([`server_url`]); SQLite uses a file of its own ([`floors::SqliteFile`]).

pub mod floors;
#[cfg(feature = "criterion")]
pub mod groups;
pub mod measure;
pub mod scenarios;
pub mod suite;

use shedlock::AnyLockProvider;

/// The URL in the environment variable `variable`.
///
/// # Panics
///
/// If the variable is not set: a bench never skips a backend it was built for, it names the
/// variable to set instead.
pub fn server_url(variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        panic!("{variable} is not set: point it at the server to bench against (see ci/test.sh)")
    })
}

/// A new node on `url`: its own provider with its own connections, creating ShedLock's table
/// on the SQL backends if it is missing.
///
/// # Panics
///
/// If the backend cannot be reached: a bench cannot go on without it.
pub async fn connect_node(url: &str) -> AnyLockProvider {
    AnyLockProvider::builder()
        .create_table_if_missing()
        .connect(url)
        .await
        .unwrap_or_else(|error| panic!("cannot connect a node: {error}"))
}
