//! What the binary says to bad input: one line on stderr, `shedlock: <what and why>`, a
//! non-zero exit, no password, and within a bounded time when the host does not answer.

mod command;

#[cfg(any(feature = "postgres", feature = "redis"))]
use std::net::TcpListener;
use std::time::Duration;

use command::{run, shedlock};

#[test]
fn an_unknown_scheme_names_the_supported_ones() {
    for subcommand in [&["list"][..], &["unlock", "report", "--yes"]] {
        let mut args = subcommand.to_vec();
        args.extend(["--url", "ftp://ops:hunter2@files.example/locks"]);
        let ran = run(&mut shedlock(&args));
        let error = ran.one_line_error(1);
        assert!(error.contains("unknown scheme \"ftp\""), "{}", ran.shown());
        assert!(error.contains("postgres"), "it lists the schemes: {error}");
        assert!(!ran.stderr.contains("hunter2") && !ran.stdout.contains("hunter2"));
    }
}

#[test]
fn a_malformed_url_is_refused_without_being_quoted() {
    for url in ["localhost:5432/app", "ops:hunter2@db/app", "://db", ""] {
        let ran = run(&mut shedlock(&["list", "--url", url]));
        let error = ran.one_line_error(1);
        assert!(error.contains("not a URL"), "{url:?}: {}", ran.shown());
        assert!(!ran.stderr.contains("hunter2"), "{}", ran.shown());
    }
}

#[test]
fn a_command_without_a_url_is_a_usage_error_naming_both_ways_to_give_one() {
    let ran = run(&mut shedlock(&["list"]));
    assert_eq!(ran.code, Some(2), "{}", ran.shown());
    assert!(ran.stderr.contains("--url <URL>"), "{}", ran.shown());
}

#[test]
fn the_url_may_come_from_the_environment_and_help_never_shows_it() {
    let mut command = shedlock(&["list", "--help"]);
    command.env("SHEDLOCK_URL", "postgres://ops:hunter2@db/app");
    let ran = run(&mut command);
    assert_eq!(ran.code, Some(0), "{}", ran.shown());
    assert!(ran.stdout.contains("SHEDLOCK_URL"), "{}", ran.shown());
    assert!(!ran.stdout.contains("hunter2"), "{}", ran.shown());

    let mut command = shedlock(&["list"]);
    command.env("SHEDLOCK_URL", "ftp://ops:hunter2@files.example");
    let ran = run(&mut command);
    assert!(
        ran.one_line_error(1).contains("unknown scheme"),
        "{}",
        ran.shown()
    );
}

#[test]
fn help_teaches_with_examples_and_documents_the_exit_codes() {
    let top = run(&mut shedlock(&["--help"]));
    assert_eq!(top.code, Some(0));
    for text in [
        "shedlock demo",
        "shedlock list",
        "shedlock unlock",
        "shedlock bench",
        "Exit codes",
        "--features postgres",
    ] {
        assert!(top.stdout.contains(text), "{text:?} in:\n{}", top.stdout);
    }
    let unlock = run(&mut shedlock(&["unlock", "--help"]));
    for text in [
        "0  freed",
        "1  error",
        "2  usage error",
        "3  no lock of that name",
        "4  not freed",
        "5  declined",
        "--acquisition",
    ] {
        assert!(
            unlock.stdout.contains(text),
            "{text:?} in:\n{}",
            unlock.stdout
        );
    }
    let demo = run(&mut shedlock(&["demo", "--help"]));
    assert!(demo.stdout.contains("lock_at_least_for"), "{}", demo.stdout);
    let bench = run(&mut shedlock(&["bench", "--help"]));
    assert!(bench.stdout.contains("floor_write"), "{}", bench.stdout);
    let list = run(&mut shedlock(&["list", "--help"]));
    assert!(list.stdout.contains("--json"), "{}", list.stdout);
}

