//! One backend's benches in one go, each set beside the floor of as many round trips: what the
//! `shedlock bench` command runs and prints. (`cargo bench` measures the same scenarios with
//! criterion, one group per backend.)
//!
//! A figure alone says little; its ratio to the floor says what the provider adds to what the
//! server and the network cost anyway. An acquire + release is two round trips that each
//! commit a write, so a cycle is set beside two floor writes, and a ratio of 1.00 means the
//! provider adds nothing measurable.

use std::error::Error;
use std::fmt;
use std::time::Duration;

use shedlock::AnyLockProvider;

use crate::floors::{ContendedWrites, Driver};
use crate::measure::{Budget, Call, Samples, measure_in_turn, measure_reported};
use crate::scenarios::{Contention, Cycle, FirstAcquire, Refused, run_prefix};

/// Calls made, and thrown away, before each measurement: connections warm, statements prepared,
/// caches filled, as in a service that has been running a while.
const WARM_UP_CALLS: usize = 20;
/// Contention rounds thrown away first: each is many round trips already.
const WARM_UP_ROUNDS: usize = 2;
/// How long each bench measured [in turn](measure_in_turn) with its floor calls before the
/// next takes over: short beside a bench's seconds, so both meet the same machine, and long
/// beside a call, so that calls follow each other as they do alone.
const TURN: Duration = Duration::from_millis(100);

/// What one row of a backend's figures measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bench {
    /// The driver's cheapest durable write ([`Driver::write`]).
    FloorWrite,
    /// The driver's cheapest read ([`Driver::read`]).
    FloorRead,
    /// Acquire + release of one name ([`Cycle`]).
    Cycle,
    /// Acquire + release of a name the backend has never seen ([`FirstAcquire`]).
    FirstAcquire,
    /// An acquire refused, another node holding the name ([`Refused`]).
    Refused,
    /// 8 connections each making the floor write on a row of its own at once, until the last
    /// is acknowledged ([`ContendedWrites`]): the floor of [`Contention8`](Self::Contention8).
    FloorContention8,
    /// 8 nodes trying one name at once, until every node knows its outcome ([`Contention`]).
    Contention8,
    /// The floor of [`Contention32`](Self::Contention32): the same with 32 connections.
    FloorContention32,
    /// The same with 32 nodes.
    Contention32,
    /// 32 nodes, each a provider with its own connections, make one cycle each, one node after
    /// another (after one such round unmeasured): [`AfterIdle`](Self::AfterIdle) without the
    /// idle time. A node's single cycle costs more than one of a node cycling back to back, so
    /// this, not [`Cycle`](Self::Cycle), is what the idle time is set beside.
    BeforeIdle,
    /// The same round of 32 cycles after the nodes sat idle for a while, as a job that runs
    /// hourly meets its connections. Only when asked ([`run`]'s `after_idle`): it takes that
    /// long.
    AfterIdle,
}

impl Bench {
    /// Every bench, in the order [`run`] measures them: [`FloorWrite`](Self::FloorWrite),
    /// [`Cycle`](Self::Cycle) and [`FirstAcquire`](Self::FirstAcquire) in turns of 100 ms
    /// over the same seconds, then [`FloorRead`](Self::FloorRead) and
    /// [`Refused`](Self::Refused) the same way, so that each ratio to a floor compares calls made
    /// side by side (see [`measure_in_turn`]); then the contention rounds, one bench after
    /// another.
    pub const ALL: [Bench; 9] = [
        Bench::FloorWrite,
        Bench::Cycle,
        Bench::FirstAcquire,
        Bench::FloorRead,
        Bench::Refused,
        Bench::FloorContention8,
        Bench::FloorContention32,
        Bench::Contention8,
        Bench::Contention32,
    ];

