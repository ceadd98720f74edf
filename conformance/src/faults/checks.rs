//! The fault checks, each a plain public async function over a [`FaultHarness`], and the
//! catalogue the fault runner turns into one named test each.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use shedlock_core::{
    Acquisition, LockConfiguration, LockError, LockHandle, LockProvider, LockingTaskExecutor,
    SystemClock, TaskOutcome, TimeSource,
};
use tokio::time::Instant;

use super::FaultHarness;
use super::child::{ChildNode, Role, unix_ms};
use super::ledger::{Ledger, SoakRecord, TickExcuse, judge};
use super::stall_proxy::StallProxy;
use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::Support;
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{OPERATION_LIMIT, Timed, Trace, config, describe_acquisition, locked};

/// How long after the backend comes back every node must answer ordinary outcomes again.
pub const RECONNECT_LIMIT: Duration = Duration::from_secs(30);

/// How long a child node may take to start and connect.
const CHILD_SETUP_LIMIT: Duration = Duration::from_secs(60);

/// How long a restart command may take.
const RESTART_LIMIT: Duration = Duration::from_secs(120);

/// How long requests that a stall delayed get to reach the backend once it resumes.
const LATE_DELIVERY: Duration = Duration::from_millis(500);

/// The soak's length in seconds (default 30): `SHEDLOCK_SOAK_SECONDS=600` for a long soak.
pub const SOAK_SECONDS_VARIABLE: &str = "SHEDLOCK_SOAK_SECONDS";

/// The soak's node processes (default 3).
pub const SOAK_NODES_VARIABLE: &str = "SHEDLOCK_SOAK_NODES";

/// One fault check, by name; [`FaultCheck::ALL`] is the suite in the order it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum FaultCheck {
    /// [`check_holder_crash`]
    HolderCrash,
    /// [`check_stall_during_acquire`]
    StallDuringAcquire,
    /// [`check_stall_during_release`]
    StallDuringRelease,
    /// [`check_stall_during_extend`]
    StallDuringExtend,
    /// [`check_backend_restart`]
    BackendRestart,
    /// [`check_backend_paused`]
    BackendPaused,
    /// [`check_wrong_clocks`]
    WrongClocks,
    /// [`check_soak`]
    Soak,
}

impl FaultCheck {
    /// The whole suite, in the order it runs.
    pub const ALL: [FaultCheck; 8] = [
        FaultCheck::HolderCrash,
        FaultCheck::StallDuringAcquire,
        FaultCheck::StallDuringRelease,
        FaultCheck::StallDuringExtend,
        FaultCheck::BackendRestart,
        FaultCheck::BackendPaused,
        FaultCheck::WrongClocks,
        FaultCheck::Soak,
    ];

    /// The check's test name.
    pub fn name(self) -> &'static str {
        match self {
            FaultCheck::HolderCrash => "holder_crash",
            FaultCheck::StallDuringAcquire => "stall_during_acquire",
            FaultCheck::StallDuringRelease => "stall_during_release",
            FaultCheck::StallDuringExtend => "stall_during_extend",
            FaultCheck::BackendRestart => "backend_restart",
            FaultCheck::BackendPaused => "backend_paused",
            FaultCheck::WrongClocks => "wrong_clocks",
            FaultCheck::Soak => "soak",
        }
    }

    /// Runs the check with lock names from `names`.
    pub async fn run<H: FaultHarness>(
        self,
        harness: &H,
        names: &NameSpace,
    ) -> Result<Verdict, CheckFailure> {
        match self {
            FaultCheck::HolderCrash => check_holder_crash(harness, names).await,
            FaultCheck::StallDuringAcquire => check_stall_during_acquire(harness, names).await,
            FaultCheck::StallDuringRelease => check_stall_during_release(harness, names).await,
            FaultCheck::StallDuringExtend => check_stall_during_extend(harness, names).await,
            FaultCheck::BackendRestart => check_backend_restart(harness, names).await,
            FaultCheck::BackendPaused => check_backend_paused(harness, names).await,
            FaultCheck::WrongClocks => check_wrong_clocks(harness, names).await,
            FaultCheck::Soak => check_soak(harness, names, &SoakSettings::from_env()).await,
        }
    }
}

/// A fresh node on the backend, or the harness's failure.
async fn fresh_node<H: FaultHarness>(harness: &H, trace: &Trace) -> Result<H::Node, CheckFailure> {
    harness
        .node(Arc::new(SystemClock))
        .await
        .map_err(|error| trace.failure(Rule::HARNESS, format!("node() failed: {error}")))
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Holder crash: a child process takes a lock and is killed with SIGKILL while it holds it;
/// another node is refused until the lock's `lock_at_most_for` has passed, and takes it soon
/// after.
///
/// Applies to backends that nodes in several processes share.
pub async fn check_holder_crash<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("holder_crash");
    if !harness.shares_across_processes() {
        return Ok(Verdict::not_applicable(
            "the backend lives in the test's own process: no other process can hold its locks",
        ));
    }
    let observer = fresh_node(harness, &trace).await?;
    let timing = Timing::for_precision(observer.capabilities().time_precision);
    let at_most = timing.units(3).max(Duration::from_secs(2));
    let name = names.name("crash");
    let mut holder = ChildNode::spawn(&Role::Hold {
        name: name.clone(),
        at_most_ms: millis(at_most),
    })
    .map_err(|error| {
        trace.failure(
            Rule::HARNESS,
            format!("could not start the holder process: {error}"),
        )
    })?;
    let line = holder
        .next_line(CHILD_SETUP_LIMIT)
        .await
        .map_err(|error| trace.failure(Rule::HARNESS, format!("the holder process: {error}")))?;
    let (sent_ms, answered_ms) = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["acquired", sent, answered] => match (sent.parse::<u64>(), answered.parse::<u64>()) {
            (Ok(sent), Ok(answered)) => (sent, answered),
            _ => {
                return Err(
                    trace.failure(Rule::HARNESS, format!("the holder process said {line:?}"))
                );
            }
        },
        ["refused"] => {
            return Err(trace.failure(
                Rule::FREE_LOCK_IS_TAKEN,
                format!("the holder process was refused {name:?}, which nobody held"),
            ));
        }
        _ => {
            return Err(trace.failure(
                Rule::THREE_OUTCOMES,
                format!("the holder process could not take {name:?}, which nobody held: {line}"),
            ));
        }
    };
    holder.kill().await.map_err(|error| {
        trace.failure(
            Rule::HARNESS,
            format!("could not kill the holder process: {error}"),
        )
    })?;
    let killed_ms = unix_ms();
    trace.note(format!(
        "a child process took {name:?} for {at_most:?} and was killed with SIGKILL {} ms later",
        killed_ms.saturating_sub(answered_ms)
    ));
    let tolerance = millis(timing.tolerance);
    let earliest = (sent_ms + millis(at_most)).saturating_sub(tolerance);
    let latest = answered_ms + millis(at_most) + tolerance + millis(timing.unit);
    let poll = (timing.unit / 4).max(Duration::from_millis(50));
    let probe = config(&name, Duration::from_secs(60), Duration::ZERO);
    loop {
        let sent = unix_ms();
        let timed = trace.acquire("B", &observer, &probe).await?;
        let answered = unix_ms();
        match timed.value {
            Acquisition::Acquired(handle) => {
                if answered < earliest {
                    return Err(trace.failure(
                        Rule::AT_MOST,
                        format!(
                            "node B took {name:?} {} ms after the crashed holder took it, before its lock_at_most_for of {at_most:?} had passed",
                            answered.saturating_sub(sent_ms)
                        ),
                    ));
                }
                let _ = tokio::time::timeout(OPERATION_LIMIT, handle.unlock()).await;
                return Ok(Verdict::Passed {
                    notes: vec![format!(
                        "a holder killed with SIGKILL was taken over {} ms after its lock_at_most_for ({at_most:?}) ended",
                        answered.saturating_sub(answered_ms + millis(at_most))
                    )],
                });
            }
            Acquisition::NotAcquired(_) if sent > latest => {
                return Err(trace.failure(
                    Rule::AT_MOST,
                    format!(
                        "node B is still refused {name:?} {} ms after the crashed holder's lock_at_most_for of {at_most:?} ended",
                        sent.saturating_sub(answered_ms + millis(at_most))
                    ),
                ));
            }
            Acquisition::NotAcquired(_) => tokio::time::sleep(poll).await,
        }
    }
}