#[cfg(feature = "memory")]
#[test]
fn an_unknown_lock_name_exits_3_and_an_empty_listing_0() {
    // A memory:// store lives in one process: the binary's own is empty.
    let ran = run(&mut shedlock(&[
        "unlock",
        "nightly-report",
        "--yes",
        "--url",
        "memory://ops",
    ]));
    let error = ran.one_line_error(3);
    assert!(
        error.contains("no lock named \"nightly-report\""),
        "{}",
        ran.shown()
    );

    let listed = run(&mut shedlock(&["list", "--url", "memory://ops"]));
    assert_eq!(listed.code, Some(0), "{}", listed.shown());
    assert!(listed.stdout.is_empty(), "{}", listed.shown());
    assert_eq!(listed.stderr.trim(), "no locks on memory://ops");
    let json = run(&mut shedlock(&["list", "--json", "--url", "memory://ops"]));
    assert_eq!(
        (json.code, json.stdout.as_str(), json.stderr.as_str()),
        (Some(0), "", "")
    );
}

#[cfg(feature = "sqlite")]
#[test]
fn a_sqlite_file_that_cannot_be_opened_and_a_name_too_long_are_errors() {
    let ran = run(&mut shedlock(&[
        "list",
        "--url",
        "sqlite:///nonexistent-dir/locks.db",
    ]));
    assert!(ran.one_line_error(1).contains("sqlite"), "{}", ran.shown());

    let directory = std::env::temp_dir().join(format!(
        "shedlock-cli-test-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir(&directory).unwrap();
    let url = format!("sqlite://{}", directory.join("locks.db").display());
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        shedlock::sqlite::SqliteLockProvider::builder()
            .create_table_if_missing()
            .connect(format!("{url}?mode=rwc"))
            .await
            .unwrap();
    });
    let long = "x".repeat(65);
    let ran = run(&mut shedlock(&["unlock", &long, "--yes", "--url", &url]));
    std::fs::remove_dir_all(&directory).unwrap();
    let error = ran.one_line_error(1);
    assert!(error.contains("not accepted"), "{}", ran.shown());
}

#[cfg(not(feature = "postgres"))]
#[test]
fn a_backend_left_out_of_the_build_names_the_feature_to_rebuild_with() {
    let ran = run(&mut shedlock(&[
        "list",
        "--url",
        "postgres://ops:hunter2@db/app",
    ]));
    let error = ran.one_line_error(1);
    assert!(
        error.contains("rebuild with `--features postgres`"),
        "{}",
        ran.shown()
    );
    assert!(!ran.stderr.contains("hunter2"), "{}", ran.shown());
}

/// Every URL scheme of this build, with a password (in the user info, or in a parameter the
/// scheme takes one in) and a host that refuses or does not answer: `list` and `unlock` fail
/// in one line, and the password shows nowhere in what they print, whether the provider's
/// error or the command's own timeout speaks.
#[test]
fn a_password_never_shows_for_any_backend_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut urls = vec!["sqlite:/nonexistent-dir/locks.db?password=hunter2".to_owned()];
    let mut add = |enabled: bool, forms: &[&str]| {
        if enabled {
            urls.extend(
                forms
                    .iter()
                    .map(|form| form.replace("PORT", &port.to_string())),
            );
        }
    };
    add(
        cfg!(feature = "postgres"),
        &[
            "postgres://ops:hunter2@127.0.0.1:PORT/app",
            "postgresql://ops@127.0.0.1:PORT/app?password=hunter2",
        ],
    );
    add(
        cfg!(feature = "mysql"),
        &[
            "mysql://ops:hunter2@127.0.0.1:PORT/app",
            "mariadb://ops:hunter2@127.0.0.1:PORT/app",
        ],
    );
    add(
        cfg!(feature = "redis"),
        &[
            "redis://ops:hunter2@127.0.0.1:PORT",
            "rediss://:hunter2@127.0.0.1:PORT/0",
            "redis+cluster://ops:hunter2@127.0.0.1:PORT",
            "redis+sentinel://ops:hunter2@127.0.0.1:PORT/master?sentinel_password=hunter2",
        ],
    );
    add(
        cfg!(feature = "etcd"),
        &[
            "etcd://root:hunter2@127.0.0.1:PORT",
            "etcds://root:hunter2@127.0.0.1:PORT",
        ],
    );
    add(
        cfg!(feature = "mongo"),
        &[
            "mongodb://ops:hunter2@127.0.0.1:PORT/app",
            // No user: the secret is in a parameter the driver reads, and the command's own
            // timeout answers first.
            "mongodb://127.0.0.1:PORT/app?authMechanismProperties=SERVICE_NAME:hunter2",
        ],
    );
    add(
        cfg!(feature = "zookeeper"),
        &[
            "zk://ops:hunter2@127.0.0.1:PORT",
            "zk+tls://ops:hunter2@127.0.0.1:PORT",
        ],
    );
    let runs: Vec<_> = urls
        .into_iter()
        .flat_map(|url| {
            [&["list"][..], &["unlock", "report", "--yes"]].map(|command| {
                let url = url.clone();
                let mut args: Vec<String> = command.iter().map(|arg| (*arg).to_owned()).collect();
                args.extend(["--timeout".to_owned(), "1s".to_owned()]);
                std::thread::spawn(move || {
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    let mut command = shedlock(&args);
                    command.env("SHEDLOCK_URL", &url);
                    (url, run(&mut command))
                })
            })
        })
        .collect();
    for ran in runs {
        let (url, ran) = ran.join().unwrap();
        // Nothing listens on the port: every server backend exits 6 (try again later). A file
        // that cannot be opened, and zk+tls:// with no CA given (ZooKeeper has no default
        // roots), are 1: something must be fixed first.
        let code = if url.starts_with("sqlite:") || url.starts_with("zk+tls:") {
            1
        } else {
            6
        };
        ran.one_line_error(code);
        assert!(
            !ran.stdout.contains("hunter2") && !ran.stderr.contains("hunter2"),
            "{url}: {}",
            ran.shown()
        );
        assert!(ran.took < Duration::from_secs(15), "{url}: {}", ran.shown());
    }
}

