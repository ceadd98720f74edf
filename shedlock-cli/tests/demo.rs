//! `shedlock demo` as the README runs it: three processes on a new SQLite file, twenty ticks,
//! each tick on exactly one node; and the same check failing where nodes do not share a lock.

mod command;

#[cfg(feature = "sqlite")]
use std::collections::BTreeSet;

use command::{run, shedlock};

/// One `tick ...` line: its label, the nodes that ran it and those that skipped it.
#[derive(Debug)]
#[cfg_attr(not(any(feature = "sqlite", feature = "memory")), allow(dead_code))]
struct TickLine {
    label: String,
    ran: Vec<String>,
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    skipped: Vec<String>,
}

#[cfg_attr(not(any(feature = "sqlite", feature = "memory")), allow(dead_code))]
fn tick_lines(stdout: &str) -> Vec<TickLine> {
    stdout
        .lines()
        .filter_map(|line| line.strip_prefix("tick "))
        .map(|rest| {
            let (label, rest) = rest
                .split_once("  ran on ")
                .expect("a tick line says who ran it");
            let (ran, rest) = rest.split_once("  (skipped: ").expect("and who skipped it");
            let skipped = rest.split_once(')').expect("skipped list closes").0;
            let nodes = |text: &str| match text {
                "no node" | "none" => Vec::new(),
                text => text.split(", ").map(str::to_owned).collect(),
            };
            TickLine {
                label: label.to_owned(),
                ran: nodes(ran),
                skipped: nodes(skipped),
            }
        })
        .collect()
}

/// The per-node rows of the final table: name, ran, skipped, other.
#[cfg_attr(not(any(feature = "sqlite", feature = "memory")), allow(dead_code))]
fn node_rows(stdout: &str) -> Vec<(String, usize, usize, usize)> {
    stdout
        .lines()
        .skip_while(|line| !line.starts_with("runs and skips per node:"))
        .skip(2)
        .map_while(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            match cells.as_slice() {
                [name, ran, skipped, other] if name.starts_with("node-") => Some((
                    (*name).to_owned(),
                    ran.parse().ok()?,
                    skipped.parse().ok()?,
                    other.parse().ok()?,
                )),
                _ => None,
            }
        })
        .collect()
}

#[cfg(feature = "sqlite")]
#[test]
fn the_default_demo_runs_each_of_20_ticks_on_exactly_one_of_3_nodes() {
    let ran = run(&mut shedlock(&["demo"]));
    let shown = ran.shown();
    // Where the demo kept its lock, and the command to see it, said in its last line: run as
    // the user's shell would run it (this test's PATH does not hold target/, as after `cargo
    // run`), the command must work. The file is removed whatever the outcome.
    let command = ran
        .stdout
        .lines()
        .find_map(|line| line.split_once("see it with: "))
        .map(|(_, command)| command.trim().to_owned())
        .unwrap_or_else(|| panic!("the demo says how to see its lock:\n{shown}"));
    let file = command
        .split_once(" list --url sqlite://")
        .map(|(_, path)| std::path::PathBuf::from(path))
        .unwrap_or_else(|| panic!("the demo names its SQLite file:\n{shown}"));
    let listed = run(std::process::Command::new("sh").args(["-c", &command]));
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    assert!(
        std::path::Path::new(command.split_once(' ').unwrap().0).is_absolute(),
        "not installed, so named by its path: {command}"
    );

    assert_eq!(ran.code, Some(0), "{shown}");
    assert!(ran.stderr.is_empty(), "nothing on stderr:\n{shown}");
    assert!(
        ran.stdout
            .starts_with("shedlock demo: 3 nodes (separate processes) run one job every 1s"),
        "{shown}"
    );
    assert!(ran.stdout.contains("lock_at_most_for 899ms"), "{shown}");
    assert!(ran.stdout.contains("lock_at_least_for 749ms"), "{shown}");

    let nodes: BTreeSet<String> = ["node-1", "node-2", "node-3"].map(str::to_owned).into();
    let ticks = tick_lines(&ran.stdout);
    assert_eq!(ticks.len(), 20, "20 tick lines:\n{shown}");
    for tick in &ticks {
        assert_eq!(tick.ran.len(), 1, "tick {} ran once:\n{shown}", tick.label);
        let everyone: BTreeSet<String> = tick.ran.iter().chain(&tick.skipped).cloned().collect();
        assert_eq!(
            everyone, nodes,
            "every node ran or skipped tick {}:\n{shown}",
            tick.label
        );
        assert_eq!(tick.skipped.len(), 2, "{shown}");
    }
    let labels: BTreeSet<&str> = ticks.iter().map(|tick| tick.label.as_str()).collect();
    assert_eq!(
        labels.len(),
        20,
        "20 different ticks, one second apart:\n{shown}"
    );

    let rows = node_rows(&ran.stdout);
    assert_eq!(rows.len(), 3, "a table row per node:\n{shown}");
    for (node, runs, skips, other) in &rows {
        assert_eq!(
            runs + skips,
            20,
            "{node} ran or skipped every tick:\n{shown}"
        );
        assert_eq!(*other, 0, "{shown}");
        let counted = ticks.iter().filter(|tick| tick.ran.contains(node)).count();
        assert_eq!(
            *runs, counted,
            "{node}'s runs in the table match its tick lines:\n{shown}"
        );
    }
    assert_eq!(rows.iter().map(|row| row.1).sum::<usize>(), 20, "{shown}");
    assert!(
        ran.stdout
            .contains("20 of 20 ticks ran exactly once across 3 nodes"),
        "{shown}"
    );

    // The lock the nodes shared is in the file the demo named.
    assert_eq!(listed.code, Some(0), "{}", listed.shown());
    assert!(
        listed
            .stdout
            .lines()
            .any(|line| line.starts_with("shedlock-demo ")),
        "{}",
        listed.shown()
    );
}