/// A node behind a [`StallProxy`], and a direct node, for the stall checks.
struct Stalled<N> {
    proxy: StallProxy,
    node: Arc<N>,
    direct: N,
    timing: Timing,
}

async fn stalled<H: FaultHarness>(
    harness: &H,
    trace: &Trace,
) -> Result<Result<Stalled<H::Node>, Verdict>, CheckFailure> {
    let address = match harness.backend_address() {
        Support::Supported(address) => address,
        Support::NotApplicable(reason) => return Ok(Err(Verdict::NotApplicable(reason))),
    };
    let proxy = StallProxy::start(&address).await.map_err(|error| {
        trace.failure(
            Rule::HARNESS,
            format!("could not start a proxy to {address}: {error}"),
        )
    })?;
    let node = harness
        .node_via(&proxy.local_addr().to_string())
        .await
        .map_err(|error| trace.failure(Rule::HARNESS, format!("node_via() failed: {error}")))?;
    let direct = fresh_node(harness, trace).await?;
    let timing = Timing::for_precision(direct.capabilities().time_precision);
    Ok(Ok(Stalled {
        proxy,
        node: Arc::new(node),
        direct,
        timing,
    }))
}

/// The failure for a stalled operation that answered although nothing waited in the proxy:
/// the node did not connect through it, so the harness, not the provider, is at fault.
fn bypassed(trace: &Trace, operation: &str) -> CheckFailure {
    trace.failure(
        Rule::HARNESS,
        format!(
            "{operation} answered through a stalled proxy in which no byte waited: the node from node_via() does not connect through the address it was given (a client that learns the server's own address from it, such as MongoDB's without directConnection=true, goes around the proxy)"
        ),
    )
}

