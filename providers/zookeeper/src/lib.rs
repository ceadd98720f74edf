//! The ZooKeeper lock provider for shedlock-rs, wire-compatible with Java ShedLock's
//! `ZookeeperCuratorLockProvider`.
//!
//! A lock is the persistent node `/shedlock/<name>` (root configurable, created with its
//! parents) whose data is the UTF-8 ISO-8601 instant until which the lock is held, exactly what
//! ShedLock's Curator provider writes, so Java and Rust nodes honour each other's locks:
//!
//! - **acquire** reads the node; if it is missing, creates it; if its `lock_until` has passed
//!   on the server's clock, writes a new `lock_until` if the node is still at the version just
//!   read (compare-and-set), which is ShedLock's own condition; otherwise answers not acquired;
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
//! | acquire, refused | 1: read |
//! | release, extend | 1: compare-and-set write |
//! | connect | the session handshake + 1 root read + 1 root write (+ 1 create per missing level of the root) |
//! | first operation of a provider built with `connect_lazy` | + the same, once |
//!
//! Rarer extras: an acquire that loses a race (the node was created or written between its
//! read and its write) reads again, one more round trip per lost race; an operation that finds
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
//! is replaced by a new one on the next operation. An acquisition made in an expired session
//! counts as lost for [`LockHandle::extend`], which answers `false`, so a keep-alive tells the
//! task to stop: the node was out of touch with the ensemble for a while and the task should
//! not trust its lock to have been kept alive. [`LockHandle::unlock`] of such a handle still
//! frees its own acquisition if the node is still at the version it wrote: that write proves
//! nobody took the lock since, and freeing it lets the next run start without waiting for
//! `lock_at_most_for`. ZooKeeper runs no request of an ended session, so an acquire or release
//! refused for that reason is sent again, once, in the new session.
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

mod admin;
mod credentials;
mod paths;
mod server_clock;
mod storage;
#[cfg(feature = "tls-rustls")]
mod tls;

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, Capabilities, ConfigurationError, ErrorKind, LockConfiguration, LockError,
    LockHandle, LockHolder, LockProvider, Operation, TimeSource,
};
use tokio::time::Instant;
use tracing::debug;
use zookeeper_client::{Client, SessionState, Stat};

pub use paths::lock_name;

use credentials::{ConnectString, DigestCredentials};
use server_clock::{ServerClock, ServerMicros};

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "zookeeper";

/// ShedLock's root node: locks are `/shedlock/<name>`.
pub const DEFAULT_ROOT: &str = "/shedlock";

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::DEFAULT_OPERATION_TIMEOUT;

/// How long opening a ZooKeeper session may take.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The session timeout asked of ZooKeeper (the server keeps it between 2 and 20 ticks).
pub const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// The widest the provider lets its knowledge of the server's clock grow before it writes the
/// root to learn it again.
pub const DEFAULT_MAX_CLOCK_UNCERTAINTY: Duration = Duration::from_millis(10);

/// The longest lock name, in characters.
pub const MAX_NAME_CHARS: usize = 4096;

/// How many root writes one operation spends at most to bring the clock's uncertainty under
/// its limit; past them it goes on with the wider interval, which is safe, only slower to see
/// expiries.
const CALIBRATION_ATTEMPTS: usize = 3;

/// Settings for a [`ZookeeperLockProvider`]; finish with [`connect`](Self::connect) or
/// [`connect_lazy`](Self::connect_lazy).
#[derive(Debug, Clone)]
pub struct ZookeeperLockProviderBuilder {
    root: String,
    operation_timeout: Duration,
    connect_timeout: Duration,
    session_timeout: Duration,
    max_clock_uncertainty: Duration,
    credentials: Option<DigestCredentials>,
    #[cfg(feature = "tls-rustls")]
    tls: tls::TlsPem,
}

impl Default for ZookeeperLockProviderBuilder {
    fn default() -> Self {
        Self {
            root: DEFAULT_ROOT.to_owned(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            max_clock_uncertainty: DEFAULT_MAX_CLOCK_UNCERTAINTY,
            credentials: None,
            #[cfg(feature = "tls-rustls")]
            tls: tls::TlsPem::default(),
        }
    }
}

impl ZookeeperLockProviderBuilder {
    /// The node under which lock nodes live, `/shedlock` as in ShedLock: an absolute path,
    /// created with its parents when missing. Services that share a ZooKeeper but not their
    /// locks use different roots.
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// The longest one lock operation (all its requests) may take before it fails with
    /// [`LockError::Timeout`].
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The longest opening a session may take, at connect and whenever an expired session is
    /// replaced.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The session timeout asked of ZooKeeper: how long the client may be cut off before the
    /// server ends its session.
    pub fn session_timeout(mut self, timeout: Duration) -> Self {
        self.session_timeout = timeout;
        self
    }

    /// How uncertain the provider lets its knowledge of the server's clock become before it
    /// learns it again with a write to the root. Twice this, plus 1 ms, is the declared
    /// [`Capabilities::time_precision`]: how late a lock may be seen to expire.
    pub fn max_clock_uncertainty(mut self, limit: Duration) -> Self {
        self.max_clock_uncertainty = limit;
        self
    }

