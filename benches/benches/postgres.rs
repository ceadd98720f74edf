//! PostgreSQL (`SHEDLOCK_TEST_POSTGRES_URL`) through the facade, beside a one-row `UPDATE` and
//! a `SELECT` of that row by its key, sent by sqlx on a connection of the bench's own, and
//! beside a peer.
//!
//! The peer, `peer_pg_advisory_lock_cycle`, is sqlx's `PgAdvisoryLock` taken and released on a
//! connection of its own: a different mechanism. An advisory lock lives in the server's memory
//! for as long as the session that took it, with no expiry: a node that hangs holds it for
//! ever, a node whose connection drops loses it mid-task, and nothing of it is written to disk.
//! It is the lower bound of what a PostgreSQL lock round trip can cost, not an equivalent of
//! ShedLock's `lock_at_most_for`.

use criterion::{Criterion, criterion_group, criterion_main};
use shedlock_benches::floors::SqlDriver;
use shedlock_benches::{connect_node, groups, scenarios, server_url};
use sqlx::postgres::PgAdvisoryLock;
use sqlx::{Connection, PgConnection};

fn postgres(c: &mut Criterion) {
    let url = server_url("SHEDLOCK_TEST_POSTGRES_URL");
    let runtime = groups::multi_thread_runtime();
    let driver = runtime
        .block_on(SqlDriver::postgres(&url))
        .expect("the PostgreSQL server answers");
    let connection = runtime
        .block_on(PgConnection::connect(&url))
        .expect("the PostgreSQL server answers");
    let connection = tokio::sync::Mutex::new(connection);
    let advisory = PgAdvisoryLock::new(format!("{}-advisory", scenarios::run_prefix()));
    groups::register(
        c,
        &runtime,
        "postgres",
        || connect_node(&url),
        &driver,
        |group| {
            group.bench_function("peer_pg_advisory_lock_cycle", |b| {
                b.to_async(&runtime).iter(|| async {
                    let mut connection = connection.lock().await;
                    let guard = advisory
                        .try_acquire(&mut *connection)
                        .await
                        .expect("the server answers")
                        .left()
                        .expect("nobody else holds the advisory lock");
                    guard.release_now().await.expect("the server answers");
                })
            });
        },
    );
}

criterion_group!(benches, postgres);
criterion_main!(benches);
