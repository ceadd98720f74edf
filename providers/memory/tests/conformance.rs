//! The conformance kit against the in-memory provider: every node is a provider on one shared
//! store, as nodes of a real backend share its tables.

use std::sync::Arc;
use std::time::SystemTime;

use shedlock_conformance::shedlock_core::LockAdmin;
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_memory::{MemoryLockProvider, MemoryLockStore};

/// One store; each node is an independent provider on it with the clock the kit hands it.
struct MemoryHarness {
    store: MemoryLockStore,
}

#[async_trait]
impl ConformanceHarness for MemoryHarness {
    type Node = MemoryLockProvider;

    fn name(&self) -> &str {
        "memory"
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<MemoryLockProvider, SetupError> {
        Ok(self.store.node_with("conformance-node", clock))
    }

    fn admin<'node>(&self, node: &'node MemoryLockProvider) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        // The store's clock is monotonic but anchored to the wall clock at creation, so a
        // wall-clock instant an hour away is an hour away for the store too.
        let _: SystemTime = record.lock_until;
        self.store.put_record(
            &record.name,
            record.lock_until,
            record.locked_at,
            &record.locked_by,
        );
        Ok(Support::Supported(()))
    }
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| async {
        Ok(MemoryHarness {
            store: MemoryLockStore::new(),
        })
    })
}
