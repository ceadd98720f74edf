//! Check 11: random sequences of operations across nodes, compared with a reference model that
//! knows only what the kit's own clock can prove.

use std::collections::HashMap;
use std::env::VarError;
use std::fmt;
use std::num::NonZeroU32;
use std::str::FromStr;
use std::time::Duration;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use shedlock_core::{Acquisition, Capabilities, LockHandle, LockProvider};
use tokio::time::Instant;

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::timing::Timing;
use crate::trace::{Timed, Trace, config};

use super::{node, timing_of};

/// Nodes and lock names in each sequence.
const NODES: usize = 3;
const LOCKS: usize = 2;
/// The longest sequence tried.
const MAX_OPS: usize = 12;
/// How many failing re-runs shrinking may spend to find a smaller failing sequence.
const MAX_SHRINK_RUNS: u32 = 48;
/// Sequences tried by default where the kit's unit is at most [`FINE_UNIT_MAX`], and where it
/// is longer. A sequence spends about a unit in advances, plus its requests (tens of ms each on
/// etcd), so either keeps the check around 20 s on this project's backends; the number of
/// advances varies, so a run may take half as long again.
const FINE_CASES: u32 = 250;
const COARSE_CASES: u32 = 12;
const FINE_UNIT_MAX: Duration = Duration::from_millis(200);
/// Set this to a number to replay the same random sequences.
pub const SEED_VARIABLE: &str = "SHEDLOCK_CONFORMANCE_SEED";
/// Set this to the number of random sequences to try, for a longer search or a quicker run.
pub const CASES_VARIABLE: &str = "SHEDLOCK_CONFORMANCE_MODEL_CASES";

/// Which of a lock's handles a step uses. Steps name a handle by its place among the lock's
/// handles rather than by node: a random node rarely holds the lock, so most steps would do
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    /// The unreleased handle of the lock's latest acquisition that still has one.
    Newest,
    /// The unreleased handle before that one: its acquisition expired and another took over.
    SecondNewest,
    /// The handle last released, whatever its answer: it must change nothing any more, even
    /// while `lock_at_least_for` still holds the lock in its acquisition's name.
    Released,
}

impl fmt::Display for Which {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Which::Newest => "its newest unreleased handle",
            Which::SecondNewest => "its second-newest unreleased handle",
            Which::Released => "its last released handle",
        })
    }
}

/// One step of a random sequence. Durations are in model steps (a quarter of the kit's unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelOp {
    Acquire {
        node: usize,
        lock: usize,
        at_most: u32,
        at_least: u32,
    },
    Release {
        lock: usize,
        which: Which,
    },
    /// `at_most` is drawn independently of the acquisition's, so extends both shorten and
    /// lengthen the hold.
    Extend {
        lock: usize,
        which: Which,
        at_most: u32,
    },
    /// The lock's newest unreleased handle is dropped without release, as by a crashed process.
    Crash {
        lock: usize,
    },
    Advance {
        steps: u32,
    },
}

fn node_label(node: usize) -> String {
    char::from(b'A' + node as u8).to_string()
}

impl fmt::Display for ModelOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ModelOp::Acquire {
                node,
                lock,
                at_most,
                at_least,
            } => write!(
                f,
                "{} acquire L{lock} (at most {at_most}, at least {at_least} steps)",
                node_label(node)
            ),
            ModelOp::Release {
                lock,
                which: Which::Released,
            } => write!(f, "release L{lock} again with {}", Which::Released),
            ModelOp::Release { lock, which } => write!(f, "release L{lock} with {which}"),
            ModelOp::Extend {
                lock,
                which,
                at_most,
            } => write!(f, "extend L{lock} to now + {at_most} steps with {which}"),
            ModelOp::Crash { lock } => write!(
                f,
                "crash: drop L{lock}'s newest unreleased handle without release"
            ),
            ModelOp::Advance { steps } => write!(f, "advance {steps} steps"),
        }
    }
}

