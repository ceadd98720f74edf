//! What every SQL provider's tests need: the server from the environment, table names of
//! their own so tests run in parallel and again on a persistent database, and short ways to
//! run SQL and take locks. Each provider's `tests/<backend>_provider.rs` includes this file
//! with `#[path]`; a target uses only some of it.

#![allow(dead_code)]

use std::time::Duration;

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
