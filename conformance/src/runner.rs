//! Turns the checks into `libtest-mimic` trials: one named test per check, capability-gated at
//! run time, with a report at the end.

use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use libtest_mimic::{Arguments, Completion, Failed, Trial};
use shedlock_core::{LockProvider, SystemClock};

use crate::checks::{COARSE_UNIT, Check, DEEP_VARIABLE};
use crate::failure::Verdict;
use crate::harness::{ConformanceHarness, SetupError};
use crate::names::NameSpace;
use crate::report::{CheckResult, REPORT_DIR_VARIABLE, Report, Status};
use crate::timing::Timing;
use crate::trace::locked;

/// The test that carries a harness setup failure, so the cause is reported once.
const SETUP_TRIAL: &str = "harness_setup";

/// Held shared by every check, and exclusively by deep mode's scale check, which runs alone.
/// That check keeps a stream of writes going for up to minutes (10,000 names, 16 calls at a
/// time). On a backend that serialises writes behind a lock that is not fair (SQLite's busy
/// wait), the stream can starve another check's acquire past its operation timeout, and that
/// check would fail for a load the kit made (seen in CI: an SQLite acquire "got no answer
/// within 5s" while the deep check ran beside it).
static TURNS: RwLock<()> = RwLock::new(());

/// Whether `check` takes [`TURNS`] exclusively.
fn runs_alone(check: Check) -> bool {
    check == Check::LongDurationsAndCounts && std::env::var(DEEP_VARIABLE).as_deref() == Ok("1")
}

/// Runs the whole kit as a test binary: the body of `fn main` in a provider's
/// `tests/conformance.rs` (a `[[test]]` target with `harness = false`).
///
/// `make_harness` is awaited once, on the runtime the checks run on, so it may open pools and
/// connections. Every check becomes one test named after it; a check that does not apply shows
/// as ignored with the reason. The usual test arguments work (a name filter, `--list`,
/// `--exact`, `--skip`, `--test-threads`; without `--test-threads`, the checks of a provider
/// whose time unit is 500 ms or more all run at once, as they mostly wait). When `SHEDLOCK_CONFORMANCE_REPORT_DIR` is set, the
/// results are also written there as `<provider>.json` and `<provider>.md`.
///
/// If `make_harness` fails, for example because no backend is configured, the error is printed
/// once, as the failure of a test named `harness_setup`, and every check fails with a one-line
/// pointer to it: a backend is never silently skipped, and one cause is not repeated per check.
pub fn run<H, F, Fut>(make_harness: F) -> ExitCode
where
    H: ConformanceHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    run_with_args(Arguments::from_args(), make_harness)
}

/// [`run`] with arguments given explicitly instead of read from the command line.
pub fn run_with_args<H, F, Fut>(args: Arguments, make_harness: F) -> ExitCode
where
    H: ConformanceHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    run_and_report(args, make_harness).0
}

/// [`run_with_args`], returning the run's [`Report`] beside the exit code, for a program that
/// judges the verdict in code ([`Report::passed`], [`Report::failures`]) instead of reading
/// report files. The report holds every check that ran (a check that panicked is a failure
/// with the panic's message) and the cleanup; it is also written to
/// [`REPORT_DIR_VARIABLE`]'s folder when that is set, as [`run`] does.
pub fn run_and_report<H, F, Fut>(args: Arguments, make_harness: F) -> (ExitCode, Report)
where
    H: ConformanceHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    let (exit_code, mut reports) = run_each(args, vec![("", make_harness())]);
    let report = reports.pop().unwrap_or_else(|| Report::new("", Vec::new()));
    (exit_code, report)
}

/// Runs the whole kit once per configuration of one provider in one test binary, where
/// [`run`] runs it once: the body of `fn main` in a `tests/conformance.rs` that proves, say,
/// a server-time and a client-time setup. Each test binary is linked on its own, so one binary
/// for both builds faster than two.
///
/// `configurations` pairs a name with what `make_harness` needs to set that configuration up;
/// each check shows once per configuration, as `<name>::<check>` (`client-time::extend`), so a
/// filter selects a configuration, a check or both. Each configuration gets its own harness,
/// names, cleanup and report (its harness's [`name`](ConformanceHarness::name) names the
/// report, so it must differ between configurations); a harness that cannot be set up fails
/// that configuration's `<name>::harness_setup` and its checks, not the others'. A
/// configuration whose checks the arguments all filter out (`--skip client-time::`) is not set
/// up. Otherwise as [`run`].
pub fn run_configurations<H, C, F, Fut>(
    configurations: Vec<(&'static str, C)>,
    make_harness: F,
) -> ExitCode
where
    H: ConformanceHarness,
    F: Fn(C) -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    let setups = configurations
        .into_iter()
        .map(|(name, configuration)| (name, make_harness(configuration)))
        .collect();
    run_each(Arguments::from_args(), setups).0
}

