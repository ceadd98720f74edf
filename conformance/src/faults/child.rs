//! The node processes the crash and soak checks start: this same test binary, told by
//! [`CHILD_VARIABLE`] which part to play.

use std::io::{BufRead, Write};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use shedlock_core::{Acquisition, LockProvider, SystemClock};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

use super::FaultHarness;
use super::ledger::Ledger;
use crate::trace::{OPERATION_LIMIT, config};

/// Set (to a JSON [`Role`]) in a child's environment: the process is a node, not a test run.
pub(crate) const CHILD_VARIABLE: &str = "SHEDLOCK_FAULT_CHILD";

/// Carries [`run_id`] from a test process to its children.
const RUN_ID_VARIABLE: &str = "SHEDLOCK_FAULT_RUN_ID";

/// An id for this run of the fault suite, the same in the test process and in every node
/// process it starts. A harness that keeps each run apart with a random key prefix, env or
/// collection must take it from here, or its child nodes would lock in a namespace of their
/// own and never meet the test's nodes.
pub fn run_id() -> &'static str {
    static RUN_ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    RUN_ID.get_or_init(|| {
        std::env::var(RUN_ID_VARIABLE)
            .ok()
            .filter(|id| !id.is_empty())
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..12].to_owned())
    })
}

/// What a child process does.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum Role {
    /// Takes `name` for `at_most_ms`, prints `acquired <sent ms> <answered ms>` (or `refused`,
    /// or `error <message>`), then holds it until killed.
    Hold { name: String, at_most_ms: u64 },
    /// Prints `ready`, waits for `go` on stdin, waits `after_ms` more on its own clock, prints
    /// `acquiring` and takes `name` for `at_most_ms` as [`Role::Hold`] does (its times are its
    /// own clock's, which the parent does not trust). For nodes whose clock is wrong.
    HoldLater {
        name: String,
        at_most_ms: u64,
        after_ms: u64,
    },
    /// Prints `ready`, waits for `go` on stdin, then asks for `name` every `poll_ms` until it
    /// gets it, prints `acquired`, and holds it until killed. Errors are printed as
    /// `error <message>` and the asking goes on.
    Contend {
        name: String,
        at_most_ms: u64,
        poll_ms: u64,
    },
    /// At the start of every tick, tries `name` and, when it gets it within `at_least_ms` of
    /// the tick's start, runs a job of `job_ms`, recording it in the ledger (a later answer is
    /// recorded as late, and the lock given back).
    Soak {
        name: String,
        node: u32,
        ledger: String,
        tick_ms: u64,
        job_ms: u64,
        at_most_ms: u64,
        at_least_ms: u64,
    },
}

/// Unix milliseconds now, on the wall clock every process on the machine shares.
pub(crate) fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as u64)
}

/// A child node started by a check, killed when dropped.
pub(crate) struct ChildNode {
    child: Child,
    stdin: tokio::process::ChildStdin,
    lines: tokio::io::Lines<BufReader<ChildStdout>>,
}

impl ChildNode {
    /// Starts this test binary again as a node playing `role`.
    pub(crate) fn spawn(role: &Role) -> std::io::Result<Self> {
        Self::spawn_with(role, &[])
    }