/// Retries `operation` on errors until it answers, for at most [`RECONNECT_LIMIT`]; fails
/// under [`Rule::RECOVERY`] if it never does.
async fn until_answered<T, Fut>(
    trace: &Trace,
    what: &str,
    mut operation: impl FnMut() -> Fut,
) -> Result<(T, Duration), CheckFailure>
where
    Fut: Future<Output = Result<Result<T, LockError>, CheckFailure>>,
{
    let since = Instant::now();
    loop {
        match operation().await? {
            Ok(value) => return Ok((value, since.elapsed())),
            Err(error) if since.elapsed() > RECONNECT_LIMIT => {
                return Err(trace.failure(
                    Rule::RECOVERY,
                    format!("{what} still answers an error {RECONNECT_LIMIT:?} after the backend came back: {error}"),
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

/// Network stall during acquire: while nothing passes between a node and the backend,
/// `try_lock` answers an error (never acquired, never not acquired) in bounded time, the
/// executor does not run the task, and once the network resumes the node answers ordinary
/// outcomes again by itself.
///
/// Applies when the harness provides [`FaultHarness::backend_address`].
pub async fn check_stall_during_acquire<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("stall_during_acquire");
    let stalled = match stalled(harness, &trace).await? {
        Ok(stalled) => stalled,
        Err(verdict) => return Ok(verdict),
    };
    let Stalled {
        proxy,
        node,
        direct,
        timing,
    } = stalled;
    let warm = config(&names.name("warm"), timing.units(10), Duration::ZERO);
    trace
        .must_acquire_and_release(
            "S",
            &*node,
            &warm,
            Rule::FREE_LOCK_IS_TAKEN,
            "nobody held it",
        )
        .await?;
    proxy.pause();
    trace.note("the network between node S and the backend stalls");
    let lock = config(&names.name("lock"), timing.units(10), Duration::ZERO);
    let stalled_try = trace.try_lock("S", &*node, &lock).await?;
    let answered_in = stalled_try.answered - stalled_try.sent;
    match stalled_try.value {
        Err(_) => {}
        Ok(_) if proxy.delayed_bytes() == 0 => return Err(bypassed(&trace, "try_lock")),
        Ok(acquisition) => {
            return Err(trace.failure(
                Rule::FAIL_CLOSED,
                format!(
                    "try_lock through a stalled network answered {}: no byte reached the backend, so the outcome is unknown and must be an error",
                    describe_acquisition(&Ok(acquisition))
                ),
            ));
        }
    }
    let executor = LockingTaskExecutor::new(node.clone());
    let ran = Arc::new(AtomicBool::new(false));
    let task_ran = ran.clone();
    let task_lock = config(&names.name("task"), timing.units(10), Duration::ZERO);
    let sent = Instant::now();
    let executed = tokio::time::timeout(
        OPERATION_LIMIT,
        executor.execute(
            &task_lock,
            async move { task_ran.store(true, Ordering::SeqCst) },
        ),
    )
    .await;
    let outcome = match &executed {
        Err(_) => "no answer".to_owned(),
        Ok(Ok(TaskOutcome::Executed(()))) => "executed".to_owned(),
        Ok(Ok(TaskOutcome::Skipped(_))) => "skipped".to_owned(),
        Ok(Err(error)) => format!("error: {error}"),
    };
    trace.record(
        "S",
        "executor.execute".to_owned(),
        sent,
        Instant::now(),
        outcome,
    );
    if ran.load(Ordering::SeqCst) {
        return Err(trace.failure(
            Rule::FAIL_CLOSED,
            "the executor ran the task through a stalled network",
        ));
    }
    match executed {
        Err(_) => {
            return Err(trace.failure(
                Rule::BOUNDED_TIME,
                format!("the executor gave no answer within {OPERATION_LIMIT:?} through a stalled network"),
            ));
        }
        Ok(Ok(_)) => {
            return Err(trace.failure(
                Rule::FAIL_CLOSED,
                "the executor answered without an error through a stalled network",
            ));
        }
        Ok(Err(_)) => {}
    }
    proxy.resume();
    trace.note(format!(
        "the network resumes; {} bytes that waited are delivered late",
        proxy.delayed_bytes()
    ));
    let fresh = config(&names.name("fresh"), timing.units(10), Duration::ZERO);
    let (acquisition, recovered_in) = until_answered(&trace, "node S's try_lock", || async {
        Ok(trace.try_lock("S", &*node, &fresh).await?.value)
    })
    .await?;
    let Acquisition::Acquired(handle) = acquisition else {
        return Err(trace.failure(
            Rule::FREE_LOCK_IS_TAKEN,
            format!("node S was refused {:?}, which nobody held", fresh.name()),
        ));
    };
    trace.must_release("S", &*handle).await?;
    // The stalled acquire may have reached the backend late and taken the lock for nobody:
    // then it frees itself at its at-most, and nobody ran the task meanwhile.
    let late = trace.acquire("D", &direct, &lock).await?;
    let late_note = if late.value.is_acquired() {
        "the stalled acquire did not take the lock when it reached the backend"
    } else {
        "the stalled acquire took the lock for nobody when it reached the backend late: it frees itself at its lock_at_most_for, and no task ran"
    };
    Ok(Verdict::Passed {
        notes: vec![format!(
            "through a stalled network, try_lock answered an error after {answered_in:?} and the task did not run; node S answered normally {recovered_in:?} after the network resumed; {late_note}"
        )],
    })
}

/// Network stall during release: a release that cannot reach the backend answers an error in
/// bounded time; after the lock expires and another node takes it, the delayed release reaches
/// the backend and frees nothing, and the stale handle answers `false`.
///
/// Applies when the harness provides [`FaultHarness::backend_address`].
pub async fn check_stall_during_release<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    check_stalled_call(harness, names, HeldCall::Unlock).await
}

/// Network stall during extend: an extend that cannot reach the backend answers an error in
/// bounded time; delivered late, after another node took the lock, it neither extends nor
/// takes that node's lock, and the stale handle answers `false`.
///
/// Applies when the harness provides [`FaultHarness::backend_address`] and the provider
/// declares extend.
pub async fn check_stall_during_extend<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    check_stalled_call(harness, names, HeldCall::Extend).await
}

/// A call a holder makes on its own lock, which a stalled network delays.
#[derive(Clone, Copy, PartialEq, Eq)]
enum HeldCall {
    Unlock,
    Extend,
}

impl HeldCall {
    fn name(self) -> &'static str {
        match self {
            HeldCall::Unlock => "unlock",
            HeldCall::Extend => "extend",
        }
    }

    /// Node S's call on `handle`, recorded (an extend asks for a minute more).
    async fn try_on(
        self,
        trace: &Trace,
        handle: &dyn LockHandle,
    ) -> Result<Timed<Result<bool, LockError>>, CheckFailure> {
        match self {
            HeldCall::Unlock => trace.try_unlock("S", handle).await,
            HeldCall::Extend => trace.try_extend("S", handle, Duration::from_secs(60)).await,
        }
    }
}

/// [`check_stall_during_release`] and [`check_stall_during_extend`]: node S makes `call` on
/// its lock through a stalled network and must get an error; once the lock has expired node
/// D takes it, the network resumes and S's delayed call reaches the backend, where it must
/// change nothing (D's lock is neither freed nor moved) while S's handle answers `false`.
async fn check_stalled_call<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
    call: HeldCall,
) -> Result<Verdict, CheckFailure> {
    let operation = call.name();
    let trace = Trace::new(match call {
        HeldCall::Unlock => "stall_during_release",
        HeldCall::Extend => "stall_during_extend",
    });
    let stalled = match stalled(harness, &trace).await? {
        Ok(stalled) => stalled,
        Err(verdict) => return Ok(verdict),
    };
    let Stalled {
        proxy,
        node,
        direct,
        timing,
    } = stalled;
    if call == HeldCall::Extend && !direct.capabilities().extend {
        return Ok(Verdict::not_applicable(
            "the provider does not declare extend",
        ));
    }
    let other = fresh_node(harness, &trace).await?;
    let at_most = timing.units(3).max(Duration::from_secs(2));
    let lock = config(&names.name("lock"), at_most, Duration::ZERO);
    let taken = trace.must_acquire_free("S", &*node, &lock).await?;
    proxy.pause();
    trace.note("the network between node S and the backend stalls");
    let stalled_call = call.try_on(&trace, &*taken.value).await?;
    if stalled_call.value.is_ok() && proxy.delayed_bytes() == 0 {
        return Err(bypassed(&trace, operation));
    }
    if let Ok(answer) = stalled_call.value {
        return Err(trace.failure(
            Rule::FAIL_CLOSED,
            format!("{operation} through a stalled network answered Ok({answer}): no byte reached the backend, so the outcome is unknown and must be an error"),
        ));
    }
    let answered_in = stalled_call.answered - stalled_call.sent;
    trace
        .sleep_until(timing.surely_over_by(&taken, at_most))
        .await;
    // Against a late unlock, node D holds for a minute, so that only a wrongful free shows;
    // against a late extend, for the same at-most, so that only a wrongful move shows.
    let takeover = match call {
        HeldCall::Unlock => config(lock.name(), Duration::from_secs(60), Duration::ZERO),
        HeldCall::Extend => lock.clone(),
    };
    let successor = trace
        .must_acquire(
            "D",
            &direct,
            &takeover,
            Rule::AT_MOST,
            "node S's lock_at_most_for has passed",
        )
        .await?;
    proxy.resume();
    trace.note(format!(
        "the network resumes; {} bytes that waited are delivered late",
        proxy.delayed_bytes()
    ));
    tokio::time::sleep(LATE_DELIVERY).await;
    let (answer, recovered_in) =
        until_answered(&trace, &format!("node S's {operation}"), || async {
            Ok(call.try_on(&trace, &*taken.value).await?.value)
        })
        .await?;
    if answer {
        return Err(trace.failure(
            Rule::OWNERSHIP,
            format!(
                "node S's {operation} answered true after its lock expired and node D took {:?}",
                lock.name()
            ),
        ));
    }
    let changed_nothing = match call {
        HeldCall::Unlock => {
            trace
                .must_not_acquire(
                    "P",
                    &other,
                    &takeover,
                    Rule::OWNERSHIP,
                    "node D holds it: node S's release that reached the backend late must not have freed it",
                )
                .await?;
            trace.must_release("D", &*successor.value).await?;
            "freed nothing"
        }
        HeldCall::Extend => {
            // Node D's lock ends at its own at-most: S's late extend moved nothing.
            trace
                .sleep_until(timing.surely_over_by(&successor, at_most))
                .await;
            let after = trace
                .must_acquire(
                    "P",
                    &other,
                    &lock,
                    Rule::OWNERSHIP,
                    "node D's lock_at_most_for has passed: node S's extend that reached the backend late must not have moved it",
                )
                .await?;
            trace.must_release("P", &*after.value).await?;
            "moved nothing"
        }
    };
    Ok(Verdict::Passed {
        notes: vec![format!(
            "through a stalled network, {operation} answered an error after {answered_in:?}; delivered late, after another node took the lock, it {changed_nothing}; node S answered normally {recovered_in:?} after the network resumed"
        )],
    })
}

/// One request made while the backend restarted.
#[derive(Debug)]
struct Attempt {
    node: &'static str,
    lock: String,
    sent: Instant,
    answered: Instant,
    outcome: Option<Result<bool, String>>,
}

/// The handles a node that kept asking holds when it stops, and its label.
type Asker = (
    &'static str,
    tokio::task::JoinHandle<Vec<Box<dyn LockHandle>>>,
);

/// A node that keeps asking for one lock until told to stop, recording every answer. What it
/// acquires it keeps, unreleased, and hands back when it stops: see [`stop_asking`].
fn keep_asking<N: LockProvider + 'static>(
    node: Arc<N>,
    label: &'static str,
    lock: LockConfiguration,
    stop: Arc<AtomicBool>,
    attempts: Arc<Mutex<Vec<Attempt>>>,
) -> Asker {
    let asking = tokio::spawn(async move {
        let mut held = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let sent = Instant::now();
            let outcome = tokio::time::timeout(OPERATION_LIMIT, node.try_lock(&lock)).await;
            let answered = Instant::now();
            let outcome = match outcome {
                Err(_) => None,
                Ok(Ok(Acquisition::Acquired(handle))) => {
                    held.push(handle);
                    Some(Ok(true))
                }
                Ok(Ok(Acquisition::NotAcquired(_))) => Some(Ok(false)),
                Ok(Err(error)) => Some(Err(error.to_string())),
            };
            locked(&attempts).push(Attempt {
                node: label,
                lock: lock.name().to_owned(),
                sent,
                answered,
                outcome,
            });
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        held
    });
    (label, asking)
}

