//! The contract between the executor and a backend: try to take a lock, never wait.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use crate::error::LockError;
use shedlock_configuration::LockConfiguration;

/// Whose clock decides when a lock expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TimeSource {
    /// The backend's clock, or durations measured by the backend (TTLs, leases): a node with a
    /// wrong clock cannot take a lock that is still held.
    Server,
    /// Each node's wall clock. Exclusion holds only while the nodes' clocks differ by less than
    /// `lock_at_most_for` minus the task's run time; the provider's docs say so.
    Client,
}

/// What a provider can do, so the conformance kit and callers know which promises apply.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Whose clock decides expiry.
    pub time_source: TimeSource,
    /// Whether acquisitions carry a fencing token that strictly increases per lock name.
    pub fencing: bool,
    /// Whether [`LockHandle::extend`] is supported.
    pub extend: bool,
    /// The longest name the provider stores, in characters; longer names are refused.
    pub max_name_chars: Option<usize>,
    /// The granularity of stored times and durations (1 ms for SQL, 1 s for etcd leases).
    pub time_precision: Duration,
}

impl Capabilities {
    /// No fencing, no extend, no name limit, millisecond precision.
    pub fn new(time_source: TimeSource) -> Self {
        Self {
            time_source,
            fencing: false,
            extend: false,
            max_name_chars: None,
            time_precision: Duration::from_millis(1),
        }
    }

    /// Declares fencing tokens.
    pub fn with_fencing(mut self, fencing: bool) -> Self {
        self.fencing = fencing;
        self
    }

    /// Declares extend support.
    pub fn with_extend(mut self, extend: bool) -> Self {
        self.extend = extend;
        self
    }

    /// Declares a maximum name length in characters.
    pub fn with_max_name_chars(mut self, max: usize) -> Self {
        self.max_name_chars = Some(max);
        self
    }

    /// Declares the granularity of stored times.
    pub fn with_time_precision(mut self, precision: Duration) -> Self {
        self.time_precision = precision;
        self
    }

    /// Refuses a name longer than [`max_name_chars`](Self::max_name_chars), before anything is
    /// written, so two long names never share a truncated key.
    pub fn check_name_length(&self, provider: &'static str, name: &str) -> Result<(), LockError> {
        match self.max_name_chars {
            Some(max) if name.chars().count() > max => Err(LockError::invalid_name(
                provider,
                name,
                format!(
                    "it is {} characters long and the limit is {max}",
                    name.chars().count()
                ),
            )),
            _ => Ok(()),
        }
    }
}

/// Who holds a lock that could not be taken, as far as the backend says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LockHolder {
    /// The holder's name, when stored: the name its node was given (its host name by default),
    /// the same on every backend, without the id that makes a stored `locked_by` unique to one
    /// acquisition ([`raw::holder_of`](crate::raw::holder_of)).
    pub locked_by: Option<String>,
    /// When the lock frees itself, when known.
    pub held_until: Option<SystemTime>,
}

impl LockHolder {
    /// The holder named in a stored `locked_by` or lock value (the id of the acquisition taken
    /// off, as every provider shows it), and when the lock frees itself.
    pub fn from_stored(locked_by: Option<&str>, held_until: Option<SystemTime>) -> Self {
        Self {
            locked_by: locked_by.map(|stored| crate::identity::holder_of(stored).to_owned()),
            held_until,
        }
    }
}

/// The answer to [`LockProvider::try_lock`] when the backend answered.
pub enum Acquisition {
    /// The lock is ours until the handle releases it or `lock_at_most_for` passes.
    Acquired(Box<dyn LockHandle>),
    /// Someone else holds it; the holder is described when the backend said who.
    NotAcquired(Option<LockHolder>),
}

impl fmt::Debug for Acquisition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Acquisition::Acquired(handle) => f.debug_tuple("Acquired").field(handle).finish(),
            Acquisition::NotAcquired(holder) => f.debug_tuple("NotAcquired").field(holder).finish(),
        }
    }
}

impl Acquisition {
    /// The handle, if the lock was taken.
    pub fn into_handle(self) -> Option<Box<dyn LockHandle>> {
        match self {
            Acquisition::Acquired(handle) => Some(handle),
            Acquisition::NotAcquired(_) => None,
        }
    }

    /// Whether the lock was taken.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Acquisition::Acquired(_))
    }
}

/// A backend that can hold time-bounded locks.
///
/// `try_lock` never waits for a holder: it answers at once with [`Acquisition`], or with an
/// error when the outcome is unknown. Implementations must bound the time they take
/// (connection and statement timeouts) and return [`LockError::Timeout`] past it.
#[async_trait]
pub trait LockProvider: Send + Sync + fmt::Debug {
    /// Takes the lock if nobody holds it: held until `now + lock_at_most_for`.
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError>;

    /// What this provider promises.
    fn capabilities(&self) -> Capabilities;

    /// A short name for logs and errors (`"postgres"`), the `provider` field of the
    /// executor's span: the backend's name, the same for every provider of it. Required, with
    /// no default: the type's path (`my_crate::provider::Wrapper<...>`) is no name an operator
    /// can search the logs of a fleet by, and a wrapper names the backend it wraps.
    fn provider_name(&self) -> &'static str;
}

#[async_trait]
impl<P: LockProvider + ?Sized> LockProvider for Arc<P> {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        (**self).try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        (**self).capabilities()
    }

    fn provider_name(&self) -> &'static str {
        (**self).provider_name()
    }
}

/// One acquisition of a lock.
///
/// Dropping a handle without [`unlock`](Self::unlock) leaves the lock held until
/// `lock_at_most_for`, exactly as if the process had died: that is the safety net, not a leak.
/// Both operations act only on this acquisition: once it has expired and another node has taken
/// the lock, they change nothing and return `Ok(false)`.
#[async_trait]
pub trait LockHandle: Send + Sync + fmt::Debug {
    /// The lock's name.
    fn name(&self) -> &str;

    /// A number that strictly increases with each acquisition of this name, when the provider
    /// has [`Capabilities::fencing`]. Pass it to the guarded resource so it can reject writes
    /// from a holder that has since lost the lock.
    fn fencing_token(&self) -> Option<u64>;

    /// Whose clock decides this lock's expiry.
    fn time_source(&self) -> TimeSource;

    /// Releases the lock, keeping it until `acquired_at + lock_at_least_for` if that is later.
    ///
    /// `Ok(true)`: this acquisition was still held and is now released. `Ok(false)`: it was not
    /// ours any more (expired, taken over, or already released); nothing was changed.
    async fn unlock(&self) -> Result<bool, LockError>;

    /// Moves the expiry of a still-held lock to `now + lock_at_most_for`.
    ///
    /// `Ok(true)`: extended. `Ok(false)`: the lock had expired or is not ours; nothing changed.
    /// [`LockError::Unsupported`] when the provider lacks [`Capabilities::extend`].
    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError>;
}
