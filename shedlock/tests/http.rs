//! `shedlock::http` served for real: an axum server on a free port of 127.0.0.1, mounted under
//! `/admin/shedlock` in an application router with its own state, asked over plain HTTP/1.1
//! (a request written to a TCP socket, the answer read back), in front of real providers.
//!
//! Every scenario runs against the in-process provider, and against SQLite (a file in the temp
//! directory) and PostgreSQL (`SHEDLOCK_TEST_POSTGRES_URL`) when their features are on:
//! `cargo test -p shedlock --all-features --test http`. The client's mistakes the providers
//! refuse (a malformed acquisition id or page cursor) are also asked of MySQL/MariaDB, Redis,
//! etcd, MongoDB and ZooKeeper (`SHEDLOCK_TEST_<BACKEND>_URL`), each when its feature is on.
#![cfg(feature = "http")]
// Each backend's module calls the scenarios; in a build with none of their features on, the
// scenarios and their helpers have no caller.
#![cfg_attr(not(some_backend), allow(dead_code, unused_imports, unused_macros))]

mod support;

use shedlock_test_support::settings;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use shedlock::http::LockRoutes;
use shedlock::{AnyLockProvider, LockConfiguration, LockHandle, LockProvider};
use support::served::{MOUNT, Server, serve};
use support::{bounded, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// `text` percent-encoded for a path segment or a query value: every byte but the unreserved.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| {
            if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
                char::from(byte).to_string()
            } else {
                format!("%{byte:02X}")
            }
        })
        .collect()
}

/// One HTTP answer: its status and its body as JSON (`Null` when empty).
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Value,
}

impl Answer {
    fn error(&self) -> &str {
        self.body["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error message in {self:?}"))
    }
}

impl Server {
    async fn get(&self, target: &str) -> Answer {
        self.send("GET", target, None).await
    }

    async fn post_json(&self, target: &str, body: &Value) -> Answer {
        self.send(
            "POST",
            target,
            Some(("application/json", &body.to_string())),
        )
        .await
    }

    /// Writes one request on a new connection and reads the answer to its end.
    async fn send(&self, method: &str, target: &str, body: Option<(&str, &str)>) -> Answer {
        let mut request = format!(
            "{method} {MOUNT}{target} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n",
            self.address
        );
        let content = match body {
            Some((content_type, content)) => {
                request.push_str(&format!("Content-Type: {content_type}\r\n"));
                content
            }
            None => "",
        };
        request.push_str(&format!(
            "Content-Length: {}\r\n\r\n{content}",
            content.len()
        ));
        let mut stream = TcpStream::connect(self.address).await.unwrap();
        stream.write_all(request.as_bytes()).await.unwrap();
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.unwrap();
        let raw = String::from_utf8(raw).unwrap();
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no end of headers in {raw:?}"));
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status in {head:?}"));
        let length = head
            .lines()
            .find_map(|line| {
                let (name, value) = line.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse::<usize>().unwrap())
            })
            .unwrap_or_else(|| panic!("no Content-Length in {head:?}"));
        assert_eq!(body.len(), length, "the body of {head:?}");
        let body = if body.is_empty() {
            Value::Null
        } else {
            serde_json::from_str(body).unwrap_or_else(|error| panic!("{error}: {body:?}"))
        };
        Answer { status, body }
    }
}

/// How each backend's scenarios reach it: another node (its own provider instance) per call.
trait Backend {
    async fn node(&self) -> AnyLockProvider;

    /// A page cursor this backend never gives (a cursor that is a plain name is never
    /// malformed): `None` for such backends.
    fn malformed_cursor(&self) -> Option<&'static str> {
        None
    }
}

async fn acquire(node: &AnyLockProvider, name: &str) -> Box<dyn LockHandle> {
    let config = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
    node.try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .unwrap_or_else(|| panic!("{name} is free, so it is acquired"))
}

async fn is_free(node: &AnyLockProvider, name: &str) -> bool {
    let config = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
    match node.try_lock(&config).await.unwrap().into_handle() {
        Some(handle) => {
            assert!(handle.unlock().await.unwrap());
            true
        }
        None => false,
    }
}