    /// Authenticates with ZooKeeper's `digest` scheme (instead of credentials in the connect
    /// string). The password is never printed, logged or put into an error.
    pub fn digest_auth(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(DigestCredentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// Trusts this CA (PEM; several certificates, and revocation lists, may follow one another)
    /// for the servers of a `zk+tls://` connect string, which needs it: ZooKeeper over TLS
    /// trusts no public roots. With a plain connect string it is an error rather than ignored.
    #[cfg(feature = "tls-rustls")]
    pub fn tls_root_certificate(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls.root_certificate = Some(pem.into());
        self
    }

    /// Presents this certificate (PEM chain, the client's first) and private key (PEM: PKCS#8,
    /// PKCS#1 or SEC1) to the servers of a `zk+tls://` connect string, which ask for one unless
    /// configured with `ssl.clientAuth=none`. The key is never printed, logged or put into an
    /// error. With a plain connect string it is an error rather than ignored.
    #[cfg(feature = "tls-rustls")]
    pub fn tls_client_certificate(
        mut self,
        certificate_pem: impl Into<Vec<u8>>,
        key_pem: impl Into<Vec<u8>>,
    ) -> Self {
        self.tls.client_identity = Some((certificate_pem.into(), key_pem.into()));
        self
    }

    /// Connects to `connect_string` (`[user:password@]host:2181[,host:2181...][/chroot]`, an
    /// optional `zk://` or `zookeeper://` in front, or `zk+tls://` or `zookeeper+tls://` for
    /// TLS; a URL of another scheme is refused), opens a session within the connect timeout,
    /// and learns the server's clock with one write to the root node, creating the root if it
    /// is missing. Fails with a [`LockError`] naming the redacted connect string otherwise.
    pub async fn connect(self, connect_string: &str) -> Result<ZookeeperLockProvider, LockError> {
        let provider = self.connect_lazy(connect_string)?;
        let inner = &provider.inner;
        let session = inner.session(Operation::Connect, "").await?;
        let deadline = Instant::now() + inner.operation_timeout;
        inner
            .calibrated(&session.client, Operation::Connect, "", deadline)
            .await?;
        Ok(provider)
    }

    /// Like [`connect`](Self::connect) without talking to ZooKeeper: an application can start
    /// while ZooKeeper is down, and each lock operation fails (bounded by the connect and
    /// operation timeouts) until it answers. The first operation learns the server's clock.
    pub fn connect_lazy(self, connect_string: &str) -> Result<ZookeeperLockProvider, LockError> {
        let parsed = credentials::parse(connect_string);
        self.validate(&parsed)?;
        #[cfg(feature = "tls-rustls")]
        let tls = self.tls_for(&parsed)?;
        let ConnectString {
            servers,
            credentials,
            redacted,
            ..
        } = parsed;
        Ok(ZookeeperLockProvider {
            inner: Arc::new(Inner {
                servers,
                endpoint: redacted,
                #[cfg(feature = "tls-rustls")]
                tls,
                credentials: self.credentials.or(credentials),
                root: self.root,
                operation_timeout: self.operation_timeout,
                connect_timeout: self.connect_timeout,
                session_timeout: self.session_timeout,
                max_clock_uncertainty: self.max_clock_uncertainty,
                session: tokio::sync::Mutex::new(SessionSlot::default()),
                clock: Mutex::new(None),
                root_checked: AtomicBool::new(false),
            }),
        })
    }

    fn validate(&self, connect_string: &ConnectString) -> Result<(), LockError> {
        paths::validate_root(&self.root)?;
        if let Some(scheme) = &connect_string.foreign_scheme {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "the connect string's scheme is {scheme:?}, which is not ZooKeeper's: the \
                     zookeeper provider accepts host:port[,host:port...][/chroot], optionally \
                     after zk:// or zookeeper://"
                ),
            ));
        }
        for (what, value) in [
            ("operation timeout", self.operation_timeout),
            ("connect timeout", self.connect_timeout),
            ("session timeout", self.session_timeout),
            ("max clock uncertainty", self.max_clock_uncertainty),
        ] {
            if value.is_zero() {
                return Err(invalid_setting(what, "0s", "it must be greater than zero"));
            }
        }
        let servers = connect_string.servers.split('/').next().unwrap_or_default();
        // A scheme comes before any `/`; a chroot's own `://` is no server's scheme.
        let own_scheme = |server: &str| {
            server
                .split_once("://")
                .is_some_and(|(scheme, _)| !scheme.contains('/'))
        };
        if connect_string.servers.split(',').any(own_scheme) {
            return Err(invalid_setting(
                "connect string",
                &connect_string.redacted,
                "a server must not carry a scheme of its own (tcp://, tcp+tls://): zk+tls:// \
                 in front makes every server TLS, zk:// none",
            ));
        }
        if let Some((_, chroot)) = connect_string.servers.split_once('/') {
            let chroot = format!("/{chroot}");
            if let Some(rule) = paths::path_rule(&chroot) {
                return Err(invalid_setting(
                    "connect string",
                    &connect_string.redacted,
                    &format!("its chroot {chroot:?} is not a ZooKeeper path: {rule}"),
                ));
            }
        }
        if servers.split(',').any(|server| server.trim().is_empty()) {
            return Err(invalid_setting(
                "connect string",
                &connect_string.redacted,
                "it must list at least one host:port, separated by commas, before any /chroot",
            ));
        }
        #[cfg(not(feature = "tls-rustls"))]
        if connect_string.tls {
            return Err(LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "{} asks for TLS, which this build leaves out: enable the \"tls-rustls\" \
                     feature of shedlock-zookeeper (on by default), or the \"rustls\" feature \
                     of shedlock",
                    connect_string.redacted
                ),
            ));
        }
        Ok(())
    }

    /// The TLS settings a `zk+tls://` connect string needs, checked; `None` for a plain one,
    /// which must come without any.
    #[cfg(feature = "tls-rustls")]
    fn tls_for(&self, connect_string: &ConnectString) -> Result<Option<tls::Tls>, LockError> {
        if !connect_string.tls {
            if self.tls.is_set() {
                return Err(invalid_setting(
                    "connect string",
                    &connect_string.redacted,
                    "a TLS root or client certificate was set, but the connect string does not \
                     use TLS: write zk+tls:// in front of it",
                ));
            }
            return Ok(None);
        }
        tls::Tls::new(&self.tls).map(Some).map_err(|rule| {
            LockError::backend_message(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!("cannot connect to {}: {rule}", connect_string.redacted),
            )
        })
    }
}

fn invalid_setting(what: &str, value: &str, rule: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {what} {value:?}: {rule}"),
    )
}

