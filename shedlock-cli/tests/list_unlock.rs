//! `shedlock list` and `shedlock unlock` against every backend ci/ runs, each a real server
//! (`SHEDLOCK_TEST_<BACKEND>_URL`, set by ci/test.sh; a backend whose feature is on and whose
//! variable is missing fails its test, naming the variable) and SQLite on a file of its own.
//!
//! The test process takes the locks through the `shedlock` crate as nodes of a fleet would,
//! then points the binary at the same backend: it must list them as they are, free only the
//! acquisition it showed (never a lock that changed hands after it was shown), and refuse
//! names that do not exist. Every run uses names of its own.
#![cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "mysql",
    feature = "redis",
    feature = "etcd",
    feature = "mongo",
    feature = "zookeeper"
))]

mod command;

use std::process::Command;
use std::time::Duration;

use command::{Ran, Running, run, run_with_input, shedlock};
use serde_json::Value;
use shedlock::{
    AnyLockProvider, LockAdmin, LockConfiguration, LockHandle, LockInfo, LockProvider, LockState,
};

/// A backend as the binary is pointed at it and as the test's nodes reach it.
struct Backend {
    label: &'static str,
    url: String,
    /// The CA file for rediss:// and etcds://, given to the binary as --tls-ca-file.
    tls_ca_file: Option<String>,
}

impl Backend {
    fn plain(label: &'static str, url: String) -> Self {
        Self {
            label,
            url,
            tls_ca_file: None,
        }
    }

    /// The binary with this backend's URL in `SHEDLOCK_URL`, as an operator with a password in
    /// the URL would give it.
    fn cli(&self, args: &[&str]) -> Command {
        let mut command = shedlock(args);
        command.env("SHEDLOCK_URL", &self.url);
        if let Some(ca) = &self.tls_ca_file {
            command.args(["--tls-ca-file", ca]);
        }
        command
    }

