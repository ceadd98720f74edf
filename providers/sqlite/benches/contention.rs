//! Contention of the SQLite provider on one database file in the temp folder.
//!
//! 32 nodes (each a provider with its own connections to the file) try one name at the same
//! moment; exactly one wins each round. The time of one attempt is reported as p50/p99 next to
//! an uncontended attempt, together with 31 nodes refused by a held lock and the floor of
//! `SELECT 1` sent on 31 dedicated connections to the file at once. The file keeps SQLite's
//! default rollback journal (the provider sets no journal mode); every acquire, refused or
//! not, is a write statement and takes the file's write lock.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_core::{Acquisition, LockConfiguration, LockHandle, LockProvider};
use shedlock_sqlite::SqliteLockProvider;
use sqlx::{Connection, SqliteConnection};
use tokio::runtime::Runtime;
use tokio::sync::Barrier;

const TABLE: &str = "shedlock_bench_contention";
const NODES: usize = 32;
const NAME: &str = "contended";

/// The database file: one per process, in the temp folder.
fn path() -> PathBuf {
    std::env::temp_dir().join(format!(
        "shedlock-bench-contention-{}.db",
        std::process::id()
    ))
}

fn url() -> String {
    format!("sqlite://{}?mode=rwc", path().display())
}

/// Removes the database file and its journals.
fn remove_database() {
    let path = path().into_os_string();
    for suffix in ["", "-journal", "-wal", "-shm"] {
        let mut file = path.clone();
        file.push(suffix);
        let _ = std::fs::remove_file(file);
    }
}

fn config() -> LockConfiguration {
    LockConfiguration::new(NAME, Duration::from_secs(60), Duration::ZERO).unwrap()
}

async fn node() -> SqliteLockProvider {
    SqliteLockProvider::builder_from_url(url())
        .table_name(TABLE)
        .create_table_if_missing(true)
        .max_connections(2)
        .build()
        .await
        .unwrap()
}

async fn acquire(node: &SqliteLockProvider) -> Option<Box<dyn LockHandle>> {
    match node.try_lock(&config()).await.unwrap() {
        Acquisition::Acquired(handle) => Some(handle),
        Acquisition::NotAcquired(_) => None,
    }
}

/// The `q`-quantile of `samples`, in milliseconds.
fn quantile(samples: &mut [Duration], q: f64) -> f64 {
    samples.sort();
    let index = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[index].as_secs_f64() * 1000.0
}

fn report(label: &str, samples: &Mutex<Vec<Duration>>, baseline: &Mutex<Vec<Duration>>) {
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

/// One round: every node tries at the same moment; returns each attempt's time and the
/// winners' handles.
async fn provider_round(
    nodes: &[Arc<SqliteLockProvider>],
) -> (Vec<Duration>, Vec<Box<dyn LockHandle>>) {
    let barrier = Arc::new(Barrier::new(nodes.len()));
    let tasks: Vec<_> = nodes
        .iter()
        .map(|node| {
            let (node, barrier) = (node.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let start = Instant::now();
                let handle = acquire(&node).await;
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

/// One round of `SELECT 1` sent on every connection at the same moment.
async fn select_round(connections: &[Arc<tokio::sync::Mutex<SqliteConnection>>]) -> Vec<Duration> {
    let barrier = Arc::new(Barrier::new(connections.len()));
    let tasks: Vec<_> = connections
        .iter()
        .map(|connection| {
            let (connection, barrier) = (connection.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut connection = connection.lock().await;
                barrier.wait().await;
                let start = Instant::now();
                sqlx::query("SELECT 1")
                    .fetch_one(&mut *connection)
                    .await
                    .unwrap();
                start.elapsed()
            })
        })
        .collect();
    let mut times = Vec::with_capacity(connections.len());
    for task in tasks {
        times.push(task.await.unwrap());
    }
    times
}

fn contention(c: &mut Criterion, rt: &Runtime) {
    remove_database();
    // The first node creates the table; the others connect to it at once.
    let first = rt.block_on(node());
    let nodes: Vec<Arc<SqliteLockProvider>> = std::iter::once(first)
        .chain(rt.block_on(async { futures_join(NODES - 1, |_| node()).await }))
        .map(Arc::new)
        .collect();
    let connections: Vec<Arc<tokio::sync::Mutex<SqliteConnection>>> = rt
        .block_on(async {
            futures_join(NODES - 1, |_| async {
                SqliteConnection::connect(&url()).await.unwrap()
            })
            .await
        })
        .into_iter()
        .map(|c| Arc::new(tokio::sync::Mutex::new(c)))
        .collect();
    let (contended, uncontended) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let (held_contended, select_floor) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let mut group = c.benchmark_group("contention");
    group.sample_size(20);
    group.bench_function("provider_32_nodes_one_name", |b| {
        b.to_async(rt).iter_custom(|rounds| {
            let (nodes, contended) = (&nodes, &contended);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let (times, winners) = provider_round(nodes).await;
                    assert_eq!(winners.len(), 1, "exactly one node wins a round");
                    for winner in winners {
                        assert!(winner.unlock().await.unwrap());
                    }
                    total += times.iter().sum::<Duration>() / times.len() as u32;
                    contended.lock().unwrap().extend(times);
                }
                total
            }
        })
    });
    // The lock is already held (a job is running) and every other node's tick tries it at
    // once: every attempt is refused.
    group.bench_function("provider_31_nodes_held_name", |b| {
        b.to_async(rt).iter_custom(|rounds| {
            let (nodes, refused) = (&nodes, &held_contended);
            async move {
                let holder = acquire(&nodes[0]).await.expect("free between rounds");
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let (times, winners) = provider_round(&nodes[1..]).await;
                    assert!(
                        winners.is_empty(),
                        "the lock is held: every attempt is refused"
                    );
                    total += times.iter().sum::<Duration>() / times.len() as u32;
                    refused.lock().unwrap().extend(times);
                }
                assert!(holder.unlock().await.unwrap());
                total
            }
        })
    });
    // The floor for any statement 31 clients send at once on this machine: what is left of a
    // refused attempt's ratio beyond it is the lock's, not the scheduler's.
    group.bench_function("select_1_31_connections", |b| {
        b.to_async(rt).iter_custom(|rounds| {
            let (connections, floor) = (&connections, &select_floor);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let times = select_round(connections).await;
                    total += times.iter().sum::<Duration>() / times.len() as u32;
                    floor.lock().unwrap().extend(times);
                }
                total
            }
        })
    });
    group.bench_function("provider_1_node", |b| {
        b.to_async(rt).iter_custom(|rounds| {
            let (node, uncontended) = (&nodes[0], &uncontended);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let start = Instant::now();
                    let handle = acquire(node).await.expect("nobody else holds it");
                    let time = start.elapsed();
                    assert!(handle.unlock().await.unwrap());
                    total += time;
                    uncontended.lock().unwrap().push(time);
                }
                total
            }
        })
    });
    group.finish();
    report("provider, 32 nodes", &contended, &uncontended);
    report(
        "provider, 31 nodes refused by a held lock",
        &held_contended,
        &uncontended,
    );
    report(
        "SELECT 1 on 31 connections at once (the machine's floor)",
        &select_floor,
        &uncontended,
    );
    drop(nodes);
    drop(connections);
    remove_database();
}

/// Runs `make(i)` for `0..n` at once.
async fn futures_join<T: Send + 'static, F>(n: usize, make: impl Fn(usize) -> F) -> Vec<T>
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

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    contention(c, &rt);
}

criterion_group!(contention_benches, benches);
criterion_main!(contention_benches);