/// The names of a listing of `prefix`, page by page of `limit`, following `next`.
async fn list_by_pages(server: &Server, prefix: &str, limit: usize) -> (Vec<Value>, usize) {
    let mut locks = Vec::new();
    let mut pages = 0;
    let mut after = None::<String>;
    loop {
        let mut target = format!("/locks?prefix={}&limit={limit}", encoded(prefix));
        if let Some(cursor) = &after {
            target.push_str(&format!("&after={}", encoded(cursor)));
        }
        let answer = server.get(&target).await;
        assert_eq!(answer.status, 200, "{target}: {answer:?}");
        pages += 1;
        assert!(pages <= 100, "the listing does not end: {answer:?}");
        let page = answer.body["locks"].as_array().unwrap().clone();
        assert!(
            page.len() <= limit,
            "{} locks on a page of {limit}",
            page.len()
        );
        locks.extend(page);
        match &answer.body["next"] {
            Value::Null => return (locks, pages),
            Value::String(cursor) => after = Some(cursor.clone()),
            other => panic!("next is {other:?}"),
        }
    }
}

async fn a_listing_pages_through_next(backend: impl Backend) {
    let node = backend.node().await;
    let prefix = format!("{}/", unique("http-list"));
    // A space and a `%` in every name, and a name that shares all but the prefix's last char.
    let names: Vec<String> = (0..5).map(|i| format!("{prefix}{i} 100%")).collect();
    let mut handles = Vec::new();
    for name in &names {
        handles.push(acquire(&node, name).await);
    }
    let sibling = acquire(&node, prefix.trim_end_matches('/')).await;

    let server = serve(LockRoutes::new(backend.node().await)).await;
    let (locks, pages) = list_by_pages(&server, &prefix, 2).await;
    let listed: Vec<&str> = locks
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed, names,
        "every name once, in name order, none outside the prefix"
    );
    assert!(
        pages >= 3,
        "5 locks by pages of 2 take at least 3 pages, not {pages}"
    );
    for lock in &locks {
        assert_eq!(lock["state"], "held", "{lock}");
        assert!(lock["locked_by"].is_string(), "{lock}");
        assert!(
            lock["acquisition"]
                .as_str()
                .is_some_and(|id| !id.is_empty())
        );
    }
    // The default page size holds them all on one page.
    let answer = server
        .get(&format!("/locks?prefix={}", encoded(&prefix)))
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(
        answer.body["locks"].as_array().unwrap().len(),
        5,
        "{answer:?}"
    );
    assert_eq!(answer.body["next"], Value::Null);

    for handle in handles.iter().chain([&sibling]) {
        assert!(handle.unlock().await.unwrap());
    }
}

async fn one_lock_reads_as_listed_and_an_unknown_one_is_404(backend: impl Backend) {
    let node = backend.node().await;
    let name = unique("http-one");
    let handle = acquire(&node, &name).await;
    let server = serve(LockRoutes::new(backend.node().await)).await;

    let answer = server.get(&format!("/locks/{}", encoded(&name))).await;
    assert_eq!(answer.status, 200, "{answer:?}");
    let lock = &answer.body;
    assert_eq!(lock["name"], name.as_str());
    assert_eq!(lock["state"], "held");
    assert!(lock["locked_by"].is_string(), "{lock}");
    assert!(lock["locked_at"].is_string(), "{lock}");
    assert!(lock["held_until"].is_string(), "{lock}");
    let remaining = lock["remaining_ms"].as_u64().unwrap();
    assert!(remaining > 0 && remaining <= 60_000, "{lock}");
    if let Some(token) = handle.fencing_token() {
        assert_eq!(lock["fencing_token"], token, "{lock}");
    }
    let (listed, _) = list_by_pages(&server, &name, 10).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["acquisition"], lock["acquisition"]);
    assert_eq!(listed[0]["locked_at"], lock["locked_at"]);

    let never = unique("http-never");
    let answer = server.get(&format!("/locks/{never}")).await;
    assert_eq!(answer.status, 404, "{answer:?}");
    assert_eq!(answer.error(), format!("no lock named {never:?}"));

    assert!(handle.unlock().await.unwrap());
}

async fn names_with_slash_space_and_percent_round_trip(backend: impl Backend) {
    let node = backend.node().await;
    // `%2F` in the name itself: decoded once, it stays the three characters it is.
    let name = format!("{}/daily report 100%2F/x", unique("http-odd"));
    let handle = acquire(&node, &name).await;
    let server = serve(LockRoutes::new(backend.node().await).allow_force_unlock(true)).await;
    let path = format!("/locks/{}", encoded(&name));

    let answer = server.get(&path).await;
    assert_eq!(answer.status, 200, "{path}: {answer:?}");
    assert_eq!(answer.body["name"], name.as_str());
    let (listed, _) = list_by_pages(&server, &name, 10).await;
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0]["name"], name.as_str());

    let acquisition = answer.body["acquisition"].clone();
    let answer = server
        .post_json(
            &format!("{path}/unlock"),
            &json!({ "acquisition": acquisition }),
        )
        .await;
    assert_eq!(answer.status, 200, "{answer:?}");
    assert!(is_free(&backend.node().await, &name).await);
    assert!(!handle.unlock().await.unwrap());
}