/// Locks in ZooKeeper, one persistent node per name; see the crate docs for the layout, the
/// time source and the guarantees. Cheap to clone (the session is shared).
#[derive(Clone)]
pub struct ZookeeperLockProvider {
    inner: Arc<Inner>,
}

struct Inner {
    /// What the client connects to: hosts and chroot, without credentials.
    servers: String,
    /// The connect string as given, password masked: the only form ever shown.
    endpoint: String,
    /// Set for a `zk+tls://` connect string: every server is reached over TLS.
    #[cfg(feature = "tls-rustls")]
    tls: Option<tls::Tls>,
    credentials: Option<DigestCredentials>,
    root: String,
    operation_timeout: Duration,
    connect_timeout: Duration,
    session_timeout: Duration,
    max_clock_uncertainty: Duration,
    /// The session, opened on first use and replaced once ZooKeeper ends it. Held across the
    /// opening so concurrent operations share one new session.
    session: tokio::sync::Mutex<SessionSlot>,
    /// What this provider knows of the server's clock, from its own writes.
    clock: Mutex<Option<ServerClock>>,
    /// Whether the root was read once and found empty (or missing), before the first of the
    /// writes that learn the clock there.
    root_checked: AtomicBool,
}

#[derive(Default)]
struct SessionSlot {
    client: Option<Client>,
    /// How many sessions this provider has opened: a handle remembers the one it acquired in.
    generation: u64,
}

/// A live session and which of the provider's sessions it is.
#[derive(Clone)]
struct Session {
    client: Client,
    generation: u64,
}

impl fmt::Debug for ZookeeperLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let inner = &self.inner;
        f.debug_struct("ZookeeperLockProvider")
            .field("endpoint", &inner.endpoint)
            .field("tls", &inner.uses_tls())
            .field("credentials", &inner.credentials)
            .field("root", &inner.root)
            .field("operation_timeout", &inner.operation_timeout)
            .field("connect_timeout", &inner.connect_timeout)
            .field("session_timeout", &inner.session_timeout)
            .field("max_clock_uncertainty", &inner.max_clock_uncertainty)
            .finish()
    }
}

impl ZookeeperLockProvider {
    /// Settings with ShedLock's defaults: root `/shedlock`, 5 s operation and connect
    /// timeouts, a 10 s session, no credentials.
    pub fn builder() -> ZookeeperLockProviderBuilder {
        ZookeeperLockProviderBuilder::default()
    }

    /// Connects to `connect_string` with the default settings; see
    /// [`ZookeeperLockProviderBuilder::connect`].
    pub async fn connect(connect_string: &str) -> Result<Self, LockError> {
        Self::builder().connect(connect_string).await
    }

    /// The node of lock `name`, `<root>/<escaped name>`, for operators who want to inspect or
    /// free a lock by hand. Refuses what [`try_lock`](LockProvider::try_lock) refuses.
    pub fn lock_path(&self, name: &str) -> Result<String, LockError> {
        if name.is_empty() {
            return Err(ConfigurationError::EmptyName.into());
        }
        self.capabilities().check_name_length(PROVIDER, name)?;
        Ok(format!("{}/{}", self.inner.root, paths::node_name(name)))
    }
}

/// A request's answer: ZooKeeper's own errors (`NoNode`, `BadVersion`...) are answers the
/// caller looks at; running out of time is a [`LockError`] already.
type Answer<T> = Result<Result<T, zookeeper_client::Error>, LockError>;

impl Inner {
    fn uses_tls(&self) -> bool {
        #[cfg(feature = "tls-rustls")]
        return self.tls.is_some();
        #[cfg(not(feature = "tls-rustls"))]
        false
    }

    /// Opens a session with the servers, over TLS for a `zk+tls://` connect string.
    async fn open_session(&self) -> Result<Client, zookeeper_client::Error> {
        let mut connector = Client::connector().with_session_timeout(self.session_timeout);
        if let Some(credentials) = &self.credentials {
            connector = connector.with_auth("digest", &credentials.auth_bytes());
        }
        #[cfg(feature = "tls-rustls")]
        if let Some(tls) = &self.tls {
            return connector
                .with_tls(tls.options())
                .secure_connect(&self.servers)
                .await;
        }
        connector.connect(&self.servers).await
    }

    /// Why a TLS session could not be opened, and what kind of failure that is, when a
    /// handshake of the provider's own can tell (see the `tls` module); `None` for plain
    /// connections.
    async fn tls_failure(&self) -> Option<(ErrorKind, String)> {
        #[cfg(feature = "tls-rustls")]
        if let Some(tls) = &self.tls {
            return tls
                .explain(&self.servers, Instant::now() + self.connect_timeout)
                .await;
        }
        None
    }

