//! Hears who holds a lock when a run is skipped: the executor only says "skipped".

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;

use shedlock_core::{
    Acquisition, Capabilities, LockConfiguration, LockError, LockHolder, LockProvider, async_trait,
};

tokio::task_local! {
    /// The holder the last refused acquire in this run named, when the backend said.
    static REFUSED_BY: Cell<Option<LockHolder>>;
}

/// The scheduler's provider: the user's, passed through, noting the holder of a refused lock
/// for the run that asked.
pub(crate) struct HolderNoting {
    inner: Arc<dyn LockProvider>,
}

impl HolderNoting {
    pub(crate) fn new(inner: Arc<dyn LockProvider>) -> Self {
        Self { inner }
    }
}

impl fmt::Debug for HolderNoting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

#[async_trait]
impl LockProvider for HolderNoting {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let acquisition = self.inner.try_lock(config).await?;
        if let Acquisition::NotAcquired(Some(holder)) = &acquisition {
            // Outside a run (a job's own nested call on the scheduler's executor from a
            // spawned task) there is no slot, and nobody to tell.
            let _ = REFUSED_BY.try_with(|slot| slot.set(Some(holder.clone())));
        }
        Ok(acquisition)
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}

/// Runs `attempt` and returns its output with the holder a refused acquire named inside it.
pub(crate) async fn noting_holder<F: Future>(attempt: F) -> (F::Output, Option<LockHolder>) {
    REFUSED_BY
        .scope(Cell::new(None), async {
            let output = attempt.await;
            (output, REFUSED_BY.with(Cell::take))
        })
        .await
}