async fn force_unlock_is_absent_unless_the_app_opts_in(backend: impl Backend) {
    let node = backend.node().await;
    let name = unique("http-closed");
    let handle = acquire(&node, &name).await;
    let server = serve(LockRoutes::new(backend.node().await)).await;
    let path = format!("/locks/{}", encoded(&name));
    let acquisition = server.get(&path).await.body["acquisition"].clone();
    assert!(acquisition.is_string(), "{acquisition}");

    let answer = server
        .post_json(
            &format!("{path}/unlock"),
            &json!({ "acquisition": acquisition }),
        )
        .await;
    assert_eq!(answer.status, 404, "no such route: {answer:?}");
    assert!(!is_free(&backend.node().await, &name).await, "still held");
    assert_eq!(server.get(&path).await.body["acquisition"], acquisition);
    assert!(handle.unlock().await.unwrap(), "the holder still holds it");
}

async fn force_unlock_frees_only_the_acquisition_it_names(backend: impl Backend) {
    let (node_a, node_b, node_c) = (
        backend.node().await,
        backend.node().await,
        backend.node().await,
    );
    let name = unique("http-free");
    let held_by_a = acquire(&node_a, &name).await;
    let server = serve(LockRoutes::new(backend.node().await).allow_force_unlock(true)).await;
    let path = format!("/locks/{}", encoded(&name));
    let unlock = format!("{path}/unlock");
    let seen = server.get(&path).await.body;
    let acquisition = seen["acquisition"].as_str().unwrap().to_owned();

    // Refused bodies change nothing.
    let answer = server
        .send(
            "POST",
            &unlock,
            Some((
                "text/plain",
                &json!({ "acquisition": acquisition }).to_string(),
            )),
        )
        .await;
    assert_eq!(answer.status, 415, "{answer:?}");
    assert!(
        answer.error().contains("Content-Type: application/json"),
        "{answer:?}"
    );
    let answer = server.post_json(&unlock, &json!({})).await;
    assert_eq!(answer.status, 422, "{answer:?}");
    assert!(answer.error().contains("acquisition"), "{answer:?}");
    let answer = server
        .post_json(&unlock, &json!({ "acquisition": "" }))
        .await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(
        answer.error().contains("acquisition must not be empty"),
        "{answer:?}"
    );
    assert_eq!(
        server.get(&path).await.body["acquisition"],
        acquisition.as_str()
    );

    let answer = server
        .post_json(&unlock, &json!({ "acquisition": acquisition }))
        .await;
    assert_eq!(
        (answer.status, &answer.body),
        (200, &json!({ "freed": true }))
    );
    let held_by_b = acquire(&node_b, &name).await;
    assert!(
        !held_by_a.unlock().await.unwrap(),
        "A's acquisition was freed"
    );

    // The acquisition the operator saw is stale now: B's is left alone.
    let answer = server
        .post_json(&unlock, &json!({ "acquisition": acquisition }))
        .await;
    assert_eq!(answer.status, 409, "{answer:?}");
    assert_eq!(answer.body["freed"], false);
    assert!(
        answer.error().contains("changed hands or is already free"),
        "{answer:?}"
    );
    assert!(!is_free(&node_c, &name).await, "B still holds it");
    let now = server.get(&path).await.body;
    assert_eq!(now["state"], "held");
    assert_ne!(now["acquisition"], acquisition.as_str());
    assert!(held_by_b.unlock().await.unwrap(), "B still held it");

    // Free, and never used: nothing to free.
    let answer = server
        .post_json(&unlock, &json!({ "acquisition": now["acquisition"] }))
        .await;
    assert_eq!(answer.status, 409, "a free lock: {answer:?}");
    let answer = server
        .post_json(
            &format!("/locks/{}/unlock", unique("http-never")),
            &json!({ "acquisition": acquisition }),
        )
        .await;
    assert_eq!(answer.status, 409, "a name never used: {answer:?}");
}