fn op_strategy(extend: bool) -> BoxedStrategy<ModelOp> {
    let acquire =
        (0..NODES, 0..LOCKS, 2u32..=8, 0u32..=8).prop_map(|(node, lock, at_most, at_least)| {
            ModelOp::Acquire {
                node,
                lock,
                at_most,
                at_least: at_least.min(at_most),
            }
        });
    let which = || {
        prop_oneof![
            5 => Just(Which::Newest),
            1 => Just(Which::SecondNewest),
            2 => Just(Which::Released),
        ]
    };
    let release = (0..LOCKS, which()).prop_map(|(lock, which)| ModelOp::Release { lock, which });
    let extend_op =
        (0..LOCKS, which(), 2u32..=8).prop_map(|(lock, which, at_most)| ModelOp::Extend {
            lock,
            which,
            at_most,
        });
    let crash = (0..LOCKS).prop_map(|lock| ModelOp::Crash { lock });
    let advance = (1u32..=4).prop_map(|steps| ModelOp::Advance { steps });
    if extend {
        prop_oneof![4 => acquire, 4 => release, 3 => extend_op, 1 => crash, 3 => advance].boxed()
    } else {
        prop_oneof![4 => acquire, 4 => release, 1 => crash, 3 => advance].boxed()
    }
}

/// The request that last set a holding's expiry bounds: it names the rule a lock taken before
/// them, or still held after them, breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bound {
    Acquire,
    Extend,
    Release,
}

/// The model's knowledge of the last successful acquisition of one lock.
#[derive(Debug, Clone, Copy)]
struct Holding {
    id: u64,
    acquired_sent: Instant,
    acquired_answered: Instant,
    /// The backend's expiry lies in `[expiry_earliest, expiry_latest]` (before tolerance).
    expiry_earliest: Instant,
    expiry_latest: Instant,
    /// The `lock_at_least_for` this acquisition asked for.
    at_least: Duration,
    /// Which request set the expiry bounds, and when it was sent.
    bound: Bound,
    bound_sent: Instant,
    /// When this acquisition's handle was released (whatever the answer): it is spent since.
    released: Option<Instant>,
}

impl Holding {
    /// The rule broken by a lock taken before `expiry_earliest`.
    fn taken_early_rule(&self) -> Rule {
        match self.bound {
            Bound::Acquire => Rule::MUTUAL_EXCLUSION,
            Bound::Extend => Rule::EXTEND,
            Bound::Release => Rule::AT_LEAST,
        }
    }

    /// The rule broken by a lock still held after `expiry_latest`.
    fn held_late_rule(&self) -> Rule {
        match self.bound {
            Bound::Acquire => Rule::AT_MOST,
            Bound::Extend => Rule::EXTEND,
            Bound::Release => Rule::AT_LEAST,
        }
    }

    /// The request whose hold the bounds describe, for a failure.
    fn describe_bound(&self, trace: &Trace) -> String {
        let acquired = trace.at(self.acquired_sent);
        let sent = trace.at(self.bound_sent);
        match self.bound {
            Bound::Acquire => format!("the acquisition sent at {acquired}"),
            Bound::Extend => {
                format!("the extend sent at {sent} (of the acquisition sent at {acquired})")
            }
            Bound::Release => format!(
                "the release sent at {sent}, keeping lock_at_least_for = {:?} of the acquisition sent at {acquired},",
                self.at_least
            ),
        }
    }
}

#[derive(Debug, Default)]
struct LockModel {
    current: Option<Holding>,
    last_token: Option<u64>,
}

impl LockModel {
    /// Whether the lock may be free at some moment no later than `at`, freeing itself at most
    /// `early` before its bound.
    fn possibly_free(&self, at: Instant, early: Duration) -> bool {
        self.current
            .is_none_or(|holding| at + early >= holding.expiry_earliest)
    }

    /// Whether the lock may be held at some moment no earlier than `at`.
    fn possibly_held(&self, at: Instant, tolerance: Duration) -> bool {
        self.current
            .is_some_and(|holding| at <= holding.expiry_latest + tolerance)
    }
}

/// An operation only a holder makes, answered `true` or `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HolderOp {
    Release,
    Extend(Duration),
}

impl HolderOp {
    /// The rule a wrong answer, from the current holder, breaks.
    fn rule(self) -> Rule {
        match self {
            HolderOp::Release => Rule::RELEASE_RESULT,
            HolderOp::Extend(_) => Rule::EXTEND,
        }
    }
}

impl fmt::Display for HolderOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HolderOp::Release => "release",
            HolderOp::Extend(_) => "extend",
        })
    }
}

/// A node's handle, with the model's id of the acquisition it came from.
type Handle = (u64, Box<dyn LockHandle>);

