//! The fault suite: the lock rules under the failures production throws. A node's process is
//! killed while it holds a lock, the backend's server restarts, the network stalls during each
//! operation, and a soak runs a job every tick on several node processes through random kills
//! and restarts, with a ledger that must show at most one run per tick.
//!
//! It is a second entry point beside [`run`](crate::run), for a second `harness = false` test
//! target, because its checks stop servers and kill processes: they run one at a time, and
//! the harness needs the few more hooks of [`FaultHarness`]:
//!
//! ```no_run
//! # use std::sync::Arc;
//! # use shedlock_conformance::{ConformanceHarness, SetupError, Support, async_trait};
//! # use shedlock_conformance::faults::FaultHarness;
//! # use shedlock_core::Clock;
//! # use shedlock_memory::{MemoryLockProvider, MemoryLockStore};
//! # struct MyHarness(MemoryLockStore);
//! # #[async_trait]
//! # impl ConformanceHarness for MyHarness {
//! #     type Node = MemoryLockProvider;
//! #     fn name(&self) -> &str { "memory" }
//! #     async fn node(&self, clock: Arc<dyn Clock>) -> Result<MemoryLockProvider, SetupError> {
//! #         Ok(self.0.node_with("faults", clock))
//! #     }
//! # }
//! #[async_trait]
//! impl FaultHarness for MyHarness {
//!     // Override the hooks that apply: shares_across_processes, backend_address,
//!     // node_via, restart_backend, locks_survive_restart.
//! }
//!
//! fn main() -> std::process::ExitCode {
//!     shedlock_conformance::faults::run(|| async { Ok(MyHarness(MemoryLockStore::new())) })
//! }
//! ```
//!
//! The crash and soak checks start this same test binary again as child processes (nodes of
//! their own): [`run`] recognises such a child by its environment and plays the node's part
//! instead of running the checks, so `main` must call it first thing, as above.

mod checks;
mod child;
mod defects;
mod ledger;
mod runner;
mod stall_proxy;

use std::time::Duration;

use async_trait::async_trait;

use crate::backends::{Backend, container};
use crate::harness::{ConformanceHarness, SetupError, Support};

pub use checks::{
    FAKETIME_LIBRARY_VARIABLE, FaultCheck, RECONNECT_LIMIT, SOAK_NODES_VARIABLE,
    SOAK_SECONDS_VARIABLE, SoakSettings, check_backend_paused, check_backend_restart,
    check_holder_crash, check_soak, check_stall_during_acquire, check_stall_during_extend,
    check_stall_during_release, check_wrong_clocks,
};
pub use child::run_id;
pub use defects::{DefectiveHarness, DefectiveNode, FaultDefect, run_defects};
pub use ledger::{Ledger, LedgerEntry, LedgerVerdict, SoakRecord, TickExcuse, judge};
pub use runner::{run, run_with_args};
pub use stall_proxy::StallProxy;

/// What the fault suite needs of a harness beyond [`ConformanceHarness`]. Every hook has a
/// default meaning "does not apply", under which the checks that need it show as ignored with
/// the reason.
#[async_trait]
pub trait FaultHarness: ConformanceHarness {
    /// Whether nodes in different processes share the backend (every server, and a database
    /// file), so a child process can hold a lock that this process sees. An in-process store
    /// answers `false`.
    fn shares_across_processes(&self) -> bool {
        true
    }

    /// Whether the backend's clock is the nodes' own: a database embedded in each node's
    /// process that reads the machine's clock (SQLite's `'now'`), so every node sharing it runs
    /// on one machine and has that clock. No node can then have a clock other than the
    /// backend's, and the wrong-clocks check does not apply.
    fn backend_clock_is_the_nodes(&self) -> bool {
        false
    }

    /// The one `host:port` a node connects to, for the stall checks, which put a
    /// [`StallProxy`] in front of it.
    fn backend_address(&self) -> Support<String> {
        Support::not_applicable(
            "the harness provides no backend_address() hook, so the kit cannot stall the network between a node and its backend",
        )
    }

    /// A node like [`node`](ConformanceHarness::node) that connects to `address` (the kit's
    /// proxy) instead of the backend's own address. Give it short operation timeouts (a few
    /// seconds): the stall checks wait for them.
    async fn node_via(&self, address: &str) -> Result<Self::Node, SetupError> {
        Err(SetupError::new(format!(
            "the harness declares backend_address() but provides no node_via() to reach it through {address}"
        )))
    }

    /// Stops the backend's server and starts it again, returning once it answers.
    /// [`restart_command`] does it with a command taken from the environment.
    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        Ok(Support::not_applicable(
            "the harness provides no restart_backend() hook, so the kit cannot restart the backend while locks are held",
        ))
    }

    /// Pauses the backend's server as SIGSTOP or `docker pause` would: it neither answers nor
    /// closes anything until [`resume_backend`](Self::resume_backend). It must resume by itself
    /// after `limit` at the latest, whatever happens to the caller, so a check that dies
    /// mid-pause leaves no server stopped. [`pause_command`] does it with a command taken from
    /// the environment.
    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        let _ = limit;
        Ok(Support::not_applicable(
            "the harness provides no pause_backend() hook, so the kit cannot pause the backend while locks are held",
        ))
    }

    /// Resumes the server [`pause_backend`](Self::pause_backend) paused.
    async fn resume_backend(&self) -> Result<(), SetupError> {
        Err(SetupError::new(
            "the harness paused the backend but provides no resume_backend() hook",
        ))
    }

    /// Whether a lock held when the server restarts is still held afterwards. `false` for a
    /// backend that keeps locks only in memory (Redis without persistence): the restart check
    /// then notes the loss instead of failing on it.
    fn locks_survive_restart(&self) -> bool {
        true
    }
}