async fn a_bad_request_is_400_naming_what_is_wrong(backend: impl Backend) {
    let server = serve(LockRoutes::new(backend.node().await)).await;
    for (query, expected) in [
        ("limit=0", "\"limit\" must be a whole number from 1 to 1000"),
        (
            "limit=1001",
            "\"limit\" must be a whole number from 1 to 1000",
        ),
        (
            "limit=ten",
            "\"limit\" must be a whole number from 1 to 1000",
        ),
        ("after=", "\"after\" must not be empty"),
        ("perfix=report", "unknown query parameter \"perfix\""),
        ("limit=5&limit=6", "\"limit\" is given more than once"),
    ] {
        let answer = server.get(&format!("/locks?{query}")).await;
        assert_eq!(answer.status, 400, "{query}: {answer:?}");
        assert!(answer.error().contains(expected), "{query}: {answer:?}");
    }
    let answer = server.get("/locks/not%FFutf8").await;
    assert_eq!(answer.status, 400, "{answer:?}");
    assert!(
        answer.error().contains("lock name in the path"),
        "{answer:?}"
    );
}

/// The client's mistakes a provider refuses before sending anything are the request's fault:
/// `400` naming the value and its rule, never `502` (as if the backend had failed) or `409` (as
/// if the lock had changed hands), and nothing is freed. An `after=` or `prefix=` that is not
/// UTF-8 once decoded is refused as the same bytes in the path are, not listed as U+FFFD.
async fn the_clients_mistakes_are_400_and_change_nothing(backend: impl Backend) {
    let node = backend.node().await;
    let server = serve(LockRoutes::new(backend.node().await).allow_force_unlock(true)).await;
    let name = unique("malformed");
    let held = acquire(&node, &name).await;
    for acquisition in ["no-such-shape", "1", "%zz/%zz/x"] {
        let answer = server
            .post_json(
                &format!("/locks/{}/unlock", encoded(&name)),
                &json!({ "acquisition": acquisition }),
            )
            .await;
        assert_eq!(answer.status, 400, "{acquisition:?}: {answer:?}");
        let error = answer.error();
        assert!(
            error.contains("refused force-unlock of lock")
                && error.contains("before sending anything")
                && error.contains(&format!("{acquisition:?}")),
            "{acquisition:?}: {answer:?}"
        );
    }
    assert!(
        !is_free(&backend.node().await, &name).await,
        "a malformed id freed the lock"
    );
    if let Some(cursor) = backend.malformed_cursor() {
        let answer = server
            .get(&format!("/locks?after={}", encoded(cursor)))
            .await;
        assert_eq!(answer.status, 400, "{cursor:?}: {answer:?}");
        assert!(
            answer
                .error()
                .contains("refused list before sending anything")
                && answer.error().contains(&format!("{cursor:?}")),
            "{cursor:?}: {answer:?}"
        );
    }
    for query in ["after=%FF", "prefix=a%C3", "after=ok&prefix=%FE"] {
        let answer = server.get(&format!("/locks?{query}")).await;
        assert_eq!(answer.status, 400, "{query}: {answer:?}");
        assert!(
            answer.error().contains("is not UTF-8 once percent-decoded"),
            "{query}: {answer:?}"
        );
    }
    assert!(held.unlock().await.unwrap());
}

/// One `#[tokio::test]` per scenario for a backend.
macro_rules! scenarios {
    ($backend:expr) => {
        #[tokio::test]
        async fn a_listing_pages_through_next() {
            bounded(super::a_listing_pages_through_next($backend)).await;
        }

        #[tokio::test]
        async fn one_lock_reads_as_listed_and_an_unknown_one_is_404() {
            bounded(super::one_lock_reads_as_listed_and_an_unknown_one_is_404(
                $backend,
            ))
            .await;
        }

        #[tokio::test]
        async fn names_with_slash_space_and_percent_round_trip() {
            bounded(super::names_with_slash_space_and_percent_round_trip(
                $backend,
            ))
            .await;
        }

        #[tokio::test]
        async fn force_unlock_is_absent_unless_the_app_opts_in() {
            bounded(super::force_unlock_is_absent_unless_the_app_opts_in(
                $backend,
            ))
            .await;
        }

        #[tokio::test]
        async fn force_unlock_frees_only_the_acquisition_it_names() {
            bounded(super::force_unlock_frees_only_the_acquisition_it_names(
                $backend,
            ))
            .await;
        }

        #[tokio::test]
        async fn a_bad_request_is_400_naming_what_is_wrong() {
            bounded(super::a_bad_request_is_400_naming_what_is_wrong($backend)).await;
        }

        #[tokio::test]
        async fn the_clients_mistakes_are_400_and_change_nothing() {
            bounded(super::the_clients_mistakes_are_400_and_change_nothing(
                $backend,
            ))
            .await;
        }
    };
}