struct Case<'a, N> {
    trace: Trace,
    nodes: &'a [N],
    names: NameSpace,
    timing: Timing,
    capabilities: &'a Capabilities,
    step: Duration,
    locks: [LockModel; LOCKS],
    /// Each node's unreleased handle of each lock (a node keeps at most one per lock).
    handles: HashMap<(usize, usize), Handle>,
    /// The last released handle of each lock and the node that held it, kept for the steps
    /// that reuse it.
    released: [Option<(usize, Handle)>; LOCKS],
    next_id: u64,
}

impl<N: LockProvider> Case<'_, N> {
    /// `count` model steps as a duration: every duration of a sequence is one of these.
    fn steps(&self, count: u32) -> Duration {
        self.step * count
    }

    fn lock_name(&self, lock: usize) -> String {
        self.names.name(&format!("L{lock}"))
    }

    /// The node that holds the handle of `lock` that `which` names, if there is one.
    fn holder(&self, lock: usize, which: Which) -> Option<usize> {
        let rank = match which {
            Which::Released => return self.released[lock].as_ref().map(|(node, _)| *node),
            Which::Newest => 0,
            Which::SecondNewest => 1,
        };
        let mut holders: Vec<(u64, usize)> = self
            .handles
            .iter()
            .filter(|((_, held), _)| *held == lock)
            .map(|((node, _), (id, _))| (*id, *node))
            .collect();
        holders.sort_unstable_by(|a, b| b.cmp(a));
        holders.get(rank).map(|(_, node)| *node)
    }

    /// Whether `op` names a handle that does not exist, so it does nothing.
    fn idle(&self, op: ModelOp) -> bool {
        match op {
            ModelOp::Release { lock, which } | ModelOp::Extend { lock, which, .. } => {
                self.holder(lock, which).is_none()
            }
            ModelOp::Crash { lock } => self.holder(lock, Which::Newest).is_none(),
            ModelOp::Acquire { .. } | ModelOp::Advance { .. } => false,
        }
    }

    fn broken(&self, rule: Rule, index: usize, op: ModelOp, what: String) -> CheckFailure {
        self.trace
            .failure(rule, format!("operation #{} ({op}): {what}", index + 1))
    }

    /// Sends `operation` with `node`'s handle of `lock` (and the id of the acquisition it came
    /// from), and judges the answer against the model: `true` after another acquisition took the lock breaks
    /// ownership; `true` from a released handle, or after the lock surely expired, or `false`
    /// while the lock was surely held by this unreleased acquisition, breaks the operation's
    /// own rule. Gives the answer, with the acquisition's holding when it is still the
    /// current, unreleased one, for the caller to update.
    async fn holder_request(
        &self,
        index: usize,
        op: ModelOp,
        (node, lock): (usize, usize),
        (id, handle): &Handle,
        operation: HolderOp,
    ) -> Result<(Timed<bool>, Option<Holding>), CheckFailure> {
        let (id, handle) = (*id, &**handle);
        let label = node_label(node);
        let timed = match operation {
            HolderOp::Release => self.trace.unlock(&label, handle).await?,
            HolderOp::Extend(at_most) => self.trace.extend(&label, handle, at_most).await?,
        };
        let rule = operation.rule();
        let tolerance = self.timing.tolerance;
        let holding = self.locks[lock].current.filter(|holding| holding.id == id);
        match (holding, timed.value) {
            (None, true) => Err(self.broken(
                Rule::OWNERSHIP,
                index,
                op,
                format!(
                    "{operation} answered true, but another acquisition has taken the lock since"
                ),
            )),
            (Some(Holding { released: Some(released), .. }), true) => Err(self.broken(
                rule,
                index,
                op,
                format!(
                    "{operation} answered true at {}, but this handle was released at {} and must change nothing since",
                    self.trace.at(timed.answered),
                    self.trace.at(released)
                ),
            )),
            (Some(holding), true) if timed.sent > holding.expiry_latest + tolerance => {
                // After an extend, the likelier break is the extend's own duration not taking
                // effect (a shortening ignored) than the answer.
                let rule = if matches!(holding.bound, Bound::Extend) {
                    Rule::EXTEND
                } else {
                    rule
                };
                Err(self.broken(
                    rule,
                    index,
                    op,
                    format!(
                        "{operation} answered true at {}, but the hold of {} had ended by {} at the latest, and an expired acquisition answers false (unless the lock never expired: then its expiry is broken too)",
                        self.trace.at(timed.answered),
                        holding.describe_bound(&self.trace),
                        self.trace.at(holding.expiry_latest)
                    ),
                ))
            }
            (Some(holding), false)
                if holding.released.is_none()
                    && timed.answered + self.timing.early < holding.expiry_earliest =>
            {
                Err(self.broken(
                    rule,
                    index,
                    op,
                    format!(
                        "{operation} answered false at {}, but the hold of {} keeps the lock for this acquisition until {} at the earliest",
                        self.trace.at(timed.answered),
                        holding.describe_bound(&self.trace),
                        self.trace.at(holding.expiry_earliest)
                    ),
                ))
            }
            (holding, _) => Ok((
                timed,
                holding.filter(|holding| holding.released.is_none()),
            )),
        }
    }

    async fn apply(&mut self, index: usize, op: ModelOp) -> Result<(), CheckFailure> {
        let tolerance = self.timing.tolerance;
        match op {
            ModelOp::Advance { steps } => {
                self.trace.note(format!("advance {steps} steps"));
                tokio::time::sleep(self.steps(steps)).await;
            }
            ModelOp::Crash { lock } => {
                if let Some(((node, _), _)) = self
                    .holder(lock, Which::Newest)
                    .and_then(|node| self.handles.remove_entry(&(node, lock)))
                {
                    self.trace.note(format!(
                        "node {} crashes: its handle of L{lock} is dropped without unlock",
                        node_label(node)
                    ));
                }
            }
            ModelOp::Acquire {
                node,
                lock,
                at_most,
                at_least,
            } => {
                let at_most = self.steps(at_most);
                let at_least = self.steps(at_least);
                let lock_config = config(&self.lock_name(lock), at_most, at_least);
                let label = node_label(node);
                let timed = self
                    .trace
                    .acquire(&label, &self.nodes[node], &lock_config)
                    .await?;
                let model = &self.locks[lock];
                match timed.value {
                    Acquisition::Acquired(handle) => {
                        if !model.possibly_free(timed.answered, self.timing.early) {
                            let holding = model.current.expect("a lock that is surely held");
                            return Err(self.broken(
                                holding.taken_early_rule(),
                                index,
                                op,
                                format!(
                                    "acquired at {}, but {} holds the lock until {} at the earliest",
                                    self.trace.at(timed.answered),
                                    holding.describe_bound(&self.trace),
                                    self.trace.at(holding.expiry_earliest)
                                ),
                            ));
                        }
                        if self.capabilities.fencing {
                            match (handle.fencing_token(), model.last_token) {
                                (None, _) => {
                                    return Err(self.broken(
                                        Rule::FENCING,
                                        index,
                                        op,
                                        "the provider declares fencing but the handle has no token"
                                            .to_owned(),
                                    ));
                                }
                                (Some(token), Some(last)) if token <= last => {
                                    return Err(self.broken(
                                        Rule::FENCING,
                                        index,
                                        op,
                                        format!(
                                            "token {token} does not exceed the previous {last}"
                                        ),
                                    ));
                                }
                                (Some(token), _) => self.locks[lock].last_token = Some(token),
                            }
                        }
                        self.next_id += 1;
                        self.locks[lock].current = Some(Holding {
                            id: self.next_id,
                            acquired_sent: timed.sent,
                            acquired_answered: timed.answered,
                            expiry_earliest: timed.sent + at_most,
                            expiry_latest: timed.answered + at_most,
                            at_least,
                            bound: Bound::Acquire,
                            bound_sent: timed.sent,
                            released: None,
                        });
                        self.handles.insert((node, lock), (self.next_id, handle));
                    }
                    Acquisition::NotAcquired(_) => {
                        if !model.possibly_held(timed.sent, tolerance) {
                            let (rule, what) = match model.current {
                                None => (
                                    Rule::FREE_LOCK_IS_TAKEN,
                                    "nobody ever held this lock".to_owned(),
                                ),
                                Some(holding) => (
                                    holding.held_late_rule(),
                                    format!(
                                        "the hold of {} ended by {} at the latest",
                                        holding.describe_bound(&self.trace),
                                        self.trace.at(holding.expiry_latest)
                                    ),
                                ),
                            };
                            return Err(self.broken(
                                rule,
                                index,
                                op,
                                format!(
                                    "refused at {} (sent {}), but {what}",
                                    self.trace.at(timed.answered),
                                    self.trace.at(timed.sent)
                                ),
                            ));
                        }
                    }
                }
            }
            // A released handle's answer may only be `false`, which changes nothing: the
            // model's bounds stay as they were, and the next steps hold the lock to them.
            ModelOp::Release {
                lock,
                which: Which::Released,
            } => {
                if let Some((node, handle)) = &self.released[lock] {
                    self.holder_request(index, op, (*node, lock), handle, HolderOp::Release)
                        .await?;
                }
            }
            ModelOp::Extend {
                lock,
                which: Which::Released,
                at_most,
            } => {
                if let Some((node, handle)) = &self.released[lock] {
                    let operation = HolderOp::Extend(self.steps(at_most));
                    self.holder_request(index, op, (*node, lock), handle, operation)
                        .await?;
                }
            }
            ModelOp::Release { lock, which } => {
                let Some(((node, _), handle)) = self
                    .holder(lock, which)
                    .and_then(|node| self.handles.remove_entry(&(node, lock)))
                else {
                    return Ok(());
                };
                let answer = self
                    .holder_request(index, op, (node, lock), &handle, HolderOp::Release)
                    .await;
                self.released[lock] = Some((node, handle));
                let (timed, Some(mut holding)) = answer? else {
                    return Ok(());
                };
                if timed.value {
                    holding.expiry_earliest =
                        timed.sent.max(holding.acquired_sent + holding.at_least);
                    holding.expiry_latest = timed
                        .answered
                        .max(holding.acquired_answered + holding.at_least);
                    holding.bound = Bound::Release;
                    holding.bound_sent = timed.sent;
                }
                holding.released = Some(timed.sent);
                self.locks[lock].current = Some(holding);
            }
            ModelOp::Extend {
                lock,
                which,
                at_most,
            } => {
                let Some((&(node, _), handle)) = self
                    .holder(lock, which)
                    .and_then(|node| self.handles.get_key_value(&(node, lock)))
                else {
                    return Ok(());
                };
                let at_most = self.steps(at_most);
                let (timed, holding) = self
                    .holder_request(index, op, (node, lock), handle, HolderOp::Extend(at_most))
                    .await?;
                if let (true, Some(mut holding)) = (timed.value, holding) {
                    holding.expiry_earliest = timed.sent + at_most;
                    holding.expiry_latest = timed.answered + at_most;
                    holding.bound = Bound::Extend;
                    holding.bound_sent = timed.sent;
                    self.locks[lock].current = Some(holding);
                }
            }
        }
        Ok(())
    }
}