    async fn node(&self) -> AnyLockProvider {
        let mut builder = AnyLockProvider::builder();
        if let Some(ca) = &self.tls_ca_file {
            builder = builder.tls_root_certificate(std::fs::read(ca).unwrap());
        }
        builder
            .connect(&self.url)
            .await
            .unwrap_or_else(|error| panic!("{}: the test's node connects: {error}", self.label))
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn acquire(node: &AnyLockProvider, name: &str, at_least: Duration) -> Box<dyn LockHandle> {
    let config = LockConfiguration::new(name, Duration::from_secs(60), at_least).unwrap();
    node.try_lock(&config)
        .await
        .unwrap()
        .into_handle()
        .unwrap_or_else(|| panic!("{name} is free, so the node takes it"))
}

async fn inspect(admin: &AnyLockProvider, name: &str) -> Option<LockInfo> {
    admin.inspect_lock(name).await.unwrap()
}

/// The table's rows, as cells (no cell holds a space), after checking its header.
fn table_rows(ran: &Ran) -> Vec<Vec<String>> {
    let mut lines = ran.stdout.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "STATE",
            "HOLDER",
            "LOCKED_AT",
            "HELD_UNTIL",
            "REMAINING",
            "FENCING",
            "ACQUISITION"
        ],
        "{}",
        ran.shown()
    );
    lines
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Lists, declines, frees, and refuses to free what changed hands, on one backend.
fn lists_and_frees_only_the_acquisition_it_showed(backend: &Backend) {
    let runtime = runtime();
    let id = &uuid::Uuid::new_v4().simple().to_string()[..10];
    let prefix = format!("cli-{}-{id}-", backend.label);
    let name = |suffix: &str| format!("{prefix}{suffix}");
    let (a, b) = runtime.block_on(async { (backend.node().await, backend.node().await) });

    let (a_first, a_second, _a_asked) = runtime.block_on(async {
        // Outside the prefix, though it shares most of it.
        let _sibling = acquire(
            &a,
            &format!("cli-{}-{id}_sibling", backend.label),
            Duration::ZERO,
        )
        .await;
        let released = acquire(&a, &name("released"), Duration::ZERO).await;
        assert!(released.unlock().await.unwrap());
        (
            acquire(&a, &name("first"), Duration::ZERO).await,
            acquire(&a, &name("second"), Duration::ZERO).await,
            acquire(&a, &name("asked"), Duration::ZERO).await,
        )
    });
    let held: Vec<LockInfo> = runtime.block_on(async {
        let mut held = Vec::new();
        for suffix in ["asked", "first", "second"] {
            held.push(
                inspect(&a, &name(suffix))
                    .await
                    .expect("a held lock is there"),
            );
        }
        held
    });

    // The table: the three held locks as the backend has them, the released one only where the
    // backend keeps its record, nothing outside the prefix.
    let listed = run(&mut backend.cli(&["list", "--prefix", &prefix]));
    assert_eq!(listed.code, Some(0), "{}", listed.shown());
    let rows = table_rows(&listed);
    let names: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
    let mut expected: Vec<String> = held.iter().map(|lock| lock.name.clone()).collect();
    let released_kept = runtime.block_on(inspect(&a, &name("released")));
    if released_kept.is_some() {
        expected.push(name("released"));
    }
    let mut sorted = names.clone();
    sorted.sort_unstable();
    expected.sort_unstable();
    assert_eq!(sorted, expected, "{}", listed.shown());
    for lock in &held {
        let row = rows.iter().find(|row| row[0] == lock.name).unwrap();
        assert_eq!(row.len(), 8, "{}", listed.shown());
        assert_eq!(row[1], "held", "{}", listed.shown());
        // A dash where the backend stores no holder.
        assert_eq!(
            row[2],
            lock.locked_by.as_deref().unwrap_or("-"),
            "{}",
            listed.shown()
        );
        assert_ne!(
            row[5],
            "-",
            "a held lock has time left:\n{}",
            listed.shown()
        );
        assert_eq!(row[7], lock.acquisition.as_str(), "{}", listed.shown());
    }
    if let Some(row) = rows.iter().find(|row| row[0] == name("released")) {
        assert_eq!(
            (row[1].as_str(), row[5].as_str()),
            ("free", "-"),
            "{}",
            listed.shown()
        );
    }

    // The same as JSON lines, each one parsing, with what a script needs.
    let json = run(&mut backend.cli(&["list", "--prefix", &prefix, "--json"]));
    assert_eq!(json.code, Some(0), "{}", json.shown());
    let objects: Vec<Value> = json
        .stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|error| panic!("{error}: {line}")))
        .collect();
    let mut json_names: Vec<&str> = objects
        .iter()
        .map(|lock| lock["name"].as_str().unwrap())
        .collect();
    json_names.sort_unstable();
    assert_eq!(json_names, expected, "{}", json.shown());
    for lock in &held {
        let object = objects
            .iter()
            .find(|object| object["name"] == lock.name.as_str())
            .unwrap();
        assert_eq!(object["state"], "held", "{object}");
        assert_eq!(object["acquisition"], lock.acquisition.as_str(), "{object}");
        assert_eq!(
            object["locked_by"].as_str(),
            lock.locked_by.as_deref(),
            "{object}"
        );
        let remaining = object["remaining_ms"]
            .as_u64()
            .expect("a held lock has time left");
        assert!(remaining > 0 && remaining <= 60_000, "{object}");
        assert!(
            object["held_until"]
                .as_str()
                .is_some_and(|time| time.ends_with('Z')),
            "{object}"
        );
    }

    // A name never used is an error of its own, and nothing is asked.
    let missing = run(&mut backend.cli(&["unlock", &name("never-used"), "--yes"]));
    let error = missing.one_line_error(3);
    assert!(error.contains("no lock named"), "{}", missing.shown());

    // Declined, or no answer at all: nothing changes.
    let asked = &held[0];
    for answer in ["n\n", "", "maybe\n"] {
        let declined = run_with_input(&mut backend.cli(&["unlock", &asked.name]), answer);
        declined.one_line_error(5);
        assert!(
            declined.stdout.contains(&asked.acquisition.to_string()),
            "{}",
            declined.shown()
        );
        assert!(
            declined.stderr.contains("free this acquisition? [y/N]"),
            "{}",
            declined.shown()
        );
        let now = runtime.block_on(inspect(&a, &asked.name)).unwrap();
        assert_eq!(
            (now.state, &now.acquisition),
            (LockState::Held, &asked.acquisition)
        );
    }

    // Freed after a yes: another node takes it at once, and the old holder's release fails.
    let first = &held[1];
    let freed = run_with_input(&mut backend.cli(&["unlock", &first.name]), "y\n");
    assert_eq!(freed.code, Some(0), "{}", freed.shown());
    assert!(freed.stdout.contains("freed lock"), "{}", freed.shown());
    assert!(
        freed
            .stdout
            .contains(first.locked_by.as_deref().unwrap_or("")),
        "{}",
        freed.shown()
    );
    runtime.block_on(async {
        let b_first = acquire(&b, &first.name, Duration::ZERO).await;
        assert!(
            !a_first.unlock().await.unwrap(),
            "A no longer holds what was freed"
        );
        assert!(b_first.unlock().await.unwrap());
    });

    // The lock changes hands while the question is open: the yes then frees nothing, and the
    // new holder keeps it.
    let second = &held[2];
    let mut asking = Running::start(&mut backend.cli(&["unlock", &second.name]));
    asking.wait_for_stderr("free this acquisition? [y/N]", Duration::from_secs(30));
    let b_second = runtime.block_on(async {
        assert!(
            a.force_unlock(&second.name, &second.acquisition)
                .await
                .unwrap()
        );
        acquire(&b, &second.name, Duration::ZERO).await
    });
    let b_info = runtime.block_on(inspect(&b, &second.name)).unwrap();
    assert_ne!(b_info.acquisition, second.acquisition);
    let too_late = asking.answer("y\n");
    let error = too_late.one_line_error(4);
    assert!(error.contains("was not freed"), "{}", too_late.shown());
    assert_still_held_by(&runtime, &b, &b_info);

    // A script that listed before the change passes the acquisition it saw: refused.
    let stale = run(&mut backend.cli(&[
        "unlock",
        &second.name,
        "--acquisition",
        second.acquisition.as_str(),
        "--yes",
    ]));
    let error = stale.one_line_error(4);
    assert!(error.contains("changed hands"), "{}", stale.shown());
    assert_still_held_by(&runtime, &b, &b_info);

    // An id no backend gives is bad input (exit 1), not a lock that changed hands.
    let malformed = run(&mut backend.cli(&[
        "unlock",
        &second.name,
        "--acquisition",
        "not-an-id",
        "--yes",
    ]));
    let error = malformed.one_line_error(1);
    assert!(
        error.contains("--acquisition is not an acquisition id this backend gives"),
        "{}",
        malformed.shown()
    );
    assert_still_held_by(&runtime, &b, &b_info);

    // The acquisition it holds now is freed.
    let current = run(&mut backend.cli(&[
        "unlock",
        &second.name,
        "--acquisition",
        b_info.acquisition.as_str(),
        "--yes",
    ]));
    assert_eq!(current.code, Some(0), "{}", current.shown());
    runtime.block_on(async {
        assert!(
            !b_second.unlock().await.unwrap(),
            "B's acquisition was freed"
        );
        assert!(!a_second.unlock().await.unwrap());
    });

    // A lock that is free already: exit 4 where the record stays, 3 where the key is gone.
    let again = run(&mut backend.cli(&["unlock", &second.name, "--yes"]));
    match runtime.block_on(inspect(&a, &second.name)) {
        Some(lock) => {
            assert_eq!(lock.state, LockState::Free);
            let error = again.one_line_error(4);
            assert!(error.contains("free already"), "{}", again.shown());
        }
        None => {
            again.one_line_error(3);
        }
    }
}

