//! What a provider author implements to run the kit: how to make nodes, and a few optional
//! hooks whose defaults mean "does not apply to this provider".

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use shedlock_core::{BoxError, Clock, LockAdmin, LockProvider};

/// Why the harness could not do its own part (open a pool, make a node, plant a record, clean
/// up): a fault of the test setup, not a lock outcome, so the provider's [`LockError`]
/// (`shedlock_core::LockError`) is not the type for it.
///
/// Any error converts into it with `?` (a `LockError` from a provider's `connect`, a driver's
/// error, a `String`), so a harness wraps nothing by hand. It is deliberately not a
/// [`std::error::Error`] itself, which is what lets that blanket conversion exist.
///
/// [`LockError`]: shedlock_core::LockError
pub struct SetupError(BoxError);

impl SetupError {
    /// A setup error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self(message.into().into())
    }

    /// The underlying error.
    pub fn error(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

impl<E: Into<BoxError>> From<E> for SetupError {
    fn from(error: E) -> Self {
        Self(error.into())
    }
}

impl fmt::Display for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

impl fmt::Debug for SetupError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Whether a harness hook applies to this provider.
#[derive(Debug)]
pub enum Support<T> {
    /// The hook did its work.
    Supported(T),
    /// The hook has no meaning for this provider; the checks that need it show as ignored with
    /// this reason.
    NotApplicable(String),
}

impl<T> Support<T> {
    /// Not applicable, for `reason`.
    pub fn not_applicable(reason: impl Into<String>) -> Self {
        Support::NotApplicable(reason.into())
    }
}

/// A lock record written as another program (Java ShedLock, a crashed node) would have left it,
/// for the check that Rust nodes honour and take over such records.
///
/// Times are UTC instants. The kit only plants records whose `lock_until` is an hour or more
/// away from now, so clock differences between the kit and the backend do not matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlantedRecord {
    /// The lock's name (ShedLock's `name`, `_id`, or key suffix).
    pub name: String,
    /// ShedLock's `lock_until`.
    pub lock_until: SystemTime,
    /// ShedLock's `locked_at`.
    pub locked_at: SystemTime,
    /// ShedLock's `locked_by` (a host name, as Java writes it).
    pub locked_by: String,
}

/// How the kit reaches one provider on one backend.
///
/// Implement [`node`](Self::node) and [`name`](Self::name); override the hooks that apply.
/// The kit makes many nodes (up to a dozen per check, several checks at once), each of which
/// must be an independent provider instance (its own connection or pool, its own name cache),
/// as separate processes would be.
#[async_trait]
pub trait ConformanceHarness: Send + Sync + 'static {
    /// The provider under test.
    type Node: LockProvider + 'static;

    /// The provider's name, used in reports and report file names (`"postgres"`).
    fn name(&self) -> &str;

    /// A new, independent provider instance on the shared backend whose wall clock is `clock`.
    ///
    /// Server-time providers may ignore `clock` for lock decisions (that is the point); a
    /// client-time provider must read it wherever it reads "now". The kit hands skewed clocks
    /// ([`shedlock_core::raw::SkewedClock`]) to the clock-skew check.
    async fn node(&self, clock: Arc<dyn Clock>) -> Result<Self::Node, SetupError>;

    /// A node whose backend cannot be reached (a closed port, a stopped server), built without
    /// connecting, for the check that an unreachable backend is an error in bounded time.
    async fn unreachable_node(&self) -> Result<Support<Self::Node>, SetupError> {
        Ok(Support::not_applicable(
            "the harness provides no unreachable_node() hook, so the kit cannot point a node at a backend that is down; implement it to prove the provider fails closed",
        ))
    }

    /// Cuts `node` off from its backend from now on, as a network partition or a stopped server
    /// would: every request the node sends afterwards fails (a closed connection, a refused or
    /// timed-out connect), while other nodes keep their backend. For the check that a node
    /// which has been working answers errors, never "not acquired" or `false`, once its backend
    /// fails under it.
    ///
    /// A provider that reaches its backend over TCP gets the same proof from the fault suite
    /// ([`crate::faults`]), which puts a proxy in front of the server; this hook is for the
    /// providers the kit cannot put a proxy in front of (an in-process backend, a client
    /// library with its own transport).
    async fn cut_off(&self, node: &Self::Node) -> Result<Support<()>, SetupError> {
        let _ = node;
        Ok(Support::not_applicable(
            "the harness provides no cut_off() hook, so the kit cannot fail a working node's backend under it (the fault suite does, for a backend reached over TCP)",
        ))
    }

    /// Clears `node`'s cache of lock names known to exist (storage-based providers).
    fn clear_name_cache(&self, node: &Self::Node) -> Support<()> {
        let _ = node;
        Support::not_applicable(
            "the harness provides no clear_name_cache() hook (providers without a name cache have nothing to clear)",
        )
    }

    /// `node`'s operator view, for the admin checks: a provider that implements [`LockAdmin`]
    /// answers `Support::Supported(node)`.
    fn admin<'node>(&self, node: &'node Self::Node) -> Support<&'node dyn LockAdmin> {
        let _ = node;
        Support::not_applicable(
            "the harness provides no admin() hook, so listing and force-unlock are not checked; implement it when the provider implements LockAdmin",
        )
    }

    /// Writes `record` directly into the backend in ShedLock's format, replacing any record of
    /// that name.
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        let _ = record;
        Ok(Support::not_applicable(
            "the harness provides no write_record() hook, so no ShedLock-format record is planted",
        ))
    }

    /// Moves the backend's source of fencing tokens for `name`, a name nobody holds, so that
    /// its next acquisition's token is above `past`, as if `past` acquisitions had come
    /// before it. Deep mode ([`DEEP_VARIABLE`](crate::DEEP_VARIABLE)) uses it to see tokens
    /// cross 65,535 in a hundred acquisitions instead of 65,600 taken one after another (minutes
    /// on a backend that syncs every write).
    ///
    /// Write what the provider reads when it issues the next token: the counter in the name's
    /// record or row (with the record itself expired, so the name stays free), or, where
    /// tokens come from a counter every write raises (etcd's revision, ZooKeeper's zxid),
    /// writes of the harness's own until it stands past `past`. The kit checks that the next
    /// token is above `past`, so a hook that moves nothing fails the run. Without the hook,
    /// deep mode takes the 65,600 acquisitions.
    async fn advance_fencing_tokens(
        &self,
        name: &str,
        past: u64,
    ) -> Result<Support<()>, SetupError> {
        let _ = (name, past);
        Ok(Support::not_applicable(
            "the harness provides no advance_fencing_tokens() hook, so deep mode takes 65,600 acquisitions of one name one by one",
        ))
    }

    /// Called once by [`run`](crate::run) after all checks; every lock name the run used starts
    /// with `name_prefix`, so a persistent backend can delete them.
    ///
    /// A test that calls a `check_*` function directly is not a run: nothing calls `cleanup`
    /// for it. Its names start with the [`NameSpace`](crate::NameSpace) it passed, so it can
    /// call `harness.cleanup(names.prefix())` itself when it is done.
    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        let _ = name_prefix;
        Ok(())
    }
}
