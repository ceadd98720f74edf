//! Contention and overhead of the PostgreSQL provider against a real server
//! (`SHEDLOCK_TEST_POSTGRES_URL`).
//!
//! - `cycle/provider` against `cycle/dedicated_connection`: one acquire + release through the
//!   provider, and the same two statements sent by sqlx on one connection of the bench's own:
//!   the provider's overhead over the driver.
//! - `contention/...`: 32 nodes (each with its own connections) try one name at the same moment;
//!   exactly one wins each round. The time of one attempt is reported as p50/p99 next to an
//!   uncontended attempt, for the provider and for the `INSERT ... ON CONFLICT DO UPDATE ...
//!   WHERE` upsert it used before, sent on 32 dedicated connections.

#[path = "../../sql/benches/shared/contention.rs"]
mod shared;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_core::LockConfiguration;
use shedlock_postgres::PostgresLockProvider;
use sqlx::{Connection, PgConnection};
use tokio::runtime::Runtime;
use tokio::sync::Barrier;

const TABLE: &str = "shedlock_bench_contention";
const NODES: usize = 32;
const NAME: &str = "contended";

/// The statements the provider sends for a known name (take-over, release) on [`TABLE`] with
/// its fencing column, written out so a dedicated connection sends exactly them.
const TAKE_OVER: &str = "WITH current AS MATERIALIZED (SELECT \"lock_until\" <= \
     timezone('utc', CURRENT_TIMESTAMP) AS free FROM \"shedlock_bench_contention\" \
     WHERE \"name\" = $1), taken AS (UPDATE \"shedlock_bench_contention\" AS lock_row SET \
     \"lock_until\" = timezone('utc', CURRENT_TIMESTAMP) + make_interval(secs => $3), \
     \"locked_at\" = timezone('utc', CURRENT_TIMESTAMP), \"locked_by\" = $2, \
     \"fencing_token\" = COALESCE(lock_row.\"fencing_token\", 0) + 1 \
     WHERE (SELECT free FROM current) AND lock_row.\"name\" = (SELECT \"name\" FROM \"shedlock_bench_contention\" WHERE \"name\" = $1 \
     AND \"lock_until\" <= timezone('utc', CURRENT_TIMESTAMP) FOR UPDATE SKIP LOCKED) \
     AND lock_row.\"lock_until\" <= timezone('utc', CURRENT_TIMESTAMP) \
     RETURNING lock_row.\"fencing_token\"::int8) SELECT (SELECT * FROM taken), \
     EXISTS (SELECT 1 FROM current)";
const RELEASE: &str = "UPDATE \"shedlock_bench_contention\" SET \"lock_until\" = \
     GREATEST(timezone('utc', CURRENT_TIMESTAMP), \"locked_at\" + make_interval(secs => $3)) \
     WHERE \"name\" = $1 AND \"locked_by\" = $2 AND \"lock_until\" > timezone('utc', CURRENT_TIMESTAMP)";
/// The acquire statement of the provider before it split insert and take-over.
const OLD_UPSERT: &str = "INSERT INTO \"shedlock_bench_contention\" AS lock_row (\"name\", \
     \"lock_until\", \"locked_at\", \"locked_by\", \"fencing_token\") VALUES ($1, \
     timezone('utc', CURRENT_TIMESTAMP) + make_interval(secs => $3), \
     timezone('utc', CURRENT_TIMESTAMP), $2, 1) ON CONFLICT (\"name\") DO UPDATE SET \
     \"lock_until\" = EXCLUDED.\"lock_until\", \"locked_at\" = EXCLUDED.\"locked_at\", \
     \"locked_by\" = EXCLUDED.\"locked_by\", \
     \"fencing_token\" = COALESCE(lock_row.\"fencing_token\", 0) + 1 \
     WHERE lock_row.\"lock_until\" <= timezone('utc', CURRENT_TIMESTAMP) \
     RETURNING lock_row.\"fencing_token\"::int8";
const FREE: &str = "UPDATE \"shedlock_bench_contention\" SET \"lock_until\" = \
     timezone('utc', CURRENT_TIMESTAMP) - interval '1 second' WHERE \"name\" = $1";

fn url() -> String {
    std::env::var("SHEDLOCK_TEST_POSTGRES_URL")
        .expect("SHEDLOCK_TEST_POSTGRES_URL names the PostgreSQL server to bench against")
}

fn config() -> LockConfiguration {
    LockConfiguration::new(NAME, Duration::from_secs(60), Duration::ZERO).unwrap()
}

async fn node() -> PostgresLockProvider {
    PostgresLockProvider::builder_from_url(url())
        .table_name(TABLE)
        .create_table_with_fencing_if_missing()
        .max_connections(2)
        .build()
        .await
        .unwrap()
}

