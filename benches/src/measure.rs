//! Timing an operation again and again, and what its latencies come to.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Barrier;

/// How long to keep calling an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    /// Until this much time has passed (at least one call).
    For(Duration),
    /// This many calls (at least one).
    Calls(usize),
}

impl Budget {
    fn allows(self, started: Instant, calls: usize) -> bool {
        match self {
            Budget::For(duration) => calls == 0 || started.elapsed() < duration,
            Budget::Calls(count) => calls < count.max(1),
        }
    }
}

/// Runs every one of `calls` in a task of its own, all let go by one barrier, as contending
/// nodes act at the same instant: their outputs, in order, and the time from the first call's
/// start until the last one's end.
///
/// # Panics
///
/// If a call panics.
pub async fn at_once<T, Fut>(calls: impl IntoIterator<Item = Fut>) -> (Vec<T>, Duration)
where
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let calls: Vec<Fut> = calls.into_iter().collect();
    let barrier = Arc::new(Barrier::new(calls.len()));
    let tasks: Vec<_> = calls
        .into_iter()
        .map(|call| {
            let barrier = barrier.clone();
            tokio::spawn(async move {
                barrier.wait().await;
                let start = Instant::now();
                let output = call.await;
                (start, Instant::now(), output)
            })
        })
        .collect();
    let (mut first_start, mut last_end) = (None::<Instant>, None::<Instant>);
    let mut outputs = Vec::with_capacity(tasks.len());
    for task in tasks {
        let (start, end, output) = task.await.expect("a call made at once panicked");
        first_start = Some(first_start.map_or(start, |first| first.min(start)));
        last_end = Some(last_end.map_or(end, |last| last.max(end)));
        outputs.push(output);
    }
    let took = last_end
        .zip(first_start)
        .map_or(Duration::ZERO, |(end, start)| end - start);
    (outputs, took)
}

/// The latencies of calls made one after another.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// How many calls were timed.
    pub samples: usize,
    /// The median latency.
    pub p50: Duration,
    /// The latency 99 % of calls beat or matched.
    pub p99: Duration,
    /// The mean latency.
    pub mean: Duration,
    /// Calls per second one caller gets back to back: samples over the summed latencies, so the
    /// time between calls (bookkeeping of the loop) is left out.
    pub ops_per_sec: f64,
}

/// Every latency of a measurement, fastest first: the distribution a chart draws.
#[derive(Debug, Clone, PartialEq)]
pub struct Samples {
    latencies: Vec<Duration>,
}

impl Samples {
    /// The samples of `latencies`, in any order; `None` if there are none.
    pub fn from_latencies(mut latencies: Vec<Duration>) -> Option<Samples> {
        latencies.sort_unstable();
        (!latencies.is_empty()).then_some(Samples { latencies })
    }

    /// The latencies, fastest first.
    pub fn latencies(&self) -> &[Duration] {
        &self.latencies
    }

    /// Their summary.
    pub fn stats(&self) -> Stats {
        Stats::from_sorted(&self.latencies)
    }
}

impl Stats {
    /// The summary of `latencies`, sorted and not empty.
    fn from_sorted(latencies: &[Duration]) -> Stats {
        let total: Duration = latencies.iter().sum();
        let samples = latencies.len();
        // Nearest rank: the smallest latency with at least q of the samples at or below it.
        let quantile = |q: f64| latencies[((samples as f64 * q).ceil() as usize).max(1) - 1];
        Stats {
            samples,
            p50: quantile(0.50),
            p99: quantile(0.99),
            mean: total / samples as u32,
            ops_per_sec: samples as f64 / total.as_secs_f64().max(f64::MIN_POSITIVE),
        }
    }
}

/// Calls `operation` within `budget`, one call at a time, each call reporting its own latency:
/// for an operation with setup or cleanup that is not part of what is measured (a contention
/// round times the attempts, not the release of the winner).
pub async fn measure_reported<E, F, Fut>(budget: Budget, mut operation: F) -> Result<Samples, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Duration, E>>,
{
    let started = Instant::now();
    let mut latencies = Vec::new();
    while budget.allows(started, latencies.len()) {
        latencies.push(operation().await?);
    }
    Ok(Samples::from_latencies(latencies).expect("every budget allows one call"))
}

/// One call of an operation measured [in turn](measure_in_turn) with others.
pub type Call<'a, E> = Box<dyn FnMut() -> Pin<Box<dyn Future<Output = Result<(), E>> + 'a>> + 'a>;

