//! The machine-readable summary (JSON) and the markdown table of one run, and a table that
//! puts several providers side by side.

use std::io;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The environment variable naming the folder where [`run`](crate::run) writes
/// `<provider>.json` and `<provider>.md`.
pub const REPORT_DIR_VARIABLE: &str = "SHEDLOCK_CONFORMANCE_REPORT_DIR";

/// How one check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Every rule the check covers held.
    Passed,
    /// A rule was broken (or the harness failed).
    Failed,
    /// The check does not apply to this provider.
    Ignored,
}

impl Status {
    fn label(self) -> &'static str {
        match self {
            Status::Passed => "pass",
            Status::Failed => "FAIL",
            Status::Ignored => "n/a",
        }
    }
}

/// One check's line in a report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CheckResult {
    /// The check's test name.
    pub check: String,
    /// How it ended.
    pub status: Status,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// The failure, the reason it does not apply, or the notes of a pass.
    pub detail: String,
}

impl CheckResult {
    /// A result line.
    pub fn new(check: &str, status: Status, duration: Duration, detail: impl Into<String>) -> Self {
        Self {
            check: check.to_owned(),
            status,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
            detail: detail.into(),
        }
    }
}

/// One provider's run of the kit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    /// The harness's [`name`](crate::ConformanceHarness::name).
    pub provider: String,
    /// The kit's version, so reports from different kits are not compared blindly.
    pub kit_version: String,
    /// The checks that ran (filtered-out checks are absent), in the order they finished.
    pub checks: Vec<CheckResult>,
    /// The harness's [`cleanup`](crate::ConformanceHarness::cleanup) after the checks: failed
    /// when it answered an error (the run's names may be left in the backend), with how long
    /// it took. `None` when no cleanup ran (a listing, a harness that could not be set up).
    #[serde(default)]
    pub cleanup: Option<CheckResult>,
}

impl Report {
    /// A report of this kit's version on `provider`'s `checks`, with no cleanup yet.
    pub(crate) fn new(provider: &str, checks: Vec<CheckResult>) -> Self {
        Self {
            provider: provider.to_owned(),
            kit_version: env!("CARGO_PKG_VERSION").to_owned(),
            checks,
            cleanup: None,
        }
    }

    /// Whether no check failed and the cleanup, if one ran, did not fail either: the verdict a
    /// program reads instead of the exit code.
    pub fn passed(&self) -> bool {
        self.checks
            .iter()
            .chain(&self.cleanup)
            .all(|result| result.status != Status::Failed)
    }

    /// The results that failed: checks, then the cleanup.
    pub fn failures(&self) -> impl Iterator<Item = &CheckResult> {
        self.checks
            .iter()
            .chain(&self.cleanup)
            .filter(|result| result.status == Status::Failed)
    }

    /// The report as a markdown table: check, status, time, detail.
    pub fn to_markdown(&self) -> String {
        let mut out = format!(
            "# Conformance of `{}` (shedlock-conformance {})\n\n| check | status | time | detail |\n|---|---|---|---|\n",
            self.provider, self.kit_version
        );
        let mut checks = self.checks.clone();
        checks.sort_by(|a, b| a.check.cmp(&b.check));
        for check in &checks {
            out.push_str(&format!(
                "| {} | {} | {} ms | {} |\n",
                check.check,
                check.status.label(),
                check.duration_ms,
                table_cell(&check.detail)
            ));
        }
        if let Some(cleanup) = &self.cleanup {
            out.push_str(&format!(
                "\n(cleanup: {} in {} ms{}{})\n",
                cleanup.status.label(),
                cleanup.duration_ms,
                if cleanup.detail.is_empty() { "" } else { ": " },
                table_cell(&cleanup.detail)
            ));
        }
        out
    }

    /// Writes `<dir>/<provider>.json` and `<dir>/<provider>.md`, creating `dir`.
    pub fn write_to(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        let stem = file_stem(&self.provider);
        let json = serde_json::to_string_pretty(self).map_err(io::Error::other)?;
        std::fs::write(dir.join(format!("{stem}.json")), json)?;
        std::fs::write(dir.join(format!("{stem}.md")), self.to_markdown())
    }
}