/// Runs one sequence on fresh lock names and checks every answer against the model. A failure
/// comes with which steps, up to the failing one, were idle (see [`Case::idle`]).
async fn run_case<N: LockProvider>(
    nodes: &[N],
    names: NameSpace,
    timing: Timing,
    capabilities: &Capabilities,
    ops: &[ModelOp],
) -> Result<(), (CheckFailure, Vec<bool>)> {
    let mut case = Case {
        trace: Trace::new("model"),
        nodes,
        names,
        timing,
        capabilities,
        step: timing.unit / 4,
        locks: Default::default(),
        handles: HashMap::new(),
        released: Default::default(),
        next_id: 0,
    };
    let mut idle = Vec::with_capacity(ops.len());
    for (index, op) in ops.iter().enumerate() {
        idle.push(case.idle(*op));
        if let Err(failure) = case.apply(index, *op).await {
            return Err((failure, idle));
        }
    }
    Ok(())
}

/// How many sequences to try when nobody said: fewer where the kit's unit is long, so the
/// check takes about as long on every backend.
fn default_cases(unit: Duration) -> u32 {
    if unit > FINE_UNIT_MAX {
        COARSE_CASES
    } else {
        FINE_CASES
    }
}

/// `ops`, one a line, saying which did nothing: shrinking may stop before it removes them all.
fn describe_sequence(ops: &[ModelOp], idle: &[bool]) -> String {
    ops.iter()
        .enumerate()
        .map(|(index, op)| {
            let note = match idle.get(index) {
                Some(false) => "",
                Some(true) => " (no such handle: did nothing)",
                None => " (not reached)",
            };
            format!("  #{} {op}{note}", index + 1)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The number in environment variable `name`, if it is set. Anything else there fails the
/// check rather than being ignored: a typo would quietly run another search than the one asked.
/// The random seed of a run: [`SEED_VARIABLE`] when set, else a fresh one.
pub(super) fn seed_from_env(trace: &Trace) -> Result<u64, CheckFailure> {
    Ok(from_env(
        trace,
        SEED_VARIABLE,
        "a seed (a whole number from 0 to 18446744073709551615)",
    )?
    .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0))
}

/// A proptest generator drawing from `seed`, so a failure replays.
pub(super) fn generator(seed: u64) -> TestRunner {
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    TestRunner::new_with_rng(Config::default(), rng)
}

fn from_env<T: FromStr>(
    trace: &Trace,
    name: &str,
    expected: &str,
) -> Result<Option<T>, CheckFailure> {
    let text = match std::env::var(name) {
        Err(VarError::NotPresent) => return Ok(None),
        Err(VarError::NotUnicode(text)) => text.to_string_lossy().into_owned(),
        Ok(text) => match text.trim().parse() {
            Ok(value) => return Ok(Some(value)),
            Err(_) => text,
        },
    };
    Err(trace.failure(
        Rule::HARNESS,
        format!(
            "the environment variable {name} is {text:?}, not {expected}; correct it or unset it"
        ),
    ))
}

/// A proptest model check: random sequences of steps across three nodes and two names,
/// compared with a reference model of the lock rules. The steps: acquire; release and extend
/// (when declared) with the lock's newest unreleased handle, with an older one whose lock
/// another acquisition took since, and with the handle last released (a second release, an
/// extend after release: both must answer `false` and change nothing, even while
/// `lock_at_least_for` still holds the lock); crash (a handle dropped unreleased); advance
/// time. An extend's duration is drawn apart from the acquisition's, so extends shorten the
/// hold as often as they lengthen it, and the lock must be free after the shorter one.
///
/// The backends run in real time, so the model tracks for every acquisition, release and
/// extend the interval between sending and answering, and from it the earliest and latest
/// moment the lock can expire; an answer fails only when it is impossible under every timing
/// consistent with those bounds plus the tolerance.
///
/// Two environment variables tune the search:
/// - `SHEDLOCK_CONFORMANCE_MODEL_CASES` ([`CASES_VARIABLE`]): how many sequences to try.
///   Unset: 250, or 12 where the provider's precision makes the kit's unit longer than 200 ms
///   (etcd's whole-second leases): around 20 s either way on this project's backends.
/// - `SHEDLOCK_CONFORMANCE_SEED` ([`SEED_VARIABLE`]): the random seed. Unset: a fresh one.
///
/// [`ModelSettings`] passed to [`check_model_with`] take precedence over both. A variable set to
/// anything but a whole number (from 1, for the count) fails the check under the harness rule
/// rather than being ignored. The pass note and any failure give the seed and the number of
/// sequences; a failing sequence is shrunk with proptest to a minimal one that fails the same
/// rule, printed with the settings that replay it.
pub async fn check_model<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    check_model_with(harness, names, ModelSettings::default()).await
}

/// How many random sequences [`check_model_with`] tries, and from which seed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelSettings {
    /// Sequences to try; `None`: [`CASES_VARIABLE`] if set, else the default of
    /// [`check_model`].
    pub cases: Option<u32>,
    /// The random seed; `None`: [`SEED_VARIABLE`] if set, else a fresh one.
    pub seed: Option<u64>,
}

