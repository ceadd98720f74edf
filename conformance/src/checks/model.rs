//! Check 11: random sequences of operations across nodes, compared with a reference model that
//! knows only what the kit's own clock can prove.

use std::collections::HashMap;
use std::fmt;
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
/// Set this to a number to replay the same random sequences.
pub const SEED_VARIABLE: &str = "SHEDLOCK_CONFORMANCE_SEED";

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
        node: usize,
        lock: usize,
    },
    Extend {
        node: usize,
        lock: usize,
        at_most: u32,
    },
    /// The node drops its handle without releasing, as a crashed process would.
    Crash {
        node: usize,
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
            ModelOp::Release { node, lock } => write!(f, "{} release L{lock}", node_label(node)),
            ModelOp::Extend {
                node,
                lock,
                at_most,
            } => write!(f, "{} extend L{lock} ({at_most} steps)", node_label(node)),
            ModelOp::Crash { node, lock } => {
                write!(f, "{} crash holding L{lock}", node_label(node))
            }
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
    let release = (0..NODES, 0..LOCKS).prop_map(|(node, lock)| ModelOp::Release { node, lock });
    let extend_op =
        (0..NODES, 0..LOCKS, 2u32..=8).prop_map(|(node, lock, at_most)| ModelOp::Extend {
            node,
            lock,
            at_most,
        });
    let crash = (0..NODES, 0..LOCKS).prop_map(|(node, lock)| ModelOp::Crash { node, lock });
    let advance = (1u32..=4).prop_map(|steps| ModelOp::Advance { steps });
    if extend {
        prop_oneof![4 => acquire, 3 => release, 2 => extend_op, 1 => crash, 3 => advance].boxed()
    } else {
        prop_oneof![4 => acquire, 3 => release, 1 => crash, 3 => advance].boxed()
    }
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
    released: bool,
}

#[derive(Debug, Default)]
struct LockModel {
    current: Option<Holding>,
    last_token: Option<u64>,
}

impl LockModel {
    /// Whether the lock may be free at some moment no later than `at`.
    fn possibly_free(&self, at: Instant, tolerance: Duration) -> bool {
        self.current
            .is_none_or(|holding| at + tolerance >= holding.expiry_earliest)
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
    Extend,
}

impl HolderOp {
    /// The rule a wrong answer, from the current holder, breaks.
    fn rule(self) -> Rule {
        match self {
            HolderOp::Release => Rule::RELEASE_RESULT,
            HolderOp::Extend => Rule::EXTEND,
        }
    }
}

impl fmt::Display for HolderOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HolderOp::Release => "release",
            HolderOp::Extend => "extend",
        })
    }
}

struct Case<'a, N> {
    trace: Trace,
    nodes: &'a [N],
    names: NameSpace,
    timing: Timing,
    capabilities: &'a Capabilities,
    step: Duration,
    locks: [LockModel; LOCKS],
    handles: HashMap<(usize, usize), (u64, Box<dyn LockHandle>)>,
    next_id: u64,
}

