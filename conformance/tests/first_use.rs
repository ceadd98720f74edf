//! `check_first_use` judges a fleet's first start: it passes the in-memory provider, and fails,
//! under the right rule, a fleet where one node cannot be built, where two nodes both acquire,
//! where first use is refused with an error, and where fencing tokens do not increase.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use shedlock_conformance::shedlock_core::{
    Acquisition, Capabilities, ErrorKind, LockConfiguration, LockError, LockHandle, LockProvider,
    Operation, TimeSource,
};
use shedlock_conformance::{FIRST_USE_NODES, Verdict, async_trait, check_first_use};
use shedlock_memory::{MemoryLockProvider, MemoryLockStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_correct_provider_passes_and_every_node_is_built_at_once() {
    let store = MemoryLockStore::new();
    let started = Arc::new(AtomicUsize::new(0));
    let verdict = check_first_use(FIRST_USE_NODES, |_| {
        let (store, started) = (store.clone(), started.clone());
        async move {
            started.fetch_add(1, Ordering::SeqCst);
            Ok::<_, LockError>(store.node())
        }
    })
    .await
    .unwrap_or_else(|failure| panic!("{failure}"));
    assert_eq!(started.load(Ordering::SeqCst), FIRST_USE_NODES);
    let Verdict::Passed { notes } = verdict else {
        panic!("{verdict:?}")
    };
    assert!(notes[0].starts_with("16 nodes built at once"), "{notes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_that_fails_to_build_fails_the_first_use_rule_and_is_named() {
    let store = MemoryLockStore::new();
    let failure = check_first_use(FIRST_USE_NODES, |index| {
        let store = store.clone();
        async move {
            if index == 3 {
                Err("duplicate key value violates unique constraint \"pg_type_typname_nsp_index\"")
            } else {
                Ok(store.node())
            }
        }
    })
    .await
    .expect_err("a node that could not be built must fail the check");
    assert_eq!(failure.rule.id, "first-use");
    assert!(failure.observed.starts_with("1 of 16 nodes"), "{failure}");
    assert!(
        failure.observed.contains("node D: duplicate key"),
        "{failure}"
    );
}

/// A provider whose first `try_lock` on a name fails (what it had to create was not there yet)
/// and whose later ones work: every node's first use on new storage.
#[derive(Debug)]
struct FailsFirstUse {
    inner: MemoryLockProvider,
    used: AtomicUsize,
}

#[async_trait]
impl LockProvider for FailsFirstUse {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        if self.used.fetch_add(1, Ordering::SeqCst) == 0 {
            return Err(LockError::backend_message(
                ErrorKind::OutcomeUnknown,
                "fails-first-use",
                Operation::Acquire,
                config.name(),
                "the collection was created by another node at the same moment",
            ));
        }
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        self.inner.provider_name()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_error_on_the_first_acquire_fails_the_first_use_rule() {
    let store = MemoryLockStore::new();
    let failure = check_first_use(4, |_| {
        let store = store.clone();
        async move {
            Ok::<_, LockError>(FailsFirstUse {
                inner: store.node(),
                used: AtomicUsize::new(0),
            })
        }
    })
    .await
    .expect_err("an error on a working backend must fail the check");
    assert_eq!(failure.rule.id, "first-use");
    assert!(failure.observed.contains("the first time"), "{failure}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_that_do_not_share_their_locks_break_mutual_exclusion() {
    // Each node on a store of its own: every one of them acquires.
    let failure = check_first_use(3, |_| async {
        Ok::<_, LockError>(MemoryLockStore::new().node())
    })
    .await
    .expect_err("three holders must fail the check");
    assert_eq!(failure.rule.id, "mutual-exclusion");
    assert!(
        failure.observed.contains("3 acquired it: A, B, C"),
        "{failure}"
    );
}

/// A handle whose fencing token is always the same.
#[derive(Debug)]
struct SameToken(Box<dyn LockHandle>);

#[async_trait]
impl LockHandle for SameToken {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(7)
    }

    fn time_source(&self) -> TimeSource {
        self.0.time_source()
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        self.0.unlock().await
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        self.0.extend(lock_at_most_for).await
    }
}

/// A provider whose tokens never increase.
#[derive(Debug)]
struct RepeatsTokens(MemoryLockProvider);

#[async_trait]
impl LockProvider for RepeatsTokens {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        Ok(match self.0.try_lock(config).await? {
            Acquisition::Acquired(handle) => Acquisition::Acquired(Box::new(SameToken(handle))),
            refused => refused,
        })
    }

    fn capabilities(&self) -> Capabilities {
        self.0.capabilities().with_fencing(true)
    }

    fn provider_name(&self) -> &'static str {
        self.0.provider_name()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_that_does_not_increase_breaks_fencing() {
    let store = MemoryLockStore::new();
    let failure = check_first_use(4, |_| {
        let store = store.clone();
        async move { Ok::<_, LockError>(RepeatsTokens(store.node())) }
    })
    .await
    .expect_err("a repeated token must fail the check");
    assert_eq!(failure.rule.id, "fencing");
    assert!(
        failure
            .observed
            .contains("got token 7, not greater than the first's 7"),
        "{failure}"
    );
}