    /// Its name in tables and JSON, as criterion's groups name the same bench.
    pub fn name(self) -> &'static str {
        match self {
            Bench::FloorWrite => "floor_write",
            Bench::FloorRead => "floor_read",
            Bench::Cycle => "cycle",
            Bench::FirstAcquire => "first_acquire",
            Bench::Refused => "refused",
            Bench::FloorContention8 => "floor_contention_8",
            Bench::Contention8 => "contention_8",
            Bench::FloorContention32 => "floor_contention_32",
            Bench::Contention32 => "contention_32",
            Bench::BeforeIdle => "before_idle",
            Bench::AfterIdle => "after_idle",
        }
    }

    /// The benches [`run`] measures, in order: [`ALL`](Self::ALL), then
    /// [`BeforeIdle`](Self::BeforeIdle) and [`AfterIdle`](Self::AfterIdle) when an idle time
    /// is given.
    pub fn planned(after_idle: Option<Duration>) -> Vec<Bench> {
        let mut planned = Bench::ALL.to_vec();
        if after_idle.is_some() {
            planned.extend([Bench::BeforeIdle, Bench::AfterIdle]);
        }
        planned
    }

    /// The floor the bench's least cost is made of, and how many of it; `None` for the floors
    /// themselves.
    ///
    /// A cycle, first acquire included, is two round trips that each commit a write: two floor
    /// writes. A refused acquire writes nothing (the record says the name is held): one floor
    /// read. Contending nodes each make one attempt at the same time, so a round is set beside
    /// as many connections each writing a row of their own at the same time: the server's
    /// serialising of the writes and the machine's cores cost that much anyway, and the ratio is
    /// the provider's share. The round of cycles after idle time is set beside the same round
    /// without it: what the idle time costs.
    pub fn floor(self) -> Option<(Bench, u32)> {
        match self {
            Bench::FloorWrite
            | Bench::FloorRead
            | Bench::FloorContention8
            | Bench::FloorContention32 => None,
            Bench::Cycle | Bench::FirstAcquire | Bench::BeforeIdle => Some((Bench::FloorWrite, 2)),
            Bench::Refused => Some((Bench::FloorRead, 1)),
            Bench::Contention8 => Some((Bench::FloorContention8, 1)),
            Bench::Contention32 => Some((Bench::FloorContention32, 1)),
            Bench::AfterIdle => Some((Bench::BeforeIdle, 1)),
        }
    }

    /// How many nodes the bench contends with, for a contention bench.
    fn contenders(self) -> Option<usize> {
        match self {
            Bench::Contention8 | Bench::FloorContention8 => Some(8),
            Bench::Contention32 | Bench::FloorContention32 => Some(32),
            _ => None,
        }
    }
}

impl fmt::Display for Bench {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A backend's latencies, one [`Samples`] per [`Bench`].
#[derive(Debug, Clone)]
pub struct Figures {
    measured: Vec<(Bench, Samples)>,
}

impl Figures {
    /// Every bench and its samples, in the order they were measured.
    pub fn iter(&self) -> impl Iterator<Item = (Bench, &Samples)> {
        self.measured
            .iter()
            .map(|(bench, samples)| (*bench, samples))
    }

    /// The samples of `bench`.
    pub fn get(&self, bench: Bench) -> Option<&Samples> {
        self.iter()
            .find(|(measured, _)| *measured == bench)
            .map(|(_, samples)| samples)
    }

    /// `bench`'s median over the median of [its floor](Bench::floor) times the floor's count:
    /// 1.00 when the provider adds nothing measurable to what the server costs anyway.
    pub fn ratio_to_floor(&self, bench: Bench) -> Option<f64> {
        let (floor, trips) = bench.floor()?;
        let floor = self.get(floor)?.stats().p50 * trips;
        Some(crate::measure::ratio(self.get(bench)?.stats().p50, floor))
    }
}

/// Why a backend has no figures: a step that failed and the backend's own error.
#[derive(Debug)]
pub struct BenchError {
    step: String,
    source: Box<dyn Error + Send + Sync>,
}

impl BenchError {
    /// `source` stopped `step` ("connecting node 3", "cycle", ...).
    pub fn new(step: impl Into<String>, source: impl Into<Box<dyn Error + Send + Sync>>) -> Self {
        Self {
            step: step.into(),
            source: source.into(),
        }
    }
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} failed", self.step)
    }
}