/// A provider name made safe as a file name.
fn file_stem(provider: &str) -> String {
    provider
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Text made safe inside one markdown table cell (first line only, pipes escaped).
fn table_cell(text: &str) -> String {
    text.lines().next().unwrap_or_default().replace('|', "\\|")
}

/// Reads every `*.json` report in `dir`, sorted by provider.
pub fn read_reports(dir: &Path) -> io::Result<Vec<Report>> {
    let mut reports = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "json") {
            let text = std::fs::read_to_string(&path)?;
            let report: Report = serde_json::from_str(&text).map_err(|error| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{} is not a conformance report: {error}", path.display()),
                )
            })?;
            reports.push(report);
        }
    }
    reports.sort_by(|a, b| a.provider.cmp(&b.provider));
    Ok(reports)
}

/// The markdown table of every report in `dir` ([`read_reports`], then [`merged_markdown`]);
/// a folder without reports is an error naming it, not an empty table.
pub fn merged_report(dir: &Path) -> io::Result<String> {
    let reports = read_reports(dir)?;
    if reports.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no conformance reports (*.json) in {}", dir.display()),
        ));
    }
    Ok(merged_markdown(&reports))
}

/// One markdown table, a row per check and a column per provider: `pass 351 ms`, `FAIL`, `n/a`
/// (does not apply) or blank (not run).
pub fn merged_markdown(reports: &[Report]) -> String {
    let mut checks: Vec<String> = reports
        .iter()
        .flat_map(|report| report.checks.iter().map(|check| check.check.clone()))
        .collect();
    checks.sort();
    checks.dedup();
    let mut out = String::from("| check |");
    for report in reports {
        out.push_str(&format!(" {} |", report.provider));
    }
    out.push_str("\n|---|");
    out.push_str(&"---|".repeat(reports.len()));
    out.push('\n');
    for check in &checks {
        out.push_str(&format!("| {check} |"));
        for report in reports {
            let cell = match report.checks.iter().find(|result| &result.check == check) {
                Some(result) if result.status == Status::Ignored => "n/a".to_owned(),
                Some(result) => format!("{} {} ms", result.status.label(), result.duration_ms),
                None => String::new(),
            };
            out.push_str(&format!(" {cell} |"));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(provider: &str, results: Vec<CheckResult>) -> Report {
        Report {
            provider: provider.to_owned(),
            kit_version: "0.1.0".to_owned(),
            checks: results,
            cleanup: None,
        }
    }

    #[test]
    fn merged_table_has_a_column_per_provider_and_a_row_per_check() {
        let memory = report(
            "memory",
            vec![
                CheckResult::new("extend", Status::Passed, Duration::from_millis(12), ""),
                CheckResult::new(
                    "clock_skew",
                    Status::Failed,
                    Duration::from_millis(7),
                    "x|y\nmore",
                ),
            ],
        );
        let etcd = report(
            "etcd",
            vec![CheckResult::new(
                "extend",
                Status::Ignored,
                Duration::ZERO,
                "no extend",
            )],
        );
        let table = merged_markdown(&[etcd, memory.clone()]);
        assert_eq!(
            table,
            "| check | etcd | memory |\n|---|---|---|\n| clock_skew |  | FAIL 7 ms |\n| extend | n/a | pass 12 ms |\n"
        );
        let single = memory.to_markdown();
        assert!(
            single.contains("| clock_skew | FAIL | 7 ms | x\\|y |"),
            "{single}"
        );
    }

    #[test]
    fn reports_round_trip_through_a_folder() {
        let dir =
            std::env::temp_dir().join(format!("slc-report-{}", uuid::Uuid::new_v4().simple()));
        let memory = report(
            "memory/with slash",
            vec![CheckResult::new(
                "model",
                Status::Passed,
                Duration::from_millis(3),
                "ok",
            )],
        );
        memory.write_to(&dir).unwrap();
        assert!(dir.join("memory_with_slash.md").exists());
        assert_eq!(read_reports(&dir).unwrap(), vec![memory.clone()]);
        assert_eq!(merged_report(&dir).unwrap(), merged_markdown(&[memory]));
        let empty = dir.join("empty");
        std::fs::create_dir(&empty).unwrap();
        let error = merged_report(&empty).unwrap_err();
        assert!(
            error.to_string().contains("no conformance reports"),
            "{error}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