/// Stops the askers and gives back the handles they hold, with their labels. The caller
/// releases them only now, once every asker has stopped: an asker that released its own
/// handle as it stopped let another asker's try_lock, sent just before the stop, take the lock
/// right after that release, which looked like a second holder (etcd's `backend_restart` failed
/// so about once in 36 runs, each time 200 ms after the restart, as the askers and the kit's
/// polling fell in step).
async fn stop_asking(
    stop: &AtomicBool,
    askers: Vec<Asker>,
) -> Vec<(&'static str, Box<dyn LockHandle>)> {
    stop.store(true, Ordering::SeqCst);
    let mut held = Vec::new();
    for (label, asker) in askers {
        let handles = asker.await.unwrap_or_default();
        held.extend(handles.into_iter().map(|handle| (label, handle)));
    }
    held
}

/// Puts every attempt of the askers on the timeline.
fn record_attempts(trace: &Trace, attempts: &[Attempt]) {
    for attempt in attempts {
        let outcome = match &attempt.outcome {
            None => "no answer".to_owned(),
            Some(Ok(true)) => "acquired".to_owned(),
            Some(Ok(false)) => "not acquired".to_owned(),
            Some(Err(error)) => format!("error: {error}"),
        };
        trace.record(
            attempt.node,
            format!("try_lock {:?}", attempt.lock),
            attempt.sent,
            attempt.answered,
            outcome,
        );
    }
}

