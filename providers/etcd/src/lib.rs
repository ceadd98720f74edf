//! The etcd lock provider for shedlock-rs, wire-compatible with Java ShedLock's
//! `EtcdLockProvider`.
//!
//! A lock is one key, `shedlock:<env>:<name>` (env `default` unless set), attached to a lease
//! granted for this acquisition alone:
//!
//! - **acquire** grants a lease of `ceil(lock_at_most_for)` seconds, then runs one transaction:
//!   if the key does not exist, put it on the lease (ShedLock's own condition, so Java and Rust
//!   nodes exclude each other), else read who holds it;
//! - **release** and **extend** are transactions that compare the key's value, unique per
//!   acquisition, so they only ever act on this acquisition (ShedLock checks nothing). Extend
//!   moves the key onto a new lease of `ceil(new lock_at_most_for)`; release deletes the key, or
//!   while `lock_at_least_for` still runs, moves it onto a lease of the rest, rounded up;
//! - **time** is etcd's: leases expire on the server, so a node whose clock is wrong cannot
//!   break exclusion ([`TimeSource::Server`]). The one duration measured here, how much of
//!   `lock_at_least_for` is left at release, uses this process's monotonic clock from the moment
//!   the acquire was answered, which can only overestimate it;
//! - **fencing tokens** are the revision of the acquiring put: etcd raises its revision with
//!   every write, so tokens strictly increase per name (and across names).
//!
//! A key under `shedlock:<env>:` whose value is not ShedLock's (`ADDED:<time>@<holder>`, as
//! Java and this provider write it) is another application's, or was set by hand: an acquire
//! of its lock fails with an error naming the key and what it holds, and writes nothing (Java
//! ShedLock would skip that lock for as long as the key lives, for ever without a lease).
//! Names are at most [`MAX_NAME_CHARS`] characters.
//!
//! Each operation is its minimum of gRPC calls: an acquire is two (a lease, then the
//! transaction: a key can only be put on a lease that already exists), a release one
//! transaction, and an extend two (a lease of the new TTL, then the owner-checked move; etcd
//! cannot change a lease's TTL, and a keep-alive of the current lease alone would not tell
//! whether the key on it is still ours). A release within `lock_at_least_for` moves the key
//! onto a lease that ends with it; that lease is made in the background as soon as the acquire
//! is answered, while the task runs, so the release is the move alone, one transaction. It is
//! used only if it surely ends no later than `lock_at_least_for` plus the declared precision
//! (counted from the acquire's start) and lives past the operation timeout; otherwise (a
//! release in the last seconds of `lock_at_least_for`, or before the lease was made) the
//! release makes a lease of the rest then, two calls in turn. Leases that a
//! transaction leaves without a key (after a release, a move, or a refused acquire) are kept, a
//! few per TTL, and the next operation needing that TTL restarts one with a keep-alive instead
//! of granting a new one: a lock cycle sends no revoke, and keyless leases never pile up (at
//! most 32 TTLs keep spares). A spare of a TTL under a minute that nobody reuses ends at its
//! TTL, as every lease does; one of a minute or more is kept alive in the background by a
//! keep-alive shortly before it would end (about one call per TTL), so a job idle for longer
//! than its `lock_at_most_for`, an hourly one, still finds it young. When the spare surely outlives
//! the acquire (more than the operation timeout and a second of its life left), its keep-alive
//! and the acquire's transaction are sent together, one round trip: the transaction finds the
//! lease alive whichever etcd applies first. If the keep-alive fails, the lease is revoked with
//! any key on it and the acquire answers an error; if etcd says the lease had ended, nothing of
//! ours is left and the acquire grants a new one.
//!
//! Leases count whole seconds, so every duration is rounded up to a second, and etcd raises a
//! lease below its minimum TTL (2 s with default settings) to that minimum and revokes expired
//! leases on a 500 ms tick: a lock is never shorter than asked, but the shortest locks may be
//! held up to about 2 s longer. The provider declares this as its
//! [`Capabilities::time_precision`]: the minimum TTL the server grants, measured by
//! [`EtcdLockProviderBuilder::connect`] (a 1 s lease, granted and revoked), at least 1 s, and
//! etcd's default of 2 s when the provider is built without that check.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_etcd::EtcdLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = EtcdLockProvider::builder()
//!     .env("production")
//!     .connect("http://127.0.0.1:2379")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("nightly-report", Duration::from_secs(600), Duration::ZERO)?;
//! let _ = executor.execute(&config, async { /* the task */ }).await?;
//! # Ok(()) }
//! ```
//!
//! # Building: `protoc`
//!
//! The `etcd-client` crate compiles etcd's protobuf definitions when it is built, which needs
//! the `protoc` compiler: on Debian or Ubuntu `apt-get install protobuf-compiler`, elsewhere
//! install it from <https://github.com/protocolbuffers/protobuf/releases> or point the `PROTOC`
//! environment variable at a `protoc` binary. Without it the build stops in `etcd-client`'s
//! build script with "Could not find `protoc`" (Cargo runs that script before this crate's
//! own build script, which repeats the advice where it gets the chance).
//!
//! # Seeing and freeing locks
//!
//! [`EtcdLockProvider`] implements [`LockAdmin`](shedlock_core::LockAdmin) for operators. A
//! lock is a key only while held (release deletes it, an ended lease takes it away), so a
//! listing shows held locks; a key whose lease has just ended and which etcd has not yet
//! deleted shows as free. The remaining time is the lease's TTL by etcd's clock, rounded up to
//! a whole second (etcd reports whole seconds); `held_until` is this process's clock plus
//! that. An acquisition id is `<create_revision>/<value>` (the revision is also the fencing
//! token), and force-unlock is one transaction deleting the key if both still match. Costs: a
//! page is one `Range` plus one `LeaseTimeToLive` per held lock on it (sent concurrently:
//! etcd has no call reading several leases), inspect two calls, force-unlock one.
//!
//! # Unknown outcomes
//!
//! Every operation is bounded by the operation timeout (5 s unless set), applied per request by
//! the client and to the operation as a whole. An acquire whose transaction got no answer may
//! or may not have taken the lock, so [`LockProvider::try_lock`] returns an error, never "not
//! acquired", and the executor does not run the task; the provider then revokes the lease it
//! granted for that attempt, in the background, which removes the key if the put did land. The
//! lease belongs to that attempt alone, so this can never free anyone else's lock.
//!
//! # TLS
//!
//! `https://` endpoints connect over TLS, with the `tls-rustls` feature (on by default): rustls
//! on ring, trusting Mozilla's roots, compiled in (`tls-rustls-native-roots`: the system's store
//! instead). A cluster whose certificates a private CA signed, as etcd's own TLS guides set up,
//! needs that CA: [`EtcdLockProviderBuilder::tls_root_certificate`]. All endpoints use TLS or none
//! do. A build without TLS refuses `https://` with an error naming the feature.
//!
//! # Credentials
//!
//! A user and password may come in the URL (`http://user:password@host:2379`, percent-encoded)
//! or from [`EtcdLockProviderBuilder::credentials`]. The provider keeps only a redacted copy of
//! the URL for its `Debug` output, error messages and log lines.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod builder;
mod credentials;
mod failure;
mod handle;
mod lease;
mod provider;
mod storage;
mod url;

use std::time::Duration;

#[cfg(doc)]
use shedlock_core::{Capabilities, LockError, LockProvider, TimeSource};

pub use builder::EtcdLockProviderBuilder;
pub use provider::EtcdLockProvider;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "etcd";

/// ShedLock's key prefix: keys are `shedlock:<env>:<name>`.
pub const DEFAULT_KEY_PREFIX: &str = "shedlock";

/// ShedLock's default environment segment of the key.
pub const DEFAULT_ENV: &str = "default";

/// The time precision declared until [`EtcdLockProviderBuilder::connect`] measures the
/// server's: etcd's default minimum lease TTL.
pub const DEFAULT_TIME_PRECISION: Duration = Duration::from_secs(2);

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::raw::DEFAULT_OPERATION_TIMEOUT;

/// The longest lock name accepted, in characters. An acquire sends its key three times in one
/// request (the transaction's compare, put and read), which etcd refuses past its request limit
/// (1.5 MiB unless set): 4096 characters keep a key under 16 KiB whatever they are, far below
/// it. A longer name is refused with [`LockError::InvalidName`] before anything is sent, never
/// truncated.
pub const MAX_NAME_CHARS: usize = 4096;
