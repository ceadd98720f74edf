//! The in-process provider (`memory://`) beside a `HashMap` under a `Mutex`, on a
//! current-thread runtime: nothing crosses a thread, so each figure is the client's CPU alone.
//!
//! The group `memory` is the shape every backend shares. The group `memory_cpu` measures the
//! cycle and the cycle over 10,000 names in the thread's CPU time instead of wall time, so a
//! regression in the core shows even on a machine busy with other work: its target is under 1
//! microsecond per cycle.

use cpu_time::ThreadTime;
use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::MemoryDriver;
use shedlock_benches::scenarios::{Cycle, ManyNames};
use shedlock_benches::{connect_node, groups, scenarios};

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
    // The runtime runs on this thread, so this thread's CPU time is every instruction the
    // cycle costs: the provider, the store, the executor.
    group.bench_function("cycle", |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let started = ThreadTime::now();
                for _ in 0..iterations {
                    cycle.run().await.expect("cycle");
                }
                started.elapsed()
            })
        })
    });
    group.bench_function("names_10000", |b| {
        b.iter_custom(|iterations| {
            runtime.block_on(async {
                let started = ThreadTime::now();
                for _ in 0..iterations {
                    many.run().await.expect("cycle over many names");
                }
                started.elapsed()
            })
        })
    });
    group.finish();
}

fn current_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

criterion_group!(benches, memory, memory_cpu);
criterion_main!(benches);
