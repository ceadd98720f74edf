//! One criterion group per backend, of the same shape for every backend, so their figures line
//! up side by side:
//!
//! | bench | what one iteration is |
//! | --- | --- |
//! | `cycle` | acquire + release of one name ([`Cycle`]) |
//! | `first_acquire` | acquire + release of a name never seen ([`FirstAcquire`]) |
//! | `refused` | an acquire refused, another node holding the name ([`Refused`]) |
//! | `floor_write` | the driver's cheapest durable write ([`Driver::write`]) |
//! | `floor_read` | the driver's cheapest read ([`Driver::read`]) |
//! | `names_10000` | acquire + release of the next of 10,000 prepared names ([`ManyNames`]) |
//! | `floor_contention_8`, `floor_contention_32` | 8 or 32 connections each making the floor write on a row of its own at once, until the last is acknowledged ([`ContendedWrites`]) |
//! | `contention_8`, `contention_32` | 8 or 32 nodes trying one name at once, until every node knows its outcome ([`Contention`]) |
//!
//! `cycle` over `floor_write` is the provider's cost in round trips of its backend;
//! `contention_32` over `floor_contention_32` is its share of a burst, apart from what the
//! server and the machine's cores cost 32 writers anyway.

use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use shedlock::AnyLockProvider;
use tokio::runtime::Runtime;

use crate::floors::{ContendedWrites, Driver};
use crate::scenarios::{Contention, Cycle, FirstAcquire, ManyNames, Refused, run_prefix};

/// How many names `names_10000` goes through.
const MANY_NAMES: usize = 10_000;
/// The node counts of the contention benches.
const CONTENDERS: [usize; 2] = [8, 32];
/// Criterion's least: a contention round is many round trips.
const CONTENTION_SAMPLES: usize = 10;

/// The runtime of every server backend's bench: a client with a thread per core, as an
/// application's.
pub fn multi_thread_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// Whether criterion measures (`cargo bench` passes `--bench`) rather than runs each bench once
/// as a test (`cargo test`).
fn measuring() -> bool {
    std::env::args().any(|arg| arg == "--bench")
}

/// Registers and runs a backend's group, named `backend`.
///
/// `node` makes a new node: a provider of its own, with its own connections. `driver` is the
/// backend's floor, on its own connection. `peers` adds benches of other libraries doing the
/// same job to the group, after the floors and before contention (whose smaller sample count
/// would otherwise apply to them too).
///
/// # Panics
///
/// On any failure of the backend, and when a lock answers what a scenario rules out.
pub fn register<N, Fut, D>(
    c: &mut Criterion,
    runtime: &Runtime,
    backend: &str,
    node: N,
    driver: &D,
    peers: impl FnOnce(&mut BenchmarkGroup<'_, WallTime>),
) where
    N: Fn() -> Fut,
    Fut: Future<Output = AnyLockProvider>,
    D: Driver,
{
    let prefix = run_prefix();
    let first = runtime.block_on(node());
    let mut group = c.benchmark_group(backend);

    let cycle = Cycle::new(first.clone(), &prefix);
    group.bench_function("cycle", |b| {
        b.to_async(runtime)
            .iter(|| async { cycle.run().await.expect("cycle") })
    });

    let first_acquire = FirstAcquire::new(first.clone(), &prefix);
    group.bench_function("first_acquire", |b| {
        b.to_async(runtime)
            .iter(|| async { first_acquire.run().await.expect("first acquire") })
    });

    let holder = runtime.block_on(node());
    let refused = runtime
        .block_on(Refused::new(&holder, first, &prefix))
        .expect("the holder takes the name");
    group.bench_function("refused", |b| {
        b.to_async(runtime)
            .iter(|| async { refused.run().await.expect("refused acquire") })
    });
    runtime
        .block_on(refused.release())
        .expect("the holder releases the name");

    group.bench_function("floor_write", |b| {
        b.to_async(runtime)
            .iter(|| async { driver.write().await.expect("floor write") })
    });
    group.bench_function("floor_read", |b| {
        b.to_async(runtime)
            .iter(|| async { driver.read().await.expect("floor read") })
    });

    // A node of its own, so its name cache (if it has one) holds these names only.
    let many = ManyNames::new(runtime.block_on(node()), &prefix, MANY_NAMES);
    runtime
        .block_on(driver.prepare_names(&many.names()))
        .expect("the names are prepared");
    // The steady state of a service whose every job has run once: each name's first visit by a
    // node costs a statement more on the SQL backends. `cargo test` runs each bench once, to
    // see that it works, and skips this.
    if measuring() {
        runtime
            .block_on(many.visit_each_once())
            .expect("every name is visited once");
    }
    group.bench_function("names_10000", |b| {
        b.to_async(runtime)
            .iter(|| async { many.run().await.expect("cycle over many names") })
    });

    peers(&mut group);

    group.sample_size(CONTENTION_SAMPLES);
    // Each floor's writers are connected for their bench alone, and closed before the
    // contending nodes connect: a server may cap the connections of one client address
    // (ZooKeeper's maxClientCnxns, 60 by default), and 32 nodes and 32 writers would pass it.
    for count in CONTENDERS {
        let writes = runtime
            .block_on(ContendedWrites::connect(driver, count as u32))
            .expect("the floor's writers connect");
        group.bench_function(format!("floor_contention_{count}"), |b| {
            b.to_async(runtime).iter_custom(|rounds| {
                let writes = &writes;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..rounds {
                        total += writes.run().await.expect("contended floor writes");
                    }
                    total
                }
            })
        });
    }
    let most = CONTENDERS.into_iter().max().unwrap_or(0);
    let mut nodes = Vec::with_capacity(most);
    for _ in 0..most {
        nodes.push(runtime.block_on(node()));
    }
    for count in CONTENDERS {
        let contention = Contention::new(nodes[..count].to_vec(), &prefix);
        group.bench_function(format!("contention_{count}"), |b| {
            b.to_async(runtime).iter_custom(|rounds| {
                let contention = &contention;
                async move {
                    let mut total = Duration::ZERO;
                    for _ in 0..rounds {
                        total += contention.run().await.expect("contention round");
                    }
                    total
                }
            })
        });
    }
    group.finish();
    runtime
        .block_on(driver.remove_names(&prefix))
        .expect("the run's lock records are removed");
}
