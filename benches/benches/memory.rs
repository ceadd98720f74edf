//! The in-process provider (`memory://`) beside a `HashMap` under a `Mutex`, on a
//! current-thread runtime: nothing crosses a thread, so each figure is the client's CPU alone.
//!
//! The group `memory` is the shape every backend shares. The group `memory_cpu` measures the
//! cycle and the cycle over 10,000 names in the thread's CPU time instead of wall time, so a
//! regression in the core shows even on a machine busy with other work: its target is under 1
//! microsecond per cycle.

use cpu_time::ThreadTime;
use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use shedlock::LockError;
use shedlock_benches::floors::MemoryDriver;
use shedlock_benches::scenarios::{Cycle, ManyNames};
use shedlock_benches::{connect_node, groups, scenarios};
use tokio::runtime::Runtime;

/// How many names the CPU-time cycle over many names goes through, as `names_10000`.
const MANY_NAMES: usize = 10_000;

fn memory(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    // Every node of one store name shares its locks, as nodes of a fleet share a server.
    let url = format!("memory://{}", scenarios::run_prefix());
    let driver = MemoryDriver::default();
    groups::register(
        c,
        &runtime,
        "memory",
        || connect_node(&url),
        &driver,
        |_| {},
    );
}

fn memory_cpu(c: &mut Criterion) {
    let runtime = current_thread_runtime();
    let prefix = scenarios::run_prefix();
    let url = format!("memory://{prefix}");
    let cycle = Cycle::new(runtime.block_on(connect_node(&url)), &prefix);
    let many = ManyNames::new(runtime.block_on(connect_node(&url)), &prefix, MANY_NAMES);
    let mut group = c.benchmark_group("memory_cpu");
    in_cpu_time(&mut group, &runtime, "cycle", || cycle.run());
    in_cpu_time(&mut group, &runtime, "names_10000", || many.run());
    group.finish();
}

/// Benches `call` in this thread's CPU time. The runtime runs on this thread, so that is every
/// instruction a call costs: the provider, the store, the executor.
fn in_cpu_time<F, Fut>(
    group: &mut BenchmarkGroup<'_, WallTime>,
    runtime: &Runtime,
    name: &str,
    call: F,
) where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<(), LockError>>,
{
    group.bench_function(name, |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let started = ThreadTime::now();
                for _ in 0..iterations {
                    call().await.expect(name);
                }
                started.elapsed()
            })
        })
    });
}

fn current_thread_runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

criterion_group!(benches, memory, memory_cpu);
criterion_main!(benches);
