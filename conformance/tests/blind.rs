//! The kit's defect suite of providers written blind: each batch was written by an author who
//! read only RULES.md, the public traits and the READMEs (never the checks), as correct controls
//! and as realistic broken providers, each tagged with the rule its bug breaks. One test per
//! provider runs the whole kit against it, in a process of its own (the kit's `run_with_args`,
//! as an author's `tests/conformance.rs` calls it), and passes when the kit's verdict is the
//! expected one: a control passes every check; a broken provider fails, and the first check
//! to fail (focused checks in the kit's order, then the races, then the random `model`) names
//! the provider's own rule, or one its bug also breaks where the suite says why. A check that
//! proved nothing because every probe came too late (a loaded machine, or a provider that
//! waits) is no diagnosis: it is printed and passed over for a broken provider, and fails a
//! control.
//!
//! `cargo test -p shedlock-conformance --test blind [-- FILTER]`; `-- --demo` instead shows,
//! outside the kit, what some of the broken providers really do wrong.
//!
//! What the kit killed before its third edition, counted before any check was written for them:
//! batch 1, 40 of 53 broken providers (controls clean).

#[path = "blind/batch1/mod.rs"]
mod batch1;
#[path = "blind/batch2/mod.rs"]
mod batch2;

use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Failed, Trial};
use shedlock_conformance::{Check, REPORT_DIR_VARIABLE, Status, read_reports};

/// Set in a child's environment to the provider it runs the kit against.
const CHILD_VARIABLE: &str = "SHEDLOCK_BLIND_PROVIDER";
/// The longest one provider's run may take before it is stopped and counted as hung.
const RUN_LIMIT: Duration = Duration::from_secs(600);
/// Providers run side by side by default: each run mostly waits for locks to expire.
const SIDE_BY_SIDE: usize = 6;

/// One provider of a batch, as the suite sees it.
struct Provider {
    name: String,
    /// The rules the kit's first failure may name, the provider's own first (which some
    /// failure must name); empty for a control.
    rules: Vec<&'static str>,
    /// Runs the kit against it with deep mode on (its bug needs large counts to show).
    deep: bool,
    launch: Box<dyn Fn(shedlock_conformance::Arguments) -> ExitCode>,
}

fn providers() -> Vec<Provider> {
    let batch1 = batch1::catalog::entries().into_iter().map(|entry| {
        let deep = entry.name == "natskv-u16-token";
        let rules = match (entry.name.as_str(), entry.rule) {
            // Declaring a coarse precision honestly is no break: truncating the stored
            // times frees the lock early, which the precision never excuses.
            ("sqlish-second-timestamps-coarse", _) => vec!["at-most", "at-least"],
            // The simulated server's clock runs 750 ms ahead of the node's: node-clock times
            // written or compared end locks early (or keep them late) on the server's clock,
            // which the hold checks see before `clock_skew` says why.
            ("sqlish-client-lock-until", Some(rule)) => vec![rule, "at-most"],
            ("sqlish-client-now-compare", Some(rule)) => {
                vec![rule, "at-least", "free-lock-is-taken"]
            }
            (_, Some(rule)) => vec![rule],
            (_, None) => Vec::new(),
        };
        Provider {
            name: format!("batch1/{}", entry.name),
            rules,
            deep,
            launch: entry.launch,
        }
    });
    let batch2 = batch2::catalog::entries().into_iter().map(|entry| {
        // Where RULES.md files the bug under another rule than its author did, that rule is the
        // provider's own.
        let mut rules: Vec<&'static str> = match entry.name.as_str() {
            // A release that revokes a lease shared with another lock frees that other
            // acquisition's lock: RULES.md's [ownership] ("never change a lock that another
            // acquisition holds, even one taken by the same node"); that lock's own release
            // then answers false.
            "etcdish-lease-reuse" => vec!["ownership", "release-result"],
            // The handle's name is part of what a handle reports ([honest-capabilities]).
            "etcdish-handle-name-is-key" => vec!["honest-capabilities"],
            // An error answered as "not acquired" while a fresh node gets the lock is, to
            // anyone watching, a free lock refused; the kit cannot throttle the backend.
            "dynamoish-throttle-not-acquired" => vec!["free-lock-is-taken"],
            _ => entry.rule.into_iter().collect(),
        };
        rules.extend(match entry.name.as_str() {
            // Node-clock times written or compared end locks at the wrong moment on the
            // backend's clock, which the hold checks see before `clock_skew` says why.
            "etcdish-value-deadline-takeover" | "mongoish-extend-from-node-clock" => {
                &["extend"][..]
            }
            "mongoish-locked-at-from-node-clock" => &["at-least"],
            // Tasks of one node that joined one acquisition share it: whichever releases
            // second is told `false` inside lock_at_most_for. Which check sees the sharing
            // first depends on which runs its tasks concurrently at the right moment: the
            // fencing check did once in CI under load, before mutual_exclusion.
            "dynamoish-single-flight" => &["release-result"],
            // Another server's clock read as the node's: a released lock still looks held to
            // every node, though the operator view may show it free.
            "dynamoish-date-header-now" => &["free-lock-is-taken", "at-least"],
            _ => &[],
        });
        Provider {
            name: format!("batch2/{}", entry.name),
            rules,
            deep: false,
            launch: entry.launch,
        }
    });
    batch1.chain(batch2).collect()
}