/// [`check_model`] with explicit settings, for a longer search or a replay.
pub async fn check_model_with<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
    settings: ModelSettings,
) -> Result<Verdict, CheckFailure> {
    let setup = Trace::new("model");
    let cases = match settings.cases {
        Some(cases) => Some(cases),
        None => from_env::<NonZeroU32>(
            &setup,
            CASES_VARIABLE,
            "a number of sequences to try (a whole number from 1 to 4294967295)",
        )?
        .map(NonZeroU32::get),
    };
    let seed = match settings.seed {
        Some(seed) => seed,
        None => seed_from_env(&setup)?,
    };
    let mut nodes = Vec::new();
    for index in 0..NODES {
        nodes.push(node(harness, &setup, &node_label(index)).await?);
    }
    let capabilities = nodes[0].capabilities();
    let timing = timing_of(&capabilities);
    let cases = cases.unwrap_or_else(|| default_cases(timing.unit));
    // Only the generator is used: the sequences are run, counted and shrunk here, not by
    // proptest's runner, so its case count and failure persistence do not apply.
    let mut runner = generator(seed);
    let strategy = proptest::collection::vec(op_strategy(capabilities.extend), 1..=MAX_OPS);
    for case in 1..=cases {
        let mut tree = strategy.new_tree(&mut runner).map_err(|reason| {
            setup.failure(
                Rule::HARNESS,
                format!("proptest could not generate a case: {reason}"),
            )
        })?;
        let ops = tree.current();
        let Err(failure) = run_case(&nodes, names.fresh_child(), timing, &capabilities, &ops).await
        else {
            continue;
        };
        let mut smallest = (ops, failure);
        let mut runs = 0;
        if tree.simplify() {
            while runs < MAX_SHRINK_RUNS {
                runs += 1;
                let candidate = tree.current();
                match run_case(
                    &nodes,
                    names.fresh_child(),
                    timing,
                    &capabilities,
                    &candidate,
                )
                .await
                {
                    // A smaller sequence failing another rule is another defect: keeping it
                    // would report a different failure than the one found.
                    Err(failure) if failure.0.rule == smallest.1.0.rule => {
                        smallest = (candidate, failure);
                        if !tree.simplify() {
                            break;
                        }
                    }
                    _ => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
        }
        let (ops, (mut failure, idle)) = smallest;
        failure.observed = format!(
            "{}\nsequence {case} of {cases} (seed {seed}) failed; minimal failing sequence after {runs} shrink runs (one step = {:?}):\n{}\nreplay it with {SEED_VARIABLE}={seed} {CASES_VARIABLE}={case} (or ModelSettings {{ cases: Some({case}), seed: Some({seed}) }})",
            failure.observed,
            timing.unit / 4,
            describe_sequence(&ops, &idle)
        );
        return Err(failure);
    }
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{cases} random sequences of up to {MAX_OPS} operations on {NODES} nodes and {LOCKS} locks matched the model (seed {seed}; {SEED_VARIABLE} and {CASES_VARIABLE} replay or widen the search)"
        )],
    })
}

