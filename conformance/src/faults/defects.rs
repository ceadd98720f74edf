//! Broken nodes the fault suite must catch, on the harness's own backend.
//!
//! A fault check proves something only if it fails for a provider that breaks its rule. Each
//! [`FaultDefect`] wraps a correct node of the harness with one defect a real provider could
//! have, and names the fault check that exists to catch it. [`run_defects`] runs every pair in
//! a process of its own (the checks start node processes, which must carry the same defect)
//! and fails unless the check fails.

use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use libtest_mimic::{Arguments, Failed, Trial};
use shedlock_core::{
    Acquisition, Capabilities, Clock, ErrorKind, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockProvider, LockState, TimeSource,
};

use super::FaultHarness;
use super::checks::FaultCheck;
use super::child;
use crate::harness::{ConformanceHarness, SetupError, Support};
use crate::names::NameSpace;

/// Set (to a defect's name) in the environment of a process that plays a broken node.
const DEFECT_VARIABLE: &str = "SHEDLOCK_FAULT_DEFECT";

/// One defect, and the fault check that must catch it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultDefect {
    /// Takes every lock for a tenth of its `lock_at_most_for`: a lock whose holder crashed
    /// frees early. [`FaultCheck::HolderCrash`] must catch it.
    ShortLocks,
    /// Answers "not acquired" when the backend does not answer, instead of an error: a node
    /// behind a stalled network skips a run it may hold the lock for.
    /// [`FaultCheck::StallDuringAcquire`] must catch it.
    ErrorsAsRefusals,
    /// Releases by freeing whoever holds the lock (the admin's force-unlock of the current
    /// acquisition), not its own acquisition only: a release that arrives late frees the next
    /// holder. [`FaultCheck::StallDuringRelease`] must catch it.
    ReleaseFreesAnyHolder,
    /// Once an operation has failed, fails every later one: a node that never reconnects after
    /// the server restarts. [`FaultCheck::BackendRestart`] must catch it.
    NeverRecovers,
    /// Extend answers `true` without reaching the backend: a keep-alive never learns that its
    /// lock ran out while the server was unreachable. [`FaultCheck::BackendPaused`] must catch
    /// it.
    ExtendWithoutBackend,
    /// Judges expiry by the node's own clock: a lock whose `held_until` has passed on that
    /// clock is freed (the admin's force-unlock) and taken, so a node whose clock runs ahead
    /// takes held locks. [`FaultCheck::WrongClocks`] must catch it.
    ExpiryByNodeClock,
}

impl FaultDefect {
    /// Every defect, in the order [`run_defects`] runs them.
    pub const ALL: [FaultDefect; 6] = [
        FaultDefect::ShortLocks,
        FaultDefect::ErrorsAsRefusals,
        FaultDefect::ReleaseFreesAnyHolder,
        FaultDefect::NeverRecovers,
        FaultDefect::ExtendWithoutBackend,
        FaultDefect::ExpiryByNodeClock,
    ];

    /// The defect's name, as its test is listed.
    pub fn name(self) -> &'static str {
        match self {
            FaultDefect::ShortLocks => "short_locks",
            FaultDefect::ErrorsAsRefusals => "errors_as_refusals",
            FaultDefect::ReleaseFreesAnyHolder => "release_frees_any_holder",
            FaultDefect::NeverRecovers => "never_recovers",
            FaultDefect::ExtendWithoutBackend => "extend_without_backend",
            FaultDefect::ExpiryByNodeClock => "expiry_by_node_clock",
        }
    }

    /// The fault check that must fail for a node with this defect.
    pub fn caught_by(self) -> FaultCheck {
        match self {
            FaultDefect::ShortLocks => FaultCheck::HolderCrash,
            FaultDefect::ErrorsAsRefusals => FaultCheck::StallDuringAcquire,
            FaultDefect::ReleaseFreesAnyHolder => FaultCheck::StallDuringRelease,
            FaultDefect::NeverRecovers => FaultCheck::BackendRestart,
            FaultDefect::ExtendWithoutBackend => FaultCheck::BackendPaused,
            FaultDefect::ExpiryByNodeClock => FaultCheck::WrongClocks,
        }
    }

    fn named(name: &str) -> Option<FaultDefect> {
        FaultDefect::ALL
            .into_iter()
            .find(|defect| defect.name() == name)
    }
}