#[cfg(feature = "memory")]
mod memory {
    use super::*;

    /// One in-process store per test; each `connect` is another node on it.
    struct Memory(String);

    impl Backend for Memory {
        async fn node(&self) -> AnyLockProvider {
            shedlock::connect(&self.0).await.unwrap()
        }
    }

    fn store() -> Memory {
        Memory(format!("memory://{}", unique("http")))
    }

    scenarios!(store());

    #[tokio::test]
    async fn the_application_keeps_its_own_routes_and_state() {
        let server = serve(LockRoutes::new(Arc::new(store().node().await))).await;
        let mut stream = TcpStream::connect(server.address).await.unwrap();
        stream
            .write_all(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut raw = String::new();
        stream.read_to_string(&mut raw).await.unwrap();
        assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
        assert!(raw.ends_with("the application's own state"), "{raw}");
    }
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use super::*;
    use shedlock::sqlite::SqliteLockProvider;

    /// A database file of its own per test; each node makes the table if it is not there yet.
    struct Sqlite(String);

    impl Backend for Sqlite {
        async fn node(&self) -> AnyLockProvider {
            SqliteLockProvider::builder()
                .create_table_if_missing()
                .connect(format!("{}?mode=rwc", self.0))
                .await
                .unwrap();
            shedlock::connect(&self.0).await.unwrap()
        }
    }

    fn database() -> Sqlite {
        let dir = std::env::temp_dir().join(unique("shedlock-http"));
        std::fs::create_dir_all(&dir).unwrap();
        Sqlite(format!("sqlite://{}", dir.join("locks.db").display()))
    }

    scenarios!(database());
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use shedlock::postgres::PostgresLockProvider;

    /// The test database; names are unique per run, so runs and tests do not collide.
    struct Postgres(String);

    impl Backend for Postgres {
        /// Each node makes the table if it is not there yet, as replicas starting together
        /// on a new database would (the tests run in parallel, so they race to create it).
        async fn node(&self) -> AnyLockProvider {
            PostgresLockProvider::builder()
                .create_table_if_missing()
                .connect(self.0.clone())
                .await
                .unwrap();
            shedlock::connect(&self.0).await.unwrap()
        }
    }

    fn database() -> Postgres {
        Postgres(settings::POSTGRES.value())
    }

    scenarios!(database());

    #[tokio::test]
    async fn a_backend_that_went_away_is_503() {
        bounded(super::a_backend_that_went_away_is_503(
            settings::POSTGRES.value(),
            503,
        ))
        .await;
    }

    /// PostgreSQL text holds no NUL, so a listing's prefix or cursor with one is refused before
    /// anything is sent: the request's fault, not the backend's.
    #[tokio::test]
    async fn a_nul_in_a_prefix_or_cursor_is_400_naming_the_rule() {
        bounded(async {
            let server = serve(LockRoutes::new(database().node().await)).await;
            for (query, what) in [
                ("prefix=a%00b", "the prefix \"a\\0b\""),
                ("after=a%00b", "the page cursor \"a\\0b\""),
            ] {
                let answer = server.get(&format!("/locks?{query}")).await;
                assert_eq!(answer.status, 400, "{query}: {answer:?}");
                let error = answer.error();
                assert!(
                    error.starts_with("postgres refused list before sending anything")
                        && error.contains(what)
                        && error.contains("PostgreSQL text cannot contain the NUL character"),
                    "{query}: {answer:?}"
                );
            }
        })
        .await;
    }

    /// ShedLock's table takes 64 characters and PostgreSQL no NUL: a name it could never store
    /// is the request's fault, and says which rule it broke.
    #[tokio::test]
    async fn a_name_postgres_refuses_is_400_naming_the_rule() {
        bounded(async {
            let server = serve(LockRoutes::new(database().node().await)).await;
            for (name, rule) in [
                ("x".repeat(65), "the limit is 64"),
                ("a\0b".to_owned(), "cannot contain the NUL character"),
            ] {
                let answer = server.get(&format!("/locks/{}", encoded(&name))).await;
                assert_eq!(answer.status, 400, "{name:?}: {answer:?}");
                assert!(
                    answer
                        .error()
                        .contains("is not accepted by the postgres provider")
                        && answer.error().contains(rule),
                    "{name:?}: {answer:?}"
                );
            }
        })
        .await;
    }
}

/// A backend on a server, reached by `shedlock::connect`'s URL (making the table where there is
/// one), with the cursor it refuses, if any.
struct OnServer {
    url: String,
    malformed_cursor: Option<&'static str>,
}

impl Backend for OnServer {
    async fn node(&self) -> AnyLockProvider {
        AnyLockProvider::builder()
            .create_table_if_missing()
            .connect(&self.url)
            .await
            .unwrap_or_else(|error| panic!("connecting to {}: {error}", self.url))
    }

