//! What every MySQL or MariaDB test needs: the server from the environment, and table names of its
//! own so tests run in parallel and again on a persistent database.

#![allow(dead_code)]

use std::time::Duration;

use shedlock_core::{Acquisition, LockConfiguration, LockHandle, LockProvider};
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

/// The environment variable naming the test server.
pub const URL_VAR: &str = "SHEDLOCK_TEST_MYSQL_URL";

/// The test server's URL; a missing variable fails the test loudly, it never skips.
pub fn url() -> String {
    std::env::var(URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{URL_VAR} is not set: these tests need a MySQL or MariaDB server, e.g. \
             {URL_VAR}=mysql://root@127.0.0.1:3306/test"
        )
    })
}

/// A pool of our own for setup and inspection SQL.
pub async fn pool() -> MySqlPool {
    MySqlPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(Duration::from_secs(5))
        .connect(&url())
        .await
        .expect("connect to the MySQL or MariaDB test server")
}

/// A table name no other test or run uses.
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}_{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Runs SQL built by the test itself.
pub async fn exec(pool: &MySqlPool, sql: &str) {
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
