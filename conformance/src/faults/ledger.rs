//! The soak's external ledger: a file every run of the job appends to, and the judgement of
//! what it shows.
//!
//! Each line is one event: `start <tick> <node> <token or -> <unix ms>` when a node's job
//! begins, `end <tick> <node> <unix ms>` when it ends, and `error <tick> <node> <unix ms>`
//! when a node's acquire failed (so it skipped the tick: fail closed). Lines are short and
//! appended with one write each, so nodes in separate processes never interleave within one.
//! `late <tick> <node> <unix ms>` says a node got the lock only after `lock_at_least_for` had
//! passed since the tick began, and gave it back without running: by then the tick's run may
//! have come and gone, and `lock_at_least_for` is what keeps a tick's latecomers out.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The ledger file.
#[derive(Debug, Clone)]
pub struct Ledger {
    path: PathBuf,
}

/// One run of the job, as the ledger shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerEntry {
    /// The tick the run belongs to: its scheduled start divided by the tick length.
    pub tick: u64,
    /// The node (child process) that ran it.
    pub node: u32,
    /// The acquisition's fencing token, when the provider gives one.
    pub token: Option<u64>,
    /// When the job began, in Unix milliseconds.
    pub started_ms: u64,
    /// When it ended, unless its node was killed first.
    pub ended_ms: Option<u64>,
}

/// A stretch of time in which a tick may go without a run, and why: a killed node may have
/// held the lock until its `lock_at_most_for`, or the backend was restarting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TickExcuse {
    /// From this Unix millisecond...
    pub from_ms: u64,
    /// ...to this one, inclusive.
    pub to_ms: u64,
    /// What happened.
    pub why: String,
}

/// What the ledger shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LedgerVerdict {
    /// Runs in the judged ticks.
    pub runs: usize,
    /// Ticks judged.
    pub ticks: u64,
    /// Ticks without a run, each inside an excuse.
    pub excused_losses: u64,
    /// Acquires that failed (the node skipped the tick).
    pub errors: usize,
    /// Broken promises: two runs in a tick, overlapping runs, tokens out of order, a tick lost
    /// without an excuse. Empty when the soak passed.
    pub problems: Vec<String>,
}

impl Ledger {
    /// A ledger at `path` (created on first append).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self { path: path.into() }
    }

    /// Where it is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one line, with a single write.
    pub fn append(&self, line: &str) -> io::Result<()> {
        let mut file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)?;
        file.write_all(format!("{line}\n").as_bytes())
    }

    /// The runs it records, in the order they started, how many acquires failed, and how many
    /// came late.
    pub fn read(&self) -> io::Result<(Vec<LedgerEntry>, usize, usize)> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(text) => text,
            Err(error) if error.kind() == io::ErrorKind::NotFound => String::new(),
            Err(error) => return Err(error),
        };
        parse(&text)
    }
}

fn bad_line(line: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("ledger line {line:?} is not `start|end|error ...`"),
    )
}

fn parse(text: &str) -> io::Result<(Vec<LedgerEntry>, usize, usize)> {
    let mut runs: Vec<LedgerEntry> = Vec::new();
    let mut open: BTreeMap<(u64, u32), usize> = BTreeMap::new();
    let (mut errors, mut late) = (0, 0);
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let number = |index: usize| -> io::Result<u64> {
            fields
                .get(index)
                .and_then(|field| field.parse().ok())
                .ok_or_else(|| bad_line(line))
        };
        match fields.first().copied() {
            Some("start") if fields.len() == 5 => {
                let tick = number(1)?;
                let node = u32::try_from(number(2)?).map_err(|_| bad_line(line))?;
                let token = match fields[3] {
                    "-" => None,
                    _ => Some(number(3)?),
                };
                open.insert((tick, node), runs.len());
                runs.push(LedgerEntry {
                    tick,
                    node,
                    token,
                    started_ms: number(4)?,
                    ended_ms: None,
                });
            }
            Some("end") if fields.len() == 4 => {
                let key = (
                    number(1)?,
                    u32::try_from(number(2)?).map_err(|_| bad_line(line))?,
                );
                let index = open.remove(&key).ok_or_else(|| bad_line(line))?;
                runs[index].ended_ms = Some(number(3)?);
            }
            Some("error") if fields.len() == 4 => errors += 1,
            Some("late") if fields.len() == 4 => late += 1,
            _ => return Err(bad_line(line)),
        }
    }
    runs.sort_by_key(|run| (run.started_ms, run.node));
    Ok((runs, errors, late))
}