fn main() -> ExitCode {
    if let Ok(name) = std::env::var(CHILD_VARIABLE) {
        return child(&name);
    }
    if std::env::args().any(|arg| arg == "--demo") {
        batch1::demos::run();
        batch2::demos::run();
        return ExitCode::SUCCESS;
    }
    let mut args = Arguments::from_args();
    args.test_threads.get_or_insert(SIDE_BY_SIDE);
    let root = std::env::temp_dir().join(format!("shedlock-blind-{}", std::process::id()));
    let exe = std::env::current_exe().expect("the test binary's own path");
    let trials = providers()
        .into_iter()
        .map(|provider| {
            let (root, exe) = (root.clone(), exe.clone());
            let Provider {
                name, rules, deep, ..
            } = provider;
            Trial::test(name.clone(), move || {
                judge(&exe, &root, &name, &rules, deep)
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let _ = std::fs::remove_dir_all(&root);
    conclusion.exit_code()
}

/// In a child: run the kit against one provider, with the kit's default arguments.
fn child(name: &str) -> ExitCode {
    let Some(provider) = providers().into_iter().find(|p| p.name == name) else {
        eprintln!("no provider named {name}");
        return ExitCode::from(2);
    };
    (provider.launch)(shedlock_conformance::Arguments::default())
}

/// Runs the kit against `provider` in a child process and compares its verdict with the
/// expected one.
fn judge(
    exe: &Path,
    root: &Path,
    name: &str,
    rules: &[&'static str],
    deep: bool,
) -> Result<(), Failed> {
    let dir = root.join(name.replace('/', "-"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("a report folder: {e}"))?;
    let mut command = Command::new(exe);
    command
        .env(CHILD_VARIABLE, name)
        .env(REPORT_DIR_VARIABLE, &dir)
        .stdout(Stdio::from(log_file(&dir, "stdout.log")?))
        .stderr(Stdio::from(log_file(&dir, "stderr.log")?));
    // Deep mode only where the bug needs it, whatever the suite's own environment says.
    command.env(
        shedlock_conformance::DEEP_VARIABLE,
        if deep { "1" } else { "0" },
    );
    let started = Instant::now();
    let mut child = command
        .spawn()
        .map_err(|e| format!("the child process: {e}"))?;
    loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break;
        }
        if started.elapsed() > RUN_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("the kit's run was stopped after {RUN_LIMIT:?}").into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let failures = failures(&dir, name)?;
    let logs = dir.display();
    // A check that saw every probe answered too late proved nothing about which rule the
    // provider breaks: it fails under its own rule, or [bounded-time] when one answer was
    // slow, whether the lateness was a loaded machine's or a provider's that waits (whose
    // other checks then name its rule). It still fails a control, but a broken provider's
    // diagnosis is its first conclusive failure.
    let conclusive: Vec<&Failure> = failures
        .iter()
        .filter(|failure| rules.is_empty() || !failure.observed.contains(INCONCLUSIVE))
        .collect();
    for failure in failures.iter().filter(|f| !conclusive.contains(f)) {
        eprintln!("{name}: inconclusive, so not taken as the diagnosis: {failure}");
    }
    let failures = conclusive;
    match (failures.first(), rules) {
        (None, []) => Ok(()),
        (Some(failure), []) => {
            Err(format!("a correct control failed the kit: {failure} (logs in {logs})").into())
        }
        (None, rules) => Err(format!(
            "the kit passed a provider broken under [{}]",
            rules.join("], [")
        )
        .into()),
        (Some(first), [own, ..]) => {
            if !rules.iter().any(|rule| first.rule == *rule) {
                return Err(format!(
                    "the kit's first failure names the wrong rule: expected [{}], got {first}",
                    rules.join("] or [")
                )
                .into());
            }
            if !failures.iter().any(|failure| failure.rule == *own) {
                return Err(format!(
                    "no failure names the provider's own rule [{own}]; the first was {first}"
                )
                .into());
            }
            Ok(())
        }
    }
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, Failed> {
    std::fs::File::create(dir.join(name)).map_err(|e| format!("{name}: {e}").into())
}

/// What the kit says of a check that could not prove anything because every probe was
/// answered too late (its `until_conclusive` gave up).
const INCONCLUSIVE: &str = "every probe was answered too late to prove anything";

/// A failing check of a run.
#[derive(PartialEq)]
struct Failure {
    check: String,
    rule: String,
    observed: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}] {}", self.check, self.rule, self.observed)
    }
}

/// The failing checks of a run, in the kit's order (the model last).
fn failures(dir: &Path, name: &str) -> Result<Vec<Failure>, Failed> {
    let reports = read_reports(dir).map_err(|e| format!("no report ({e})"))?;
    // The kit names its report after the harness, which is the provider's name in its batch.
    let local = name.rsplit('/').next().unwrap_or(name);
    let report = reports
        .into_iter()
        .find(|r| r.provider == local)
        .ok_or("the kit wrote no report")?;
    // The checks that probe one rule at a time come first: when one of them fails, its rule is
    // the diagnosis. The races (many requests interleaved) find what they miss, and the model
    // explores at random last.
    let races = [
        Check::MutualExclusion,
        Check::ConcurrentRelease,
        Check::AdminConcurrentForceUnlock,
        Check::StaleCallAtExpiry,
    ];
    let order = |check: &str| {
        let position = Check::ALL
            .iter()
            .position(|c| c.name() == check)
            .unwrap_or(usize::MAX / 4);
        if check == Check::Model.name() {
            2 * Check::ALL.len()
        } else if races.iter().any(|race| race.name() == check) {
            Check::ALL.len() + position
        } else {
            position
        }
    };
    let mut failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.status == Status::Failed)
        .collect();
    failed.sort_by_key(|c| order(&c.check));
    Ok(failed
        .into_iter()
        .map(|check| {
            // The detail is "[rule-id] what was observed", possibly followed by a timeline.
            let line = check
                .detail
                .lines()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .trim();
            let (rule, observed) = match line.strip_prefix('[').and_then(|r| r.split_once(']')) {
                Some((id, rest)) => (id.to_owned(), rest.trim()),
                None => ("?".to_owned(), line),
            };
            Failure {
                check: check.check.clone(),
                rule,
                observed: observed.chars().take(300).collect(),
            }
        })
        .collect())
}
