//! What the SQL providers' contention benches share: rounds of nodes trying one lock at the
//! same moment, and the p50/p99 report against an uncontended attempt.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use shedlock_core::{Acquisition, LockConfiguration, LockHandle, LockProvider};
use tokio::sync::Barrier;

/// One attempt: the handle if the lock was taken.
pub async fn acquire(
    node: &dyn LockProvider,
    config: &LockConfiguration,
) -> Option<Box<dyn LockHandle>> {
    match node.try_lock(config).await.unwrap() {
        Acquisition::Acquired(handle) => Some(handle),
        Acquisition::NotAcquired(_) => None,
    }
}

/// One round: every node tries at the same moment; returns each attempt's time and the
/// winners' handles.
pub async fn provider_round<P: LockProvider + 'static>(
    nodes: &[Arc<P>],
    config: &LockConfiguration,
) -> (Vec<Duration>, Vec<Box<dyn LockHandle>>) {
    let barrier = Arc::new(Barrier::new(nodes.len()));
    let tasks: Vec<_> = nodes
        .iter()
        .map(|node| {
            let (node, barrier, config) = (node.clone(), barrier.clone(), config.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let start = Instant::now();
                let handle = acquire(&*node, &config).await;
                (start.elapsed(), handle)
            })
        })
        .collect();
    let mut times = Vec::with_capacity(nodes.len());
    let mut winners = Vec::new();
    for task in tasks {
        let (time, handle) = task.await.unwrap();
        times.push(time);
        winners.extend(handle);
    }
    (times, winners)
}

/// The `q`-quantile of `samples`, in milliseconds.
fn quantile(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[index].as_secs_f64() * 1000.0
}

/// Prints p50/p99 of `samples` next to the uncontended `baseline`, and their p50 ratio.
pub fn report(label: &str, samples: &Mutex<Vec<Duration>>, baseline: &Mutex<Vec<Duration>>) {
    let mut samples = samples.lock().unwrap();
    let mut baseline = baseline.lock().unwrap();
    if samples.is_empty() || baseline.is_empty() {
        return;
    }
    let (p50, p99) = (quantile(&mut samples, 0.5), quantile(&mut samples, 0.99));
    let (b50, b99) = (quantile(&mut baseline, 0.5), quantile(&mut baseline, 0.99));
    println!(
        "{label}: attempt p50 {p50:.3} ms, p99 {p99:.3} ms over {} attempts; uncontended p50 \
         {b50:.3} ms, p99 {b99:.3} ms; p50 ratio {:.2}x",
        samples.len(),
        p50 / b50
    );
}

/// Runs `make(i)` for `0..n` at once.
pub async fn futures_join<T: Send + 'static, F>(n: usize, make: impl Fn(usize) -> F) -> Vec<T>
where
    F: Future<Output = T> + Send + 'static,
{
    let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(make(i))).collect();
    let mut done = Vec::with_capacity(n);
    for task in tasks {
        done.push(task.await.unwrap());
    }
    done
}