/// The environment variable holding a shell command that restarts `backend`'s server and
/// returns once it answers: `SHEDLOCK_TEST_<BACKEND>_RESTART`.
pub fn restart_variable(backend: Backend) -> String {
    format!("SHEDLOCK_TEST_{}_RESTART", backend.name().to_uppercase())
}

/// Restarts `backend`'s server for a harness's [`FaultHarness::restart_backend`]: with the
/// command in [`restart_variable`]`(backend)` (`sh -c`), else, when the kit started the backend
/// in a container, by stopping and starting that container. Not applicable when neither is
/// there; an error when the restart fails or takes more than `limit`.
pub async fn restart_command(backend: Backend, limit: Duration) -> Result<Support<()>, SetupError> {
    if !command_is_set(&restart_variable(backend)) && container::started(backend).await {
        return container_step(
            "restarting the container",
            limit,
            container::restart(backend),
        )
        .await;
    }
    command_from_env(
        &restart_variable(backend),
        &[],
        &format!(
            "a shell command that restarts the {} server and returns once it answers",
            backend.name()
        ),
        limit,
    )
    .await
}

fn command_is_set(variable: &str) -> bool {
    std::env::var(variable).is_ok_and(|command| !command.trim().is_empty())
}

/// Runs one step on the container the kit started, within `limit`.
async fn container_step(
    what: &str,
    limit: Duration,
    step: impl std::future::Future<Output = Result<(), String>>,
) -> Result<Support<()>, SetupError> {
    match tokio::time::timeout(limit, step).await {
        Err(_) => Err(SetupError::new(format!(
            "{what} did not finish within {limit:?}"
        ))),
        Ok(Err(error)) => Err(SetupError::new(format!("{what} failed: {error}"))),
        Ok(Ok(())) => Ok(Support::Supported(())),
    }
}

/// The environment variable holding a shell command that pauses and resumes `backend`'s
/// server: `SHEDLOCK_TEST_<BACKEND>_PAUSE`. `<command> stop SECONDS` pauses it, to resume by
/// itself after SECONDS at the latest; `<command> cont` resumes it (`ci/pause-backend.sh`).
pub fn pause_variable(backend: Backend) -> String {
    format!("SHEDLOCK_TEST_{}_PAUSE", backend.name().to_uppercase())
}

/// Pauses `backend`'s server for a harness's [`FaultHarness::pause_backend`]: with
/// `<command> stop SECONDS` from [`pause_variable`]`(backend)`, else, when the kit started the
/// backend in a container, with `docker pause` (resumed by itself after `limit`). Not applicable
/// when neither is there.
pub async fn pause_command(backend: Backend, limit: Duration) -> Result<Support<()>, SetupError> {
    if !command_is_set(&pause_variable(backend)) && container::started(backend).await {
        return container_step(
            "pausing the container",
            Duration::from_secs(30),
            container::pause(backend, limit),
        )
        .await;
    }
    let seconds = limit.as_secs().max(1).to_string();
    command_from_env(
        &pause_variable(backend),
        &["stop", &seconds],
        &pause_purpose(backend),
        Duration::from_secs(30),
    )
    .await
}

/// Resumes what [`pause_command`] paused: `<command> cont`, or `docker unpause`.
pub async fn resume_command(backend: Backend) -> Result<(), SetupError> {
    let resumed = if !command_is_set(&pause_variable(backend)) && container::started(backend).await
    {
        container_step(
            "resuming the container",
            Duration::from_secs(30),
            container::resume(backend),
        )
        .await?
    } else {
        command_from_env(
            &pause_variable(backend),
            &["cont"],
            &pause_purpose(backend),
            Duration::from_secs(30),
        )
        .await?
    };
    match resumed {
        Support::Supported(()) => Ok(()),
        Support::NotApplicable(reason) => Err(SetupError::new(reason)),
    }
}

fn pause_purpose(backend: Backend) -> String {
    format!(
        "a shell command that pauses the {} server (`<command> stop SECONDS`, resuming by itself after SECONDS at the latest) and resumes it (`<command> cont`)",
        backend.name()
    )
}

/// Runs the shell command in `variable` with `arguments` appended, for a harness whose
/// [`FaultHarness::restart_backend`] fails a cluster over (`ci/failover.sh etcd-kill-leader`):
/// not applicable when the variable is unset (the reason says it should hold `what`), an error
/// when the command fails or takes more than `limit`.
pub async fn command_from_env(
    variable: &str,
    arguments: &[&str],
    what: &str,
    limit: Duration,
) -> Result<Support<()>, SetupError> {
    let command = match std::env::var(variable) {
        Ok(command) if !command.trim().is_empty() => command,
        _ => {
            return Ok(Support::not_applicable(format!(
                "{variable} is not set: set it to {what}"
            )));
        }
    };
    let run = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{command} \"$@\""))
        .arg("sh")
        .args(arguments)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(limit, run)
        .await
        .map_err(|_| SetupError::new(format!("{variable} did not finish within {limit:?}")))??;
    if !output.status.success() {
        return Err(SetupError::new(format!(
            "{variable} {} failed ({}): {}",
            arguments.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(Support::Supported(()))
}
