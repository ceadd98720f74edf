//! [`SqlLockProvider`], once for every [`SqlBackend`]: one node's view of the table, on the
//! storage its builder connected.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, Capabilities, Clock, LockConfiguration, LockError, LockProvider, SystemClock,
    raw::StorageBasedLockProvider,
};
use sqlx::Pool;

use crate::backend::SqlBackend;
use crate::builder::SqlLockProviderBuilder;
use crate::storage::SqlStorage;
use crate::table::LockTable;

/// A lock provider on a SQL table: one node's view of it.
///
/// Each provider crate names it for its database (`PostgresLockProvider`,
/// `MySqlLockProvider`, `SqliteLockProvider`), and documents its table and statements there.
///
/// It is also the table's [`LockAdmin`](shedlock_core::LockAdmin), for operators: list,
/// inspect and force-unlock on the same connections, one statement each.
///
/// Cloning is not offered; call [`node`](Self::node) for another node on the same pool and
/// table (with its own name cache), as tests of several nodes do.
pub struct SqlLockProvider<B: SqlBackend> {
    inner: StorageBasedLockProvider,
    pub(crate) storage: Arc<SqlStorage<B>>,
    pub(crate) operation_timeout: Duration,
    /// The node clock again, for the operator's view ([`LockAdmin`](shedlock_core::LockAdmin))
    /// in client time, which judges locks by the clock the lock statements compare with.
    pub(crate) clock: Arc<dyn Clock>,
}

impl<B: SqlBackend> fmt::Debug for SqlLockProvider<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl<B: SqlBackend> SqlLockProvider<B> {
    /// A builder: set what differs from ShedLock's defaults, then
    /// [`connect`](SqlLockProviderBuilder::connect) to a URL,
    /// [`connect_lazy`](SqlLockProviderBuilder::connect_lazy) to one, or
    /// [`build`](SqlLockProviderBuilder::build) on a pool of yours.
    pub fn builder() -> SqlLockProviderBuilder<B> {
        SqlLockProviderBuilder::<B>::new()
    }

    /// Connects to `url` with every default: ShedLock's table, server time.
    pub async fn connect(url: impl Into<String>) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    pub(crate) fn new(
        storage: SqlStorage<B>,
        operation_timeout: Duration,
        holder: Option<String>,
        clock: Option<Arc<dyn Clock>>,
    ) -> Self {
        let mut provider = Self::on_storage(Arc::new(storage), operation_timeout);
        if let Some(holder) = holder {
            provider = provider.with_holder(holder);
        }
        if let Some(clock) = clock {
            provider = provider.with_clock(clock);
        }
        provider
    }

    fn on_storage(storage: Arc<SqlStorage<B>>, operation_timeout: Duration) -> Self {
        Self {
            inner: StorageBasedLockProvider::from_arc(storage.clone())
                .with_operation_timeout(operation_timeout),
            storage,
            operation_timeout,
            clock: Arc::new(SystemClock),
        }
    }

    /// Another node on the same pool and table: the host name as holder, the system clock, and
    /// a name cache of its own.
    pub fn node(&self) -> Self {
        Self::on_storage(self.storage.clone(), self.operation_timeout)
    }

    /// This node's clock (see [`SqlLockProviderBuilder::clock`]).
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Self {
        Self {
            inner: self.inner.with_clock(clock.clone()),
            clock,
            ..self
        }
    }

    /// This node's holder name (see [`SqlLockProviderBuilder::holder`]).
    pub fn with_holder(self, holder: impl Into<String>) -> Self {
        Self {
            inner: self.inner.with_holder(holder),
            ..self
        }
    }

    /// Forgets which names this node has seen, as a restarted node would.
    pub fn clear_name_cache(&self) {
        self.inner.clear_name_cache();
    }

    /// The pool the statements run on, when the provider was given one
    /// ([`builder`](Self::builder)); `None` when it opened its own connections from a URL.
    pub fn pool(&self) -> Option<&Pool<B::Database>> {
        self.storage.pool()
    }

    /// The table the provider uses.
    pub fn lock_table(&self) -> &LockTable {
        self.storage.table()
    }

    /// Whether the table has the fencing column, so acquisitions carry tokens.
    pub fn has_fencing(&self) -> bool {
        self.storage.schema().fencing
    }

    /// The backend as connecting found it, for what only one database has (MySQL's
    /// `flavor()`: MySQL or MariaDB).
    pub fn backend(&self) -> &B {
        self.storage.backend()
    }
}

#[async_trait]
impl<B: SqlBackend> LockProvider for SqlLockProvider<B> {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        B::PROVIDER
    }
}