fn assert_still_held_by(
    runtime: &tokio::runtime::Runtime,
    admin: &AnyLockProvider,
    holder: &LockInfo,
) {
    let now = runtime
        .block_on(inspect(admin, &holder.name))
        .expect("still there");
    assert_eq!(now.state, LockState::Held, "{now:?}");
    assert_eq!(
        now.acquisition, holder.acquisition,
        "the new holder still holds it"
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn sqlite() {
    let directory = std::env::temp_dir().join(format!(
        "shedlock-cli-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir(&directory).unwrap();
    let url = format!("sqlite://{}", directory.join("locks.db").display());
    runtime().block_on(async {
        shedlock::sqlite::SqliteLockProvider::builder()
            .create_table_with_fencing_if_missing()
            .connect(format!("{url}?mode=rwc"))
            .await
            .unwrap();
    });
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("sqlite", url));
    std::fs::remove_dir_all(directory).unwrap();
}

/// A name or holder with a line break or a terminal escape sequence, as another program may
/// store: the table shows it escaped on its own line, and neither `list` nor `unlock` writes
/// the raw control characters; `--json` carries the exact text.
#[cfg(feature = "sqlite")]
#[test]
fn control_characters_are_shown_escaped_and_never_written_raw() {
    let directory = std::env::temp_dir().join(format!(
        "shedlock-cli-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir(&directory).unwrap();
    let url = format!("sqlite://{}", directory.join("locks.db").display());
    let name = "evil\u{1b}[2J\nname";
    let runtime = runtime();
    let _handle = runtime.block_on(async {
        let node = shedlock::sqlite::SqliteLockProvider::builder()
            .create_table_if_missing()
            .holder("host\rspoofed")
            .connect(format!("{url}?mode=rwc"))
            .await
            .unwrap();
        let config = LockConfiguration::new(name, Duration::from_secs(60), Duration::ZERO).unwrap();
        node.try_lock(&config).await.unwrap().into_handle().unwrap()
    });
    let backend = Backend::plain("sqlite", url);
    let raw = |text: &str| text.contains(['\u{1b}', '\r']) || text.contains("m\nn");

    let ran = run(&mut backend.cli(&["list"]));
    assert_eq!(ran.code, Some(0), "{}", ran.shown());
    assert!(!raw(&ran.stdout) && !raw(&ran.stderr), "{:?}", ran.stdout);
    let rows = table_rows(&ran);
    assert_eq!(rows.len(), 1, "one line for the lock: {}", ran.shown());
    assert_eq!(rows[0][0], "evil\\u{1b}[2J\\nname");
    assert_eq!(rows[0][2], "host\\rspoofed", "{:?}", rows[0]);

    let ran = run(&mut backend.cli(&["list", "--json"]));
    let listed: Value = serde_json::from_str(ran.stdout.trim()).unwrap();
    assert_eq!(listed["name"], name);

    let ran = run_with_input(&mut backend.cli(&["unlock", name]), "n\n");
    assert_eq!(ran.code, Some(5), "{}", ran.shown());
    assert!(!raw(&ran.stdout) && !raw(&ran.stderr), "{}", ran.shown());
    assert!(
        ran.stdout
            .contains("lock \"evil\\u{1b}[2J\\nname\" on sqlite://")
            && ran.stdout.contains("holder       host\\rspoofed\n"),
        "{}",
        ran.shown()
    );
    std::fs::remove_dir_all(directory).unwrap();
}

#[cfg(feature = "postgres")]
#[test]
fn postgres() {
    let url = shedlock_test_support::settings::POSTGRES.value();
    runtime().block_on(async {
        shedlock::postgres::PostgresLockProvider::builder()
            .create_table_if_missing()
            .connect(&url)
            .await
            .expect("PostgreSQL has or gets ShedLock's table");
    });
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("postgres", url));
}

#[cfg(feature = "postgres")]
#[test]
fn postgres_over_tls() {
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        shedlock_test_support::settings::POSTGRES_TLS.value(),
        shedlock_test_support::settings::TLS_CA.value()
    );
    runtime().block_on(async {
        shedlock::postgres::PostgresLockProvider::builder()
            .create_table_if_missing()
            .connect(&url)
            .await
            .expect("the TLS PostgreSQL has or gets ShedLock's table");
    });
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("postgres-tls", url));
}

#[cfg(feature = "mysql")]
#[test]
fn mariadb() {
    let url = shedlock_test_support::settings::MYSQL.value();
    runtime().block_on(async {
        shedlock::mysql::MySqlLockProvider::builder()
            .create_table_if_missing()
            .connect(&url)
            .await
            .expect("MariaDB has or gets ShedLock's table");
    });
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("mariadb", url));
}

#[cfg(feature = "redis")]
#[test]
fn redis() {
    let url = shedlock_test_support::settings::REDIS.value();
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("redis", url));
}