/// Releases what [`stop_asking`] gave back, on the timeline.
async fn release_held(trace: &Trace, held: Vec<(&'static str, Box<dyn LockHandle>)>) {
    for (label, handle) in held {
        let _ = tokio::time::timeout(OPERATION_LIMIT, trace.try_unlock(label, &*handle)).await;
    }
}

/// Backend restart: the server stops and starts again ([`FaultHarness::restart_backend`])
/// while one node holds a lock and three others keep asking for locks. Every request answers
/// in bounded time, an error while the server is away; no lock ever has two holders; each node
/// answers ordinary outcomes again by itself within [`RECONNECT_LIMIT`]; and the holder's
/// release afterwards answers `true`, unless the harness declares that the backend loses locks
/// on restart.
pub async fn check_backend_restart<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("backend_restart");
    let holder = fresh_node(harness, &trace).await?;
    let long = Duration::from_secs(120);
    let held = config(&names.name("held"), long, Duration::ZERO);
    let raced = config(&names.name("raced"), long, Duration::ZERO);
    let taken = trace.must_acquire_free("A", &holder, &held).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let mut askers = Vec::new();
    for (label, lock) in [("B", &held), ("C", &raced), ("D", &raced)] {
        let node = Arc::new(fresh_node(harness, &trace).await?);
        askers.push(keep_asking(
            node,
            label,
            lock.clone(),
            stop.clone(),
            attempts.clone(),
        ));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let began = Instant::now();
    let restart = harness.restart_backend().await;
    let restarted = Instant::now();
    let verdict = match restart {
        Ok(Support::Supported(())) => None,
        Ok(Support::NotApplicable(reason)) => Some(Ok(Verdict::NotApplicable(reason))),
        Err(error) => Some(Err(
            trace.failure(Rule::HARNESS, format!("restart_backend() failed: {error}"))
        )),
    };
    if let Some(verdict) = verdict {
        release_held(&trace, stop_asking(&stop, askers).await).await;
        let _ = tokio::time::timeout(OPERATION_LIMIT, taken.value.unlock()).await;
        return verdict;
    }
    trace.record(
        "kit",
        "restart the backend".to_owned(),
        began,
        restarted,
        "answering again".to_owned(),
    );
    // Each asker must answer ordinarily again after the restart.
    let deadline = restarted + RECONNECT_LIMIT;
    loop {
        let recovered = {
            let attempts = locked(&attempts);
            ["B", "C", "D"].iter().all(|label| {
                attempts.iter().any(|attempt| {
                    attempt.node == *label
                        && attempt.sent >= restarted
                        && matches!(attempt.outcome, Some(Ok(_)))
                })
            })
        };
        if recovered || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held_by_askers = stop_asking(&stop, askers).await;
    let attempts = std::mem::take(&mut *locked(&attempts));
    record_attempts(&trace, &attempts);
    // Released after every attempt is on the timeline, so it reads in order.
    release_held(&trace, held_by_askers).await;
    if let Some(hung) = attempts.iter().find(|attempt| attempt.outcome.is_none()) {
        return Err(trace.failure(
            Rule::BOUNDED_TIME,
            format!("node {}'s try_lock gave no answer within {OPERATION_LIMIT:?} while the backend restarted", hung.node),
        ));
    }
    let survive = harness.locks_survive_restart();
    let mut notes = Vec::new();
    let stolen = attempts
        .iter()
        .filter(|a| a.node == "B" && matches!(a.outcome, Some(Ok(true))))
        .count();
    let raced_holders = attempts
        .iter()
        .filter(|a| a.lock == raced.name() && matches!(a.outcome, Some(Ok(true))))
        .count();
    if stolen > 0 || raced_holders > 1 {
        let what = format!(
            "across the restart, node B took {:?} {stolen} time(s) while node A held it, and {:?} was taken {raced_holders} times though no acquisition of it was released before the askers stopped",
            held.name(),
            raced.name()
        );
        if survive {
            return Err(trace.failure(Rule::RECOVERY, what));
        }
        notes.push(format!(
            "{what}: the backend loses its locks on restart, as the harness declares"
        ));
    }
    for label in ["B", "C", "D"] {
        let first = attempts
            .iter()
            .filter(|a| a.node == label && a.sent >= restarted && matches!(a.outcome, Some(Ok(_))))
            .map(|a| a.answered)
            .min();
        if first.is_none() {
            return Err(trace.failure(
                Rule::RECOVERY,
                format!("node {label} answered no ordinary outcome within {RECONNECT_LIMIT:?} after the backend came back"),
            ));
        }
    }
    let errors = attempts
        .iter()
        .filter(|a| matches!(a.outcome, Some(Err(_))))
        .count();
    let slowest = attempts
        .iter()
        .map(|a| a.answered - a.sent)
        .max()
        .unwrap_or_default();
    let back_after = attempts
        .iter()
        .filter(|a| a.sent >= restarted && matches!(a.outcome, Some(Ok(_))))
        .map(|a| a.answered.saturating_duration_since(restarted))
        .max()
        .unwrap_or_default();
    let (released, _) = until_answered(&trace, "node A's unlock", || async {
        Ok(trace.try_unlock("A", &*taken.value).await?.value)
    })
    .await?;
    if survive && !released {
        return Err(trace.failure(
            Rule::RECOVERY,
            format!("node A's unlock of {:?} answered false after the restart: the lock it held was lost", held.name()),
        ));
    }
    notes.insert(0, format!(
        "restart_backend() (a restart, or a failover) took {:?}; {} of {} requests meanwhile answered an error (fail closed), the slowest in {slowest:?}; every node answered normally again within {back_after:?} after it returned",
        restarted - began,
        errors,
        attempts.len()
    ));
    Ok(Verdict::Passed { notes })
}

/// How long the soak runs, and on how many node processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoakSettings {
    /// How long the nodes run ([`SOAK_SECONDS_VARIABLE`], default 30 s).
    pub length: Duration,
    /// How many node processes run at once ([`SOAK_NODES_VARIABLE`], default 3).
    pub nodes: u32,
}

impl SoakSettings {
    /// From [`SOAK_SECONDS_VARIABLE`] and [`SOAK_NODES_VARIABLE`], each defaulting when unset
    /// or not a positive number.
    pub fn from_env() -> Self {
        let read = |variable: &str, default: u64| {
            std::env::var(variable)
                .ok()
                .and_then(|value| value.trim().parse::<u64>().ok())
                .filter(|value| *value > 0)
                .unwrap_or(default)
        };
        Self {
            length: Duration::from_secs(read(SOAK_SECONDS_VARIABLE, 30)),
            nodes: u32::try_from(read(SOAK_NODES_VARIABLE, 3)).unwrap_or(3),
        }
    }
}

/// Soak: `settings.nodes` node processes run a job at every tick for `settings.length`, taking
/// the lock first, while the kit kills a random node with SIGKILL (and starts a new one) at a
/// quarter and at three quarters of the run, and restarts the backend at half time (when the
/// harness can). Every run appends to a ledger file with its fencing token and wall times,
/// which must show at most one run per tick, no two runs overlapping, tokens strictly
/// increasing (with fencing; on a backend that loses its data on restart, on each side of the
/// restart), and no tick without a run unless a killed node may have held the lock or the
/// backend was restarting.
///
/// A tick is a second, or three of the provider's time units if that is longer; the job takes
/// a fifth of a tick, with `lock_at_least_for` half a tick and `lock_at_most_for` two ticks. A
/// node whose acquire answers only after `lock_at_least_for` has passed since the tick began
/// (a slow answer while the backend recovers) gives the lock back without running: the tick's
/// run may have come and gone by then, and `lock_at_least_for` is what keeps a tick's
/// latecomers out. Such answers are counted in the check's notes.
pub async fn check_soak<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
    settings: &SoakSettings,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("soak");
    if !harness.shares_across_processes() {
        return Ok(Verdict::not_applicable(
            "the backend lives in the test's own process: node processes cannot share it",
        ));
    }
    let observer = fresh_node(harness, &trace).await?;
    let capabilities = observer.capabilities();
    let timing = Timing::for_precision(capabilities.time_precision);
    let tick = timing.units(3).max(Duration::from_secs(1));
    let (tick_ms, at_most) = (millis(tick), tick * 2);
    let name = names.name("soak");
    let ledger = Ledger::new(std::env::temp_dir().join(format!("shedlock-soak-{name}.ledger")));
    let _ = std::fs::remove_file(ledger.path());
    let role = |node: u32| Role::Soak {
        name: name.clone(),
        node,
        ledger: ledger.path().display().to_string(),
        tick_ms,
        job_ms: tick_ms / 5,
        at_most_ms: millis(at_most),
        at_least_ms: tick_ms / 2,
    };
    let spawn = |node: u32| async move {
        let mut child = ChildNode::spawn(&role(node))
            .map_err(|error| format!("could not start node process {node}: {error}"))?;
        match child.next_line(CHILD_SETUP_LIMIT).await?.as_str() {
            "ready" => Ok(child),
            other => Err(format!("node process {node} said {other:?}")),
        }
    };
    let mut nodes = Vec::new();
    for id in 1..=settings.nodes {
        let child = spawn(id)
            .await
            .map_err(|error| trace.failure(Rule::HARNESS, error))?;
        nodes.push((id, child));
    }
    let started = unix_ms();
    let mut next_id = settings.nodes + 1;
    let mut killed = Vec::new();
    let mut excuses = Vec::new();
    let mut token_resets = Vec::new();
    let mut notes = Vec::new();
    let mut random = u64::from_le_bytes(
        uuid::Uuid::new_v4().as_bytes()[..8]
            .try_into()
            .unwrap_or_default(),
    );
    let length = millis(settings.length);
    for (at, event) in [
        (length / 4, "kill"),
        (length / 2, "restart"),
        (length * 3 / 4, "kill"),
    ] {
        tokio::time::sleep(Duration::from_millis(
            (started + at).saturating_sub(unix_ms()),
        ))
        .await;
        if event == "kill" {
            random = random
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            let index = usize::try_from(random >> 33).unwrap_or(0) % nodes.len();
            let (id, mut child) = nodes.swap_remove(index);
            let _ = child.kill().await;
            let at = unix_ms();
            trace.note(format!("node process {id} killed with SIGKILL"));
            killed.push((id, at));
            excuses.push(TickExcuse {
                from_ms: at.saturating_sub(tick_ms),
                to_ms: at + millis(at_most) + tick_ms,
                why: format!("node {id} was killed and may have held the lock"),
            });
            let child = spawn(next_id)
                .await
                .map_err(|error| trace.failure(Rule::HARNESS, error))?;
            nodes.push((next_id, child));
            next_id += 1;
        } else {
            let began = unix_ms();
            match tokio::time::timeout(RESTART_LIMIT, harness.restart_backend()).await {
                Err(_) => {
                    return Err(trace.failure(
                        Rule::HARNESS,
                        format!("restart_backend() took more than {RESTART_LIMIT:?}"),
                    ));
                }
                Ok(Err(error)) => {
                    return Err(
                        trace.failure(Rule::HARNESS, format!("restart_backend() failed: {error}"))
                    );
                }
                Ok(Ok(Support::NotApplicable(reason))) => {
                    notes.push(format!("no restart: {reason}"))
                }
                Ok(Ok(Support::Supported(()))) => {
                    let back = unix_ms();
                    trace.note(format!(
                        "restart_backend() returned after {} ms",
                        back - began
                    ));
                    excuses.push(TickExcuse {
                        from_ms: began.saturating_sub(tick_ms),
                        to_ms: back + millis(at_most) + millis(RECONNECT_LIMIT.min(tick * 5)),
                        why: "the backend was restarting".to_owned(),
                    });
                    notes.push(format!(
                        "restart_backend() (a restart, or a failover) ran at half time and took {} ms",
                        back - began
                    ));
                    if !harness.locks_survive_restart() {
                        token_resets.push((began, back));
                        notes.push("the backend loses its data on restart, as the harness declares: fencing tokens are compared only between runs on the same side of the restart".to_owned());
                    }
                }
            }
        }
    }
    tokio::time::sleep(Duration::from_millis(
        (started + length).saturating_sub(unix_ms()),
    ))
    .await;
    let ended = unix_ms();
    for (_, mut child) in nodes {
        let _ = child.kill().await;
    }
    let (runs, errors, late) = ledger.read().map_err(|error| {
        trace.failure(Rule::HARNESS, format!("could not read the ledger: {error}"))
    })?;
    let record = SoakRecord {
        first_tick: started / tick_ms + 1,
        last_tick: (ended / tick_ms).saturating_sub(1),
        tick_ms,
        killed: &killed,
        excuses: &excuses,
        fencing: capabilities.fencing,
        token_resets: &token_resets,
    };
    let verdict = judge(&runs, errors, &record);
    if let Some(problem) = verdict.problems.first() {
        let rule = if problem.contains("token") {
            Rule::FENCING
        } else if problem.contains("had no run") {
            Rule::RECOVERY
        } else {
            Rule::MUTUAL_EXCLUSION
        };
        return Err(trace.failure(
            rule,
            format!(
                "the ledger {} shows: {}",
                ledger.path().display(),
                verdict.problems.join("; ")
            ),
        ));
    }
    let _ = std::fs::remove_file(ledger.path());
    notes.insert(0, format!(
        "{} node processes, {} ticks of {tick:?}: {} runs, at most one per tick, {}; {} ticks lost while a killed node's lock ran out or the backend restarted; {} acquires failed and skipped their tick, {late} got the lock after lock_at_least_for had passed since the tick began and gave it back; {} nodes killed with SIGKILL",
        settings.nodes,
        verdict.ticks,
        verdict.runs,
        if capabilities.fencing { "fencing tokens strictly increasing" } else { "no fencing tokens (not declared)" },
        verdict.excused_losses,
        verdict.errors,
        killed.len()
    ));
    Ok(Verdict::Passed { notes })
}

