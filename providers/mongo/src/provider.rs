//! [`MongoLockProvider`]: the provider type, its nodes and shutdown, and its [`LockProvider`]
//! implementation on the shared storage-based provider.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mongodb::Collection;
use mongodb::bson::Document;
use shedlock_core::{
    Acquisition, Capabilities, LockConfiguration, LockError, LockProvider,
    raw::StorageBasedLockProvider,
};

use crate::MongoLockProviderBuilder;
use crate::storage::MongoStorage;

/// Locks in a MongoDB collection, one document per name; see the crate docs for the layout,
/// the commands and the guarantees.
///
/// Not `Clone`: call [`node`](Self::node) for another node on the same client (its own
/// identity and name cache), as tests of several nodes do.
pub struct MongoLockProvider {
    inner: StorageBasedLockProvider,
    pub(crate) storage: Arc<MongoStorage>,
    pub(crate) operation_timeout: Duration,
}

impl fmt::Debug for MongoLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl MongoLockProvider {
    /// A builder with ShedLock's defaults.
    pub fn builder() -> MongoLockProviderBuilder {
        MongoLockProviderBuilder::default()
    }

    /// Connects to `url` with every default; see [`MongoLockProviderBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    pub(crate) fn on_storage(
        storage: Arc<MongoStorage>,
        holder: Option<String>,
        operation_timeout: Duration,
    ) -> Self {
        let mut inner = StorageBasedLockProvider::from_arc(storage.clone())
            .with_operation_timeout(operation_timeout);
        if let Some(holder) = holder {
            inner = inner.with_holder(holder);
        }
        Self {
            inner,
            storage,
            operation_timeout,
        }
    }

    /// Another node on the same client and collection, with the host name as holder and a
    /// name cache of its own.
    pub fn node(&self) -> Self {
        Self::on_storage(self.storage.clone(), None, self.operation_timeout)
    }

    /// Shuts down the MongoDB client the provider created, within the operation timeout: call
    /// it once the application is done with locks, before its async runtime ends.
    ///
    /// Without it the client cleans up when the runtime drops it, racing the runtime's own
    /// end: the `mongodb` driver (3.9.1) then panics now and then in one of its tasks
    /// (`SendError` in `cmap/connection_requester.rs`), a backtrace printed as the process
    /// exits; see "Known issue" in the crate docs. Shutting the client down first ends its
    /// tasks in order and tells the server the client's sessions are over.
    ///
    /// The client is shared by every node made with [`node`](Self::node), so any one node
    /// shuts it down for all; from then on every operation of every node, and the release and
    /// extend of every handle still held, fails with [`LockError::Backend`] saying the client
    /// was shut down, without sending anything: never "not acquired" nor `Ok(false)`, and a
    /// lock still held stays held until its `lock_at_most_for`, as after a crash. Release
    /// locks first to free them at once. A provider moved into a
    /// [`LockingTaskExecutor`](shedlock_core::LockingTaskExecutor) can be reached through a
    /// node made before the move, or by giving the executor an `Arc` of it.
    ///
    /// Returns `true` once the client is shut down (`true` again if it already was). The
    /// driver's shutdown waits for the operations still running on the client, any node's,
    /// so stop the scheduler and let its tasks end first. It never waits longer than the
    /// operation timeout: if the client is not shut down by then (other nodes still busy, a
    /// server that stopped answering), this gives up and returns `false`; the client may be
    /// left partly shut down, so the operations of nodes still running go on or fail with an
    /// error (never a wrong answer), and this may be called again once they have stopped.
    ///
    /// A provider made with [`MongoLockProviderBuilder::build`] did not create its client and
    /// leaves it alone: this returns `false` at once, and the application calls
    /// [`Client::shutdown`] on its client itself.
    ///
    /// [`Client::shutdown`]: mongodb::Client::shutdown
    pub async fn shutdown(&self) -> bool {
        if !self.storage.owns_client {
            return false;
        }
        let client = self.storage.collection.client().clone();
        tokio::time::timeout(self.operation_timeout, client.shutdown())
            .await
            .is_ok()
    }

    /// Forgets which names this node has seen, as a restarted node would. Acquire is one
    /// upsert that never consults the cache, so no answer and no cost depends on it.
    pub fn clear_name_cache(&self) {
        self.inner.clear_name_cache();
    }

    /// The lock collection, with the provider's read and write concerns, for operators who
    /// want to inspect or free a lock by hand.
    pub fn collection(&self) -> &Collection<Document> {
        &self.storage.collection
    }
}

#[async_trait]
impl LockProvider for MongoLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        self.inner.provider_name()
    }
}