    /// The current session, or a new one if there is none yet or ZooKeeper ended the last.
    async fn session(&self, operation: Operation, name: &str) -> Result<Session, LockError> {
        let mut slot = self.session.lock().await;
        if let Some(client) = &slot.client {
            if !matches!(
                client.state(),
                SessionState::Expired | SessionState::Closed | SessionState::AuthFailed
            ) {
                return Ok(Session {
                    client: client.clone(),
                    generation: slot.generation,
                });
            }
            debug!(endpoint = %self.endpoint, state = ?client.state(), "ZooKeeper session ended; opening a new one");
        }
        slot.client = None;
        let connected = tokio::time::timeout(self.connect_timeout, self.open_session()).await;
        let failure = match &connected {
            Ok(Ok(_)) => None,
            _ => self.tls_failure().await,
        };
        if let Some((kind, reason)) = failure {
            let message = after_failure(
                format!(
                    "could not open a TLS session with ZooKeeper at {}: {reason}",
                    self.endpoint
                ),
                operation,
            );
            return Err(match connected {
                Ok(Err(error)) => {
                    LockError::backend(kind, PROVIDER, operation, name, message, error)
                }
                _ => LockError::backend_message(kind, PROVIDER, operation, name, message),
            });
        }
        let client = match connected {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                return Err(LockError::backend(
                    connect_kind(&error),
                    PROVIDER,
                    operation,
                    name,
                    format!(
                        "could not open a session with ZooKeeper at {}; {}",
                        self.endpoint,
                        consequence(operation)
                    ),
                    error,
                ));
            }
            Err(_) => {
                return Err(LockError::backend_message(
                    ErrorKind::Unreachable,
                    PROVIDER,
                    operation,
                    name,
                    after_failure(
                        format!(
                            "ZooKeeper at {} opened no session within {:?} (is it running and \
                             reachable?)",
                            self.endpoint, self.connect_timeout
                        ),
                        operation,
                    ),
                ));
            }
        };
        slot.generation += 1;
        slot.client = Some(client.clone());
        Ok(Session {
            client,
            generation: slot.generation,
        })
    }

    /// Forgets `client`'s session if ZooKeeper said it is over, so the next operation opens a
    /// new one even before the client's state shows it.
    async fn forget_ended_session(&self, client: &Client, error: &zookeeper_client::Error) {
        use zookeeper_client::Error::{AuthFailed, ClientClosed, SessionExpired, SessionMoved};
        if matches!(
            error,
            SessionExpired | SessionMoved | ClientClosed | AuthFailed
        ) {
            let mut slot = self.session.lock().await;
            if slot
                .client
                .as_ref()
                .is_some_and(|current| current.session_id() == client.session_id())
            {
                slot.client = None;
            }
        }
    }

    /// Runs one request, bounded by the operation's `deadline`.
    async fn request<T>(
        &self,
        operation: Operation,
        name: &str,
        deadline: Instant,
        request: impl Future<Output = Result<T, zookeeper_client::Error>>,
    ) -> Answer<T> {
        tokio::time::timeout_at(deadline, request)
            .await
            .map_err(|_| LockError::Timeout {
                provider: PROVIDER,
                operation,
                name: name.to_owned(),
                after: self.operation_timeout,
            })
    }

    /// A ZooKeeper error that is not an answer about the lock, as the caller reports it.
    async fn failure(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        error: zookeeper_client::Error,
    ) -> LockError {
        self.forget_ended_session(client, &error).await;
        LockError::backend(
            kind_of(&error),
            PROVIDER,
            operation,
            name,
            format!(
                "ZooKeeper at {} failed; {}",
                self.endpoint,
                consequence(operation)
            ),
            error,
        )
    }

    /// Learns from a write of ours what the server's clock reads.
    fn observe(&self, sent: Instant, answered: Instant, stat: &Stat) {
        let sample = ServerClock::from_write(sent.into_std(), answered.into_std(), stat.mtime);
        if let Ok(mut clock) = self.clock.lock() {
            *clock = Some(match *clock {
                Some(known) => known.narrowed_by(&sample),
                None => sample,
            });
        }
    }

    fn known_clock(&self) -> Option<ServerClock> {
        self.clock.lock().ok().and_then(|clock| *clock)
    }

    /// The server's clock, learnt again with writes to the root when it is unknown or more
    /// uncertain than the limit.
    async fn calibrated(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<ServerClock, LockError> {
        for _ in 0..CALIBRATION_ATTEMPTS {
            if let Some(clock) = self.known_clock()
                && clock.uncertainty(std::time::Instant::now()) <= self.max_clock_uncertainty
            {
                return Ok(clock);
            }
            self.stamp(client, operation, name, deadline).await?;
        }
        // Still wide after every attempt (a slow network): a wider interval is safe, only
        // slower to see expiries.
        self.known_clock()
            .ok_or_else(|| self.root_kept_disappearing(operation, name))
    }

    /// Writes the root once, and learns from the write's stamp what the server's clock reads.
    /// Returns the stamp: the server's clock read at least this when the write landed, and
    /// so at least this at any later request. A missing root is created first.
    async fn stamp(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<ServerMicros, LockError> {
        if !self.root_checked.load(Ordering::Relaxed) {
            self.check_root(client, operation, name, deadline).await?;
        }
        for _ in 0..2 {
            let sent = Instant::now();
            match self
                .request(
                    operation,
                    name,
                    deadline,
                    storage::stamp_root(client, &self.root),
                )
                .await?
            {
                Ok(stat) => {
                    self.observe(sent, Instant::now(), &stat);
                    return Ok(stat.mtime.saturating_mul(1000));
                }
                Err(zookeeper_client::Error::NoNode) => {
                    self.ensure_root(client, operation, name, deadline).await?;
                }
                Err(error) => return Err(self.failure(client, operation, name, error).await),
            }
        }
        Err(self.root_kept_disappearing(operation, name))
    }

    fn root_kept_disappearing(&self, operation: Operation, name: &str) -> LockError {
        // Someone deletes the root between the provider's writes: a fault mid-operation, which
        // may be over on the next try. The root nodes it created may remain.
        LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            format!(
                "could not learn the server's clock from ZooKeeper at {}: the root node {} \
                 kept disappearing",
                self.endpoint, self.root
            ),
        )
    }

    /// A `lock_until` this node computed from its estimate of the server's clock, checked by
    /// the stamp of the write that carried it, and written again when the stamp shows it wrong.
    ///
    /// The estimate is carried forward on this node's monotonic clock since the provider's last
    /// write, so a clock running at the wrong rate (a virtual machine's clock gone wrong, a
    /// process under `faketime -f "+0 x2"`) moves it by the error times that time: a slow clock
    /// writes a lock shorter than asked, a fast one a lock, or a release's "now", later than
    /// asked. The write's own `mtime` is the server's clock when it landed. Once observed, it
    /// replaces an estimate it contradicts, and the value computed again from it must be what
    /// was written, within the uncertainty `used` had at `sent`. If it is not, the node is
    /// written again, compare-and-set on the version the write left: one more round trip, only
    /// for a node whose clock misled it. `None` when someone wrote the node in between.
    #[allow(clippy::too_many_arguments)]
    async fn checked_by_stamp(
        &self,
        operation: Operation,
        name: &str,
        path: &str,
        client: &Client,
        written: Written,
        (used, sent): (&ServerClock, Instant),
        until: impl Fn(&ServerClock, Instant) -> ServerMicros,
        deadline: Instant,
    ) -> Result<Option<Written>, LockError> {
        let Some(clock) = self.known_clock() else {
            return Ok(Some(written));
        };
        let slack = used.uncertainty(sent.into_std()) + Duration::from_millis(1);
        if until(&clock, sent).abs_diff(written.lock_until) <= micros(slack).unsigned_abs() {
            return Ok(Some(written));
        }
        let sent = Instant::now();
        let lock_until = until(&clock, sent);
        debug!(
            name,
            "this node's estimate of the server's clock was off by more than its uncertainty (its \
             monotonic clock runs at another rate than the server's): lock_until written again"
        );
        match self
            .request(
                operation,
                name,
                deadline,
                storage::write(
                    client,
                    path,
                    &storage::format_lock_until(lock_until),
                    written.stat.version,
                ),
            )
            .await?
        {
            Ok(stat) => {
                self.observe(sent, Instant::now(), &stat);
                Ok(Some(Written { stat, lock_until }))
            }
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => Ok(None),
            Err(error) => Err(self.failure(client, operation, name, error).await),
        }
    }

    /// Reads the root once before the provider first writes to it: ShedLock's root holds no
    /// data, so a root that does is another application's node, whose data the writes that
    /// learn the clock would wipe. Refused with an error naming it; a missing root is created.
    async fn check_root(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<(), LockError> {
        match self
            .request(operation, name, deadline, storage::read(client, &self.root))
            .await?
        {
            Ok((data, _)) if !data.is_empty() => {
                // The configured root is another application's node: the setting must change.
                return Err(LockError::backend_message(
                    ErrorKind::Configuration,
                    PROVIDER,
                    operation,
                    name,
                    format!(
                        "the root node {} at {} holds {} ({} bytes), and ShedLock's root holds \
                         no data: it looks like another application's node, whose data the \
                         provider's writes to its root would wipe, so nothing was written; give \
                         the provider a root of its own (ZookeeperLockProviderBuilder::root)",
                        self.root,
                        self.endpoint,
                        storage::describe_data(&data),
                        data.len()
                    ),
                ));
            }
            Ok(_) => {}
            Err(zookeeper_client::Error::NoNode) => {
                self.ensure_root(client, operation, name, deadline).await?;
            }
            Err(error) => return Err(self.failure(client, operation, name, error).await),
        }
        self.root_checked.store(true, Ordering::Relaxed);
        Ok(())
    }

    async fn ensure_root(
        &self,
        client: &Client,
        operation: Operation,
        name: &str,
        deadline: Instant,
    ) -> Result<(), LockError> {
        match self
            .request(
                operation,
                name,
                deadline,
                storage::create_root(client, &self.root),
            )
            .await?
        {
            Ok(()) => Ok(()),
            Err(error) => Err(self.failure(client, operation, name, error).await),
        }
    }

    /// Creates the lock node holding `data`; what happened, or a failure.
    async fn create_node(
        &self,
        client: &Client,
        name: &str,
        path: &str,
        data: &str,
        deadline: Instant,
    ) -> Answer<Stat> {
        let created = self
            .request(
                Operation::Acquire,
                name,
                deadline,
                storage::create(client, path, data),
            )
            .await?;
        if !matches!(created, Err(zookeeper_client::Error::NoNode)) {
            return Ok(created);
        }
        // The root is missing (deleted by hand since the provider learnt the clock there).
        self.ensure_root(client, Operation::Acquire, name, deadline)
            .await?;
        self.request(
            Operation::Acquire,
            name,
            deadline,
            storage::create(client, path, data),
        )
        .await
    }
}

/// `message` followed by what the failure leaves behind, for an operation on a lock; a failed
/// connect leaves nothing behind.
fn after_failure(message: String, operation: Operation) -> String {
    match operation {
        Operation::Connect => message,
        other => format!("{message}; {}", consequence(other)),
    }
}

/// What a failed operation leaves behind, for its error message.
fn consequence(operation: Operation) -> &'static str {
    match operation {
        Operation::Acquire => "whether the lock was taken is unknown, so the task must not run",
        Operation::Release => "the lock stays held until its lock_until at the latest",
        Operation::Extend => {
            "the lock keeps its previous expiry, or the new one if the write landed"
        }
        _ => "is it running and reachable?",
    }
}

