//! [`MongoLockProvider::shutdown`] against a MongoDB server (`SHEDLOCK_TEST_MONGO_URL`), each
//! check on an async runtime of its own, all in a database of their own
//! (`shedlock_shutdown_<uuid>`, dropped at the end).
//!
//! The `mongodb` driver 3.9.1 panics now and then when a runtime ends right after a client it
//! made was dropped (`SendError` in `cmap/connection_requester.rs`): the dropped client starts
//! an `endSessions` task, which can meet its connection pool's task already dropped by the
//! runtime; about 2 runtime ends in 100 here. `no_panic_at_exit_after_shutdown` runs
//! [`CHILDREN`] child processes one after another (this binary again, with [`ROLE`] set), each
//! ending [`CYCLES`] runtimes after holding, racing for and releasing locks on two nodes and
//! calling `shutdown`, and asserts that none exits with an error or prints a panic. With
//! `SHEDLOCK_SHUTDOWN_MEASURE=1` it first runs the same children without `shutdown` and prints
//! how many panicked (not asserted: it is the driver's race).

use shedlock_test_support::settings;
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use mongodb::Client;
use shedlock_core::{Acquisition, LockConfiguration, LockError, LockHandle, LockProvider};
use shedlock_mongo::MongoLockProvider;

/// Set in a child process: `shutdown` (end each runtime after `MongoLockProvider::shutdown`)
/// or `drop` (end it without).
const ROLE: &str = "SHEDLOCK_SHUTDOWN_TEST_ROLE";
/// The database a child uses.
const DATABASE: &str = "SHEDLOCK_SHUTDOWN_TEST_DATABASE";
/// Child processes per role.
const CHILDREN: usize = 50;
/// Runtimes each child starts and ends.
const CYCLES: usize = 10;
/// Nodes kept busy while `shutdown` runs.
const BUSY_NODES: usize = 4;

/// A runtime as an application's or the CLI's: a few worker threads.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn minute(name: &str) -> LockConfiguration {
    LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap()
}

async fn connect(database: &str) -> MongoLockProvider {
    MongoLockProvider::builder()
        .database(database)
        .operation_timeout(Duration::from_secs(5))
        .connect(&settings::MONGO.value())
        .await
        .unwrap()
}

async fn acquire(provider: &impl LockProvider, name: &str) -> Box<dyn LockHandle> {
    match provider.try_lock(&minute(name)).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("expected to acquire {name:?}, got {other:?}"),
    }
}

/// An error saying the client was shut down (and nothing sent), as every operation after
/// `shutdown` must answer.
fn assert_shut_down<T: std::fmt::Debug>(answer: Result<T, LockError>) {
    match answer {
        Err(LockError::Backend { message, .. })
            if message.contains("was shut down") && message.contains("nothing was") => {}
        other => panic!("expected an error saying the client was shut down, got {other:?}"),
    }
}

/// One child: `CYCLES` times, a runtime that connects, takes locks on two nodes (one held to
/// the end, several racing for one name), then ends with or without `shutdown`.
fn child(role: &str) -> ExitCode {
    let database = std::env::var(DATABASE).unwrap();
    let shut_down = match role {
        "shutdown" => true,
        "drop" => false,
        other => panic!("unknown role {other:?}"),
    };
    let me = std::process::id();
    for cycle in 0..CYCLES {
        let database = database.clone();
        runtime().block_on(async move {
            let provider = Arc::new(connect(&database).await);
            let other = provider.node();
            let held = acquire(&*provider, &format!("held-{me}-{cycle}")).await;
            let racing = minute("racing");
            let attempts = futures_util::future::join_all((0..6).map(|i| {
                if i % 2 == 0 {
                    provider.try_lock(&racing)
                } else {
                    other.try_lock(&racing)
                }
            }))
            .await;
            for attempt in attempts {
                if let Acquisition::Acquired(handle) = attempt.unwrap() {
                    assert!(handle.unlock().await.unwrap());
                }
            }
            let released = acquire(&other, &format!("released-{me}-{cycle}")).await;
            assert!(released.unlock().await.unwrap());
            if shut_down {
                assert!(
                    provider.shutdown().await,
                    "the shutdown did not finish in time"
                );
                // The held handle and the other node answer with errors from now on.
                assert_shut_down(held.unlock().await);
                assert_shut_down(other.try_lock(&minute("after")).await);
            }
        });
    }
    ExitCode::SUCCESS
}