/// A node of the harness's backend with one defect.
#[derive(Debug)]
pub struct DefectiveNode<N> {
    inner: Arc<N>,
    defect: FaultDefect,
    /// [`FaultDefect::NeverRecovers`]: an operation has failed.
    failed: Arc<AtomicBool>,
}

impl<N: LockProvider + LockAdmin + 'static> DefectiveNode<N> {
    fn new(inner: N, defect: FaultDefect) -> Self {
        Self {
            inner: Arc::new(inner),
            defect,
            failed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// [`FaultDefect::NeverRecovers`]: remembers a failure, and refuses everything after one.
    fn remembered<T>(&self, outcome: Result<T, LockError>) -> Result<T, LockError> {
        if self.defect != FaultDefect::NeverRecovers {
            return outcome;
        }
        if self.failed.load(Ordering::SeqCst) {
            return Err(LockError::backend_message(
                ErrorKind::Unreachable,
                self.inner.provider_name(),
                shedlock_core::Operation::Acquire,
                "any",
                "an earlier operation failed, and this node never reconnects".to_owned(),
            ));
        }
        if outcome.is_err() {
            self.failed.store(true, Ordering::SeqCst);
        }
        outcome
    }

    /// [`FaultDefect::ExpiryByNodeClock`]: frees a held lock whose `held_until` has passed on
    /// this node's clock.
    async fn free_if_expired_here(&self, name: &str) -> Result<(), LockError> {
        if let Some(info) = self.inner.inspect_lock(name).await?
            && info.state == LockState::Held
            && info
                .held_until
                .is_some_and(|until| until <= SystemTime::now())
        {
            self.inner.force_unlock(name, &info.acquisition).await?;
        }
        Ok(())
    }
}

#[async_trait]
impl<N: LockProvider + LockAdmin + 'static> LockProvider for DefectiveNode<N> {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let config = match self.defect {
            FaultDefect::ShortLocks => LockConfiguration::new(
                config.name(),
                (config.lock_at_most_for() / 10).max(Duration::from_millis(1)),
                Duration::ZERO,
            )?,
            _ => config.clone(),
        };
        if self.defect == FaultDefect::ExpiryByNodeClock {
            self.free_if_expired_here(config.name()).await?;
        }
        let outcome = match self.remembered(self.inner.try_lock(&config).await) {
            Ok(outcome) => outcome,
            Err(_) if self.defect == FaultDefect::ErrorsAsRefusals => {
                return Ok(Acquisition::NotAcquired(None));
            }
            Err(error) => return Err(error),
        };
        Ok(match outcome {
            Acquisition::Acquired(handle) => Acquisition::Acquired(Box::new(DefectiveHandle {
                inner: handle,
                node: self.inner.clone(),
                defect: self.defect,
            })),
            refused => refused,
        })
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        self.inner.provider_name()
    }
}

/// The handle of a [`DefectiveNode`]'s acquisition.
#[derive(Debug)]
struct DefectiveHandle<N> {
    inner: Box<dyn LockHandle>,
    node: Arc<N>,
    defect: FaultDefect,
}

#[async_trait]
impl<N: LockProvider + LockAdmin + 'static> LockHandle for DefectiveHandle<N> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn fencing_token(&self) -> Option<u64> {
        self.inner.fencing_token()
    }

    fn time_source(&self) -> TimeSource {
        self.inner.time_source()
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        if self.defect != FaultDefect::ReleaseFreesAnyHolder {
            return self.inner.unlock().await;
        }
        match self.node.inspect_lock(self.inner.name()).await? {
            Some(info) => {
                self.node
                    .force_unlock(self.inner.name(), &info.acquisition)
                    .await
            }
            None => Ok(false),
        }
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        match self.defect {
            FaultDefect::ExtendWithoutBackend => Ok(true),
            _ => self.inner.extend(lock_at_most_for).await,
        }
    }
}

/// A harness whose nodes carry one [`FaultDefect`]; every hook is the wrapped harness's.
pub struct DefectiveHarness<H> {
    inner: H,
    defect: FaultDefect,
}