/// The name of `check`'s trial in the configuration named `configuration` (`""` for a run of
/// one configuration, whose trials are named after their checks alone).
fn trial_name(configuration: &str, check: &str) -> String {
    if configuration.is_empty() {
        check.to_owned()
    } else {
        format!("{configuration}::{check}")
    }
}

/// Sets up one configuration's harness on `runtime`; a failure is printed once, here.
fn set_up<H, Fut>(runtime: &tokio::runtime::Runtime, make_harness: Fut) -> Part<H>
where
    H: ConformanceHarness,
    Fut: Future<Output = Result<H, SetupError>>,
{
    let harness = runtime
        .block_on(make_harness)
        .map(Arc::new)
        .map_err(|error| {
            let message = format!(
                "the conformance harness could not be set up, so no check can run: {error}"
            );
            eprintln!("shedlock-conformance: {message}");
            message
        });
    Part {
        harness,
        names: NameSpace::new_run(),
        results: Arc::new(Mutex::new(Vec::new())),
    }
}

/// Whether `args` select any check of the configuration named `configuration`.
fn selects_any(args: &Arguments, configuration: &str) -> bool {
    Check::ALL.iter().any(|check| {
        let trial = Trial::test(trial_name(configuration, check.name()), || Ok(()));
        !args.is_filtered_out(&trial)
    })
}

/// One configuration's part of a run: its harness (or why there is none), its names and the
/// results of its checks as they finish.
struct Part<H> {
    harness: Result<Arc<H>, String>,
    names: NameSpace,
    results: Arc<Mutex<Vec<CheckResult>>>,
}

/// What [`run_and_report`] and [`run_configurations`] share: sets up each configuration's
/// harness on one runtime, runs every check of every configuration as one `libtest-mimic` run,
/// then cleans up and reports each configuration. The reports come back in the order of
/// `setups`.
fn run_each<H, Fut>(
    mut args: Arguments,
    setups: Vec<(&'static str, Fut)>,
) -> (ExitCode, Vec<Report>)
where
    H: ConformanceHarness,
    Fut: Future<Output = Result<H, SetupError>>,
{
    if args.list {
        let trials = setups
            .iter()
            .flat_map(|(configuration, _)| {
                Check::ALL
                    .iter()
                    .map(|check| Trial::test(trial_name(configuration, check.name()), || Ok(())))
            })
            .collect();
        return (libtest_mimic::run(&args, trials).exit_code(), Vec::new());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Arc::new(runtime),
        Err(error) => {
            let message = format!("could not start a tokio runtime: {error}");
            eprintln!("shedlock-conformance: {message}");
            let line = CheckResult::new(SETUP_TRIAL, Status::Failed, Duration::ZERO, message);
            return (ExitCode::FAILURE, vec![Report::new("", vec![line])]);
        }
    };
    // With several configurations, one whose checks the arguments all filter out is not set
    // up at all (a run of one configuration sets it up whatever the filter, as it always has).
    let several = setups.len() > 1;
    let parts: Vec<(&'static str, Part<H>)> = setups
        .into_iter()
        .filter(|(configuration, _)| !several || selects_any(&args, configuration))
        .map(|(configuration, make_harness)| (configuration, set_up(&runtime, make_harness)))
        .collect();
    // On a coarse-precision backend (whole-second leases) the checks spend their time waiting
    // for locks to expire: run them all at once, unless told otherwise, so the run takes as long
    // as its longest check. Fine-grained backends keep one check per core, as their checks are
    // short and some backends (SQLite) serialise every write.
    if args.test_threads.is_none() {
        let coarse = parts.iter().any(|(_, part)| {
            part.harness.as_ref().is_ok_and(|harness| {
                runtime
                    .block_on(harness.node(Arc::new(SystemClock)))
                    .is_ok_and(|node| {
                        Timing::for_precision(node.capabilities().time_precision).unit
                            >= COARSE_UNIT
                    })
            })
        });
        if coarse {
            args.test_threads = Some(Check::ALL.len() * parts.len());
        }
    }
    let trials = parts
        .iter()
        .flat_map(|(configuration, part)| trials(&runtime, configuration, part))
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let mut passed = true;
    let reports: Vec<Report> = parts
        .iter()
        .map(|(_, part)| {
            let report = match &part.harness {
                Ok(harness) => Report {
                    cleanup: Some(cleaned_up(&runtime, &**harness, part.names.prefix())),
                    ..Report::new(harness.name(), locked(&part.results).clone())
                },
                Err(message) => {
                    let line =
                        CheckResult::new(SETUP_TRIAL, Status::Failed, Duration::ZERO, message);
                    Report::new("", vec![line])
                }
            };
            passed &= write_report(&report).is_ok() && report.passed();
            report
        })
        .collect();
    runtime.block_on(crate::backends::stop_containers());
    let exit_code = if passed {
        conclusion.exit_code()
    } else {
        ExitCode::FAILURE
    };
    (exit_code, reports)
}

/// The trials of one configuration: each check, or, when its harness could not be set up, the
/// setup failure once and a pointer to it from each check.
fn trials<H: ConformanceHarness>(
    runtime: &Arc<tokio::runtime::Runtime>,
    configuration: &str,
    part: &Part<H>,
) -> Vec<Trial> {
    let harness = match &part.harness {
        Ok(harness) => harness,
        Err(message) => {
            let message = message.clone();
            let setup = trial_name(configuration, SETUP_TRIAL);
            let pointer = format!(
                "not run: the harness could not be set up (the cause is the failure of `{setup}`, printed once)"
            );
            let mut trials = vec![Trial::test(setup, move || Err(Failed::from(message)))];
            trials.extend(Check::ALL.iter().map(|check| {
                let pointer = pointer.clone();
                Trial::test(trial_name(configuration, check.name()), move || {
                    Err(Failed::from(pointer))
                })
            }));
            return trials;
        }
    };
    Check::ALL
        .iter()
        .map(|&check| {
            let runtime = runtime.clone();
            let harness = harness.clone();
            let names = check.names_in(&part.names);
            let results = part.results.clone();
            Trial::ignorable_test(trial_name(configuration, check.name()), move || {
                let alone = runs_alone(check);
                let _shared =
                    (!alone).then(|| TURNS.read().unwrap_or_else(PoisonError::into_inner));
                let _alone = alone.then(|| TURNS.write().unwrap_or_else(PoisonError::into_inner));
                let started = Instant::now();
                let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                    runtime.block_on(check.run(&*harness, &names))
                }));
                let (result, line) = match outcome {
                    Ok(outcome) => judged(check.name(), outcome, started.elapsed()),
                    Err(panic) => {
                        let message = format!("the check panicked: {}", panic_message(&*panic));
                        let line = CheckResult::new(
                            check.name(),
                            Status::Failed,
                            started.elapsed(),
                            &message,
                        );
                        (Err(Failed::from(message)), line)
                    }
                };
                locked(&results).push(line);
                result
            })
        })
        .collect()
}

