//! Turns the fault checks into `libtest-mimic` trials, one at a time (they stop servers and
//! kill processes), with a report at the end; or, in a child process, plays its node.

use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use libtest_mimic::{Arguments, Failed, Trial};

use super::FaultHarness;
use super::checks::FaultCheck;
use super::child;
use crate::harness::SetupError;
use crate::names::NameSpace;
use crate::report::{Report, Status};
use crate::runner::{cleaned_up, judged, write_report};
use crate::trace::locked;

/// Runs the fault suite as a test binary: the body of `fn main` in a provider's
/// `tests/faults.rs` (a `[[test]]` target with `harness = false`).
///
/// Call it first thing in `main`: the crash and soak checks start this binary again as node
/// processes, and in those it plays the node's part and never returns. Checks run one at a
/// time unless `--test-threads` says otherwise. With `SHEDLOCK_CONFORMANCE_REPORT_DIR` set, the
/// results are also written there as `<provider>-faults.json` and `.md`.
pub fn run<H, F, Fut>(make_harness: F) -> ExitCode
where
    H: FaultHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    if child::is_child() {
        child::play(make_harness)
    }
    run_with_args(Arguments::from_args(), make_harness)
}

/// [`run`] with arguments given explicitly instead of read from the command line.
pub fn run_with_args<H, F, Fut>(mut args: Arguments, make_harness: F) -> ExitCode
where
    H: FaultHarness,
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<H, SetupError>>,
{
    if args.list {
        let trials = FaultCheck::ALL
            .iter()
            .map(|check| Trial::test(check.name(), || Ok(())))
            .collect();
        return libtest_mimic::run(&args, trials).exit_code();
    }
    args.test_threads = args.test_threads.or(Some(1));
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => Arc::new(runtime),
        Err(error) => {
            eprintln!("shedlock-conformance: could not start a tokio runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let harness = match runtime.block_on(make_harness()) {
        Ok(harness) => Arc::new(harness),
        Err(error) => {
            let message = format!(
                "the fault suite's harness could not be set up, so no check can run: {error}"
            );
            eprintln!("shedlock-conformance: {message}");
            runtime.block_on(crate::backends::stop_containers());
            let trials = FaultCheck::ALL
                .iter()
                .map(|check| {
                    let message = message.clone();
                    Trial::test(check.name(), move || Err(Failed::from(message)))
                })
                .collect();
            return libtest_mimic::run(&args, trials).exit_code();
        }
    };
    let run_names = NameSpace::new_run();
    let results = Arc::new(Mutex::new(Vec::new()));
    let trials = FaultCheck::ALL
        .iter()
        .map(|&check| {
            let runtime = runtime.clone();
            let harness = harness.clone();
            let names = run_names.child(check.name());
            let results = results.clone();
            Trial::ignorable_test(check.name(), move || {
                let started = Instant::now();
                let outcome = runtime.block_on(check.run(&*harness, &names));
                let (result, line) = judged(check.name(), outcome, started.elapsed());
                locked(&results).push(line);
                result
            })
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    // The suite restarts the backend: the harness's own connection may be dead on first use.
    let mut cleanup = cleaned_up(&runtime, &*harness, run_names.prefix());
    if cleanup.status == Status::Failed {
        std::thread::sleep(std::time::Duration::from_secs(1));
        cleanup = cleaned_up(&runtime, &*harness, run_names.prefix());
    }
    runtime.block_on(crate::backends::stop_containers());
    let report = Report {
        cleanup: Some(cleanup),
        ..Report::new(
            &format!("{}-faults", harness.name()),
            locked(&results).clone(),
        )
    };
    if write_report(&report).is_ok() && report.passed() {
        conclusion.exit_code()
    } else {
        ExitCode::FAILURE
    }
}
