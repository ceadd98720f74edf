//! Prints one markdown table, provider by check, from the JSON reports in a folder
//! (default: `$SHEDLOCK_CONFORMANCE_REPORT_DIR`).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let dir = std::env::args_os()
        .nth(1)
        .or_else(|| std::env::var_os(shedlock_conformance::REPORT_DIR_VARIABLE))
        .map(PathBuf::from);
    let Some(dir) = dir else {
        eprintln!(
            "usage: shedlock-conformance-report <folder of reports> (or set {})",
            shedlock_conformance::REPORT_DIR_VARIABLE
        );
        return ExitCode::FAILURE;
    };
    match shedlock_conformance::merged_report(&dir) {
        Ok(table) => {
            print!("{table}");
            ExitCode::SUCCESS
        }
        Err(error) => {
            eprintln!("shedlock-conformance-report: {error}");
            ExitCode::FAILURE
        }
    }
}