/// A cleanup longer than this is reported on standard error as slow, as well as in the report:
/// a harness that deletes name by name, or a backend that cannot delete by prefix, shows.
const SLOW_CLEANUP: Duration = Duration::from_secs(10);

/// Runs the harness's cleanup of the run's names, timed: its line in the report. A failure is
/// printed and fails the run (the run's names may be left in the backend); a slow one is
/// printed.
pub(crate) fn cleaned_up<H: ConformanceHarness>(
    runtime: &tokio::runtime::Runtime,
    harness: &H,
    prefix: &str,
) -> CheckResult {
    let started = Instant::now();
    let outcome = runtime.block_on(harness.cleanup(prefix));
    let took = started.elapsed();
    match outcome {
        Err(error) => {
            let message =
                format!("cleanup of names starting with {prefix:?} failed after {took:?}: {error}");
            eprintln!("shedlock-conformance: {message}");
            CheckResult::new("cleanup", Status::Failed, took, message)
        }
        Ok(()) if took > SLOW_CLEANUP => {
            let message = format!(
                "cleanup of names starting with {prefix:?} took {took:.1?}, more than {SLOW_CLEANUP:?}"
            );
            eprintln!("shedlock-conformance: slow {message}");
            CheckResult::new("cleanup", Status::Passed, took, format!("slow: {message}"))
        }
        Ok(()) => CheckResult::new("cleanup", Status::Passed, took, ""),
    }
}

/// The text a panic carried, when it was a string.
fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(not a string)")
}

/// A check's outcome as its trial's result and its line in the report; a passed check's notes
/// are printed.
pub(crate) fn judged(
    check: &'static str,
    outcome: Result<Verdict, crate::failure::CheckFailure>,
    elapsed: std::time::Duration,
) -> (Result<Completion, Failed>, CheckResult) {
    match outcome {
        Ok(Verdict::Passed { notes }) => {
            for note in &notes {
                println!("{check}: {note}");
            }
            (
                Ok(Completion::Completed),
                CheckResult::new(check, Status::Passed, elapsed, notes.join("; ")),
            )
        }
        Ok(Verdict::NotApplicable(reason)) => (
            Ok(Completion::ignored_with(&reason)),
            CheckResult::new(check, Status::Ignored, elapsed, reason),
        ),
        Err(failure) => (
            Err(Failed::from(failure.to_string())),
            CheckResult::new(
                check,
                Status::Failed,
                elapsed,
                format!("[{}] {}", failure.rule.id, failure.observed),
            ),
        ),
    }
}

/// Writes `report` to [`REPORT_DIR_VARIABLE`]'s folder, when it is set, as `<provider>.json`
/// and `.md`; a failure to write is printed, and fails the run.
pub(crate) fn write_report(report: &Report) -> Result<(), ()> {
    let Some(dir) = std::env::var_os(REPORT_DIR_VARIABLE) else {
        return Ok(());
    };
    report
        .write_to(std::path::Path::new(&dir))
        .map_err(|error| {
            eprintln!(
                "shedlock-conformance: could not write the report to {}: {error}",
                std::path::Path::new(&dir).display()
            );
        })
}