/// A port on which nothing listens.
#[cfg(feature = "postgres")]
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A server that accepts connections and never says a word, as a host behind a firewall that
/// drops packets would look once connected; held open until dropped.
#[cfg(any(feature = "postgres", feature = "redis"))]
fn silent_server() -> (TcpListener, u16) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = listener.try_clone().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        while let Ok((stream, _)) = accepting.accept() {
            held.push(stream);
        }
    });
    (listener, port)
}

#[cfg(feature = "postgres")]
#[test]
fn an_unreachable_postgres_fails_in_one_line_within_the_timeout_without_the_password() {
    let refused = format!("postgres://ops:hunter2@127.0.0.1:{}/app", closed_port());
    let ran = run(&mut shedlock(&[
        "list",
        "--url",
        &refused,
        "--timeout",
        "3s",
    ]));
    ran.one_line_error(6);
    assert!(!ran.stderr.contains("hunter2"), "{}", ran.shown());
    assert!(ran.took < Duration::from_secs(10), "{}", ran.shown());

    let (_server, port) = silent_server();
    let silent = format!("postgres://ops:hunter2@127.0.0.1:{port}/app");
    let ran = run(&mut shedlock(&[
        "unlock",
        "report",
        "--url",
        &silent,
        "--timeout",
        "2s",
    ]));
    let error = ran.one_line_error(6);
    assert!(!error.contains("hunter2"), "{}", ran.shown());
    assert!(
        error.contains("2s"),
        "it says how long it waited: {}",
        ran.shown()
    );
    assert!(
        ran.took >= Duration::from_secs(2) && ran.took < Duration::from_secs(8),
        "{}",
        ran.shown()
    );
}

#[cfg(feature = "redis")]
#[test]
fn a_silent_redis_fails_in_one_line_within_the_timeout() {
    let (_server, port) = silent_server();
    let ran = run(&mut shedlock(&[
        "list",
        "--url",
        &format!("redis://:hunter2@127.0.0.1:{port}"),
        "--timeout",
        "2s",
    ]));
    let error = ran.one_line_error(6);
    assert!(!error.contains("hunter2"), "{}", ran.shown());
    assert!(ran.took < Duration::from_secs(8), "{}", ran.shown());
}

#[cfg(feature = "mysql")]
#[test]
fn refused_credentials_exit_7_without_the_password() {
    // The CI's MariaDB lets root in with no password, so any password is refused.
    let url =
        shedlock_test_support::settings::MYSQL
            .value()
            .replacen("://root@", "://root:hunter2@", 1);
    assert!(url.contains("hunter2"), "{url}");
    let ran = run(&mut shedlock(&["list", "--url", &url, "--timeout", "10s"]));
    let error = ran.one_line_error(7);
    assert!(!error.contains("hunter2"), "{}", ran.shown());
}