/// The clocks of [`check_wrong_clocks`]'s nodes: what libfaketime's `FAKETIME` is given, how it reads,
/// and whether the clock runs at the right rate (set ahead or behind only).
const WRONG_CLOCKS: [(&str, &str, bool); 4] = [
    ("+1h", "an hour ahead", true),
    ("-1h", "an hour behind", true),
    ("+0 x2", "running twice as fast", false),
    ("+0 x0.5", "running at half speed", false),
];

/// How long a node with a wrong clock waits, on its own clock, before it takes a lock of its
/// own: time enough for a clock that runs at the wrong rate to have drifted.
const WRONG_CLOCK_WAIT: Duration = Duration::from_secs(2);

/// Wrong clocks: nodes in processes of their own under `faketime`, with clocks an hour ahead,
/// an hour behind, running twice as fast and at half speed. Under server time:
/// - none takes a lock another node holds before its `lock_at_most_for` has passed;
/// - a lock one of them takes ends when the backend's clock says, neither earlier (another
///   node is refused until then) nor later (another node takes it soon after);
/// - the ones set ahead or behind take a free lock as soon as a correct node would; the ones
///   running at the wrong rate must take it, and how late they did is noted.
///
/// Applies to server-time providers whose backend nodes in several processes share, unless
/// the backend's clock is the nodes' own ([`FaultHarness::backend_clock_is_the_nodes`]). Needs
/// libfaketime (Debian's package `faketime`; [`FAKETIME_LIBRARY_VARIABLE`] names another
/// path): without it the check fails and says so, it does not skip.
pub async fn check_wrong_clocks<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("wrong_clocks");
    if !harness.shares_across_processes() {
        return Ok(Verdict::not_applicable(
            "the backend lives in the test's own process: no node in another process, with \
             another clock, can reach its locks",
        ));
    }
    if harness.backend_clock_is_the_nodes() {
        return Ok(Verdict::not_applicable(
            "the backend reads the clock of the machine its nodes run on, inside each node's \
             process: no node can have a clock other than the backend's",
        ));
    }
    let observer = Arc::new(fresh_node(harness, &trace).await?);
    let capabilities = observer.capabilities();
    if capabilities.time_source != TimeSource::Server {
        return Ok(Verdict::not_applicable(
            "client time: the node's clock decides when a lock ends, so a node whose clock is \
             wrong takes locks early or keeps them late by that much, as the client-time rule \
             says; the clock_skew check covers what such a provider does with the clock it is \
             given",
        ));
    }
    let faketime = faketime_library().ok_or_else(|| {
        trace.failure(
            Rule::HARNESS,
            format!(
                "this check runs nodes under libfaketime, which is not installed: install it \
                 (Debian and Ubuntu: apt-get install faketime), or set {FAKETIME_LIBRARY_VARIABLE} \
                 to the path of libfaketimeMT.so.1"
            ),
        )
    })?;
    let faketime = faketime.to_string_lossy().into_owned();
    let timing = Timing::for_precision(capabilities.time_precision);
    let at_most = timing.units(3).max(Duration::from_secs(3));
    let tolerance = millis(timing.tolerance);
    let poll = (timing.unit / 4).max(Duration::from_millis(50));

    // Every node with a wrong clock starts, connects and says it is ready before any lock is
    // taken, so a slow start cannot hide an early take.
    let mut contenders = Vec::new();
    let mut holders = Vec::new();
    for (index, (spec, described, _)) in WRONG_CLOCKS.iter().enumerate() {
        // Preloaded directly, not through the `faketime` program, which keeps a semaphore
        // per process id that a killed node leaves behind, and a later node given the same id
        // then fails to start.
        let environment = [("LD_PRELOAD", faketime.as_str()), ("FAKETIME", *spec)];
        let spawn = |role: Role| {
            ChildNode::spawn_with(&role, &environment).map_err(|error| {
                trace.failure(
                    Rule::HARNESS,
                    format!("could not start a node {described} under faketime: {error}"),
                )
            })
        };
        let take = names.name(&format!("clock-take-{index}"));
        contenders.push((
            take.clone(),
            spawn(Role::Contend {
                name: take,
                at_most_ms: millis(at_most),
                poll_ms: millis(poll),
            })?,
        ));
        let hold = names.name(&format!("clock-hold-{index}"));
        holders.push((
            hold.clone(),
            spawn(Role::HoldLater {
                name: hold,
                at_most_ms: millis(at_most),
                after_ms: millis(WRONG_CLOCK_WAIT),
            })?,
        ));
    }
    for (index, (_, child)) in contenders.iter_mut().chain(holders.iter_mut()).enumerate() {
        let described = WRONG_CLOCKS[index % WRONG_CLOCKS.len()].1;
        match child.next_line(CHILD_SETUP_LIMIT).await {
            Ok(line) if line == "ready" => {}
            Ok(line) => {
                return Err(trace.failure(
                    Rule::HARNESS,
                    format!("a node {described} said {line:?} instead of \"ready\""),
                ));
            }
            Err(error) => {
                return Err(trace.failure(Rule::HARNESS, format!("a node {described}: {error}")));
            }
        }
    }

    // A correct node holds every contender's lock; then every node with a wrong clock goes.
    let mut taken = Vec::new();
    for (name, _) in &contenders {
        let lock = config(name, at_most, Duration::ZERO);
        let sent = unix_ms();
        let timed = trace.acquire("A", observer.as_ref(), &lock).await?;
        let answered = unix_ms();
        match timed.value {
            Acquisition::Acquired(handle) => taken.push((sent, answered, handle)),
            Acquisition::NotAcquired(_) => {
                return Err(trace.failure(
                    Rule::FREE_LOCK_IS_TAKEN,
                    format!("node A was refused {name:?}, which nobody held"),
                ));
            }
        }
    }
    for (_, child) in contenders.iter_mut().chain(holders.iter_mut()) {
        child.tell("go").await.map_err(|error| {
            trace.failure(
                Rule::HARNESS,
                format!("could not tell a node to go: {error}"),
            )
        })?;
    }

    let contended = contenders.into_iter().zip(&taken).enumerate().map(
        |(index, ((name, mut child), (sent, answered, _)))| async move {
            let (sent, answered) = (*sent, *answered);
            let (_, described, right_rate) = WRONG_CLOCKS[index];
            let ended = answered + millis(at_most);
            let limit = if right_rate {
                ended + tolerance + millis(timing.unit) + millis(poll)
            } else {
                ended + 3 * millis(at_most) + 5_000
            };
            loop {
                let wait = Duration::from_millis(limit.saturating_sub(unix_ms()) + 1_000);
                let line = child.next_line(wait).await;
                let arrived = unix_ms();
                match line.as_deref() {
                    Ok("acquired") if arrived + tolerance < sent + millis(at_most) => {
                        return Err((
                            Rule::SERVER_TIME,
                            format!(
                                "a node {described} took {name:?}, which node A held for \
                                 {at_most:?}, {} ms after A took it",
                                arrived.saturating_sub(sent)
                            ),
                        ));
                    }
                    Ok("acquired") if arrived > limit => {
                        return Err((
                            Rule::FREE_LOCK_IS_TAKEN,
                            format!(
                                "a node {described} took {name:?} only {} ms after node A's \
                                 lock_at_most_for ended",
                                arrived.saturating_sub(ended)
                            ),
                        ));
                    }
                    Ok("acquired") => {
                        return Ok(format!(
                            "{described}: took a lock {} ms after its lock_at_most_for ended",
                            arrived.saturating_sub(ended)
                        ));
                    }
                    Ok(_) if unix_ms() <= limit => {}
                    Ok(line) => {
                        return Err((
                            Rule::FREE_LOCK_IS_TAKEN,
                            format!(
                                "a node {described} had not taken {name:?} {} ms after node A's \
                                 lock_at_most_for ended; it last said {line:?}",
                                arrived.saturating_sub(ended)
                            ),
                        ));
                    }
                    Err(error) => {
                        return Err((
                            Rule::FREE_LOCK_IS_TAKEN,
                            format!(
                                "a node {described} had not taken {name:?} {} ms after node A's \
                                 lock_at_most_for ended: {error}",
                                arrived.saturating_sub(ended)
                            ),
                        ));
                    }
                }
            }
        },
    );
    let observer = &observer;
    let held = holders
        .into_iter()
        .enumerate()
        .map(|(index, (name, mut child))| async move {
            let (_, described, _) = WRONG_CLOCKS[index];
            let said = |line: Result<String, String>| {
                line.map_err(|error| (Rule::HARNESS, format!("a node {described}: {error}")))
            };
            let limit = CHILD_SETUP_LIMIT + WRONG_CLOCK_WAIT * 2;
            let line = said(child.next_line(limit).await)?;
            let acquiring = unix_ms();
            if line != "acquiring" {
                return Err((
                    Rule::HARNESS,
                    format!("a node {described} said {line:?} instead of \"acquiring\""),
                ));
            }
            let line = said(child.next_line(OPERATION_LIMIT).await)?;
            let acquired = unix_ms();
            if !line.starts_with("acquired") {
                return Err((
                    Rule::FREE_LOCK_IS_TAKEN,
                    format!(
                        "a node {described} could not take {name:?}, which nobody held: {line}"
                    ),
                ));
            }
            let earliest = (acquiring + millis(at_most)).saturating_sub(tolerance);
            let latest = acquired + millis(at_most) + tolerance + millis(timing.unit);
            let probe = config(&name, Duration::from_secs(60), Duration::ZERO);
            loop {
                let sent = unix_ms();
                let outcome =
                    tokio::time::timeout(OPERATION_LIMIT, observer.try_lock(&probe)).await;
                let answered = unix_ms();
                match outcome {
                    Ok(Ok(Acquisition::Acquired(handle))) => {
                        let _ = tokio::time::timeout(OPERATION_LIMIT, handle.unlock()).await;
                        if answered < earliest {
                            return Err((
                                Rule::SERVER_TIME,
                                format!(
                                    "a lock a node {described} took for {at_most:?} ended {} ms \
                                     early: node A took {name:?} {} ms after that node began \
                                     to acquire it",
                                    earliest.saturating_sub(answered),
                                    answered.saturating_sub(acquiring)
                                ),
                            ));
                        }
                        return Ok(format!(
                            "{described}: its lock ended {} ms after its lock_at_most_for",
                            answered.saturating_sub(acquired + millis(at_most))
                        ));
                    }
                    Ok(Ok(Acquisition::NotAcquired(_))) if sent > latest => {
                        return Err((
                            Rule::SERVER_TIME,
                            format!(
                                "a lock a node {described} took for {at_most:?} was still held \
                                 {} ms after its lock_at_most_for ended",
                                sent.saturating_sub(acquired + millis(at_most))
                            ),
                        ));
                    }
                    Ok(Ok(Acquisition::NotAcquired(_))) => tokio::time::sleep(poll).await,
                    Ok(Err(error)) => {
                        return Err((
                            Rule::THREE_OUTCOMES,
                            format!("node A's acquire of {name:?} failed: {error}"),
                        ));
                    }
                    Err(_) => {
                        return Err((
                            Rule::BOUNDED_TIME,
                            format!("node A's acquire of {name:?} took over {OPERATION_LIMIT:?}"),
                        ));
                    }
                }
            }
        });
    let (contended, held) = tokio::join!(
        futures_util::future::join_all(contended),
        futures_util::future::join_all(held)
    );
    let mut notes = Vec::new();
    for outcome in contended.into_iter().chain(held) {
        match outcome {
            Ok(note) => notes.push(note),
            Err((rule, observed)) => return Err(trace.failure(rule, observed)),
        }
    }
    drop(taken);
    Ok(Verdict::Passed { notes })
}