impl Error for BenchError {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        Some(&*self.source)
    }
}

/// Measures every [`Bench`] of one backend, each for `each`, after a short warm-up; with
/// `after_idle`, then [`Bench::AfterIdle`] after that much idle time.
///
/// `node` connects a new node: a provider of its own, with its own connections (up to 33 are
/// made: the bench's, a holder for [`Bench::Refused`], and 32 contenders, who reuse the first
/// two). `driver` is the backend's floor. `starting` is told each bench before it starts, for a
/// progress display. The lock records the run made are removed at the end, when it fails too.
///
/// # Panics
///
/// When a lock answers what a scenario rules out (a free lock refused, a held one granted, two
/// winners of one round): a broken lock has no figure.
pub async fn run<N, Fut, D>(
    node: N,
    driver: &D,
    each: Duration,
    after_idle: Option<Duration>,
    mut starting: impl FnMut(Bench),
) -> Result<Figures, BenchError>
where
    N: Fn() -> Fut,
    Fut: Future<Output = Result<AnyLockProvider, BenchError>>,
    D: Driver,
{
    let prefix = run_prefix();
    let measured = measure_all(&node, driver, each, after_idle, &prefix, &mut starting).await;
    let removed = driver.remove_names(&prefix).await;
    let measured = measured?;
    removed.map_err(|error| BenchError::new("removing the run's lock records", error))?;
    Ok(Figures { measured })
}

async fn measure_all<N, Fut, D>(
    node: &N,
    driver: &D,
    each: Duration,
    after_idle: Option<Duration>,
    prefix: &str,
    starting: &mut impl FnMut(Bench),
) -> Result<Vec<(Bench, Samples)>, BenchError>
where
    N: Fn() -> Fut,
    Fut: Future<Output = Result<AnyLockProvider, BenchError>>,
    D: Driver,
{
    let first = node().await?;
    let holder = node().await?;
    let mut contenders = vec![first.clone(), holder.clone()];
    let mut measured = Vec::with_capacity(Bench::ALL.len() + 2);
    for bench in Bench::planned(after_idle) {
        let samples = match bench {
            // Measured in turn with the floor, below.
            Bench::Cycle | Bench::FirstAcquire | Bench::Refused => continue,
            Bench::FloorWrite => {
                let in_turn = [Bench::FloorWrite, Bench::Cycle, Bench::FirstAcquire];
                in_turn.into_iter().for_each(&mut *starting);
                let cycle = Cycle::new(first.clone(), prefix);
                let first_acquire = FirstAcquire::new(first.clone(), prefix);
                let calls: [Call<'_, BenchError>; 3] = [
                    Box::new(|| Box::pin(async { driver.write().await.map_err(failed(bench)) })),
                    Box::new(|| {
                        Box::pin(async { cycle.run().await.map_err(failed(Bench::Cycle)) })
                    }),
                    Box::new(|| {
                        Box::pin(async {
                            let acquired = first_acquire.run().await;
                            acquired.map_err(failed(Bench::FirstAcquire))
                        })
                    }),
                ];
                measured.extend(in_turn.into_iter().zip(timed_in_turn(each, calls).await?));
                continue;
            }
            Bench::FloorRead => {
                let in_turn = [Bench::FloorRead, Bench::Refused];
                in_turn.into_iter().for_each(&mut *starting);
                let refused = Refused::new(&holder, first.clone(), prefix)
                    .await
                    .map_err(failed(Bench::Refused))?;
                let calls: [Call<'_, BenchError>; 2] = [
                    Box::new(|| Box::pin(async { driver.read().await.map_err(failed(bench)) })),
                    Box::new(|| {
                        Box::pin(async { refused.run().await.map_err(failed(Bench::Refused)) })
                    }),
                ];
                let samples = timed_in_turn(each, calls).await;
                refused.release().await.map_err(failed(Bench::Refused))?;
                measured.extend(in_turn.into_iter().zip(samples?));
                continue;
            }
            Bench::FloorContention8 | Bench::FloorContention32 => {
                starting(bench);
                let count = bench.contenders().expect("a contention bench");
                // Connected for this bench alone, and closed before the contending nodes
                // connect: a server may cap the connections of one client address (ZooKeeper's
                // maxClientCnxns, 60 by default), and 32 nodes and 32 writers would pass it.
                let writes = ContendedWrites::connect(driver, count as u32)
                    .await
                    .map_err(failed(bench))?;
                timed_rounds(each, || writes.run())
                    .await
                    .map_err(failed(bench))?
            }
            Bench::Contention8 | Bench::Contention32 => {
                starting(bench);
                let count = bench.contenders().expect("a contention bench");
                while contenders.len() < count {
                    contenders.push(node().await?);
                }
                let contention = Contention::new(contenders[..count].to_vec(), prefix);
                timed_rounds(each, || contention.run())
                    .await
                    .map_err(failed(bench))?
            }
            Bench::BeforeIdle => {
                starting(bench);
                while contenders.len() < IDLE_NODES {
                    contenders.push(node().await?);
                }
                let round = || cycles_in_turn(&contenders[..IDLE_NODES], prefix);
                round().await.map_err(failed(bench))?;
                round().await.map_err(failed(bench))?
            }
            Bench::AfterIdle => {
                starting(bench);
                let idle = after_idle.expect("planned only with an idle time");
                tokio::time::sleep(idle).await;
                cycles_in_turn(&contenders[..IDLE_NODES], prefix)
                    .await
                    .map_err(failed(bench))?
            }
        };
        measured.push((bench, samples));
    }
    Ok(measured)
}