#[async_trait]
impl<H> ConformanceHarness for DefectiveHarness<H>
where
    H: FaultHarness,
    H::Node: LockAdmin,
{
    type Node = DefectiveNode<H::Node>;

    fn name(&self) -> &str {
        self.inner.name()
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<Self::Node, SetupError> {
        Ok(DefectiveNode::new(
            self.inner.node(clock).await?,
            self.defect,
        ))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        self.inner.cleanup(name_prefix).await
    }
}

#[async_trait]
impl<H> FaultHarness for DefectiveHarness<H>
where
    H: FaultHarness,
    H::Node: LockAdmin,
{
    fn shares_across_processes(&self) -> bool {
        self.inner.shares_across_processes()
    }

    fn backend_clock_is_the_nodes(&self) -> bool {
        self.inner.backend_clock_is_the_nodes()
    }

    fn backend_address(&self) -> Support<String> {
        self.inner.backend_address()
    }

    async fn node_via(&self, address: &str) -> Result<Self::Node, SetupError> {
        Ok(DefectiveNode::new(
            self.inner.node_via(address).await?,
            self.defect,
        ))
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        self.inner.restart_backend().await
    }

    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        self.inner.pause_backend(limit).await
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        self.inner.resume_backend().await
    }

    fn locks_survive_restart(&self) -> bool {
        self.inner.locks_survive_restart()
    }
}

/// Runs every [`FaultDefect`] against the fault check that must catch it, on the backend
/// `make_harness` reaches, one test per defect: each passes only if its check fails. Like
/// [`run`](super::run), it must be the first thing a `harness = false` test target's `main`
/// does, and every hook the checks need must be there (a check that shows as ignored catches
/// nothing, and fails its defect's test).
///
/// Each defect runs in a process of its own: this test binary again, told which defect to
/// carry, so the node processes its check starts carry it too.
pub fn run_defects<H, F, Fut>(make_harness: F) -> ExitCode
where
    H: FaultHarness,
    H::Node: LockAdmin,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    let defect = std::env::var(DEFECT_VARIABLE).ok();
    let defect = match defect.as_deref().map(FaultDefect::named) {
        None => return run_every_defect(),
        Some(None) => {
            eprintln!(
                "shedlock-conformance: {DEFECT_VARIABLE} names no defect: {}",
                defect.unwrap_or_default()
            );
            return ExitCode::FAILURE;
        }
        Some(Some(defect)) => defect,
    };
    let make_defective = || async move {
        Ok(DefectiveHarness {
            inner: make_harness().await?,
            defect,
        })
    };
    if child::is_child() {
        child::play(make_defective)
    }
    // A defect's own process: its one check, judged by the caller from the exit code.
    let check = defect.caught_by();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("shedlock-conformance: could not start a tokio runtime: {error}");
            return ExitCode::from(2);
        }
    };
    runtime.block_on(async move {
        let harness = match make_defective().await {
            Ok(harness) => harness,
            Err(error) => {
                eprintln!("the harness could not be set up: {error}");
                return ExitCode::from(2);
            }
        };
        let names = NameSpace::new_run().child(defect.name());
        match check.run(&harness, &names).await {
            // The check could not run: it caught nothing.
            Err(failure) if failure.rule.id == crate::failure::Rule::HARNESS.id => {
                println!("not caught: {} could not run: {failure}", check.name());
                ExitCode::from(3)
            }
            Err(failure) => {
                println!("caught: {failure}");
                ExitCode::SUCCESS
            }
            Ok(verdict) => {
                println!("not caught: {} answered {verdict:?}", check.name());
                ExitCode::from(3)
            }
        }
    })
}

/// The test process: one trial per defect, each running the defect's own process.
fn run_every_defect() -> ExitCode {
    let mut args = Arguments::from_args();
    args.test_threads = args.test_threads.or(Some(1));
    let trials = FaultDefect::ALL
        .into_iter()
        .map(|defect| {
            Trial::test(defect.name(), move || {
                let exe =
                    std::env::current_exe().map_err(|error| Failed::from(error.to_string()))?;
                let output = std::process::Command::new(exe)
                    .env(DEFECT_VARIABLE, defect.name())
                    .stdin(Stdio::null())
                    .output()
                    .map_err(|error| Failed::from(error.to_string()))?;
                let said = String::from_utf8_lossy(&output.stdout);
                match output.status.code() {
                    Some(0) => {
                        println!("{}", said.trim());
                        Ok(())
                    }
                    _ => Err(Failed::from(format!(
                        "the fault check {} did not catch a node that {}: {}{}",
                        defect.caught_by().name(),
                        defect.name().replace('_', " "),
                        said.trim(),
                        String::from_utf8_lossy(&output.stderr)
                    ))),
                }
            })
        })
        .collect();
    libtest_mimic::run(&args, trials).exit_code()
}