impl<N: LockProvider> Case<'_, N> {
    fn lock_name(&self, lock: usize) -> String {
        self.names.name(&format!("L{lock}"))
    }

    fn broken(&self, rule: Rule, index: usize, op: ModelOp, what: String) -> CheckFailure {
        self.trace
            .failure(rule, format!("operation #{} ({op}): {what}", index + 1))
    }

    /// Judges a holder's `release` or `extend` answer by acquisition `id` of `lock` against
    /// the model: `true` after another acquisition took the lock breaks ownership; `true` after
    /// the lock surely expired, or `false` while it was surely held, breaks the operation's own
    /// rule. Gives the acquisition's holding when it is still the current, unreleased one, for
    /// the caller to update.
    fn judge_holder_answer(
        &self,
        index: usize,
        op: ModelOp,
        lock: usize,
        id: u64,
        operation: HolderOp,
        timed: &Timed<bool>,
    ) -> Result<Option<Holding>, CheckFailure> {
        let rule = operation.rule();
        let tolerance = self.timing.tolerance;
        let current = self.locks[lock]
            .current
            .filter(|holding| holding.id == id && !holding.released);
        match (current, timed.value) {
            (None, true) => Err(self.broken(
                Rule::OWNERSHIP,
                index,
                op,
                format!(
                    "{operation} answered true, but another acquisition has taken the lock since"
                ),
            )),
            (Some(holding), true) if timed.sent > holding.expiry_latest + tolerance => {
                Err(self.broken(
                    rule,
                    index,
                    op,
                    format!(
                        "{operation} answered true at {}, but the lock had expired by {} at the latest",
                        self.trace.at(timed.answered),
                        self.trace.at(holding.expiry_latest)
                    ),
                ))
            }
            (Some(holding), false) if timed.answered + tolerance < holding.expiry_earliest => {
                Err(self.broken(
                    rule,
                    index,
                    op,
                    format!(
                        "{operation} answered false at {}, but the lock was surely held by this acquisition until {}",
                        self.trace.at(timed.answered),
                        self.trace.at(holding.expiry_earliest)
                    ),
                ))
            }
            (current, _) => Ok(current),
        }
    }

    async fn apply(&mut self, index: usize, op: ModelOp) -> Result<(), CheckFailure> {
        let tolerance = self.timing.tolerance;
        match op {
            ModelOp::Advance { steps } => {
                self.trace.note(format!("advance {steps} steps"));
                tokio::time::sleep(self.step * steps).await;
            }
            ModelOp::Crash { node, lock } => {
                if self.handles.remove(&(node, lock)).is_some() {
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
                let at_most = self.step * at_most;
                let at_least = self.step * at_least;
                let lock_config = config(&self.lock_name(lock), at_most, at_least);
                let label = node_label(node);
                let timed = self
                    .trace
                    .acquire(&label, &self.nodes[node], &lock_config)
                    .await?;
                let model = &self.locks[lock];
                match timed.value {
                    Acquisition::Acquired(handle) => {
                        if !model.possibly_free(timed.answered, tolerance) {
                            let holding = model.current.expect("a lock that is surely held");
                            let rule = if holding.released {
                                Rule::AT_LEAST
                            } else {
                                Rule::MUTUAL_EXCLUSION
                            };
                            return Err(self.broken(
                                rule,
                                index,
                                op,
                                format!(
                                    "acquired at {}, but the previous acquisition (sent {}) holds the lock until {} at the earliest",
                                    self.trace.at(timed.answered),
                                    self.trace.at(holding.acquired_sent),
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
                            released: false,
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
                                    if holding.released {
                                        Rule::AT_LEAST
                                    } else {
                                        Rule::AT_MOST
                                    },
                                    format!(
                                        "the last acquisition's hold ended by {} at the latest",
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
            ModelOp::Release { node, lock } => {
                let Some((id, handle)) = self.handles.remove(&(node, lock)) else {
                    return Ok(());
                };
                let timed = self.trace.unlock(&node_label(node), &*handle).await?;
                let Some(mut holding) =
                    self.judge_holder_answer(index, op, lock, id, HolderOp::Release, &timed)?
                else {
                    return Ok(());
                };
                if timed.value {
                    holding.expiry_earliest =
                        timed.sent.max(holding.acquired_sent + holding.at_least);
                    holding.expiry_latest = timed
                        .answered
                        .max(holding.acquired_answered + holding.at_least);
                }
                holding.released = true;
                self.locks[lock].current = Some(holding);
            }
            ModelOp::Extend {
                node,
                lock,
                at_most,
            } => {
                let Some((id, handle)) = self.handles.get(&(node, lock)) else {
                    return Ok(());
                };
                let id = *id;
                let at_most = self.step * at_most;
                let timed = self
                    .trace
                    .extend(&node_label(node), &**handle, at_most)
                    .await?;
                let Some(mut holding) =
                    self.judge_holder_answer(index, op, lock, id, HolderOp::Extend, &timed)?
                else {
                    return Ok(());
                };
                if timed.value {
                    holding.expiry_earliest = timed.sent + at_most;
                    holding.expiry_latest = timed.answered + at_most;
                    self.locks[lock].current = Some(holding);
                }
            }
        }
        Ok(())
    }
}

/// Runs one sequence on fresh lock names and checks every answer against the model.
async fn run_case<N: LockProvider>(
    nodes: &[N],
    names: NameSpace,
    timing: Timing,
    capabilities: &Capabilities,
    ops: &[ModelOp],
) -> Result<(), CheckFailure> {
    let mut case = Case {
        trace: Trace::new("model"),
        nodes,
        names,
        timing,
        capabilities,
        step: timing.unit / 4,
        locks: Default::default(),
        handles: HashMap::new(),
        next_id: 0,
    };
    for (index, op) in ops.iter().enumerate() {
        case.apply(index, *op).await?;
    }
    Ok(())
}

fn describe_sequence(ops: &[ModelOp]) -> String {
    ops.iter()
        .enumerate()
        .map(|(index, op)| format!("  #{} {op}", index + 1))
        .collect::<Vec<_>>()
        .join("\n")
}

fn seed() -> u64 {
    std::env::var(SEED_VARIABLE)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or_else(|| uuid::Uuid::new_v4().as_u64_pair().0)
}

/// A proptest model check: random sequences of acquire, release, extend (when declared),
/// crash (a handle dropped unreleased) and advance-time across three nodes and two names,
/// compared with a reference model of the lock rules.
///
/// The backends run in real time, so the model tracks for every acquisition, release and
/// extend the interval between sending and answering, and from it the earliest and latest
/// moment the lock can expire; an answer fails only when it is impossible under every timing
/// consistent with those bounds plus the tolerance. A failing sequence is shrunk with
/// proptest to a minimal one, printed with its seed (replay with `SHEDLOCK_CONFORMANCE_SEED`).
pub async fn check_model<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    check_model_with(harness, names, ModelSettings::default()).await
}

/// How many random sequences [`check_model_with`] tries, and from which seed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ModelSettings {
    /// Sequences to try; `None`: 12, or 6 for providers with a coarse precision.
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
    let mut nodes = Vec::new();
    for index in 0..NODES {
        nodes.push(node(harness, &setup, &node_label(index)).await?);
    }
    let capabilities = nodes[0].capabilities();
    let timing = timing_of(&capabilities);
    let cases = settings
        .cases
        .unwrap_or(if timing.unit > Duration::from_millis(200) {
            6
        } else {
            12
        });
    let seed = settings.seed.unwrap_or_else(seed);
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed_bytes);
    let mut runner = TestRunner::new_with_rng(
        Config {
            cases,
            failure_persistence: None,
            ..Config::default()
        },
        rng,
    );
    let strategy = proptest::collection::vec(op_strategy(capabilities.extend), 1..=MAX_OPS);
    for _ in 0..cases {
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
                    Err(failure) => {
                        smallest = (candidate, failure);
                        if !tree.simplify() {
                            break;
                        }
                    }
                    Ok(()) => {
                        if !tree.complicate() {
                            break;
                        }
                    }
                }
            }
        }
        let (ops, mut failure) = smallest;
        failure.observed = format!(
            "{}\nminimal failing sequence after {runs} shrink runs (seed {seed}; one step = {:?}):\n{}",
            failure.observed,
            timing.unit / 4,
            describe_sequence(&ops)
        );
        return Err(failure);
    }
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{cases} random sequences of up to {MAX_OPS} operations on {NODES} nodes and {LOCKS} locks matched the model (seed {seed})"
        )],
    })
}
