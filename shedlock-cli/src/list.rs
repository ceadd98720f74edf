//! `shedlock list`: every lock of a backend, page by page as it is read, so a backend with
//! 100,000 locks prints them without holding them all.

use std::io::{self, BufWriter, IsTerminal, Write};

use clap::Args;
use futures_util::StreamExt;
use shedlock::json::LockJson;
use shedlock::{AnyLockProvider, DEFAULT_PAGE_SIZE, LockInfo, list_all_locks};

use crate::backend::BackendArgs;
use crate::progress::Progress;
use crate::times;
use crate::{Failure, printable};

const LIST_EXAMPLES: &str = "\
Columns: NAME, STATE (held or free, by the backend's clock), HOLDER (the last holder's
locked_by), LOCKED_AT and HELD_UNTIL (UTC), REMAINING (time left, by the backend's clock),
FENCING (the last acquisition's fencing token, where the backend keeps one) and ACQUISITION
(what `shedlock unlock NAME --acquisition ID` takes to free exactly that acquisition). A dash:
the backend does not store it. Free locks are listed where the backend keeps their records
(SQL rows, MongoDB documents, ZooKeeper nodes); Redis and etcd keys vanish when freed.

Examples:
  shedlock list --url sqlite:/var/lib/app/locks.db
  shedlock list --url postgres://ops@db/app --prefix report-
  SHEDLOCK_URL=redis://cache:6379 shedlock list --json | jq -r 'select(.state == \"held\") | .name'

Exit codes: 0 listed (even none), 1 error, 2 usage error.";

/// List the locks of a backend, as a table or as JSON lines.
#[derive(Args)]
#[command(after_help = LIST_EXAMPLES)]
pub struct ListArgs {
    #[command(flatten)]
    backend: BackendArgs,
    /// Only the locks whose names start with this text, taken literally (`%`, `_`, `*` are
    /// plain characters).
    #[arg(long, value_name = "TEXT", default_value = "")]
    prefix: String,
    /// One JSON object per lock and line (name, state, locked_by, locked_at, held_until,
    /// remaining_ms, fencing_token, acquisition), instead of the table.
    #[arg(long)]
    json: bool,
}

const HEADER: [&str; COLUMNS] = [
    "NAME",
    "STATE",
    "HOLDER",
    "LOCKED_AT",
    "HELD_UNTIL",
    "REMAINING",
    "FENCING",
    "ACQUISITION",
];
const COLUMNS: usize = 8;

/// Reads and prints the listing, then shuts the provider down.
pub async fn run(args: ListArgs) -> Result<(), Failure> {
    let admin = args.backend.connect().await?;
    let listed = list(&args, &admin).await;
    admin.shutdown().await;
    listed
}

async fn list(args: &ListArgs, admin: &AnyLockProvider) -> Result<(), Failure> {
    let mut output = match args.json {
        true => Output::Json,
        false => Output::Table(Table::default()),
    };
    // A terminal gets each line at once, so the progress line, which shares it, never lands
    // in the middle of a buffered one; a pipe or a file gets large writes.
    let line_by_line = io::stdout().is_terminal();
    let mut stdout = BufWriter::new(io::stdout().lock());
    let progress = Progress::start("reading locks");
    let mut locks = std::pin::pin!(list_all_locks(admin, &args.prefix, DEFAULT_PAGE_SIZE));
    let mut count = 0_u64;
    while let Some(lock) = locks.next().await {
        let lock = lock.map_err(|error| Failure::from_error("", &error))?;
        count += 1;
        progress.set(format!("reading locks: {count} so far"));
        let written = progress.suspend(|| {
            output.add(&lock, &mut stdout)?;
            match line_by_line {
                true => stdout.flush(),
                false => Ok(()),
            }
        });
        if let Some(end) = stopped_by(written)? {
            return end;
        }
    }
    progress.finish();
    if let Some(end) = stopped_by(output.finish(&mut stdout).and_then(|()| stdout.flush()))? {
        return end;
    }
    if count == 0 && !args.json {
        let whose = match args.prefix.as_str() {
            "" => String::new(),
            prefix => format!(" whose names start with {prefix:?}"),
        };
        eprintln!("no locks{whose} on {}", args.backend.shown_url());
    }
    Ok(())
}

/// A reader that went away (`shedlock list | head`) ends the listing quietly, as it does for
/// every Unix tool; any other write error is an error.
fn stopped_by(written: io::Result<()>) -> Result<Option<Result<(), Failure>>, Failure> {
    match written {
        Ok(()) => Ok(None),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(Some(Ok(()))),
        Err(error) => Err(Failure::from_error("cannot write the listing: ", &error)),
    }
}

enum Output {
    Json,
    Table(Table),
}

impl Output {
    fn add(&mut self, lock: &LockInfo, out: &mut impl Write) -> io::Result<()> {
        match self {
            Output::Json => {
                let line =
                    serde_json::to_string(&LockJson::from(lock)).map_err(io::Error::other)?;
                writeln!(out, "{line}")
            }
            Output::Table(table) => table.add(row(lock), out),
        }
    }

    fn finish(&mut self, out: &mut impl Write) -> io::Result<()> {
        match self {
            Output::Json => Ok(()),
            Output::Table(table) => table.flush_pending(out),
        }
    }
}

fn row(lock: &LockInfo) -> [String; COLUMNS] {
    let dash = || "-".to_owned();
    [
        printable(&lock.name).into_owned(),
        lock.state.to_string(),
        lock.locked_by
            .as_deref()
            .map_or_else(dash, |holder| printable(holder).into_owned()),
        lock.locked_at.map_or_else(dash, times::instant),
        lock.held_until.map_or_else(dash, times::instant),
        lock.remaining.map_or_else(dash, times::span),
        lock.fencing_token
            .map_or_else(dash, |token| token.to_string()),
        printable(lock.acquisition.as_str()).into_owned(),
    ]
}

/// Columns as wide as the first page needs, so the first screenful lines up while the listing
/// still streams; a longer cell later on pushes its line out rather than holding output back.
#[derive(Default)]
struct Table {
    pending: Vec<[String; COLUMNS]>,
    widths: Option<[usize; COLUMNS]>,
}

impl Table {
    fn add(&mut self, row: [String; COLUMNS], out: &mut impl Write) -> io::Result<()> {
        match self.widths {
            Some(widths) => write_row(out, &row, widths),
            None => {
                self.pending.push(row);
                if self.pending.len() >= DEFAULT_PAGE_SIZE {
                    self.flush_pending(out)?;
                }
                Ok(())
            }
        }
    }

    fn flush_pending(&mut self, out: &mut impl Write) -> io::Result<()> {
        if self.widths.is_some() || self.pending.is_empty() {
            return Ok(());
        }
        let mut widths = HEADER.map(str::len);
        for row in &self.pending {
            for (width, cell) in widths.iter_mut().zip(row) {
                *width = (*width).max(cell.chars().count());
            }
        }
        self.widths = Some(widths);
        write_row(out, &HEADER.map(str::to_owned), widths)?;
        for row in std::mem::take(&mut self.pending) {
            write_row(out, &row, widths)?;
        }
        out.flush()
    }
}

fn write_row(
    out: &mut impl Write,
    row: &[String; COLUMNS],
    widths: [usize; COLUMNS],
) -> io::Result<()> {
    let mut line = String::new();
    for (index, (cell, width)) in row.iter().zip(widths).enumerate() {
        if index + 1 == COLUMNS {
            line.push_str(cell);
        } else {
            line.push_str(cell);
            let pad = width.saturating_sub(cell.chars().count()) + 2;
            line.extend(std::iter::repeat_n(' ', pad));
        }
    }
    writeln!(out, "{line}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_longest_cell_of_the_first_page() {
        let mut table = Table::default();
        let mut out = Vec::new();
        let cells = |name: &str, state: &str| {
            let mut row: [String; COLUMNS] = Default::default();
            row[0] = name.to_owned();
            row[1] = state.to_owned();
            for cell in &mut row[2..] {
                *cell = "-".to_owned();
            }
            row
        };
        table
            .add(cells("a-very-long-lock-name", "held"), &mut out)
            .unwrap();
        table.add(cells("b", "free"), &mut out).unwrap();
        assert!(out.is_empty(), "rows wait for the first page to end");
        table.flush_pending(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("NAME                   STATE  HOLDER"));
        assert!(lines[2].starts_with("b                      free   -"));
        assert!(
            lines[2].ends_with("  -"),
            "the last column is not padded: {:?}",
            lines[2]
        );
    }
}