    fn malformed_cursor(&self) -> Option<&'static str> {
        self.malformed_cursor
    }
}

/// The `host:port` a one-server URL names (after the scheme and any user, before the path).
fn server_of(url: &str) -> &str {
    let (_, rest) = url.split_once("://").expect("a URL with a scheme");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    rest.split(['/', '?']).next().unwrap()
}

/// A backend that went away under a running HTTP view (its connections cut, its port closed)
/// is 503, as the docs promise for a backend that cannot be reached, on the request that meets
/// a connection cut under it: a read writes nothing, so no outcome is unknown. The requests
/// after it answer `later`: 503 where the client tries a new connection and is refused, 504
/// where it waits for the server to come back (ZooKeeper's queues requests while it
/// reconnects, so they get no answer in time).
async fn a_backend_that_went_away_is_503(url: String, later: u16) {
    let upstream = server_of(&url).to_owned();
    let proxy = shedlock_conformance::CountingProxy::start(&upstream)
        .await
        .unwrap();
    let mut through = url.replacen(&upstream, &proxy.local_addr().to_string(), 1);
    if through.starts_with("mongodb://") {
        // Else the driver reaches the server at the address the server gives for itself,
        // around the proxy.
        through.push_str(if through.contains('?') { "&" } else { "?" });
        through.push_str("directConnection=true");
    }
    let node = OnServer {
        url: through,
        malformed_cursor: None,
    }
    .node()
    .await;
    let server = serve(LockRoutes::new(Arc::new(node))).await;
    let name = unique("gone");
    let answer = server.get(&format!("/locks/{name}")).await;
    assert_eq!(answer.status, 404, "while the backend is up: {answer:?}");
    proxy.cut_open_connections();
    drop(proxy);
    let answer = server.get(&format!("/locks/{name}")).await;
    assert_eq!(answer.status, 503, "on the cut connection: {answer:?}");
    for target in ["/locks".to_owned(), format!("/locks/{name}")] {
        let answer = server.get(&target).await;
        assert_eq!(answer.status, later, "{target}: {answer:?}");
        assert!(
            !answer.error().contains("outcome is unknown"),
            "{target}: {answer:?}"
        );
    }
}

/// The client's mistakes on a backend reached by URL.
macro_rules! mistakes_on {
    ($feature:literal, $module:ident, $url:expr, $cursor:expr) => {
        mistakes_on!($feature, $module, $url, $cursor, 503);
    };
    ($feature:literal, $module:ident, $url:expr, $cursor:expr, $later:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            #[tokio::test]
            async fn the_clients_mistakes_are_400_and_change_nothing() {
                let backend = OnServer {
                    url: $url,
                    malformed_cursor: $cursor,
                };
                bounded(super::the_clients_mistakes_are_400_and_change_nothing(
                    backend,
                ))
                .await;
            }

            #[tokio::test]
            async fn a_backend_that_went_away_is_503() {
                bounded(super::a_backend_that_went_away_is_503($url, $later)).await;
            }
        }
    };
}

mistakes_on!("mysql", mysql, settings::MYSQL.value(), None);
mistakes_on!(
    "redis",
    redis,
    settings::REDIS.value(),
    Some("not-a-scan-cursor")
);
mistakes_on!(
    "etcd",
    etcd,
    {
        let url = settings::ETCD.value();
        let (_, rest) = url.split_once("://").expect("a URL with a scheme");
        format!("etcd://{rest}")
    },
    Some("not hex")
);
mistakes_on!(
    "mongo",
    mongo,
    format!(
        "{}/shedlock_http",
        settings::MONGO.value().trim_end_matches('/')
    ),
    None
);
mistakes_on!(
    "zookeeper",
    zookeeper,
    format!("zk://{}", settings::ZOOKEEPER.value()),
    Some("bad%zzescape"),
    504
);
