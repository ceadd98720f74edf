//! Blind batch 1: runs the conformance kit against every provider of `blind_batch1/` (correct
//! controls and deliberately broken providers), one after another, and prints one line per
//! provider with the kit's verdict. It is a measurement: it exits 0 whatever the verdicts.
//!
//! The providers were written blind, from RULES.md, the public traits and the READMEs only, to
//! measure how well the kit catches bugs nobody here thought of. Batch 1's count before the
//! kit's third edition: 40 of 53 broken providers failed the kit, and the 3 controls passed
//! (about 17 minutes). It is an example, built with every test run but not run by it.
//!
//! `cargo run -p shedlock-conformance --example blind_batch1 [-- FILTER...]`, where a filter
//! is part of a provider's name, or `=NAME` for exactly that provider. `-- --demo` instead
//! shows, outside the kit, what the providers the kit may pass really do wrong.
//!
//! Each provider runs in a child process of this binary (the kit's `run_with_args`, as a
//! provider author's `tests/conformance.rs` would call it), with
//! `SHEDLOCK_CONFORMANCE_REPORT_DIR` pointing at a folder of its own; the parent reads the
//! report the kit writes there.

#[path = "providers/mod.rs"]
mod batch;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use shedlock_conformance::{Arguments, Check, REPORT_DIR_VARIABLE, Status, read_reports};

const CHILD_VARIABLE: &str = "BLIND_BATCH1_PROVIDER";
const LOG_VARIABLE: &str = "BLIND_BATCH1_LOG";
/// The longest one provider's run may take before it is stopped and counted as hung.
const RUN_LIMIT: Duration = Duration::from_secs(900);

fn main() -> ExitCode {
    if let Ok(name) = std::env::var(CHILD_VARIABLE) {
        return child(&name);
    }
    if std::env::args().any(|a| a == "--demo") {
        batch::demos::run();
        return ExitCode::SUCCESS;
    }
    parent()
}

/// In a child: run the kit against one provider.
fn child(name: &str) -> ExitCode {
    let Some(entry) = batch::catalog::entries()
        .into_iter()
        .find(|e| e.name == name)
    else {
        eprintln!("no provider named {name}");
        return ExitCode::from(2);
    };
    let args = Arguments {
        logfile: std::env::var(LOG_VARIABLE).ok(),
        ..Arguments::default()
    };
    (entry.launch)(args)
}

/// The first failing check, in the kit's order, with its rule and what was observed.
fn verdict(dir: &Path, name: &str) -> Result<Option<String>, String> {
    let reports = read_reports(dir).map_err(|e| format!("no report ({e})"))?;
    let report = reports
        .into_iter()
        .find(|r| r.provider == name)
        .ok_or("no report written")?;
    let failed: Vec<_> = report
        .checks
        .iter()
        .filter(|c| c.status == Status::Failed)
        .collect();
    let order = |check: &str| {
        Check::ALL
            .iter()
            .position(|c| c.name() == check)
            .unwrap_or(usize::MAX)
    };
    let Some(first) = failed.iter().min_by_key(|c| order(&c.check)) else {
        return Ok(None);
    };
    // The detail is "[rule-id] what was observed", possibly followed by a timeline.
    let line = first
        .detail
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let (rule, observed) = match line.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((id, rest)) => (format!("[{id}]"), rest.trim()),
        None => ("[?]".to_owned(), line),
    };
    let observed = {
        let short: String = observed.chars().take(160).collect();
        if short.len() < observed.len() {
            format!("{short}...")
        } else {
            short
        }
    };
    let others: Vec<&str> = failed
        .iter()
        .filter(|c| c.check != first.check)
        .map(|c| c.check.as_str())
        .collect();
    let more = if others.is_empty() {
        String::new()
    } else {
        format!(" (+{}: {})", others.len(), others.join(","))
    };
    Ok(Some(format!("{} {rule}{more} — {observed}", first.check)))
}

fn parent() -> ExitCode {
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let root = PathBuf::from(
        std::env::var("BLIND_BATCH1_DIR")
            .unwrap_or_else(|_| "/var/tmp/blind_batch1-reports".to_owned()),
    );
    let exe = std::env::current_exe().expect("the example's own path");
    let entries: Vec<_> = batch::catalog::entries()
        .into_iter()
        .filter(|e| {
            filters.is_empty()
                || filters.iter().any(|f| match f.strip_prefix('=') {
                    Some(exact) => e.name == exact,
                    None => e.name.contains(f.as_str()),
                })
        })
        .collect();
    let (mut killed, mut broken, mut clean, mut controls) = (0, 0, 0, 0);
    let total = Instant::now();
    println!(
        "blind_batch1: {} providers; logs and reports under {}",
        entries.len(),
        root.display()
    );
    for entry in &entries {
        let dir = root.join(&entry.name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a report folder");
        let started = Instant::now();
        let mut child = Command::new(&exe)
            .env(CHILD_VARIABLE, &entry.name)
            .env(REPORT_DIR_VARIABLE, &dir)
            .env(LOG_VARIABLE, dir.join("kit.log"))
            .stdout(Stdio::from(
                std::fs::File::create(dir.join("stdout.log")).expect("a log file"),
            ))
            .stderr(Stdio::from(
                std::fs::File::create(dir.join("stderr.log")).expect("a log file"),
            ))
            .spawn()
            .expect("the child process starts");
        let mut hung = false;
        loop {
            if child.try_wait().expect("the child's status").is_some() {
                break;
            }
            if started.elapsed() > RUN_LIMIT {
                let _ = child.kill();
                let _ = child.wait();
                hung = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let took = started.elapsed();
        let outcome = if hung {
            Err(format!("run stopped after {RUN_LIMIT:?}"))
        } else {
            verdict(&dir, &entry.name)
        };
        let verdict_text = match &outcome {
            Ok(None) => "passed".to_owned(),
            Ok(Some(failure)) => format!("failed: {failure}"),
            Err(why) => format!("no verdict: {why}"),
        };
        let failed = matches!(outcome, Ok(Some(_)));
        if entry.broken() {
            broken += 1;
            if failed {
                killed += 1;
            }
        } else {
            controls += 1;
            if matches!(outcome, Ok(None)) {
                clean += 1;
            }
        }
        let expected = match entry.rule {
            Some(rule) => format!("broken [{rule}]"),
            None => "correct".to_owned(),
        };
        println!(
            "{} | expected: {expected} | kit verdict: {verdict_text} | {:.1} s",
            entry.name,
            took.as_secs_f64()
        );
    }
    println!(
        "killed {killed} of {broken} broken; controls clean {clean} of {controls}; total kit time {:.0} s",
        total.elapsed().as_secs_f64()
    );
    ExitCode::SUCCESS
}