/// Runs `CHILDREN` children of `role`, one after another (several at once panic less: the
/// race is one of timing); how many exited with an error, how many printed a panic, and the
/// first such child's status and stderr.
fn run_children(role: &str, database: &str) -> (usize, usize, Option<String>) {
    let exe = std::env::current_exe().unwrap();
    let (mut failed, mut panicked, mut sample) = (0, 0, None);
    for _ in 0..CHILDREN {
        let output = Command::new(&exe)
            .env(ROLE, role)
            .env(DATABASE, database)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let bad_exit = !output.status.success();
        let panic = stderr.contains("panicked");
        failed += usize::from(bad_exit);
        panicked += usize::from(panic);
        if (bad_exit || panic) && sample.is_none() {
            sample = Some(format!("{}\n{stderr}", output.status));
        }
    }
    (failed, panicked, sample)
}

fn no_panic_at_exit_after_shutdown(database: &str) -> Result<(), String> {
    if std::env::var_os("SHEDLOCK_SHUTDOWN_MEASURE").is_some() {
        let (failed, panicked, sample) = run_children("drop", database);
        println!(
            "  without shutdown: {panicked} of {CHILDREN} children ({} runtime ends) printed a \
             panic, {failed} exited with an error",
            CHILDREN * CYCLES
        );
        if let Some(sample) = sample {
            println!("  first:\n{sample}");
        }
    }
    let (failed, panicked, sample) = run_children("shutdown", database);
    println!(
        "  with shutdown: {panicked} of {CHILDREN} children ({} runtime ends) printed a panic, \
         {failed} exited with an error",
        CHILDREN * CYCLES
    );
    match sample {
        None => Ok(()),
        Some(sample) => Err(format!(
            "{failed} children failed and {panicked} panicked; the first:\n{sample}"
        )),
    }
}

/// After `shutdown`, every node on the client and every handle still held answers with an
/// error, nothing is sent, and the lock held stays held (another client cannot take it).
async fn nodes_and_handles_fail_after_shutdown(database: &str) {
    let provider = connect(database).await;
    let other = provider.node();
    let held = acquire(&other, "kept").await;
    assert!(held.extend(Duration::from_secs(60)).await.unwrap());
    assert!(other.shutdown().await);
    assert_shut_down(held.unlock().await);
    assert_shut_down(held.extend(Duration::from_secs(60)).await);
    assert_shut_down(provider.try_lock(&minute("fresh")).await);
    assert_shut_down(other.try_lock(&minute("kept")).await);
    let admin: &dyn shedlock_core::LockAdmin = &provider;
    assert_shut_down(admin.inspect_lock("kept").await);
    // Called again: already shut down.
    assert!(provider.shutdown().await);
    // The lock was not released: a client of its own finds it held.
    let later = connect(database).await;
    assert!(matches!(
        later.try_lock(&minute("kept")).await.unwrap(),
        Acquisition::NotAcquired(_)
    ));
    assert!(later.shutdown().await);
}