/// What kind of failure a ZooKeeper error is, for a request sent in an open session.
///
/// - refused authentication (`AuthFailed`) or an ACL that denies the user (`NoAuth`):
///   [`ErrorKind::CredentialsRefused`];
/// - no server reachable (`NoHosts`), and a session that had ended (`SessionExpired`,
///   `SessionMoved`, `ClientClosed`): [`ErrorKind::Unreachable`]. ZooKeeper runs no request of
///   an ended session: the client fails those it had not sent, and the server answers the ones
///   it had with this error after having answered every earlier one, so nothing was written
///   (the premise on which an acquire or release refused this way is sent again in a new
///   session);
/// - a path or ACL the client or server refuses (`BadArguments`, `InvalidAcl`), and a request
///   the server does not implement (`Unimplemented`, a server too old):
///   [`ErrorKind::Configuration`];
/// - a quota on the root (`QuotaExceeded`): [`ErrorKind::Limit`];
/// - everything else, a lost connection (`ConnectionLoss`) above all, is an error after the
///   request may have been sent: [`ErrorKind::OutcomeUnknown`].
///
/// Opening a session classifies its errors with [`connect_kind`].
fn kind_of(error: &zookeeper_client::Error) -> ErrorKind {
    use zookeeper_client::Error;
    match error {
        Error::AuthFailed | Error::NoAuth => ErrorKind::CredentialsRefused,
        Error::NoHosts | Error::SessionExpired | Error::SessionMoved | Error::ClientClosed => {
            ErrorKind::Unreachable
        }
        Error::BadArguments(_) | Error::InvalidAcl | Error::Unimplemented => {
            ErrorKind::Configuration
        }
        Error::QuotaExceeded => ErrorKind::Limit,
        _ => ErrorKind::OutcomeUnknown,
    }
}

