//! `shedlock unlock NAME`: frees a stuck lock, and only the acquisition the operator was shown,
//! so a lock a healthy node took in the meantime is never freed by mistake.

use std::io::{self, BufRead, IsTerminal, Write};

use clap::Args;
use shedlock::{AcquisitionId, AnyLockProvider, LockAdmin, LockError, LockInfo, LockState};

use crate::backend::BackendArgs;
use crate::progress::Progress;
use crate::times;
use crate::{Failure, printable};

const UNLOCK_HELP: &str = "\
It reads the lock, shows its holder and asks \"free this acquisition? [y/N]\" on stderr
(--yes skips the question). The backend then frees the lock only if that same acquisition
still holds it: if the lock was released, expired or taken by another node since it was shown,
nothing changes. The holder itself finds out at its next extend or release, which then fail;
its job may still be running, which is why this asks first.

Examples:
  shedlock unlock nightly-report --url postgres://ops@db/app
  shedlock unlock nightly-report --yes
  # A script: list, decide, then free only what it saw
  id=$(shedlock list --json --prefix nightly- | jq -r 'select(.name == \"nightly-report\") | .acquisition')
  shedlock unlock nightly-report --acquisition \"$id\" --yes

Exit codes:
  0  freed
  1  error (bad URL, a name the backend refuses, a backend failure trying again will not mend)
  2  usage error
  3  no lock of that name
  4  not freed: the lock changed hands or was released since it was shown, or was free already
  5  declined at the question (or no answer: standard input closed)
  6  the backend could not be reached or did not answer: whether a force-unlock that was sent
     took effect is unknown; list again, then retry
  7  the backend refused the credentials";

/// Free one stuck lock, after showing its holder, and only if that acquisition still holds it.
#[derive(Args)]
#[command(after_help = UNLOCK_HELP)]
pub struct UnlockArgs {
    /// The lock's name, exactly as stored (case and spaces count).
    name: String,
    #[command(flatten)]
    backend: BackendArgs,
    /// Free it without asking (scripts); still only the acquisition that was read.
    #[arg(long, short = 'y')]
    yes: bool,
    /// Free only this acquisition, as an earlier `shedlock list` showed it (its ACQUISITION
    /// column, or `acquisition` in --json): if the lock changed hands since, exit 4.
    #[arg(long, value_name = "ID")]
    acquisition: Option<String>,
}

/// Reads, shows, asks and frees, then shuts the provider down.
pub async fn run(args: UnlockArgs) -> Result<(), Failure> {
    let admin = args.backend.connect().await?;
    let outcome = unlock(&args, &admin).await;
    admin.shutdown().await;
    outcome
}

async fn unlock(args: &UnlockArgs, admin: &AnyLockProvider) -> Result<(), Failure> {
    let name = args.name.as_str();
    let shown_url = args.backend.shown_url();

    let progress = Progress::start(format!("reading lock {name:?}"));
    let read = admin.inspect_lock(name).await;
    progress.finish();
    let lock = read
        .map_err(|error| Failure::from_error("", &error))?
        .ok_or_else(|| {
            Failure::NotFound(format!(
                "no lock named {name:?} on {shown_url}: nothing to free (names are exact; \
                 `shedlock list` shows them)"
            ))
        })?;
    show(&lock, &shown_url);

    if let Some(expected) = &args.acquisition
        && lock.acquisition.as_str() != expected
    {
        // Malformed, or an acquisition that no longer holds the lock? Only the backend can
        // tell: its compare-and-free refuses a malformed id before sending anything, and frees
        // nothing for any other (acquisitions never come back).
        if let Err(error @ LockError::InvalidRequest { .. }) = admin
            .force_unlock(name, &AcquisitionId::new(expected))
            .await
        {
            return Err(Failure::from_error(
                "--acquisition is not an acquisition id this backend gives: ",
                &error,
            ));
        }
        return Err(Failure::NotFreed(format!(
            "lock {name:?} changed hands since acquisition {} was seen: it is now {} \
             ({}); nothing changed",
            printable(expected),
            printable(lock.acquisition.as_str()),
            lock.state
        )));
    }
    if lock.state == LockState::Free {
        return Err(Failure::NotFreed(format!(
            "lock {name:?} is free already (any node may take it): nothing changed"
        )));
    }
    if !args.yes {
        confirm(name).await?;
    }

    let acquisition = AcquisitionId::new(
        args.acquisition
            .as_deref()
            .unwrap_or(lock.acquisition.as_str()),
    );
    let progress = Progress::start(format!("freeing lock {name:?}"));
    let freed = admin.force_unlock(name, &acquisition).await;
    progress.finish();
    match freed.map_err(|error| Failure::from_error("", &error))? {
        true => {
            println!(
                "freed lock {name:?} (acquisition {}): any node may take it now",
                printable(acquisition.as_str())
            );
            Ok(())
        }
        false => Err(Failure::NotFreed(format!(
            "lock {name:?} was not freed: it changed hands or was released since it was shown, \
             so acquisition {} no longer holds it; nothing changed",
            printable(acquisition.as_str())
        ))),
    }
}

/// What the operator decides on, on stdout.
fn show(lock: &LockInfo, shown_url: &str) {
    let unknown = || "not stored".to_owned();
    let state = match lock.remaining {
        Some(remaining) => format!(
            "{}, {} left by the backend's clock",
            lock.state,
            times::span(remaining)
        ),
        None => lock.state.to_string(),
    };
    println!("lock {:?} on {shown_url}", lock.name);
    println!("  state        {state}");
    println!(
        "  holder       {}",
        lock.locked_by
            .as_deref()
            .map_or_else(unknown, |holder| printable(holder).into_owned())
    );
    println!(
        "  locked at    {}",
        lock.locked_at.map_or_else(unknown, times::instant)
    );
    println!(
        "  held until   {}",
        lock.held_until.map_or_else(unknown, times::instant)
    );
    if let Some(token) = lock.fencing_token {
        println!("  fencing      {token}");
    }
    println!("  acquisition  {}", printable(lock.acquisition.as_str()));
    let _ = io::stdout().flush();
}

/// Asks on stderr and reads the answer from stdin; only `y` or `yes` frees.
async fn confirm(name: &str) -> Result<(), Failure> {
    eprint!("free this acquisition? [y/N] ");
    let _ = io::stderr().flush();
    // Reading stdin blocks: off the runtime's threads, which the client's tasks use.
    let answer = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        io::stdin()
            .lock()
            .read_line(&mut line)
            .map(|read| (read, line))
    })
    .await
    .map_err(|error| Failure::from_error("the question was not answered: ", &error))?
    .map_err(|error| Failure::from_error("cannot read the answer from standard input: ", &error))?;
    if !io::stdin().is_terminal() {
        // Typed answers end the prompt's line themselves; a piped one does not.
        eprintln!();
    }
    match answer {
        (0, _) => Err(Failure::Declined(format!(
            "no answer (standard input is closed): lock {name:?} was left as it is; pass --yes \
             to free it without asking"
        ))),
        (_, line) if matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes") => Ok(()),
        _ => Err(Failure::Declined(format!(
            "declined: lock {name:?} was left as it is"
        ))),
    }
}
