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

/// The HTTP view served for real, as an application mounts it: an axum server on a free port of
/// 127.0.0.1, the view nested under [`MOUNT`](served::MOUNT) in a router with its own state and
/// routes.
#[cfg(feature = "http")]
pub mod served {
    use std::net::SocketAddr;

    use axum::Router;
    use axum::extract::State;
    use axum::routing::get;
    use shedlock::http::LockRoutes;
    use tokio::net::TcpListener;
    use tokio::task::JoinHandle;

    /// Where the tests mount the view, as an application would.
    pub const MOUNT: &str = "/admin/shedlock";

    /// The view served until dropped.
    pub struct Server {
        pub address: SocketAddr,
        task: JoinHandle<()>,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            self.task.abort();
        }
    }

    /// Serves `routes` nested in an application that has its own state and routes.
    pub async fn serve(routes: LockRoutes) -> Server {
        let app = Router::new()
            .route(
                "/health",
                get(|State(app): State<&'static str>| async move { app }),
            )
            .nest(MOUNT, routes.into_router())
            .with_state("the application's own state");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Server { address, task }
    }
}