/// What kind of failure an error opening a session is: refused credentials and a connect
/// string the client refuses keep their kind; anything else means no session was opened, so
/// no request was sent: [`ErrorKind::Unreachable`].
fn connect_kind(error: &zookeeper_client::Error) -> ErrorKind {
    match kind_of(error) {
        kind @ (ErrorKind::CredentialsRefused | ErrorKind::Configuration) => kind,
        _ => ErrorKind::Unreachable,
    }
}

/// The longest lock this provider writes: ShedLock's data is an RFC 3339 instant, whose year has
/// four digits, so `lock_until` must stay before the year 10000; a thousand years keep it there
/// for the next seven millennia, and the arithmetic on it far from overflowing.
pub const MAX_LOCK_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 60 * 60);

/// Refuses a duration longer than [`MAX_LOCK_DURATION`] before anything is sent.
fn check_duration(operation: Operation, name: &str, duration: Duration) -> Result<(), LockError> {
    if duration <= MAX_LOCK_DURATION {
        return Ok(());
    }
    Err(LockError::invalid_request(
        PROVIDER,
        operation,
        name,
        format!(
            "{duration:?} is longer than a lock this provider writes (at most {} s, 1000 \
             years: ShedLock's lock_until must stay a four-digit-year instant)",
            MAX_LOCK_DURATION.as_secs()
        ),
    ))
}

fn micros(duration: Duration) -> ServerMicros {
    ServerMicros::try_from(duration.as_micros()).unwrap_or(ServerMicros::MAX)
}

fn system_time(micros: ServerMicros) -> SystemTime {
    match u64::try_from(micros) {
        Ok(after) => SystemTime::UNIX_EPOCH + Duration::from_micros(after),
        Err(_) => SystemTime::UNIX_EPOCH - Duration::from_micros(micros.unsigned_abs()),
    }
}

/// `lock_until` for a lock of `duration` from a request sent at `sent`: the latest the
/// server's clock can read then, plus `duration`, rounded up to ShedLock's milliseconds.
fn held_until(clock: &ServerClock, sent: Instant, duration: Duration) -> ServerMicros {
    storage::ceil_to_millis(
        clock
            .latest(sent.into_std())
            .saturating_add(micros(duration)),
    )
}