#[cfg(test)]
mod tests {
    use shedlock_memory::MemoryLockProvider;

    use super::*;

    #[test]
    fn a_failing_sequence_marks_the_steps_that_did_nothing_and_those_not_reached() {
        let ops = [
            ModelOp::Acquire {
                node: 1,
                lock: 1,
                at_most: 4,
                at_least: 2,
            },
            ModelOp::Release {
                lock: 0,
                which: Which::Newest,
            },
            ModelOp::Advance { steps: 3 },
        ];
        assert_eq!(
            describe_sequence(&ops, &[false, true]),
            "  #1 B acquire L1 (at most 4, at least 2 steps)\n  \
             #2 release L0 with its newest unreleased handle (no such handle: did nothing)\n  \
             #3 advance 3 steps (not reached)"
        );
    }

    /// After an extend, the model must expect the lock held to the extend's new expiry: a
    /// refusal inside it is right, and only the extend's own bounds say so.
    #[tokio::test]
    async fn an_honest_refusal_within_an_extended_hold_matches_the_model() {
        let store = shedlock_memory::MemoryLockStore::new();
        let nodes = [store.node(), store.node()];
        let capabilities = nodes[0].capabilities();
        let ops = [
            ModelOp::Acquire {
                node: 0,
                lock: 0,
                at_most: 2,
                at_least: 0,
            },
            ModelOp::Extend {
                lock: 0,
                which: Which::Newest,
                at_most: 8,
            },
            ModelOp::Advance { steps: 3 },
            ModelOp::Acquire {
                node: 1,
                lock: 0,
                at_most: 2,
                at_least: 0,
            },
        ];
        let outcome = run_case(
            &nodes,
            NameSpace::new_run(),
            timing_of(&capabilities),
            &capabilities,
            &ops,
        )
        .await;
        if let Err((failure, _)) = outcome {
            panic!("the memory provider was judged wrong:\n{failure}");
        }
    }

