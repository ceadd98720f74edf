//! The in-process lock provider: every node is a [`MemoryLockProvider`] on one shared
//! [`MemoryLockStore`].
//!
//! It is a real provider, not a test double: use it where all contenders live in one process
//! (several tasks or several schedulers in one binary), and as the reference the conformance kit
//! compares other providers with. It keeps ShedLock's record semantics (records are kept after
//! release), checks the owner of every release and extend, and issues fencing tokens.
//!
//! ```
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor, TaskOutcome};
//! use shedlock_memory::MemoryLockStore;
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), shedlock_core::LockError> {
//! let store = MemoryLockStore::new();
//! let (node_a, node_b) = (LockingTaskExecutor::new(store.node()), LockingTaskExecutor::new(store.node()));
//! let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
//! let outer = node_a.execute(&config, async {
//!     // While node A runs the task, node B skips it.
//!     node_b.execute(&config, async {}).await
//! }).await?;
//! assert!(matches!(outer, TaskOutcome::Executed(Ok(TaskOutcome::Skipped(Some(_))))));
//! # Ok(()) }
//! ```

mod storage;

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, Clock, LockAdmin, LockConfiguration, LockError,
    LockInfo, LockPage, LockProvider, MonotonicClock, PageRequest, raw::StorageBasedLockProvider,
};

pub use storage::MemoryLockStore;

impl MemoryLockStore {
    /// A new empty store whose expiry decisions use a monotonic clock, so a wall-clock step
    /// (NTP) neither frees nor prolongs a lock.
    pub fn new() -> Self {
        Self::with_clock(Arc::new(MonotonicClock::new()))
    }

    /// A new provider ("node") on this store, with the host name as holder.
    pub fn node(&self) -> MemoryLockProvider {
        MemoryLockProvider {
            inner: StorageBasedLockProvider::new(self.clone()),
            store: self.clone(),
        }
    }

    /// A new node that identifies itself as `holder`, with `node_clock` as its own wall clock.
    /// Expiry is still decided by the store's clock: the store declares server time, so the
    /// node's clock is never handed to it and a skewed node clock changes nothing.
    pub fn node_with(&self, holder: &str, node_clock: Arc<dyn Clock>) -> MemoryLockProvider {
        MemoryLockProvider {
            inner: StorageBasedLockProvider::new(self.clone())
                .with_holder(holder)
                .with_clock(node_clock),
            store: self.clone(),
        }
    }
}

impl Default for MemoryLockStore {
    fn default() -> Self {
        Self::new()
    }
}

/// One node's view of a [`MemoryLockStore`].
#[derive(Debug)]
pub struct MemoryLockProvider {
    inner: StorageBasedLockProvider,
    /// The store again, for the operator's view ([`LockAdmin`]), which the lock algorithm
    /// does not need.
    store: MemoryLockStore,
}

impl MemoryLockProvider {
    /// A provider with a store of its own: all its users share locks only with each other.
    pub fn new() -> Self {
        MemoryLockStore::new().node()
    }
}

impl Default for MemoryLockProvider {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl LockProvider for MemoryLockProvider {
    // Written out as `async_trait` expands it, to hand back the inner provider's boxed future
    // rather than box a second future around it: one allocation less per acquisition.
    fn try_lock<'node, 'config, 'async_trait>(
        &'node self,
        config: &'config LockConfiguration,
    ) -> Pin<Box<dyn Future<Output = Result<Acquisition, LockError>> + Send + 'async_trait>>
    where
        'node: 'async_trait,
        'config: 'async_trait,
        Self: 'async_trait,
    {
        self.inner.try_lock(config)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        self.inner.provider_name()
    }
}

/// A node sees and frees the locks of its whole store.
#[async_trait]
impl LockAdmin for MemoryLockProvider {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        self.store.list_locks(request).await
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        self.store.inspect_lock(name).await
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        self.store.force_unlock(name, acquisition).await
    }
}
