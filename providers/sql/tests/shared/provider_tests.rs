//! What every SQL provider's tests need: the server from the environment, table names of
//! their own so tests run in parallel and again on a persistent database, and short ways to
//! run SQL and take locks. Each provider's `tests/<backend>_provider.rs` includes this file
//! with `#[path]`; a target uses only some of it.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use shedlock_core::{Acquisition, LockConfiguration, LockHandle, LockProvider};
use sqlx::pool::PoolOptions;
use sqlx::{Database, Executor, IntoArguments, Pool};

/// The test server's URL from `var`; a missing variable fails the test loudly, it never
/// skips. `server` and `example` say what to set it to.
pub fn url_from_env(var: &str, server: &str, example: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: these tests need {server}, e.g. {var}={example}")
    })
}

/// A pool of our own for setup and inspection SQL.
pub async fn pool<DB: Database>(url: &str) -> Pool<DB> {
    PoolOptions::<DB>::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(url)
        .await
        .unwrap_or_else(|e| panic!("connect to the test server: {e}"))
}

/// A table name no other test or run uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Runs SQL built by the test itself.
pub async fn exec<DB: Database>(pool: &Pool<DB>, sql: &str)
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
{
    sqlx::query(sqlx::AssertSqlSafe(sql.to_owned()))
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// A lock configuration, unwrapped.
pub fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

/// Tries to lock and returns the handle, or `None` when someone else holds it.
pub async fn lock(
    provider: &dyn LockProvider,
    name: &str,
    at_most: Duration,
) -> Option<Box<dyn LockHandle>> {
    match provider
        .try_lock(&config(name, at_most, Duration::ZERO))
        .await
        .unwrap()
    {
        Acquisition::Acquired(handle) => Some(handle),
        Acquisition::NotAcquired(_) => None,
    }
}

/// How long a test lock is held when the test does not wait for it to expire.
const MINUTE: Duration = Duration::from_secs(60);

/// Races `nodes` for the first acquire of five new names: each round, exactly one wins.
pub async fn exactly_one_racing_node_acquires(nodes: &[Arc<dyn LockProvider>]) {
    for round in 0..5 {
        let name = format!("race-{round}");
        let tasks: Vec<_> = nodes
            .iter()
            .map(|node| {
                let (node, name) = (node.clone(), name.clone());
                tokio::spawn(async move { lock(&*node, &name, MINUTE).await })
            })
            .collect();
        let mut acquired = 0;
        for task in tasks {
            if task.await.unwrap().is_some() {
                acquired += 1;
            }
        }
        assert_eq!(
            acquired,
            1,
            "round {round}: exactly one of {} nodes",
            nodes.len()
        );
    }
}

/// A release keeps the lock until `lock_at_least_for` has passed, and an extend moves
/// `lock_until` forward, as `node_b` sees it.
pub async fn release_keeps_at_least_and_extend_moves_the_lock(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
) {
    let held = node_a
        .try_lock(&config("at-least", MINUTE, Duration::from_millis(600)))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    let released_at = Instant::now();
    assert!(held.unlock().await.unwrap());
    assert!(
        lock(node_b, "at-least", MINUTE).await.is_none(),
        "still within at-least"
    );
    tokio::time::sleep(
        Duration::from_millis(600).saturating_sub(released_at.elapsed())
            + Duration::from_millis(150),
    )
    .await;
    let b = lock(node_b, "at-least", Duration::from_millis(300))
        .await
        .expect("free once at-least has passed");

    // Extend: B holds for 300 ms, extends to 1 min, so A still cannot take it after 500 ms.
    assert!(b.extend(MINUTE).await.unwrap());
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(lock(node_a, "at-least", MINUTE).await.is_none(), "extended");
    assert!(b.unlock().await.unwrap());
}

/// `node_a`'s lock expires and `node_b` takes it: `node_a`'s stale handle can neither extend
/// nor release `node_b`'s lock. Give both nodes the same holder name: ShedLock would confuse
/// the two, the per-acquisition id must not.
pub async fn an_expired_holder_cannot_touch_the_next_holders_lock(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
) {
    let stale = lock(node_a, "job", Duration::from_millis(200))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    let current = lock(node_b, "job", MINUTE)
        .await
        .expect("expired, so B takes it");
    assert!(
        !stale.extend(MINUTE).await.unwrap(),
        "stale extend must not touch B's lock"
    );
    assert!(
        !stale.unlock().await.unwrap(),
        "stale release must not touch B's lock"
    );
    assert!(
        lock(node_a, "job", MINUTE).await.is_none(),
        "B still holds it"
    );
    assert!(current.unlock().await.unwrap());
}
