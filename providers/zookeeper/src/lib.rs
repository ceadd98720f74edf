//! The ZooKeeper lock provider for shedlock-rs, wire-compatible with Java ShedLock's
//! `ZookeeperCuratorLockProvider`.
//!
//! A lock is the persistent node `/shedlock/<name>` (root configurable, created with its
//! parents) whose data is the UTF-8 ISO-8601 instant until which the lock is held, exactly what
//! ShedLock's Curator provider writes, so Java and Rust nodes honour each other's locks:
//!
//! - **acquire** reads the node; if it is missing, creates it; if its `lock_until` has passed
//!   on the server's clock, writes a new `lock_until` if the node is still at the version just
//!   read (compare-and-set), which is ShedLock's own condition; otherwise answers not acquired.
//!   When this provider's own release left the node free (its stamp past the `lock_until` it
//!   wrote), the next acquire of the name writes on that version at once, with no read: it
//!   lands only if nobody wrote the node since, and otherwise the node is read as above;
//! - **release** and **extend** write only if the node is still at the version this
//!   acquisition's last write produced, so they never touch a lock someone has taken since,
//!   whoever that is (ShedLock's release writes without any check). Release writes
//!   `max(now, acquired_at + lock_at_least_for)`; extend writes `now + lock_at_most_for`. The
//!   node is kept, never deleted;
//! - **fencing tokens** are the `mzxid` of the acquiring write: ZooKeeper gives every write a
//!   larger transaction id than the one before, across the whole ensemble and across restarts,
//!   so tokens strictly increase per name. (The node's version would not do: it restarts at 0
//!   if the node is deleted and created again.)
//!
//! Free a lock with `force_unlock` (or the CLI's `unlock`), which writes, never by deleting its
//! node: a node deleted and made again restarts its version at 0 and can come back to the
//! version an acquisition, or this provider's last release, compares with.
//!
//! Tested against ZooKeeper 3.8 (Debian's package, standalone) with `zookeeper-client` 0.11.
//!
//! # Java ShedLock interop
//!
//! The node and its data are the Curator provider's: Java nodes see a Rust lock as held until
//! its `lock_until`, and Rust nodes honour a node Java wrote while its `lock_until` has not
//! passed on the server's clock, and take it over once it has. Java nodes compare `lock_until`
//! with their own wall clock (ShedLock's Curator provider is client-time), so exclusion between
//! a Java and a Rust node holds while the Java node's clock is within `lock_at_most_for` minus
//! the task's run time of the ZooKeeper leader's clock. A node whose data is not an ISO-8601
//! instant (empty, or written by something else) is an error naming the node, and is left
//! alone; Java ShedLock treats such a node as held for ever.
//!
//! # Time: the server's clock, learnt from `mtime`
//!
//! ZooKeeper has no request that answers the time, but every write is stamped with the
//! leader's wall clock (`mtime`, milliseconds) and the stamp comes back with the write. A write
//! sent at `t0` and answered at `t1` on this process's *monotonic* clock was stamped between
//! the two, so later the server's clock reads between `mtime + (time since t1)` and
//! `mtime + 1 ms + (time since t0)`. The provider keeps that interval, narrows it with every
//! write of its own, widens it by 100 ppm of its age for the two clocks' drift, and uses the
//! safe end for each decision: the earliest server time to judge that a lock has expired (never
//! early), the latest to compute a new `lock_until` (never short). The node's wall clock is never
//! read, so a node whose wall clock is set wrong by any amount cannot take a held lock:
//! [`TimeSource::Server`].
//!
//! The estimate does rest on the *rate* of the node's monotonic clock: carried forward, it
//! assumes that clock runs at the server's rate within 100 ppm, as on NTP-disciplined
//! machines. A node whose clock runs at another rate (a virtual machine's clock gone wrong, a
//! process under `faketime -f "+0 x2"`) misjudges by the rate error times the time since the
//! provider's last write. So the two decisions that matter never rest on the estimate alone:
//! - **Taking over a lock that was not released** (its node's `lock_until` is later than the
//!   node's own `mtime`): when the estimate says it has expired, the provider writes the root
//!   first and takes the lock only if that write's stamp, the server's own clock, is past
//!   `lock_until`. One more round trip, on this path only; a lock released "now" is seen free
//!   from its own stamp, with none.
//! - **The `lock_until` it writes** (acquire, extend, and release's "now"): each write's own
//!   stamp is checked against the value it carried, and a value the stamp shows wrong by more
//!   than the estimate's uncertainty is written again, compare-and-set on the version just
//!   left: a lock is neither shorter nor longer than asked, whatever the node's clock rate.
//!
//! What a wrong rate still costs is liveness, never exclusion: a node whose clock runs slow
//! sees a lock free late, by the rate error times the time since its last write (measured at
//! half speed: a 3 s lock taken 3 s after it ended), while nodes with good clocks take it on
//! time. The fault suite's `wrong_clocks` check runs nodes an hour ahead, an hour behind, at
//! double and at half speed against every server-time backend.
//!
//! The first interval comes from a write of the provider's own:
//! [`ZookeeperLockProviderBuilder::connect`] writes empty data to the root node (creating it if
//! needed), one round trip. Before its first such write a provider reads the root once: a root
//! that holds data (ShedLock's never does) is another application's node, whose data the write
//! would wipe, so the provider refuses it with an error naming it and writes nothing. When the interval is wider than
//! [`ZookeeperLockProviderBuilder::max_clock_uncertainty`] (10 ms unless set) before an
//! operation, because the provider was idle for minutes or its last writes were slow, it writes
//! the root again first, up to three times. The declared [`Capabilities::time_precision`] is
//! twice that limit plus 1 ms (21 ms by default): a lock's writer may overshoot by one
//! interval, its next taker may see it late by another, and `lock_until` is rounded up to the
//! millisecond.
//!
//! Two more server stamps are used. `acquired_at`, from which `lock_at_least_for` counts, is
//! the end of the millisecond of the acquiring write's `mtime`, so the at-least hold is never
//! short. And a node that reads a lock node knows the server's clock is at least that node's
//! `mtime` (the write came before the read): a release writes "now" as the earliest the
//! server's clock can read, which is never later than the release's own `mtime`, so the next
//! reader sees the lock free at once.
//!
//! This relies on ZooKeeper's servers keeping their wall clocks in step (NTP): a new leader
//! stamps with its own clock. A step of the server's clock moves every lock by that step, as
//! it would for a SQL server's `now()`.
//!
//! # Round trips
//!
//! | operation | requests |
//! |---|---|
//! | acquire, new name | 2: read (no node), create |
//! | acquire, free known name | 2: read, compare-and-set write |
//! | acquire, name this provider released last | 1: compare-and-set write |
//! | acquire, refused | 1: read |
//! | release, extend | 1: compare-and-set write |
//! | connect | the session handshake + 1 root read + 1 root write (+ 1 create per missing level of the root) |
//! | first operation of a provider built with `connect_lazy` | + the same, once |
//!
//! Rarer extras: an acquire that loses a race (the node was created or written between its
//! read and its write, or since this provider's release) reads again, one more round trip per
//! lost race; an operation that finds
//! the clock interval wider than its limit first writes the root, up to three times; a
//! release or extend whose write landed just after the lock expired writes the expired
//! `lock_until` back (one more) and answers `false`, so a lock that was over is over again one
//! round trip later (meanwhile it reads as held, which can only delay the next taker). Pings
//! the client sends on a quiet connection are not part of any operation. `tests/round_trips.rs`
//! counts requests exactly through the conformance kit's counting proxy.
//!
//! # Sessions
//!
//! Lock nodes are persistent, so a lock outlives the session that took it, as Curator's do.
//! A session that ZooKeeper expired (the client was cut off longer than the session timeout)
//! is replaced by a new one on the next operation. An acquisition does not belong to the
//! session that took it: [`LockHandle::extend`] and [`LockHandle::unlock`] write only over the
//! node's version that the acquisition's last write left, which proves nobody took the lock
//! since, so they extend and release it from the new session while it has not expired. Once it
//! expired, or someone took it, they answer `false`, as on every backend. ZooKeeper runs no
//! request of an ended session, so an acquire, release or extend refused for that reason is
//! sent again, once, in the new session.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_zookeeper::ZookeeperLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = ZookeeperLockProvider::builder()
//!     .root("/shedlock")
//!     .connect("127.0.0.1:2181")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("nightly-report", Duration::from_secs(600), Duration::ZERO)?;
//! let _ = executor.execute(&config, async { /* the task */ }).await?;
//! # Ok(()) }
//! ```
//!
//! # Names
//!
//! A plain name is the node name, as Curator writes it. `/`, `%`, a name that is exactly `.` or
//! `..`, and the characters ZooKeeper refuses in paths (controls, characters beyond U+FFFF,
//! U+E000..U+F8FF, U+FFF0..U+FFFF) are written `%XX` per UTF-8 byte, so every name gets its
//! own node directly under the root and the escaping can be undone ([`lock_name`]). Names are
//! limited to [`MAX_NAME_CHARS`] characters, which keeps every request far below ZooKeeper's
//! 1 MiB packet limit even when every character is escaped.
//!
//! # Seeing and freeing locks
//!
//! [`ZookeeperLockProvider`] implements [`LockAdmin`](shedlock_core::LockAdmin). A lock node
//! holds only its `lock_until`, so a listed lock shows no holder and no acquisition time: its
//! state and remaining time are judged by the server-time estimate as an acquire judges them,
//! `held_until` is the stored `lock_until`, and the fencing token is the node's `mzxid` (the
//! acquisition's token until its holder extends or releases). A node whose data is not an
//! instant is shown held with no `held_until`. The acquisition id is `<mzxid>:<version>` of
//! the node's last write, so any write, the holder's extend included, makes it stale.
//! Force-unlock reads the node and, if it is still at that write and held, writes
//! `lock_until` = the server's earliest possible now at that version (two requests); the node
//! is kept. A page reads the root's children (every name: ZooKeeper has no paging), then the
//! page's nodes in one multi-read (ZooKeeper 3.6 or later): two requests per page. Inspect is
//! one read. Child nodes that are no escape this provider writes are left out of listings.
//!
//! # Unknown outcomes and timeouts
//!
//! Opening a session is bounded by the connect timeout and each lock operation by the
//! operation timeout (5 s each unless set). A write that got no answer may or may not have
//! landed, so [`LockProvider::try_lock`] returns an error, never "not acquired", and the
//! executor does not run the task. A release or extend that failed that way leaves the handle
//! at its last known version: if the write did land, a later release answers `false` and the
//! lock ends at its `lock_until`.
//!
//! # TLS
//!
//! `zk+tls://` (or `zookeeper+tls://`) in front of the connect string connects to every server
//! over TLS, as ZooKeeper's `secureClientPort` (2281 by convention) expects; `zk://` or no
//! scheme connects to every server in plain TCP. TLS is chosen by the scheme, as with
//! `rediss://` and `https://`, rather than by a query parameter, because a ZooKeeper connect
//! string has no query (its path is the chroot), and so that one look at the string tells
//! whether it is encrypted. zookeeper-client's per-server `tcp://` and `tcp+tls://` prefixes
//! are refused: one connect string never mixes encrypted and plain servers.
//!
//! ZooKeeper over TLS trusts no public roots: the CA that signed the servers' certificates is
//! required, given (PEM) to [`ZookeeperLockProviderBuilder::tls_root_certificate`], and each
//! server's certificate must name the host written in the connect string. ZooKeeper servers ask
//! for a client certificate unless configured with `ssl.clientAuth=none`:
//! [`ZookeeperLockProviderBuilder::tls_client_certificate`] gives one (PEM certificate chain
//! and key; the key is never printed). Both are read when the provider is built, so a PEM
//! without a certificate or key is an error then, not at the first lock.
//!
//! zookeeper-client keeps the reason a TLS connection failed to its debug log and retries until
//! the connect timeout; when no session could be opened, the provider repeats the handshake
//! itself, bounded by the connect timeout once more, and the error says what failed: the
//! server's certificate (`UnknownIssuer` for a CA that did not sign it, `NotValidForName` for a
//! host it does not name), or the server's refusal of the client's certificate. A failed TLS
//! connect therefore takes up to twice the connect timeout.
//!
//! TLS is the `tls-rustls` feature, on by default: rustls, with ring as the crypto provider
//! (installed as the process default unless one was installed before). zookeeper-client's TLS
//! also builds rustls' default aws-lc-rs provider (from C, with the C compiler alone), which is
//! compiled but not used. Without the feature, a `zk+tls://` connect string is refused with an
//! error naming it.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use shedlock_zookeeper::ZookeeperLockProvider;
//!
//! let provider = ZookeeperLockProvider::builder()
//!     .tls_root_certificate(std::fs::read("/etc/zookeeper/ca.pem")?)
//!     .tls_client_certificate(
//!         std::fs::read("/etc/app/zk-client.pem")?,
//!         std::fs::read("/etc/app/zk-client.key")?,
//!     )
//!     .connect("zk+tls://zk1.internal:2281,zk2.internal:2281/app")
//!     .await?;
//! # let _ = provider; Ok(()) }
//! ```
//!
//! # Credentials
//!
//! Digest credentials may come in front of the connect string (`user:password@host:2181`,
//! percent-encoded) or from [`ZookeeperLockProviderBuilder::digest_auth`]. Nodes are created
//! with the open ACL, as Curator's defaults do. The provider keeps the connect string with the
//! password masked for its `Debug` output, error messages and logs.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod builder;
mod calibration;
mod credentials;
mod failure;
mod handle;
mod paths;
mod provider;
mod server_clock;
mod session;
mod storage;
#[cfg(feature = "tls-rustls")]
mod tls;

use std::time::Duration;

#[cfg(doc)]
use shedlock_core::{Capabilities, LockError, LockHandle, LockProvider, TimeSource};

pub use builder::ZookeeperLockProviderBuilder;
pub use paths::lock_name;
pub use provider::ZookeeperLockProvider;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "zookeeper";

/// ShedLock's root node: locks are `/shedlock/<name>`.
pub const DEFAULT_ROOT: &str = "/shedlock";

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::raw::DEFAULT_OPERATION_TIMEOUT;

/// How long opening a ZooKeeper session may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The session timeout asked of ZooKeeper (the server keeps it between 2 and 20 ticks).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The widest the provider lets its knowledge of the server's clock grow before it writes the
/// root to learn it again.
pub const DEFAULT_MAX_CLOCK_UNCERTAINTY: Duration = Duration::from_millis(10);

/// The longest lock name, in characters.
pub const MAX_NAME_CHARS: usize = 4096;

/// The longest lock this provider writes: ShedLock's data is an RFC 3339 instant, whose year has
/// four digits, so `lock_until` must stay before the year 10000; a thousand years keep it there
/// for the next seven millennia, and the arithmetic on it far from overflowing.
pub const MAX_LOCK_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 60 * 60);
