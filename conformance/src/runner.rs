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
pub fn run_and_report<H, F, Fut>(mut args: Arguments, make_harness: F) -> (ExitCode, Report)
where
    H: ConformanceHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    if args.list {
        let trials = Check::ALL
            .iter()
            .map(|check| Trial::test(check.name(), || Ok(())))
            .collect();
        return (
            libtest_mimic::run(&args, trials).exit_code(),
            Report::new("", Vec::new()),
        );
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
            return (ExitCode::FAILURE, Report::new("", vec![line]));
        }
    };
    let harness = match runtime.block_on(make_harness()) {
        Ok(harness) => Arc::new(harness),
        Err(error) => {
            let message = format!(
                "the conformance harness could not be set up, so no check can run: {error}"
            );
            eprintln!("shedlock-conformance: {message}");
            runtime.block_on(crate::backends::stop_containers());
            let line = CheckResult::new(SETUP_TRIAL, Status::Failed, Duration::ZERO, &message);
            let mut trials = vec![Trial::test(SETUP_TRIAL, move || Err(Failed::from(message)))];
            trials.extend(Check::ALL.iter().map(|check| {
                Trial::test(check.name(), || {
                    Err(Failed::from(format!(
                        "not run: the harness could not be set up (the cause is the failure of `{SETUP_TRIAL}`, printed once)"
                    )))
                })
            }));
            return (
                libtest_mimic::run(&args, trials).exit_code(),
                Report::new("", vec![line]),
            );
        }
    };
    // On a coarse-precision backend (whole-second leases) the checks spend their time waiting
    // for locks to expire: run them all at once, unless told otherwise, so the run takes as long
    // as its longest check. Fine-grained backends keep one check per core, as their checks are
    // short and some backends (SQLite) serialise every write.
    if args.test_threads.is_none() {
        let coarse = runtime
            .block_on(harness.node(Arc::new(SystemClock)))
            .is_ok_and(|node| {
                Timing::for_precision(node.capabilities().time_precision).unit >= COARSE_UNIT
            });
        if coarse {
            args.test_threads = Some(Check::ALL.len());
        }
    }
    let run_names = NameSpace::new_run();
    let results = Arc::new(Mutex::new(Vec::new()));
    let trials = Check::ALL
        .iter()
        .map(|&check| {
            let runtime = runtime.clone();
            let harness = harness.clone();
            let names = check.names_in(&run_names);
            let results = results.clone();
            Trial::ignorable_test(check.name(), move || {
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
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let cleanup = cleaned_up(&runtime, &*harness, run_names.prefix());
    runtime.block_on(crate::backends::stop_containers());
    let report = Report {
        cleanup: Some(cleanup),
        ..Report::new(harness.name(), locked(&results).clone())
    };
    let written = write_report(&report);
    let exit_code = if written.is_ok() && report.passed() {
        conclusion.exit_code()
    } else {
        ExitCode::FAILURE
    };
    (exit_code, report)
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