    /// The other side: a lock taken after the acquisition's own hold but inside the extended
    /// one (here by a node that, wrongly, keeps its locks in another store) breaks the extend
    /// rule, and only the extend's bounds show it.
    #[tokio::test]
    async fn a_lock_taken_inside_an_extended_hold_breaks_the_extend_rule() {
        let (store, elsewhere) = (
            shedlock_memory::MemoryLockStore::new(),
            shedlock_memory::MemoryLockStore::new(),
        );
        let nodes = [store.node(), elsewhere.node()];
        let capabilities = nodes[0].capabilities();
        let ops = [
            ModelOp::Acquire {
                node: 0,
                lock: 0,
                at_most: 2,
                at_least: 0,
            },
            ModelOp::Extend {
                lock: 0,
                which: Which::Newest,
                at_most: 8,
            },
            ModelOp::Advance { steps: 3 },
            ModelOp::Acquire {
                node: 1,
                lock: 0,
                at_most: 2,
                at_least: 0,
            },
        ];
        let timing = timing_of(&capabilities);
        match run_case(&nodes, NameSpace::new_run(), timing, &capabilities, &ops).await {
            Err((failure, _)) => {
                assert_eq!(failure.rule, Rule::EXTEND, "{failure}");
                assert!(
                    failure.observed.contains("operation #4")
                        && failure.observed.contains("the extend sent at"),
                    "{failure}"
                );
            }
            Ok(()) => panic!("a lock taken inside an extended hold went unnoticed"),
        }
    }

