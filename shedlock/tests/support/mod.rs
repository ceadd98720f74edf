//! What the facade's test files share: bounded scenarios, names of their own, and the servers
//! named by `SHEDLOCK_TEST_<BACKEND>_URL`. Each test file uses only some of it.

#![allow(dead_code)]

use std::future::Future;
use std::time::Duration;

/// Every scenario that talks to a server is bounded, so a hung backend fails the test.
pub async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(60), test)
        .await
        .expect("the test did not finish within 60 s")
}

/// `prefix` and a value no other run uses, so runs can share a server.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

/// `url` with its scheme replaced by `scheme`.
pub fn with_scheme(scheme: &str, url: &str) -> String {
    let (_, rest) = url.split_once("://").expect("a URL with a scheme");
    format!("{scheme}://{rest}")
}