/// What a soak's ledger is judged against.
#[derive(Debug, Clone)]
pub struct SoakRecord<'a> {
    /// The first tick judged: every node was up by then.
    pub first_tick: u64,
    /// The last tick judged.
    pub last_tick: u64,
    /// The tick length, in milliseconds.
    pub tick_ms: u64,
    /// The nodes killed, and when (Unix ms).
    pub killed: &'a [(u32, u64)],
    /// When a tick may go without a run.
    pub excuses: &'a [TickExcuse],
    /// Whether every run must carry a fencing token greater than the one before.
    pub fencing: bool,
    /// Stretches of time (Unix ms, from and to) somewhere in which tokens may start again from
    /// the bottom: restarts of a backend that loses its data on restart, counter included.
    /// Tokens are not compared between a run before such a stretch ended and one after it
    /// began.
    pub token_resets: &'a [(u64, u64)],
}

/// Judges `runs` over the ticks of `record`.
///
/// Every tick has at most one run; no run starts before the one before it ended (a run whose
/// node was killed ends at the kill); with fencing, every run has a token greater than the one
/// before, unless a token reset lies between them; and every tick has a run unless its start
/// lies inside one of the excuses.
pub fn judge(runs: &[LedgerEntry], errors: usize, record: &SoakRecord<'_>) -> LedgerVerdict {
    let SoakRecord {
        first_tick,
        last_tick,
        tick_ms,
        killed,
        excuses,
        fencing,
        token_resets,
    } = *record;
    let mut verdict = LedgerVerdict {
        errors,
        ticks: (last_tick + 1).saturating_sub(first_tick),
        ..LedgerVerdict::default()
    };
    let mut per_tick: BTreeMap<u64, Vec<&LedgerEntry>> = BTreeMap::new();
    for run in runs {
        per_tick.entry(run.tick).or_default().push(run);
    }
    for (tick, in_tick) in &per_tick {
        if in_tick.len() > 1 {
            let nodes: Vec<String> = in_tick.iter().map(|run| run.node.to_string()).collect();
            verdict.problems.push(format!(
                "tick {tick} ran {} times, on nodes {}",
                in_tick.len(),
                nodes.join(", ")
            ));
        }
    }
    let end_of = |run: &LedgerEntry| -> u64 {
        run.ended_ms.unwrap_or_else(|| {
            killed
                .iter()
                .filter(|(node, at)| *node == run.node && *at >= run.started_ms)
                .map(|(_, at)| *at)
                .min()
                .unwrap_or(u64::MAX)
        })
    };
    for pair in runs.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        let before_end = end_of(before);
        if after.started_ms < before_end {
            verdict.problems.push(format!(
                "node {}'s run of tick {} started at {} ms, before node {}'s run of tick {} ended ({})",
                after.node,
                after.tick,
                after.started_ms,
                before.node,
                before.tick,
                if before_end == u64::MAX {
                    "never, and its node was not killed".to_owned()
                } else {
                    format!("{before_end} ms")
                }
            ));
        }
        let reset_between = token_resets
            .iter()
            .any(|(from, to)| before.started_ms < *to && after.started_ms > *from);
        if fencing && !reset_between {
            match (before.token, after.token) {
                (Some(earlier), Some(later)) if later > earlier => {}
                (earlier, later) => verdict.problems.push(format!(
                    "tokens out of order: node {}'s run of tick {} has token {later:?}, after node {}'s run of tick {} with {earlier:?}",
                    after.node, after.tick, before.node, before.tick
                )),
            }
        }
    }
    if fencing
        && let Some(first) = runs.first()
        && first.token.is_none()
    {
        verdict.problems.push(format!(
            "node {}'s run of tick {} has no fencing token",
            first.node, first.tick
        ));
    }
    for tick in first_tick..=last_tick {
        match per_tick.get(&tick) {
            Some(in_tick) => verdict.runs += in_tick.len(),
            None => {
                let at = tick * tick_ms;
                if excuses
                    .iter()
                    .any(|excuse| (excuse.from_ms..=excuse.to_ms).contains(&at))
                {
                    verdict.excused_losses += 1;
                } else {
                    verdict.problems.push(format!(
                        "tick {tick} (at {at} ms) had no run, though a node was alive and the backend up"
                    ));
                }
            }
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record<'a>(
        first_tick: u64,
        last_tick: u64,
        killed: &'a [(u32, u64)],
        excuses: &'a [TickExcuse],
        fencing: bool,
    ) -> SoakRecord<'a> {
        SoakRecord {
            first_tick,
            last_tick,
            tick_ms: 1000,
            killed,
            excuses,
            fencing,
            token_resets: &[],
        }
    }

    fn run(tick: u64, node: u32, token: Option<u64>, ended: bool) -> LedgerEntry {
        LedgerEntry {
            tick,
            node,
            token,
            started_ms: tick * 1000 + 5,
            ended_ms: ended.then_some(tick * 1000 + 205),
        }
    }

    #[test]
    fn a_clean_ledger_passes() {
        let runs = [
            run(10, 1, Some(1), true),
            run(11, 2, Some(2), true),
            run(12, 1, Some(7), true),
        ];
        let verdict = judge(&runs, 0, &record(10, 12, &[], &[], true));
        assert_eq!(verdict.problems, Vec::<String>::new());
        assert_eq!((verdict.runs, verdict.ticks), (3, 3));
    }

    #[test]
    fn two_runs_in_a_tick_are_reported() {
        let mut second = run(10, 2, None, true);
        second.started_ms += 300;
        second.ended_ms = Some(second.started_ms + 100);
        let verdict = judge(
            &[run(10, 1, None, true), second],
            0,
            &record(10, 10, &[], &[], false),
        );
        assert_eq!(
            verdict.problems,
            vec!["tick 10 ran 2 times, on nodes 1, 2".to_owned()]
        );
    }

    #[test]
    fn an_overlap_is_reported_and_a_kill_ends_a_run() {
        let mut late = run(11, 2, None, true);
        late.started_ms = 10_100;
        let verdict = judge(
            &[run(10, 1, None, true), late.clone()],
            0,
            &record(10, 11, &[], &[], false),
        );
        assert_eq!(verdict.problems.len(), 1, "{:?}", verdict.problems);
        assert!(verdict.problems[0].contains("before node 1's run of tick 10 ended"));

        let unfinished = run(10, 1, None, false);
        let verdict = judge(
            &[unfinished.clone(), late.clone()],
            0,
            &record(10, 11, &[], &[], false),
        );
        assert!(verdict.problems[0].contains("never, and its node was not killed"));
        let verdict = judge(
            &[unfinished, late],
            0,
            &record(10, 11, &[(1, 10_050)], &[], false),
        );
        assert_eq!(verdict.problems, Vec::<String>::new());
    }

    #[test]
    fn tokens_must_increase_and_be_present() {
        let verdict = judge(
            &[run(10, 1, Some(5), true), run(11, 2, Some(5), true)],
            0,
            &record(10, 11, &[], &[], true),
        );
        assert_eq!(verdict.problems.len(), 1);
        assert!(verdict.problems[0].contains("tokens out of order"));
        let verdict = judge(
            &[run(10, 1, None, true)],
            0,
            &record(10, 10, &[], &[], true),
        );
        assert_eq!(verdict.problems.len(), 1);
        assert!(verdict.problems[0].contains("no fencing token"));
    }

    #[test]
    fn tokens_may_start_again_only_across_a_reset() {
        let runs = [run(10, 1, Some(15), true), run(11, 2, Some(1), true)];
        let mut rules = record(10, 11, &[], &[], true);
        assert_eq!(judge(&runs, 0, &rules).problems.len(), 1);
        rules.token_resets = &[(10_500, 10_700)];
        assert_eq!(judge(&runs, 0, &rules).problems, Vec::<String>::new());
        // A restart that began before the first run and ended after it began: the data may
        // have gone after the first run took its token.
        rules.token_resets = &[(9_000, 10_010)];
        assert_eq!(judge(&runs, 0, &rules).problems, Vec::<String>::new());
        for (window, why) in [
            ((11_500, 11_600), "a reset after both runs excuses nothing"),
            (
                (9_000, 10_005),
                "a reset over when the first run began excuses nothing",
            ),
            (
                (11_005, 11_100),
                "a reset from when the second run began excuses nothing",
            ),
        ] {
            let windows = [window];
            let rules = SoakRecord {
                token_resets: &windows,
                ..record(10, 11, &[], &[], true)
            };
            assert_eq!(judge(&runs, 0, &rules).problems.len(), 1, "{why}");
        }
    }

    #[test]
    fn a_lost_tick_needs_an_excuse() {
        let runs = [run(10, 1, None, true), run(12, 1, None, true)];
        let verdict = judge(&runs, 0, &record(10, 12, &[], &[], false));
        assert_eq!(verdict.problems.len(), 1);
        assert!(verdict.problems[0].starts_with("tick 11 (at 11000 ms) had no run"));
        let excuse = TickExcuse {
            from_ms: 11_000,
            to_ms: 11_000,
            why: "restart".into(),
        };
        let verdict = judge(&runs, 0, &record(10, 12, &[], &[excuse], false));
        assert_eq!(verdict.problems, Vec::<String>::new());
        assert_eq!(verdict.excused_losses, 1);
    }

    #[test]
    fn a_kill_ends_only_its_own_nodes_run_and_back_to_back_runs_do_not_overlap() {
        let unfinished = run(10, 1, None, false);
        let mut next = run(11, 2, None, true);
        next.started_ms = 10_100;
        let verdict = judge(
            &[unfinished, next.clone()],
            3,
            &record(10, 11, &[(2, 10_050)], &[], false),
        );
        assert_eq!(
            verdict.problems.len(),
            1,
            "node 2's kill does not end node 1's run"
        );
        assert_eq!(verdict.errors, 3);
        let mut first = run(10, 1, None, true);
        first.ended_ms = Some(10_100);
        let verdict = judge(&[first, next], 0, &record(10, 11, &[], &[], false));
        assert_eq!(
            verdict.problems,
            Vec::<String>::new(),
            "a run may start as the one before ends"
        );
    }

    #[test]
    fn lines_with_a_field_too_many_are_refused() {
        for line in [
            "start 10 1 4 10005 9",
            "end 10 1 10205 9",
            "error 10 2 10009 9",
            "late 10 2 10009 9",
        ] {
            let text = format!("start 10 1 4 10005\n{line}\n");
            assert!(parse(&text).is_err(), "{line}");
        }
    }

    #[test]
    fn the_ledger_file_is_appended_and_read_back() {
        let dir =
            std::env::temp_dir().join(format!("shedlock-ledger-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).unwrap();
        let ledger = Ledger::new(dir.join("ledger"));
        assert_eq!(
            ledger.read().unwrap(),
            (Vec::new(), 0, 0),
            "a ledger nobody wrote is empty"
        );
        ledger.append("start 10 1 4 10005").unwrap();
        ledger.append("error 10 2 10009").unwrap();
        let (runs, errors, late) = ledger.read().unwrap();
        assert_eq!((runs.len(), errors, late), (1, 1, 0));
        assert_eq!(runs[0].token, Some(4));
        assert!(
            Ledger::new(&dir).read().is_err(),
            "a directory is not a ledger"
        );
        assert!(Ledger::new(dir.join("no/such/dir")).append("x").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_file_round_trips() {
        let text = "start 10 1 4 10005\nerror 10 2 10009\nend 10 1 10205\nstart 11 2 - 11003\n";
        let (runs, errors, late) = parse(&format!("{text}late 11 3 11900\n")).unwrap();
        assert_eq!((errors, late), (1, 1));
        assert_eq!(runs.len(), 2);
        assert_eq!(
            runs[0],
            LedgerEntry {
                tick: 10,
                node: 1,
                token: Some(4),
                started_ms: 10005,
                ended_ms: Some(10205)
            }
        );
        assert_eq!(runs[1].ended_ms, None);
        assert!(parse("start x").is_err());
        assert!(parse("end 10 9 5").is_err(), "an end without its start");
    }
}