#[cfg(feature = "redis")]
#[test]
fn redis_over_tls() {
    lists_and_frees_only_the_acquisition_it_showed(&Backend {
        label: "rediss",
        url: shedlock_test_support::settings::REDIS_TLS.value(),
        tls_ca_file: Some(shedlock_test_support::settings::TLS_CA.value()),
    });
}

/// The tests name etcd by its endpoint (`http://host:2379`); the CLI by `etcd://host:2379`.
#[cfg(feature = "etcd")]
fn etcd_url(setting: shedlock_test_support::settings::Setting, scheme: &str) -> String {
    let url = setting.value();
    let endpoint = url
        .split_once("://")
        .map_or(url.as_str(), |(_, endpoint)| endpoint);
    format!("{scheme}://{endpoint}")
}

#[cfg(feature = "etcd")]
#[test]
fn etcd() {
    let url = etcd_url(shedlock_test_support::settings::ETCD, "etcd");
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("etcd", url));
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_over_tls() {
    lists_and_frees_only_the_acquisition_it_showed(&Backend {
        label: "etcds",
        url: etcd_url(shedlock_test_support::settings::ETCD_TLS, "etcds"),
        tls_ca_file: Some(shedlock_test_support::settings::TLS_CA.value()),
    });
}

#[cfg(feature = "mongo")]
#[test]
fn mongo() {
    // The variable names the server; the locks live in a database of this crate's tests.
    let url = format!(
        "{}/shedlock_cli",
        shedlock_test_support::settings::MONGO
            .value()
            .trim_end_matches('/')
    );
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain("mongo", url));
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper() {
    // The tests name ZooKeeper by its connect string (`host:2181`); the CLI by `zk://host:2181`.
    let connect = shedlock_test_support::settings::ZOOKEEPER.value();
    let connect = connect
        .split_once("://")
        .map_or(connect.as_str(), |(_, rest)| rest);
    lists_and_frees_only_the_acquisition_it_showed(&Backend::plain(
        "zookeeper",
        format!("zk://{connect}"),
    ));
}
