//! The in-memory acquire+release cycle beside its floor: a `HashMap` under a `Mutex` doing the
//! same bookkeeping (expiry check, owner check on release) for the same names, in the same run.
//! One name and 10,000 names are both measured because the cost per cycle must not grow with
//! the number of names.

use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use shedlock_core::{LockConfiguration, LockProvider};
use shedlock_memory::MemoryLockStore;

const AT_MOST: Duration = Duration::from_secs(60);

/// The least a lock table can do: the record, the expiry check, and an owner to match.
struct Slot {
    lock_until: Instant,
    locked_at: Instant,
    owner: u64,
}

#[derive(Default)]
struct MutexMap {
    slots: Mutex<HashMap<String, Slot>>,
}

impl MutexMap {
    fn acquire(&self, name: &str, owner: u64) -> bool {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap();
        let slot = Slot {
            lock_until: now + AT_MOST,
            locked_at: now,
            owner,
        };
        match slots.get_mut(name) {
            Some(held) if held.lock_until > now => false,
            Some(expired) => {
                *expired = slot;
                true
            }
            None => {
                slots.insert(name.to_owned(), slot);
                true
            }
        }
    }

    fn release(&self, name: &str, owner: u64) -> bool {
        let now = Instant::now();
        let mut slots = self.slots.lock().unwrap();
        match slots.get_mut(name) {
            Some(slot) if slot.owner == owner && slot.lock_until > now => {
                slot.lock_until = now.max(slot.locked_at);
                true
            }
            _ => false,
        }
    }
}

fn cycle(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let mut group = c.benchmark_group("acquire+release");
    for count in [1_usize, 10_000] {
        let names: Vec<String> = (0..count).map(|i| format!("job-{i}")).collect();
        let configs: Vec<LockConfiguration> = names
            .iter()
            .map(|name| LockConfiguration::new(name, AT_MOST, Duration::ZERO).unwrap())
            .collect();

        let provider = MemoryLockStore::new().node();
        let mut next = 0;
        group.bench_function(BenchmarkId::new("shedlock-memory", count), |b| {
            b.to_async(&runtime).iter(|| {
                next = (next + 1) % count;
                let (provider, config) = (&provider, &configs[next]);
                async move {
                    let handle = provider
                        .try_lock(config)
                        .await
                        .unwrap()
                        .into_handle()
                        .expect("released last time, so free");
                    assert!(handle.unlock().await.unwrap());
                }
            });
        });

        let map = MutexMap::default();
        let (mut next, mut owner) = (0, 0_u64);
        group.bench_function(BenchmarkId::new("HashMap+Mutex", count), |b| {
            b.to_async(&runtime).iter(|| {
                next = (next + 1) % count;
                owner += 1;
                let (map, name) = (&map, names[next].as_str());
                async move {
                    assert!(map.acquire(black_box(name), owner));
                    assert!(map.release(black_box(name), owner));
                }
            });
        });
    }
    group.finish();
}

criterion_group!(benches, cycle);
criterion_main!(benches);