/// Calls each of `operations` in turns, round and round, timing each call: the samples of
/// each, in order. With [`Budget::For`], an operation's turn is `turn` of calls one after
/// another, and the rounds go on until every operation has had its budget in its own turns
/// (a turn ends after the call that crosses `turn`, so a slow call lengthens only its own
/// operation's turns); with [`Budget::Calls`], a turn is one call, and each operation gets
/// that many.
///
/// Operations measured one after another each meet what the machine did during their own
/// seconds (a checkpoint, a build on the other core), and a ratio of two such figures moved by
/// 0.2 between runs here. Measured in short turns over the same seconds, whatever the machine
/// does weighs on each alike. Within a turn, calls follow each other as they do alone: one call
/// by one, alternating, would change what each call meets (the servers' processes and this
/// machine's virtual cores sleep and wake on another rhythm), and did so here: PostgreSQL's read
/// took 41 µs beside a refused acquire where it takes 73 µs alone.
///
/// Times with tokio's clock, which is the system's monotonic clock unless a test pauses it.
///
/// Stops at the first error and returns it.
pub async fn measure_in_turn<E>(
    budget: Budget,
    turn: Duration,
    operations: &mut [Call<'_, E>],
) -> Result<Vec<Samples>, E> {
    let mut latencies: Vec<Vec<Duration>> = vec![Vec::new(); operations.len()];
    let mut spent = vec![Duration::ZERO; operations.len()];
    for round in 0.. {
        let done = match budget {
            Budget::For(each) => round > 0 && spent.iter().all(|spent| *spent >= each),
            Budget::Calls(count) => round >= count.max(1),
        };
        if done || operations.is_empty() {
            break;
        }
        for ((operation, timed), spent) in operations.iter_mut().zip(&mut latencies).zip(&mut spent)
        {
            let turn_started = tokio::time::Instant::now();
            loop {
                let call = operation();
                let start = tokio::time::Instant::now();
                call.await?;
                timed.push(start.elapsed());
                if matches!(budget, Budget::Calls(_)) || turn_started.elapsed() >= turn {
                    break;
                }
            }
            *spent += turn_started.elapsed();
        }
    }
    Ok(latencies
        .into_iter()
        .map(|timed| Samples::from_latencies(timed).expect("every budget allows one round"))
        .collect())
}

/// How many times `floor` the `lock` figure is: 2.0 for a lock operation that costs two floor
/// round trips.
pub fn ratio(lock: Duration, floor: Duration) -> f64 {
    lock.as_secs_f64() / floor.as_secs_f64()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(millis: u64) -> Duration {
        Duration::from_millis(millis)
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let stats = Samples::from_latencies((1..=100).rev().map(ms).collect())
            .unwrap()
            .stats();
        assert_eq!(stats.samples, 100);
        assert_eq!(stats.p50, ms(50));
        assert_eq!(stats.p99, ms(99));
        assert_eq!(stats.mean, Duration::from_micros(50_500));
        assert!((stats.ops_per_sec - 100.0 / 5.05).abs() < 1e-9);

        let one = Samples::from_latencies(vec![ms(7)]).unwrap().stats();
        assert_eq!((one.p50, one.p99, one.mean), (ms(7), ms(7), ms(7)));
        assert_eq!(Samples::from_latencies(Vec::new()), None);
    }

    #[test]
    fn a_count_budget_makes_that_many_calls_and_at_least_one() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for (count, calls) in [(5, 5), (0, 1)] {
            let mut made = 0;
            let samples = runtime
                .block_on(measure_reported(Budget::Calls(count), || {
                    made += 1;
                    async { Ok::<_, ()>(ms(1)) }
                }))
                .unwrap();
            assert_eq!((made, samples.stats().samples), (calls, calls));
        }
    }

    #[test]
    fn reported_latencies_are_the_samples_and_an_error_stops_the_run() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let mut next = 0;
        let samples = runtime
            .block_on(measure_reported(Budget::Calls(3), || {
                next += 1;
                let latency = ms(10 - next);
                async move { Ok::<_, ()>(latency) }
            }))
            .unwrap();
        assert_eq!(samples.latencies(), [ms(7), ms(8), ms(9)]);
        assert_eq!((samples.stats().p50, samples.stats().samples), (ms(8), 3));

        let mut made = 0;
        let failed = runtime.block_on(measure_reported(
            Budget::For(Duration::from_secs(60)),
            || {
                made += 1;
                async { Err::<Duration, _>("backend down") }
            },
        ));
        assert_eq!((failed, made), (Err("backend down"), 1));
    }

    /// A runtime on tokio's paused clock: a sleep takes exactly its time, whatever the machine
    /// is doing, so the turns below are counted, not guessed.
    fn paused_runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// An operation that sleeps `millis` per call and logs `name` in `order`.
    fn sleeper<'a>(
        order: &'a std::cell::RefCell<Vec<char>>,
        name: char,
        millis: u64,
    ) -> Call<'a, ()> {
        Box::new(move || {
            order.borrow_mut().push(name);
            Box::pin(tokio::time::sleep(ms(millis)).then_ok())
        })
    }

    #[test]
    fn operations_in_turn_take_turns_and_are_timed_apart() {
        let runtime = paused_runtime();
        let order = std::cell::RefCell::new(Vec::new());
        let mut operations = vec![sleeper(&order, 'a', 1), sleeper(&order, 'b', 3)];
        // A count: that many rounds of one call each.
        let samples = runtime
            .block_on(measure_in_turn(Budget::Calls(3), ms(1000), &mut operations))
            .unwrap();
        assert_eq!(order.borrow().as_slice(), ['a', 'b', 'a', 'b', 'a', 'b']);
        assert_eq!(samples.len(), 2);
        assert_eq!(
            (samples[0].stats().samples, samples[0].stats().p50),
            (3, ms(1))
        );
        assert_eq!(
            (samples[1].stats().samples, samples[1].stats().p50),
            (3, ms(3))
        );

        // A time: turns of 20 ms of calls one after another (a's 20 calls of 1 ms, b's 7 of
        // 3 ms, the seventh crossing 20 ms), until each has had 60 ms: three rounds.
        order.borrow_mut().clear();
        let (samples, took) = runtime.block_on(async {
            let started = tokio::time::Instant::now();
            let samples = measure_in_turn(Budget::For(ms(60)), ms(20), &mut operations).await;
            (samples.unwrap(), started.elapsed())
        });
        drop(operations);
        assert_eq!(took, ms(3 * (20 + 21)));
        let order = order.into_inner();
        let turns: Vec<(char, usize)> = order
            .chunk_by(|a, b| a == b)
            .map(|turn| (turn[0], turn.len()))
            .collect();
        assert_eq!(turns, [('a', 20), ('b', 7)].repeat(3));
        assert_eq!(
            (samples[0].stats().samples, samples[1].stats().samples),
            (60, 21)
        );
    }

    #[test]
    fn every_operation_in_turn_has_its_budget_when_another_overruns_its_turns() {
        let runtime = paused_runtime();
        let order = std::cell::RefCell::new(Vec::new());
        // a's one call overruns every turn of 20 ms (30 ms): a has its 60 ms after two rounds,
        // b (20 calls of 1 ms a turn) only after three.
        let mut operations = vec![sleeper(&order, 'a', 30), sleeper(&order, 'b', 1)];
        let samples = runtime
            .block_on(measure_in_turn(
                Budget::For(ms(60)),
                ms(20),
                &mut operations,
            ))
            .unwrap();
        drop(operations);
        let b_had: Duration = samples[1].latencies().iter().sum();
        assert_eq!(b_had, ms(60));
        assert_eq!(
            (samples[0].stats().samples, samples[1].stats().samples),
            (3, 60)
        );
    }

    #[test]
    fn operations_in_turn_stop_at_the_first_error() {
        let runtime = paused_runtime();
        let mut calls = 0;
        let mut failing: Vec<Call<'_, &str>> = vec![
            Box::new(|| Box::pin(tokio::time::sleep(ms(1)).then_ok())),
            Box::new(|| {
                calls += 1;
                Box::pin(async { Err("backend down") })
            }),
        ];
        let failed = runtime.block_on(measure_in_turn(
            Budget::For(ms(60_000)),
            ms(10),
            &mut failing,
        ));
        drop(failing);
        assert_eq!((failed, calls), (Err("backend down"), 1));
    }

    /// A future's output as a success.
    trait ThenOk: Future<Output = ()> + Sized {
        fn then_ok<E>(self) -> impl Future<Output = Result<(), E>> {
            async move {
                self.await;
                Ok(())
            }
        }
    }

    impl<F: Future<Output = ()>> ThenOk for F {}

    #[test]
    fn ratio_is_lock_over_floor() {
        assert_eq!(ratio(ms(3), ms(2)), 1.5);
    }
}
