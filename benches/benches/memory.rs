//! The in-process provider (`memory://`) beside a `HashMap` under a `Mutex`, on a
//! current-thread runtime: nothing crosses a thread, so each figure is the client's CPU alone.
//! The cycle's target is under 1 microsecond.

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::MemoryDriver;
use shedlock_benches::{connect_node, groups, scenarios};

fn memory(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
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

criterion_group!(benches, memory);
criterion_main!(benches);