    /// Starts this test binary again as a node playing `role`, with `environment` added to
    /// what it inherits (`LD_PRELOAD` and `FAKETIME` for a node whose clock is wrong).
    pub(crate) fn spawn_with(role: &Role, environment: &[(&str, &str)]) -> std::io::Result<Self> {
        let exe = std::env::current_exe()?;
        let role = serde_json::to_string(role).map_err(std::io::Error::other)?;
        let mut command = Command::new(exe);
        command.envs(environment.iter().copied());
        let mut child = command
            .env(CHILD_VARIABLE, role)
            .env(RUN_ID_VARIABLE, run_id())
            .envs(crate::backends::chosen_urls())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let stdin = child.stdin.take().expect("stdin is piped");
        Ok(Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    /// Sends the child one line on its stdin.
    pub(crate) async fn tell(&mut self, line: &str) -> std::io::Result<()> {
        use tokio::io::AsyncWriteExt;
        self.stdin.write_all(format!("{line}\n").as_bytes()).await?;
        self.stdin.flush().await
    }

    /// The child's next line of output, waiting at most `limit`.
    pub(crate) async fn next_line(&mut self, limit: Duration) -> Result<String, String> {
        match tokio::time::timeout(limit, self.lines.next_line()).await {
            Err(_) => Err(format!("the child printed nothing within {limit:?}")),
            Ok(Err(error)) => Err(format!("reading the child's output failed: {error}")),
            Ok(Ok(None)) => Err("the child exited without a word (see its stderr above)".into()),
            Ok(Ok(Some(line))) => Ok(line),
        }
    }

    /// SIGKILL, as a crash or the OOM killer would end it, and waits for it to be gone.
    pub(crate) async fn kill(&mut self) -> std::io::Result<()> {
        self.child.kill().await
    }
}

/// Whether this process is a child node ([`CHILD_VARIABLE`] is set).
pub(crate) fn is_child() -> bool {
    std::env::var_os(CHILD_VARIABLE).is_some()
}

/// Plays the role in [`CHILD_VARIABLE`] until killed, or until the parent exits.
pub(crate) fn play<H, F, Fut>(make_harness: F) -> !
where
    H: FaultHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, crate::SetupError>>,
{
    let role = std::env::var(CHILD_VARIABLE).unwrap_or_default();
    let role: Role = match serde_json::from_str(&role) {
        Ok(role) => role,
        Err(error) => fail(&format!("{CHILD_VARIABLE} is not a role: {error}")),
    };
    // The parent holds our stdin and speaks on it; when it exits, however it ends, so do we.
    let (told, mut heard) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) => {
                    let _ = told.send(line);
                }
                Err(_) => break,
            }
        }
        std::process::exit(0);
    });
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|error| fail(&format!("no tokio runtime: {error}")));
    runtime.block_on(async move {
        let harness = make_harness()
            .await
            .unwrap_or_else(|error| fail(&format!("the harness could not be set up: {error}")));
        let node = harness
            .node(Arc::new(SystemClock))
            .await
            .unwrap_or_else(|error| fail(&format!("node() failed: {error}")));
        match role {
            Role::Hold { name, at_most_ms } => hold(&node, &name, at_most_ms).await,
            Role::HoldLater {
                name,
                at_most_ms,
                after_ms,
            } => {
                say("ready");
                wait_for_go(&mut heard).await;
                tokio::time::sleep(Duration::from_millis(after_ms)).await;
                say("acquiring");
                hold(&node, &name, at_most_ms).await
            }
            Role::Contend {
                name,
                at_most_ms,
                poll_ms,
            } => {
                say("ready");
                wait_for_go(&mut heard).await;
                let lock = config(&name, Duration::from_millis(at_most_ms), Duration::ZERO);
                loop {
                    match tokio::time::timeout(OPERATION_LIMIT, node.try_lock(&lock)).await {
                        Ok(Ok(Acquisition::Acquired(handle))) => {
                            say("acquired");
                            let _held = handle;
                            std::future::pending::<()>().await;
                        }
                        Ok(Ok(Acquisition::NotAcquired(_))) => {}
                        Ok(Err(error)) => say(&format!("error {error}")),
                        Err(_) => say(&format!("error no answer within {OPERATION_LIMIT:?}")),
                    }
                    tokio::time::sleep(Duration::from_millis(poll_ms)).await;
                }
            }
            Role::Soak {
                name,
                node: id,
                ledger,
                tick_ms,
                job_ms,
                at_most_ms,
                at_least_ms,
            } => {
                let ledger = Ledger::new(ledger);
                say("ready");
                let lock = config(
                    &name,
                    Duration::from_millis(at_most_ms),
                    Duration::from_millis(at_least_ms),
                );
                loop {
                    let tick = unix_ms() / tick_ms + 1;
                    let start = tick * tick_ms;
                    tokio::time::sleep(Duration::from_millis(start.saturating_sub(unix_ms())))
                        .await;
                    let outcome = tokio::time::timeout(OPERATION_LIMIT, node.try_lock(&lock)).await;
                    match outcome {
                        Ok(Ok(Acquisition::Acquired(handle)))
                            if unix_ms() > start + at_least_ms =>
                        {
                            write(&ledger, &format!("late {tick} {id} {}", unix_ms()));
                            let _ = tokio::time::timeout(OPERATION_LIMIT, handle.unlock()).await;
                        }
                        Ok(Ok(Acquisition::Acquired(handle))) => {
                            let token = handle
                                .fencing_token()
                                .map_or("-".to_owned(), |token| token.to_string());
                            write(&ledger, &format!("start {tick} {id} {token} {}", unix_ms()));
                            tokio::time::sleep(Duration::from_millis(job_ms)).await;
                            write(&ledger, &format!("end {tick} {id} {}", unix_ms()));
                            let _ = tokio::time::timeout(OPERATION_LIMIT, handle.unlock()).await;
                        }
                        Ok(Ok(Acquisition::NotAcquired(_))) => {}
                        Ok(Err(_)) | Err(_) => {
                            write(&ledger, &format!("error {tick} {id} {}", unix_ms()));
                        }
                    }
                }
            }
        }
    })
}

/// Waits until the parent says `go`.
async fn wait_for_go(heard: &mut tokio::sync::mpsc::UnboundedReceiver<String>) {
    while let Some(line) = heard.recv().await {
        if line == "go" {
            return;
        }
    }
}

async fn hold(node: &impl LockProvider, name: &str, at_most_ms: u64) -> ! {
    let lock = config(name, Duration::from_millis(at_most_ms), Duration::ZERO);
    let sent = unix_ms();
    let outcome = node.try_lock(&lock).await;
    let answered = unix_ms();
    let line = match &outcome {
        Ok(Acquisition::Acquired(_)) => format!("acquired {sent} {answered}"),
        Ok(Acquisition::NotAcquired(_)) => "refused".to_owned(),
        Err(error) => format!("error {error}"),
    };
    say(&line);
    // Hold the handle until the parent kills us.
    let _held = outcome;
    std::future::pending::<()>().await;
    unreachable!("pending never completes")
}

/// One line to the parent.
fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    let _ = writeln!(stdout, "{line}");
    let _ = stdout.flush();
}

fn write(ledger: &Ledger, line: &str) {
    if let Err(error) = ledger.append(line) {
        fail(&format!(
            "could not append to the ledger {}: {error}",
            ledger.path().display()
        ));
    }
}

fn fail(message: &str) -> ! {
    eprintln!("shedlock-conformance fault child: {message}");
    std::process::exit(2)
}
