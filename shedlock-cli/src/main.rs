//! The `shedlock` command: a demo of a fleet sharing one lock, and the operator's view of any
//! backend's locks (list them, free a stuck one without ever freeing a lock that changed
//! hands). Every backend is named by one URL, as `shedlock::connect` reads it.

use std::error::Error;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use shedlock::{ConnectError, ErrorKind, LockError};

mod backend;
mod bench;
mod demo;
mod list;
mod progress;
mod times;
mod unlock;

const EXAMPLES: &str = "\
Examples:
  # Three processes share one lock on a new SQLite file; each tick runs on exactly one
  shedlock demo

  # Every lock of a PostgreSQL database (the URL may come from SHEDLOCK_URL instead)
  shedlock list --url postgres://app@db.internal/app
  SHEDLOCK_URL=redis://cache:6379 shedlock list --prefix report- --json

  # Free a stuck lock: shows its holder and asks before freeing that very acquisition
  shedlock unlock nightly-report --url mysql://ops@db/app

  # What a lock costs on each backend, beside the backend's floor (table and SVG chart)
  shedlock bench --url postgres://postgres@db/test --url redis://cache:6379

Backends: sqlite: and memory:// are built in; postgres://, mysql:// (mariadb://), redis://
(rediss://, valkey://), etcd:// (etcds://), mongodb:// and zk:// each need the cargo feature
of the same name (or `all`): cargo install shedlock-cli --features postgres

Exit codes: 0 done, 1 error (bad input, a setting or schema to fix, a backend failure that
trying again will not mend), 2 usage error, 3 no such lock, 4 not freed (the lock changed hands
or was free already), 5 declined at the prompt, 6 the backend could not be reached or did not
answer (trying again may work), 7 the backend refused the credentials; `demo` exits 1 when a
tick did not run exactly once.";

/// Run a job once per tick across a fleet, and see and free the locks it takes.
#[derive(Parser)]
#[command(
    name = "shedlock",
    version,
    about = "See shedlock-rs at work, and see and free the locks of any backend",
    long_about = "See shedlock-rs at work (`demo`), see and free the locks of any backend \
                  (`list`, `unlock`), and measure what a lock costs on it (`bench`). A \
                  backend is named by a URL, given with --url or in the SHEDLOCK_URL \
                  environment variable (better for URLs with a password: argv is visible to \
                  every user of the machine). No URL is ever printed with its password.",
    after_help = EXAMPLES
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Demo(demo::DemoArgs),
    List(list::ListArgs),
    Unlock(unlock::UnlockArgs),
    Bench(bench::BenchArgs),
    /// One node of `demo`, started by it: not for direct use.
    #[command(hide = true)]
    DemoNode(demo::node::NodeArgs),
}

/// How a command ended other than with success: the line to print and the exit code.
#[derive(Debug)]
pub enum Failure {
    /// Bad input, a setting or schema to fix, or a backend that failed in a way trying again
    /// will not mend (exit 1).
    Error(String),
    /// The backend could not be reached or did not answer: trying again may work (exit 6).
    Unavailable(String),
    /// The backend refused the credentials or a permission (exit 7).
    CredentialsRefused(String),
    /// No lock of that name (exit 3).
    NotFound(String),
    /// The lock was not freed because it changed hands or was free already (exit 4).
    NotFreed(String),
    /// The operator answered no (exit 5).
    Declined(String),
}