    #[test]
    fn backends_with_a_coarse_unit_try_fewer_sequences_by_default() {
        for (unit_ms, cases) in [(50, 250), (200, 250), (201, 12), (1000, 12)] {
            assert_eq!(
                default_cases(Duration::from_millis(unit_ms)),
                cases,
                "unit {unit_ms} ms"
            );
        }
    }

    #[tokio::test]
    async fn a_step_is_idle_exactly_when_the_handle_it_names_does_not_exist() {
        let provider = MemoryLockProvider::new();
        let capabilities = provider.capabilities();
        let names = NameSpace::new_run();
        let Acquisition::Acquired(handle) = provider
            .try_lock(&config(
                &names.name("idle"),
                Duration::from_secs(5),
                Duration::ZERO,
            ))
            .await
            .unwrap()
        else {
            panic!("a fresh name on a fresh memory provider must be acquired");
        };
        let nodes = [provider];
        let mut case = Case {
            trace: Trace::new("model"),
            nodes: &nodes,
            names,
            timing: timing_of(&capabilities),
            capabilities: &capabilities,
            step: Duration::from_millis(1),
            locks: Default::default(),
            handles: HashMap::new(),
            released: Default::default(),
            next_id: 0,
        };
        let release = |lock, which| ModelOp::Release { lock, which };
        let acquire = ModelOp::Acquire {
            node: 0,
            lock: 0,
            at_most: 4,
            at_least: 0,
        };
        let busy_always = [acquire, ModelOp::Advance { steps: 1 }];

        for which in [Which::Newest, Which::SecondNewest, Which::Released] {
            assert!(
                case.idle(release(0, which)),
                "{which} before any acquisition"
            );
        }
        assert!(case.idle(ModelOp::Crash { lock: 0 }));
        assert!(busy_always.iter().all(|op| !case.idle(*op)));

        case.handles.insert((0, 0), (1, handle));
        assert!(!case.idle(release(0, Which::Newest)));
        assert!(!case.idle(ModelOp::Extend {
            lock: 0,
            which: Which::Newest,
            at_most: 2
        }));
        assert!(!case.idle(ModelOp::Crash { lock: 0 }));
        assert!(
            case.idle(release(0, Which::SecondNewest)),
            "only one handle"
        );
        assert!(
            case.idle(release(0, Which::Released)),
            "nothing released yet"
        );
        assert!(case.idle(release(1, Which::Newest)), "the other lock");
        assert!(case.idle(ModelOp::Crash { lock: 1 }));

        let (key, handle) = case.handles.remove_entry(&(0, 0)).unwrap();
        case.released[0] = Some((key.0, handle));
        assert!(!case.idle(release(0, Which::Released)));
        assert!(
            case.idle(release(0, Which::Newest)),
            "released, so no longer held"
        );
    }
}