/// Names the libfaketime to preload instead of the one the check looks for.
pub const FAKETIME_LIBRARY_VARIABLE: &str = "SHEDLOCK_FAKETIME_LIBRARY";

/// The thread-safe libfaketime (the nodes run multi-threaded runtimes): where
/// [`FAKETIME_LIBRARY_VARIABLE`] says, or where Debian's and Ubuntu's package put it.
fn faketime_library() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os(FAKETIME_LIBRARY_VARIABLE) {
        return Some(path.into());
    }
    let directories = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("faketime"))
        .chain(["/usr/lib/faketime".into(), "/usr/local/lib/faketime".into()]);
    directories
        .map(|directory: std::path::PathBuf| directory.join("libfaketimeMT.so.1"))
        .find(|library| library.is_file())
}

/// The shortest pause of [`check_backend_paused`].
const PAUSE_AT_LEAST: Duration = Duration::from_secs(7);

/// Backend paused: the server is paused ([`FaultHarness::pause_backend`]: SIGSTOP, or a paused
/// container), so it neither answers nor closes anything, for twice the lock's
/// `lock_at_most_for` and at least 7 s. Meanwhile node A runs a task under the lock (with keep-alive
/// when the provider declares extend) and node B keeps asking for it. Every request answers in
/// bounded time, an error while the server is paused; B takes the lock only once A's task has
/// stopped (A's keep-alive signalled the loss, or, without extend, A's `lock_at_most_for` has
/// passed); and B takes it within [`RECONNECT_LIMIT`] once the server resumes.
pub async fn check_backend_paused<H: FaultHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("backend_paused");
    let holder = Arc::new(fresh_node(harness, &trace).await?);
    let capabilities = holder.capabilities();
    let timing = Timing::for_precision(capabilities.time_precision);
    let at_most = timing.units(3).max(Duration::from_secs(2));
    // Longer than the lock, and than the 5 s operation timeout most clients default to, so
    // requests sent meanwhile time out on the node rather than wait for the server.
    let pause = (at_most * 2 + timing.unit).max(PAUSE_AT_LEAST);
    let lock = config(&names.name("paused"), at_most, Duration::ZERO);

    // Node A's task runs until its lock is lost (keep-alive), or for lock_at_most_for.
    let (started_tx, started_rx) = tokio::sync::oneshot::channel::<Instant>();
    let stopped = Arc::new(Mutex::new(None::<Instant>));
    let task_stopped = stopped.clone();
    let keep_alive = capabilities.extend;
    let executor = LockingTaskExecutor::new(holder.clone());
    let task_lock = lock.clone();
    let running = tokio::spawn(async move {
        let task = async |lost: Option<shedlock_core::CancellationToken>| {
            let _ = started_tx.send(Instant::now());
            let end = Instant::now() + at_most;
            match lost {
                Some(lost) => lost.cancelled().await,
                None => tokio::time::sleep_until(end).await,
            }
            *locked(&task_stopped) = Some(Instant::now());
        };
        if keep_alive {
            executor
                .execute_with_keep_alive(&task_lock, async |lost| task(Some(lost)).await)
                .await
        } else {
            executor.execute(&task_lock, task(None)).await
        }
    });
    let a_started = match tokio::time::timeout(OPERATION_LIMIT, started_rx).await {
        Ok(Ok(at)) => at,
        _ => {
            let outcome = running.await;
            return Err(trace.failure(
                Rule::FREE_LOCK_IS_TAKEN,
                format!(
                    "node A's task did not start under {:?}, which nobody held: {}",
                    lock.name(),
                    match outcome {
                        Ok(Ok(outcome)) => format!("{outcome:?}"),
                        Ok(Err(error)) => format!("error: {error}"),
                        Err(error) => format!("the task failed: {error}"),
                    }
                ),
            ));
        }
    };
    trace.note(format!(
        "node A runs a task under {:?} (lock_at_most_for {at_most:?}){}",
        lock.name(),
        if keep_alive {
            ", with keep-alive"
        } else {
            ", without keep-alive (no extend declared)"
        }
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let asker = Arc::new(fresh_node(harness, &trace).await?);
    let askers = vec![keep_asking(
        asker,
        "B",
        config(lock.name(), at_most, Duration::ZERO),
        stop.clone(),
        attempts.clone(),
    )];
    tokio::time::sleep(timing.unit).await;

    let began = Instant::now();
    let paused = harness.pause_backend(pause + RESTART_LIMIT).await;
    let verdict = match paused {
        Ok(Support::Supported(())) => None,
        Ok(Support::NotApplicable(reason)) => Some(Ok(Verdict::NotApplicable(reason))),
        Err(error) => Some(Err(
            trace.failure(Rule::HARNESS, format!("pause_backend() failed: {error}"))
        )),
    };
    if let Some(verdict) = verdict {
        release_held(&trace, stop_asking(&stop, askers).await).await;
        // A's task waits for a loss that will not come: stop it (its lock runs out).
        running.abort();
        return verdict;
    }
    tokio::time::sleep_until(began + pause).await;
    let resumed = harness.resume_backend().await;
    let resumed_at = Instant::now();
    trace.record(
        "kit",
        "pause the backend".to_owned(),
        began,
        resumed_at,
        "resumed".to_owned(),
    );
    if let Err(error) = resumed {
        release_held(&trace, stop_asking(&stop, askers).await).await;
        return Err(trace.failure(Rule::HARNESS, format!("resume_backend() failed: {error}")));
    }

    // B must take the lock once the server is back.
    let deadline = resumed_at + RECONNECT_LIMIT;
    loop {
        let taken = attempts
            .lock()
            .unwrap()
            .iter()
            .any(|attempt: &Attempt| matches!(attempt.outcome, Some(Ok(true))));
        if taken || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let held_by_b = stop_asking(&stop, askers).await;
    let ran = tokio::time::timeout(OPERATION_LIMIT * 2, running).await;
    let attempts = std::mem::take(&mut *locked(&attempts));
    record_attempts(&trace, &attempts);
    release_held(&trace, held_by_b).await;
    let a_stopped = *locked(&stopped);
    if let Some(stopped) = a_stopped {
        trace.record(
            "A",
            "task".to_owned(),
            a_started,
            stopped,
            "stopped".to_owned(),
        );
    }
    if let Some(hung) = attempts.iter().find(|attempt| attempt.outcome.is_none()) {
        return Err(trace.failure(
            Rule::BOUNDED_TIME,
            format!(
                "node {}'s try_lock gave no answer within {OPERATION_LIMIT:?} while the backend was paused",
                hung.node
            ),
        ));
    }
    let Some(first) = attempts
        .iter()
        .filter(|attempt| matches!(attempt.outcome, Some(Ok(true))))
        .min_by_key(|attempt| attempt.answered)
    else {
        return Err(trace.failure(
            Rule::RECOVERY,
            format!(
                "node B had not taken {:?} {RECONNECT_LIMIT:?} after the backend resumed from a pause longer than its lock_at_most_for",
                lock.name()
            ),
        ));
    };
    // A's task must have stopped before B's acquire was answered.
    match a_stopped {
        Some(stopped) if stopped <= first.answered => {}
        _ => {
            return Err(trace.failure(
                Rule::MUTUAL_EXCLUSION,
                format!(
                    "node B took {:?} while node A's task still ran under it: A's task {}",
                    lock.name(),
                    match a_stopped {
                        Some(stopped) => format!(
                            "stopped {:?} after B's acquire was answered",
                            stopped - first.answered
                        ),
                        None => "had not stopped when B took the lock".to_owned(),
                    }
                ),
            ));
        }
    }
    let errors = attempts
        .iter()
        .filter(|attempt| matches!(attempt.outcome, Some(Err(_))))
        .count();
    let slowest = attempts
        .iter()
        .map(|attempt| attempt.answered - attempt.sent)
        .max()
        .unwrap_or_default();
    let margin = a_stopped.map_or(Duration::ZERO, |stopped| first.answered - stopped);
    Ok(Verdict::Passed {
        notes: vec![
            format!(
                "paused {pause:?} (lock_at_most_for {at_most:?}); {errors} of {} requests meanwhile answered an error, the slowest in {slowest:?}; node B took the lock {:?} after the backend resumed, {margin:?} after node A's task stopped ({})",
                attempts.len(),
                first.answered.saturating_duration_since(resumed_at),
                if keep_alive {
                    "its keep-alive signalled the loss"
                } else {
                    "its lock_at_most_for ended"
                }
            ),
            format!(
                "node A's run: {}",
                match ran {
                    Ok(Ok(Ok(outcome))) => format!("{outcome:?}"),
                    Ok(Ok(Err(error))) => format!("error: {error}"),
                    Ok(Err(error)) => format!("the task failed: {error}"),
                    Err(_) => format!("no answer within {:?}", OPERATION_LIMIT * 2),
                }
            ),
        ],
    })
}