#[async_trait]
impl LockProvider for ZookeeperLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let path = self.lock_path(config.name())?;
        for duration in [config.lock_at_most_for(), config.lock_at_least_for()] {
            check_duration(Operation::Acquire, config.name(), duration)?;
        }
        let session = self
            .inner
            .session(Operation::Acquire, config.name())
            .await?;
        match self.try_lock_in(config, &path, &session).await {
            // The server refused the requests of a session it had ended, so nothing was
            // written: try again once, in the new session.
            Err(error) if session_ended(&error) => {
                let session = self
                    .inner
                    .session(Operation::Acquire, config.name())
                    .await?;
                self.try_lock_in(config, &path, &session).await
            }
            outcome => outcome,
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
            .with_max_name_chars(MAX_NAME_CHARS)
            .with_time_precision(2 * self.inner.max_clock_uncertainty + Duration::from_millis(1))
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// Whether `error` says the session it was sent in had ended, in which case ZooKeeper did not
/// run the request.
fn session_ended(error: &LockError) -> bool {
    use zookeeper_client::Error::{ClientClosed, SessionExpired, SessionMoved};
    let LockError::Backend {
        source: Some(source),
        ..
    } = error
    else {
        return false;
    };
    matches!(
        source.downcast_ref::<zookeeper_client::Error>(),
        Some(SessionExpired | SessionMoved | ClientClosed)
    )
}

impl ZookeeperLockProvider {
    async fn try_lock_in(
        &self,
        config: &LockConfiguration,
        path: &str,
        session: &Session,
    ) -> Result<Acquisition, LockError> {
        let name = config.name();
        let inner = &self.inner;
        let client = &session.client;
        let deadline = Instant::now() + inner.operation_timeout;
        let mut clock = inner
            .calibrated(client, Operation::Acquire, name, deadline)
            .await?;
        loop {
            let read = inner
                .request(
                    Operation::Acquire,
                    name,
                    deadline,
                    storage::read(client, path),
                )
                .await?;
            let version = match read {
                Ok((held, stat)) => {
                    let Some(current_until) = storage::parse_lock_until(&held) else {
                        return Err(LockError::backend_message(
                            ErrorKind::CorruptData,
                            PROVIDER,
                            Operation::Acquire,
                            name,
                            format!(
                                "node {path} holds {}, which is not an ISO-8601 instant (ShedLock's \
                                 lock_until); nothing was written. Java ShedLock treats such a \
                                 node as held for ever: write a lock_until into it or delete it",
                                storage::describe_data(&held)
                            ),
                        ));
                    };
                    let refused = || {
                        Ok(Acquisition::NotAcquired(Some(LockHolder {
                            locked_by: None,
                            held_until: Some(system_time(current_until)),
                        })))
                    };
                    // The node's last write was stamped before this read was served, so the
                    // server's clock reads at least its mtime: a lock released "now" is seen
                    // free at once, however uncertain this node's own interval is.
                    let stamped = stat.mtime.saturating_mul(1000);
                    if clock.earliest(std::time::Instant::now()).max(stamped) < current_until {
                        return refused();
                    }
                    // The estimate says the lock is over, but it rests on this node's
                    // monotonic clock running at the server's rate, and a take-over is the
                    // decision that must never come early. Unless the node's own stamp shows
                    // it over, the server decides: a write to the root, whose stamp the
                    // server's clock has passed before the take-over is sent.
                    if stamped < current_until {
                        let server_now = inner
                            .stamp(client, Operation::Acquire, name, deadline)
                            .await?;
                        if server_now < current_until {
                            return refused();
                        }
                        clock = inner.known_clock().unwrap_or(clock);
                    }
                    Some(stat.version)
                }
                Err(zookeeper_client::Error::NoNode) => None,
                Err(error) => {
                    return Err(inner.failure(client, Operation::Acquire, name, error).await);
                }
            };
            let until = |clock: &ServerClock, sent: Instant| {
                held_until(clock, sent, config.lock_at_most_for())
            };
            let sent = Instant::now();
            let lock_until = until(&clock, sent);
            let data = storage::format_lock_until(lock_until);
            let written = match version {
                Some(version) => {
                    inner
                        .request(
                            Operation::Acquire,
                            name,
                            deadline,
                            storage::write(client, path, &data, version),
                        )
                        .await?
                }
                None => {
                    inner
                        .create_node(client, name, path, &data, deadline)
                        .await?
                }
            };
            let stat = match written {
                Ok(stat) => stat,
                // Someone created or wrote the node since it was read: judge it again.
                Err(
                    zookeeper_client::Error::NodeExists
                    | zookeeper_client::Error::BadVersion
                    | zookeeper_client::Error::NoNode,
                ) => {
                    clock = inner.known_clock().unwrap_or(clock);
                    continue;
                }
                Err(error) => {
                    return Err(inner.failure(client, Operation::Acquire, name, error).await);
                }
            };
            inner.observe(sent, Instant::now(), &stat);
            let Some(Written {
                stat: last,
                lock_until,
            }) = inner
                .checked_by_stamp(
                    Operation::Acquire,
                    name,
                    path,
                    client,
                    Written { stat, lock_until },
                    (&clock, sent),
                    until,
                    deadline,
                )
                .await?
            else {
                // Someone took it over in between, judging by the server's clock that this
                // node's too short lock_until had passed: nothing of ours is left to run.
                return Ok(Acquisition::NotAcquired(None));
            };
            return Ok(Acquisition::Acquired(Box::new(ZookeeperLockHandle {
                inner: self.inner.clone(),
                name: name.to_owned(),
                path: path.to_owned(),
                fencing_token: u64::try_from(stat.mzxid).ok(),
                // The write was stamped in [mtime, mtime + 1 ms): from the end of that
                // millisecond, lock_at_least_for is never counted short.
                acquired_at: (stat.mtime + 1) * 1000,
                lock_at_least_for: config.lock_at_least_for(),
                generation: session.generation,
                state: tokio::sync::Mutex::new(HandleState {
                    version: last.version,
                    lock_until,
                    finished: false,
                }),
            })));
        }
    }
}

/// One acquisition of a ZooKeeper lock: the node, and the version and `lock_until` its last
/// write left there.
struct ZookeeperLockHandle {
    inner: Arc<Inner>,
    name: String,
    path: String,
    fencing_token: Option<u64>,
    /// Server time from which lock_at_least_for counts.
    acquired_at: ServerMicros,
    lock_at_least_for: Duration,
    /// Which of the provider's sessions took the lock.
    generation: u64,
    /// Serializes this handle's release and extend.
    state: tokio::sync::Mutex<HandleState>,
}

struct HandleState {
    /// The node's version after this acquisition's last write: the proof it is still ours.
    version: i32,
    /// The `lock_until` of that write.
    lock_until: ServerMicros,
    /// Released, or found lost: nothing more is sent.
    finished: bool,
}

impl fmt::Debug for ZookeeperLockHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperLockHandle")
            .field("name", &self.name)
            .field("path", &self.path)
            .field("fencing_token", &self.fencing_token)
            .field("generation", &self.generation)
            .finish()
    }
}

/// A write of a lock node that landed: the node's stat after it, and the `lock_until` it
/// carries.
#[derive(Clone, Copy)]
struct Written {
    stat: Stat,
    lock_until: ServerMicros,
}

/// What an owner-checked write found.
enum Owned {
    /// Written while this acquisition still held the lock.
    Written(Written),
    /// The lock was not ours any more (written by someone since, deleted, or expired): nothing
    /// is left changed.
    Lost,
}

impl ZookeeperLockHandle {
    /// Writes `data` (`lock_until` = `until`) over this acquisition's own last write, if the
    /// node is still at that version and the write lands before the lock expired. A write that
    /// lands after expiry (nobody took the lock meanwhile, or the version would have differed)
    /// is undone by writing the expired `lock_until` back, so it neither revives nor moves a
    /// lock that was over.
    async fn write_if_ours(
        &self,
        operation: Operation,
        state: &HandleState,
        session: &Session,
        until: impl Fn(&ServerClock, Instant) -> ServerMicros,
    ) -> Result<Owned, LockError> {
        let inner = &self.inner;
        let client = &session.client;
        let deadline = Instant::now() + inner.operation_timeout;
        let clock = inner
            .calibrated(client, operation, &self.name, deadline)
            .await?;
        if clock.earliest(std::time::Instant::now()) >= state.lock_until {
            return Ok(Owned::Lost);
        }
        let sent = Instant::now();
        let lock_until = until(&clock, sent);
        let data = storage::format_lock_until(lock_until);
        let written = inner
            .request(
                operation,
                &self.name,
                deadline,
                storage::write(client, &self.path, &data, state.version),
            )
            .await?;
        let stat = match written {
            Ok(stat) => stat,
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => {
                return Ok(Owned::Lost);
            }
            Err(error) => return Err(inner.failure(client, operation, &self.name, error).await),
        };
        inner.observe(sent, Instant::now(), &stat);
        if stat.mtime.saturating_mul(1000) < state.lock_until {
            let written = Written { stat, lock_until };
            return Ok(
                match inner
                    .checked_by_stamp(
                        operation,
                        &self.name,
                        &self.path,
                        client,
                        written,
                        (&clock, sent),
                        until,
                        deadline,
                    )
                    .await?
                {
                    Some(last) => Owned::Written(last),
                    // Taken over since: a release had landed, an extend had not made the
                    // lock last.
                    None if operation == Operation::Release => Owned::Written(written),
                    None => Owned::Lost,
                },
            );
        }
        let expired = storage::format_lock_until(state.lock_until);
        let restored = inner
            .request(
                operation,
                &self.name,
                deadline,
                storage::write(client, &self.path, &expired, stat.version),
            )
            .await?;
        match restored {
            Ok(stat) => inner.observe(sent, Instant::now(), &stat),
            // Someone took the lock in between, as they were free to: nothing of ours is left.
            Err(zookeeper_client::Error::BadVersion | zookeeper_client::Error::NoNode) => {}
            Err(error) => return Err(inner.failure(client, operation, &self.name, error).await),
        }
        Ok(Owned::Lost)
    }
}