/// Nodes still busy can keep the driver's shutdown waiting as long as they go on (it waits for
/// their operations): `shutdown` returns within the operation timeout all the same (with four
/// busy nodes, typically `false`), and once they stop it finishes.
async fn shutdown_is_bounded_while_a_node_is_busy(database: &str) {
    let timeout = Duration::from_millis(800);
    let provider = MongoLockProvider::builder()
        .database(database)
        .operation_timeout(timeout)
        .connect(&settings::MONGO.value())
        .await
        .unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..BUSY_NODES)
        .map(|i| {
            let busy = provider.node();
            let stopping = stop.clone();
            tokio::spawn(async move {
                let config = minute(&format!("busy-{i}"));
                let (mut answers, mut errors) = (0, 0);
                while !stopping.load(Ordering::Relaxed) {
                    match busy.try_lock(&config).await {
                        Ok(Acquisition::Acquired(handle)) => match handle.unlock().await {
                            Ok(_) => answers += 1,
                            Err(_) => errors += 1,
                        },
                        Ok(_) => answers += 1,
                        Err(_) => {
                            errors += 1;
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                }
                (answers, errors)
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let finished = provider.shutdown().await;
    let took = started.elapsed();
    assert!(
        took < timeout + Duration::from_millis(500),
        "shutdown took {took:?} with the operation timeout {timeout:?}"
    );
    println!("  while {BUSY_NODES} nodes were busy: shutdown returned {finished} after {took:?}");
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        let (answers, errors) = worker.await.unwrap();
        println!("    a busy node: {answers} answers, {errors} errors");
    }
    assert!(
        provider.shutdown().await,
        "a shutdown with nothing running must finish"
    );
    assert_shut_down(provider.try_lock(&minute("busy")).await);
}

/// A provider on the application's client leaves that client alone (the provider goes on
/// working); the application shuts it down itself, and the provider's operations then fail
/// with the same error.
async fn the_application_client_is_left_alone(database: &str) {
    let client = Client::with_uri_str(settings::MONGO.value()).await.unwrap();
    let provider = MongoLockProvider::builder()
        .database(database)
        .build(&client)
        .unwrap();
    assert!(!provider.shutdown().await);
    let handle = acquire(&provider, "application").await;
    assert!(handle.unlock().await.unwrap());
    client.clone().shutdown().await;
    assert_shut_down(provider.try_lock(&minute("application")).await);
}

fn main() -> ExitCode {
    if let Ok(role) = std::env::var(ROLE) {
        return child(&role);
    }
    let database = format!("shedlock_shutdown_{}", uuid::Uuid::new_v4().simple());
    let (mut passed, mut failed) = (0, 0);
    let mut check = |name: &str, outcome: Result<(), String>| match &outcome {
        Ok(()) => {
            passed += 1;
            println!("test {name} ... ok");
        }
        Err(why) => {
            failed += 1;
            println!("test {name} ... FAILED\n{why}");
        }
    };
    let in_runtime = |check: fn(&str) -> std::pin::Pin<Box<dyn Future<Output = ()> + '_>>| {
        let database = database.clone();
        std::panic::catch_unwind(move || runtime().block_on(check(&database))).map_err(|panic| {
            let message = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied());
            message.unwrap_or("(see the panic above)").to_owned()
        })
    };
    check(
        "nodes_and_handles_fail_after_shutdown",
        in_runtime(|database| Box::pin(nodes_and_handles_fail_after_shutdown(database))),
    );
    check(
        "shutdown_is_bounded_while_a_node_is_busy",
        in_runtime(|database| Box::pin(shutdown_is_bounded_while_a_node_is_busy(database))),
    );
    check(
        "the_application_client_is_left_alone",
        in_runtime(|database| Box::pin(the_application_client_is_left_alone(database))),
    );
    check(
        "no_panic_at_exit_after_shutdown",
        no_panic_at_exit_after_shutdown(&database),
    );
    let cleanup = database.clone();
    runtime().block_on(async move {
        let client = Client::with_uri_str(settings::MONGO.value()).await.unwrap();
        let _ = client.database(&cleanup).drop().await;
        client.shutdown().await;
    });
    let verdict = if failed == 0 { "ok" } else { "FAILED" };
    println!("\ntest result: {verdict}. {passed} passed; {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