impl Failure {
    /// An error and each of its causes, once each, on one line; a lock error (or a connect
    /// error) picks the exit code by its [`ErrorKind`], so a script can tell "try again later"
    /// from "fix something first".
    pub fn from_error(context: &str, error: &(dyn Error + 'static)) -> Self {
        let message = format!("{context}{}", one_line(error));
        let kind = error
            .downcast_ref::<LockError>()
            .map(LockError::kind)
            .or_else(|| error.downcast_ref::<ConnectError>().map(ConnectError::kind));
        match kind {
            Some(kind) if kind.retryable() => Failure::Unavailable(message),
            Some(ErrorKind::CredentialsRefused) => Failure::CredentialsRefused(message),
            _ => Failure::Error(message),
        }
    }

    fn exit_code(&self) -> u8 {
        match self {
            Failure::Error(_) => 1,
            Failure::Unavailable(_) => 6,
            Failure::CredentialsRefused(_) => 7,
            Failure::NotFound(_) => 3,
            Failure::NotFreed(_) => 4,
            Failure::Declined(_) => 5,
        }
    }

    /// The line printed for it.
    pub fn message(&self) -> &str {
        match self {
            Failure::Error(message)
            | Failure::Unavailable(message)
            | Failure::CredentialsRefused(message)
            | Failure::NotFound(message)
            | Failure::NotFreed(message)
            | Failure::Declined(message) => message,
        }
    }
}

/// `error` and its sources joined by ": ", each said once ([`shedlock::ErrorChain`]), on one
/// line whatever the messages contain.
pub fn one_line(error: &(dyn Error + 'static)) -> String {
    shedlock::ErrorChain(error)
        .to_string()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `text` from a backend (a lock's name, holder or acquisition) as it may be printed, so that
/// what an operator reads is one name and no other:
///
/// - control characters are escaped as Rust writes them (`\n`, `\u{1b}`): a line break or a
///   terminal escape sequence cannot break a table's lines or drive the terminal;
/// - invisible formatting characters are escaped (`\u{202e}`): a right-to-left override
///   cannot show `abc` for `cba`, and a zero-width space cannot make two names look alike;
/// - whitespace at either end is escaped (`d\u{20}`), so `d` and `d ` look different;
/// - a backslash is doubled, so an escape shown is never a backslash the name holds.
///
/// Other characters are kept as they are.
pub fn printable(text: &str) -> std::borrow::Cow<'_, str> {
    let leading = text.len() - text.trim_start().len();
    let trailing = text.trim_end().len();
    let escaped = |at: usize, c: char| {
        c.is_control()
            || c == '\\'
            || invisible(c)
            || (c.is_whitespace() && (at < leading || at >= trailing))
    };
    if !text.char_indices().any(|(at, c)| escaped(at, c)) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut shown = String::with_capacity(text.len() + 8);
    for (at, c) in text.char_indices() {
        if c == '\\' {
            shown.push_str("\\\\");
        } else if c.is_control() {
            shown.extend(c.escape_debug());
        } else if escaped(at, c) {
            shown.extend(c.escape_unicode());
        } else {
            shown.push(c);
        }
    }
    std::borrow::Cow::Owned(shown)
}

/// Unicode's invisible formatting characters (general category Cf) that change how text
/// around them reads: bidirectional controls, zero-width characters, the byte-order mark,
/// interlinear annotations and tag characters.
fn invisible(c: char) -> bool {
    matches!(
        c,
        '\u{ad}'
            | '\u{61c}'
            | '\u{180e}'
            | '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2060}'..='\u{2064}'
            | '\u{2066}'..='\u{206f}'
            | '\u{feff}'
            | '\u{fff9}'..='\u{fffb}'
            | '\u{e0001}'
            | '\u{e0020}'..='\u{e007f}'
    )
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        // The node reads its instructions from stdin and reports on stdout, synchronously
        // around the runtime it builds itself.
        Command::DemoNode(args) => demo::node::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Bench(args) => run_command(bench::run(args)),
        Command::List(args) => run_command(list::run(args)),
        Command::Unlock(args) => run_command(unlock::run(args)),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("shedlock: {}", failure.message());
            ExitCode::from(failure.exit_code())
        }
    }
}

/// Runs one command on a runtime of its own, then drops the runtime quietly.
///
/// `list` and `unlock` shut their provider down before they return
/// (`AnyLockProvider::shutdown`), which ends the MongoDB driver's tasks in order. A command
/// that did not (the benchmark's and the demo's many nodes) leaves them to the runtime's drop,
/// and the driver (3.9) then panics now and then in one of them when its connection pool is
/// gone first (`SendError` in `connection_requester.rs`), printing a backtrace under the
/// command's answer. The command's outcome is decided by then, so a panic past that point is
/// not printed; any panic before it is, as always.
fn run_command(command: impl Future<Output = Result<(), Failure>>) -> Result<(), Failure> {
    let runtime = runtime()?;
    let outcome = runtime.block_on(command);
    std::panic::set_hook(Box::new(|_| {}));
    drop(runtime);
    outcome
}

/// The runtime of one command; a few threads, as clients keep background tasks.
pub fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|error| Failure::from_error("cannot start the async runtime: ", &error))
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn names_that_look_alike_are_printed_differently() {
        let shown = |text| printable(text).into_owned();
        assert_eq!(shown("plain name"), "plain name");
        assert_eq!(shown("d"), "d");
        assert_eq!(shown("d "), "d\\u{20}");
        assert_eq!(shown(" d"), "\\u{20}d");
        assert_eq!(shown("\tx\u{a0}"), "\\tx\\u{a0}");
        assert_eq!(shown("  "), "\\u{20}\\u{20}");
        assert_eq!(shown("a b"), "a b");
        assert_eq!(shown("\u{202e}cba"), "\\u{202e}cba");
        assert_eq!(shown("a\u{200b}b"), "a\\u{200b}b");
        assert_eq!(shown("evil\u{1b}[2J\nname"), "evil\\u{1b}[2J\\nname");
        // A backslash is doubled, so the name `d\u{20}` is not shown as `d `'s text.
        assert_eq!(shown("d\\u{20}"), "d\\\\u{20}");
        assert_ne!(shown("d\\u{20}"), shown("d "));
    }
}