#[async_trait]
impl LockHandle for ZookeeperLockHandle {
    fn name(&self) -> &str {
        &self.name
    }

    fn fencing_token(&self) -> Option<u64> {
        self.fencing_token
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
        let at_least_until = (!self.lock_at_least_for.is_zero()).then(|| {
            storage::ceil_to_millis(
                self.acquired_at
                    .saturating_add(micros(self.lock_at_least_for)),
            )
        });
        // "Now" is written as the earliest the server's clock can read, which is no later
        // than this write's own mtime: a reader compares with at least that mtime, so it sees
        // the lock free at once.
        let release_until = |clock: &ServerClock, sent: Instant| {
            let now = storage::floor_to_millis(clock.earliest(sent.into_std()));
            at_least_until.map_or(now, |until| now.max(until))
        };
        let session = self.inner.session(Operation::Release, &self.name).await?;
        let outcome = match self
            .write_if_ours(Operation::Release, &state, &session, release_until)
            .await
        {
            // The version proves ownership whatever the session: release in the new one.
            Err(error) if session_ended(&error) => {
                let session = self.inner.session(Operation::Release, &self.name).await?;
                self.write_if_ours(Operation::Release, &state, &session, release_until)
                    .await?
            }
            outcome => outcome?,
        };
        state.finished = true;
        Ok(matches!(outcome, Owned::Written(_)))
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if lock_at_most_for.is_zero() {
            return Err(ConfigurationError::ZeroLockAtMostFor {
                name: self.name.clone(),
            }
            .into());
        }
        check_duration(Operation::Extend, &self.name, lock_at_most_for)?;
        let mut state = self.state.lock().await;
        if state.finished {
            return Ok(false);
        }
        let session = self.inner.session(Operation::Extend, &self.name).await?;
        if session.generation != self.generation {
            debug!(name = %self.name, "the session that took the lock ended: extend answers lost");
            return Ok(false);
        }
        let outcome = self
            .write_if_ours(Operation::Extend, &state, &session, |clock, sent| {
                held_until(clock, sent, lock_at_most_for)
            })
            .await;
        let outcome = match outcome {
            Err(error) if session_ended(&error) => {
                debug!(name = %self.name, "the session that took the lock ended: extend answers lost");
                return Ok(false);
            }
            outcome => outcome?,
        };
        match outcome {
            Owned::Written(written) => {
                state.version = written.stat.version;
                state.lock_until = written.lock_until;
                Ok(true)
            }
            Owned::Lost => {
                state.finished = true;
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zookeeper_client::Error;

    #[test]
    fn zookeeper_errors_are_classified_by_what_they_say_of_the_request() {
        for (error, kind) in [
            (Error::AuthFailed, ErrorKind::CredentialsRefused),
            (Error::NoAuth, ErrorKind::CredentialsRefused),
            (Error::NoHosts, ErrorKind::Unreachable),
            (Error::SessionExpired, ErrorKind::Unreachable),
            (Error::SessionMoved, ErrorKind::Unreachable),
            (Error::ClientClosed, ErrorKind::Unreachable),
            (Error::Unimplemented, ErrorKind::Configuration),
            (Error::InvalidAcl, ErrorKind::Configuration),
            (Error::QuotaExceeded, ErrorKind::Limit),
            (Error::ConnectionLoss, ErrorKind::OutcomeUnknown),
            (Error::Timeout, ErrorKind::OutcomeUnknown),
            (Error::Throttled, ErrorKind::OutcomeUnknown),
            (Error::MarshallingError, ErrorKind::OutcomeUnknown),
            (Error::UnexpectedErrorCode(-999), ErrorKind::OutcomeUnknown),
        ] {
            assert_eq!(kind_of(&error), kind, "{error:?}");
        }
    }

    #[test]
    fn a_session_that_could_not_be_opened_sent_nothing() {
        for (error, kind) in [
            (Error::ConnectionLoss, ErrorKind::Unreachable),
            (Error::Timeout, ErrorKind::Unreachable),
            (Error::NoHosts, ErrorKind::Unreachable),
            (Error::SessionExpired, ErrorKind::Unreachable),
            (Error::QuotaExceeded, ErrorKind::Unreachable),
            (Error::AuthFailed, ErrorKind::CredentialsRefused),
            (Error::InvalidAcl, ErrorKind::Configuration),
        ] {
            assert_eq!(connect_kind(&error), kind, "{error:?}");
        }
    }

    #[test]
    fn bad_settings_are_configuration_errors() {
        let builder = ZookeeperLockProvider::builder;
        for error in [
            builder().root("relative").connect_lazy("127.0.0.1:2181"),
            builder()
                .operation_timeout(Duration::ZERO)
                .connect_lazy("127.0.0.1:2181"),
            builder().connect_lazy("redis://127.0.0.1:6379"),
            builder().connect_lazy("127.0.0.1:2181/a//b"),
        ]
        .map(Result::unwrap_err)
        {
            assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
        }
    }
}