#[cfg(feature = "memory")]
#[test]
fn nodes_that_share_no_lock_all_run_every_tick_and_the_demo_fails() {
    // memory:// is a store inside each process: two processes, two locks.
    let ran = run(&mut shedlock(&[
        "demo",
        "--url",
        "memory://demo",
        "--nodes",
        "2",
        "--ticks",
        "3",
        "--every",
        "500ms",
    ]));
    let shown = ran.shown();
    let error = ran.one_line_error(1);
    assert_eq!(
        error, "shedlock: 3 of 3 ticks did not run exactly once (see the table above)",
        "{shown}"
    );
    let ticks = tick_lines(&ran.stdout);
    assert_eq!(ticks.len(), 3, "{shown}");
    for tick in &ticks {
        assert_eq!(tick.ran, ["node-1", "node-2"], "{shown}");
        // Ticks half a second apart are labelled to the millisecond.
        assert_eq!(tick.label.len(), "00:00:00.000".len(), "{shown}");
    }
    assert!(
        ran.stdout.contains("every node will run every tick"),
        "{shown}"
    );
    assert!(
        ran.stdout
            .contains("0 of 3 ticks ran exactly once across 2 nodes"),
        "{shown}"
    );
    let rows = node_rows(&ran.stdout);
    assert_eq!(
        rows,
        [
            ("node-1".to_owned(), 3, 0, 0),
            ("node-2".to_owned(), 3, 0, 0)
        ],
        "{shown}"
    );
}

#[test]
fn out_of_range_numbers_are_usage_errors() {
    for args in [
        ["demo", "--nodes", "0"],
        ["demo", "--ticks", "0"],
        ["demo", "--every", "50ms"],
        ["demo", "--every", "100.5ms"],
        ["demo", "--every", "10"],
        ["demo", "--timeout", "0s"],
    ] {
        let ran = run(&mut shedlock(&args));
        assert_eq!(ran.code, Some(2), "{args:?}: {}", ran.shown());
        assert!(ran.stdout.is_empty(), "{args:?}: {}", ran.shown());
    }
}

#[test]
fn a_demo_on_an_unknown_scheme_is_one_line_and_starts_no_node() {
    let ran = run(&mut shedlock(&["demo", "--url", "ftp://files.example/x"]));
    let error = ran.one_line_error(1);
    assert!(error.contains("unknown scheme \"ftp\""), "{}", ran.shown());
    assert!(ran.stdout.is_empty(), "{}", ran.shown());
}