fn cycle(c: &mut Criterion, rt: &Runtime) {
    let provider = rt.block_on(node());
    let mut connection = rt.block_on(PgConnection::connect(&url())).unwrap();
    rt.block_on(async {
        sqlx::query(FREE)
            .bind(NAME)
            .execute(&mut connection)
            .await
            .unwrap();
    });
    let mut group = c.benchmark_group("cycle");
    group.bench_function("provider", |b| {
        b.to_async(rt).iter(|| async {
            let handle = shared::acquire(&provider, &config())
                .await
                .expect("nobody else holds it");
            assert!(handle.unlock().await.unwrap());
        })
    });
    let connection = tokio::sync::Mutex::new(connection);
    group.bench_function("dedicated_connection", |b| {
        b.to_async(rt).iter(|| async {
            let mut connection = connection.lock().await;
            let holder = "bench#1";
            let token: Option<i64> = sqlx::query_scalar(TAKE_OVER)
                .bind(NAME)
                .bind(holder)
                .bind(60.0_f64)
                .fetch_one(&mut *connection)
                .await
                .unwrap();
            assert!(token.is_some(), "nobody else holds it");
            let released = sqlx::query(RELEASE)
                .bind(NAME)
                .bind(holder)
                .bind(0.0_f64)
                .execute(&mut *connection)
                .await
                .unwrap();
            assert_eq!(released.rows_affected(), 1);
        })
    });
    group.finish();
}

/// One round of `SELECT 1` sent on every connection at the same moment.
async fn select_round(connections: &[Arc<tokio::sync::Mutex<PgConnection>>]) -> Vec<Duration> {
    let barrier = Arc::new(Barrier::new(connections.len()));
    let tasks: Vec<_> = connections
        .iter()
        .map(|connection| {
            let (connection, barrier) = (connection.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut connection = connection.lock().await;
                barrier.wait().await;
                let start = Instant::now();
                let _: i32 = sqlx::query_scalar("SELECT 1")
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

async fn upsert_round(
    connections: &[Arc<tokio::sync::Mutex<PgConnection>>],
) -> (Vec<Duration>, usize) {
    let barrier = Arc::new(Barrier::new(connections.len()));
    let tasks: Vec<_> = connections
        .iter()
        .enumerate()
        .map(|(i, connection)| {
            let (connection, barrier) = (connection.clone(), barrier.clone());
            tokio::spawn(async move {
                let mut connection = connection.lock().await;
                barrier.wait().await;
                let start = Instant::now();
                let row: Option<i64> = sqlx::query_scalar(OLD_UPSERT)
                    .bind(NAME)
                    .bind(format!("bench#{i}"))
                    .bind(60.0_f64)
                    .fetch_optional(&mut *connection)
                    .await
                    .unwrap();
                (start.elapsed(), row.is_some())
            })
        })
        .collect();
    let mut times = Vec::with_capacity(connections.len());
    let mut winners = 0;
    for task in tasks {
        let (time, won) = task.await.unwrap();
        times.push(time);
        winners += usize::from(won);
    }
    (times, winners)
}

fn contention(c: &mut Criterion, rt: &Runtime) {
    let nodes: Vec<Arc<PostgresLockProvider>> = rt
        .block_on(async { shared::futures_join(NODES, |_| node()).await })
        .into_iter()
        .map(Arc::new)
        .collect();
    let connections: Vec<Arc<tokio::sync::Mutex<PgConnection>>> = rt
        .block_on(async {
            shared::futures_join(NODES, |_| async {
                PgConnection::connect(&url()).await.unwrap()
            })
            .await
        })
        .into_iter()
        .map(|c| Arc::new(tokio::sync::Mutex::new(c)))
        .collect();
    let admin = tokio::sync::Mutex::new(rt.block_on(PgConnection::connect(&url())).unwrap());
    let (contended, uncontended) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let (held_contended, select_floor) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
    let (old_contended, old_uncontended) = (Mutex::new(Vec::new()), Mutex::new(Vec::new()));
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
    // The case a refused acquire is about: the lock is already held (a job is running) and
    // every other node's tick tries it at once. None may wait on the holder's row.
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
            let (connections, floor) = (&connections[1..], &select_floor);
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
    group.bench_function("old_upsert_32_connections_one_name", |b| {
        b.to_async(rt).iter_custom(|rounds| {
            let (connections, old_contended, admin) = (&connections, &old_contended, &admin);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let (times, winners) = upsert_round(connections).await;
                    assert_eq!(winners, 1, "exactly one connection wins a round");
                    sqlx::query(FREE)
                        .bind(NAME)
                        .execute(&mut *admin.lock().await)
                        .await
                        .unwrap();
                    total += times.iter().sum::<Duration>() / times.len() as u32;
                    old_contended.lock().unwrap().extend(times);
                }
                total
            }
        })
    });
    group.bench_function("old_upsert_1_connection", |b| {
        b.to_async(rt).iter_custom(|rounds| {
            let (connections, old_uncontended, admin) = (&connections, &old_uncontended, &admin);
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..rounds {
                    let (times, winners) = upsert_round(&connections[..1]).await;
                    assert_eq!(winners, 1, "nobody else holds it");
                    sqlx::query(FREE)
                        .bind(NAME)
                        .execute(&mut *admin.lock().await)
                        .await
                        .unwrap();
                    total += times[0];
                    old_uncontended.lock().unwrap().extend(times);
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
    shared::report(
        "old upsert, 32 connections",
        &old_contended,
        &old_uncontended,
    );
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    cycle(c, &rt);
    contention(c, &rt);
}

criterion_group!(contention_benches, benches);
criterion_main!(contention_benches);
