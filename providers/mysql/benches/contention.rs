//! Contention of the MySQL/MariaDB provider against a real server (`SHEDLOCK_TEST_MYSQL_URL`).
//!
//! 32 nodes (each with its own connections) try one name at the same moment; exactly one wins
//! each round. The time of one attempt is reported as p50/p99 next to an uncontended attempt,
//! together with 31 nodes refused by a held lock and the floor of `SELECT 1` sent on 31
//! dedicated connections at once.

#[path = "../../sql/benches/shared/contention.rs"]
mod shared;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_core::LockConfiguration;
use shedlock_mysql::MySqlLockProvider;
use sqlx::{Connection, MySqlConnection};
use tokio::runtime::Runtime;
use tokio::sync::Barrier;

const TABLE: &str = "shedlock_bench_contention";
const NODES: usize = 32;
const NAME: &str = "contended";

/// Makes the bench's row free, whatever an earlier, interrupted run left in it.
const FREE: &str = "UPDATE `shedlock_bench_contention` SET `lock_until` = \
     TIMESTAMPADD(SECOND, -1, UTC_TIMESTAMP(3)) WHERE `name` = ?";

fn url() -> String {
    std::env::var("SHEDLOCK_TEST_MYSQL_URL")
        .expect("SHEDLOCK_TEST_MYSQL_URL names the MySQL or MariaDB server to bench against")
}

fn config() -> LockConfiguration {
    LockConfiguration::new(NAME, Duration::from_secs(60), Duration::ZERO).unwrap()
}

async fn node() -> MySqlLockProvider {
    MySqlLockProvider::builder_from_url(url())
        .table_name(TABLE)
        .create_table_with_fencing_if_missing()
        .max_connections(2)
        .build()
        .await
        .unwrap()
}

/// One round of `SELECT 1` sent on every connection at the same moment.
async fn select_round(connections: &[Arc<tokio::sync::Mutex<MySqlConnection>>]) -> Vec<Duration> {
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
    let nodes: Vec<Arc<MySqlLockProvider>> = rt
        .block_on(async { shared::futures_join(NODES, |_| node()).await })
        .into_iter()
        .map(Arc::new)
        .collect();
    let connections: Vec<Arc<tokio::sync::Mutex<MySqlConnection>>> = rt
        .block_on(async {
            shared::futures_join(NODES - 1, |_| async {
                MySqlConnection::connect(&url()).await.unwrap()
            })
            .await
        })
        .into_iter()
        .map(|c| Arc::new(tokio::sync::Mutex::new(c)))
        .collect();
    rt.block_on(async {
        let mut admin = MySqlConnection::connect(&url()).await.unwrap();
        sqlx::query(FREE)
            .bind(NAME)
            .execute(&mut admin)
            .await
            .unwrap();
        admin.close().await.unwrap();
    });
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
                    let (times, winners) = shared::provider_round(nodes, &config()).await;
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
                let holder = shared::acquire(&*nodes[0], &config())
                    .await
                    .expect("free between rounds");
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let (times, winners) = shared::provider_round(&nodes[1..], &config()).await;
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
                    let handle = shared::acquire(&**node, &config())
                        .await
                        .expect("nobody else holds it");
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
    shared::report("provider, 32 nodes", &contended, &uncontended);
    shared::report(
        "provider, 31 nodes refused by a held lock",
        &held_contended,
        &uncontended,
    );
    shared::report(
        "SELECT 1 on 31 connections at once (the machine's floor)",
        &select_floor,
        &uncontended,
    );
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