/// How many nodes [`Bench::BeforeIdle`] and [`Bench::AfterIdle`] measure.
const IDLE_NODES: usize = 32;

/// One cycle on each of `nodes`, one node after another, so that they do not contend: the
/// latencies of those.
async fn cycles_in_turn(
    nodes: &[AnyLockProvider],
    prefix: &str,
) -> Result<Samples, shedlock::LockError> {
    let mut latencies = Vec::with_capacity(nodes.len());
    for node in nodes {
        let cycle = Cycle::new(node.clone(), prefix);
        let started = std::time::Instant::now();
        cycle.run().await?;
        latencies.push(started.elapsed());
    }
    Ok(Samples::from_latencies(latencies).expect("at least one node"))
}

/// Makes a backend's error, of either the driver or the provider, the failure of `bench`.
fn failed<E>(bench: Bench) -> impl FnOnce(E) -> BenchError
where
    E: Into<Box<dyn Error + Send + Sync>>,
{
    move |error| BenchError::new(bench.name(), error)
}

/// Warms `calls` up, then measures them [in turns](measure_in_turn), `each` for each.
async fn timed_in_turn<const N: usize>(
    each: Duration,
    mut calls: [Call<'_, BenchError>; N],
) -> Result<[Samples; N], BenchError> {
    measure_in_turn(Budget::Calls(WARM_UP_CALLS), TURN, &mut calls).await?;
    let samples = measure_in_turn(Budget::For(each), TURN, &mut calls).await?;
    Ok(samples
        .try_into()
        .expect("one set of samples per operation"))
}

/// Warms a round that reports its own figure up, then measures it for `each`.
async fn timed_rounds<E, F, Fut>(each: Duration, mut round: F) -> Result<Samples, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Duration, E>>,
{
    measure_reported(Budget::Calls(WARM_UP_ROUNDS), &mut round).await?;
    measure_reported(Budget::For(each), round).await
}

#[cfg(all(test, feature = "memory"))]
mod tests {
    use super::*;
    use crate::floors::MemoryDriver;

    /// A run on the in-memory store, 20 ms a bench: the benches in the order they started,
    /// and the figures.
    async fn run_on_memory(after_idle: Option<Duration>) -> (Vec<Bench>, Figures) {
        let url = format!("memory://{}", run_prefix());
        let mut started = Vec::new();
        let figures = run(
            || async { Ok(crate::connect_node(&url).await) },
            &MemoryDriver::default(),
            Duration::from_millis(20),
            after_idle,
            |bench| started.push(bench),
        )
        .await
        .unwrap();
        (started, figures)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_bench_is_measured_once_in_order_and_set_beside_its_floor() {
        let (started, figures) = run_on_memory(None).await;
        assert_eq!(started, Bench::ALL);
        let measured: Vec<Bench> = figures.iter().map(|(bench, _)| bench).collect();
        assert_eq!(measured, Bench::ALL);
        for (bench, samples) in figures.iter() {
            assert!(samples.stats().samples >= 1, "{bench} has no samples");
        }

        let write = figures.get(Bench::FloorWrite).unwrap().stats().p50;
        let cycle = figures.get(Bench::Cycle).unwrap().stats().p50;
        let expected = cycle.as_secs_f64() / (2.0 * write.as_secs_f64());
        let ratio = figures.ratio_to_floor(Bench::Cycle).unwrap();
        assert!((ratio - expected).abs() < 1e-9, "{ratio} != {expected}");
        assert_eq!(figures.ratio_to_floor(Bench::FloorRead), None);
        let read = figures.get(Bench::FloorRead).unwrap().stats().p50;
        let refused = figures.get(Bench::Refused).unwrap().stats().p50;
        let expected = refused.as_secs_f64() / read.as_secs_f64();
        let ratio = figures.ratio_to_floor(Bench::Refused).unwrap();
        assert!((ratio - expected).abs() < 1e-9, "{ratio} != {expected}");
        for (contention, floor) in [
            (Bench::Contention8, Bench::FloorContention8),
            (Bench::Contention32, Bench::FloorContention32),
        ] {
            assert_eq!(contention.floor(), Some((floor, 1)));
            assert_eq!(floor.floor(), None);
            let floor = figures.get(floor).unwrap().stats().p50;
            let round = figures.get(contention).unwrap().stats().p50;
            let expected = round.as_secs_f64() / floor.as_secs_f64();
            let ratio = figures.ratio_to_floor(contention).unwrap();
            assert!((ratio - expected).abs() < 1e-9, "{ratio} != {expected}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_round_after_idle_time_comes_last_beside_the_same_round_without_it() {
        let (started, figures) = run_on_memory(Some(Duration::from_millis(50))).await;
        let mut planned = Bench::ALL.to_vec();
        planned.extend([Bench::BeforeIdle, Bench::AfterIdle]);
        assert_eq!(started, planned);
        let before_idle = figures.get(Bench::BeforeIdle).unwrap().stats();
        let after_idle = figures.get(Bench::AfterIdle).unwrap().stats();
        assert_eq!(before_idle.samples, IDLE_NODES, "one cycle per node");
        assert_eq!(after_idle.samples, IDLE_NODES, "one cycle per node");
        let expected = after_idle.p50.as_secs_f64() / before_idle.p50.as_secs_f64();
        let ratio = figures.ratio_to_floor(Bench::AfterIdle).unwrap();
        assert!((ratio - expected).abs() < 1e-9, "{ratio} != {expected}");
    }

    #[tokio::test]
    async fn a_node_that_cannot_connect_stops_the_run_and_names_the_step() {
        let error = run(
            || async { Err(BenchError::new("connecting a node", "refused")) },
            &MemoryDriver::default(),
            Duration::from_millis(1),
            None,
            |_| {},
        )
        .await
        .unwrap_err();
        assert_eq!(error.to_string(), "connecting a node failed");
        assert_eq!(error.source().unwrap().to_string(), "refused");
    }
}
