//! What a check reports: the rule it holds the provider to, and, when broken, what happened when.

use std::fmt;
use std::time::Duration;

/// One rule of DESIGN.md's normative semantics (or of the trait docs), quoted so a failure says
/// exactly which promise the provider broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// A short handle for the rule, stable across releases.
    pub id: &'static str,
    /// The rule's text, quoted from DESIGN.md or the `shedlock-core` docs.
    pub text: &'static str,
}

impl Rule {
    /// A free lock is taken: the provider's first promise.
    pub const FREE_LOCK_IS_TAKEN: Rule = Rule {
        id: "free-lock-is-taken",
        text: "LockProvider::try_lock: \"Takes the lock if nobody holds it: held until now + lock_at_most_for.\"",
    };
    /// Acquire has three outcomes that must never be confused.
    pub const THREE_OUTCOMES: Rule = Rule {
        id: "three-outcomes",
        text: "DESIGN.md: \"Acquire never waits. Three outcomes, never confused: acquired (a lock handle), not acquired (someone holds it), or an error (backend unreachable, bad schema...).\"",
    };
    /// Every operation answers in bounded time.
    pub const BOUNDED_TIME: Rule = Rule {
        id: "bounded-time",
        text: "LockProvider: \"Implementations must bound the time they take (connection and statement timeouts) and return LockError::Timeout past it.\"",
    };
    /// At most one holder at a time.
    pub const MUTUAL_EXCLUSION: Rule = Rule {
        id: "mutual-exclusion",
        text: "DESIGN.md: \"makes a scheduled task run at most once at a time across many nodes ... A node that does not get the lock skips that run.\"",
    };
    /// The lock frees itself at `lock_at_most_for`, not before and not (much) after.
    pub const AT_MOST: Rule = Rule {
        id: "at-most",
        text: "DESIGN.md: \"Held until now + lock_at_most_for (the safety net if the holder dies).\" LockHandle: \"Dropping a handle without unlock leaves the lock held until lock_at_most_for.\"",
    };
    /// Release keeps the lock until `acquired_at + lock_at_least_for`.
    pub const AT_LEAST: Rule = Rule {
        id: "at-least",
        text: "DESIGN.md: \"Release sets held-until to max(now, acquired_at + lock_at_least_for).\"",
    };
    /// What `unlock` answers.
    pub const RELEASE_RESULT: Rule = Rule {
        id: "release-result",
        text: "LockHandle::unlock: \"Ok(true): this acquisition was still held and is now released. Ok(false): it was not ours any more (expired, taken over, or already released); nothing was changed.\"",
    };
    /// Release and extend touch only the caller's own acquisition.
    pub const OWNERSHIP: Rule = Rule {
        id: "ownership",
        text: "DESIGN.md: \"Release and extend act only on the caller's own acquisition: a holder whose lock expired and was taken by another node must not release or extend the new holder's lock.\"",
    };
    /// Extend moves held-until for a holder whose lock has not expired.
    pub const EXTEND: Rule = Rule {
        id: "extend",
        text: "DESIGN.md: \"Extend (holder only, while not expired) moves held-until to now + new_at_most.\"",
    };
    /// Declared capabilities must be true.
    pub const HONEST_CAPABILITIES: Rule = Rule {
        id: "honest-capabilities",
        text: "Capabilities: \"What a provider can do, so the conformance kit and callers know which promises apply.\" LockHandle::extend: \"LockError::Unsupported when the provider lacks Capabilities::extend.\"",
    };
    /// Fencing tokens strictly increase per name.
    pub const FENCING: Rule = Rule {
        id: "fencing",
        text: "DESIGN.md: \"Fencing token: where the backend can, each successful acquisition carries a u64 that strictly increases per lock name.\"",
    };
    /// Server time: client skew cannot break exclusion.
    pub const SERVER_TIME: Rule = Rule {
        id: "server-time",
        text: "DESIGN.md: \"Server: every comparison and every held-until is computed by the backend ... so client clock skew cannot break exclusion.\"",
    };
    /// Client time: exclusion holds while skew stays below the documented bound.
    pub const CLIENT_TIME: Rule = Rule {
        id: "client-time",
        text: "TimeSource::Client: \"Exclusion holds only while the nodes' clocks differ by less than lock_at_most_for minus the task's run time.\"",
    };
    /// The executor fails closed.
    pub const FAIL_CLOSED: Rule = Rule {
        id: "fail-closed",
        text: "DESIGN.md: \"The executor fails closed: on an error the task does not run.\" An unreachable backend is an error, never \"not acquired\".",
    };
    /// Over-long names are refused, never truncated.
    pub const NAME_LENGTH: Rule = Rule {
        id: "name-length",
        text: "DESIGN.md: \"an over-long name is a clear error, never silently truncated (two truncated names would share a lock).\"",
    };
    /// Names are data.
    pub const NAMES_ARE_DATA: Rule = Rule {
        id: "names-are-data",
        text: "DESIGN.md: \"Names are data, never code: parameters, never string-built SQL; keys and paths escape or reject separators ... so distinct names stay distinct.\"",
    };
    /// The name cache is an optimisation that never changes an answer.
    pub const NAME_CACHE: Rule = Rule {
        id: "name-cache",
        text: "DESIGN.md: \"The storage-based provider caches names it has seen so it skips a needless insert\"; ShedLock's kit: the lock survives cache clearing (held and released).",
    };
    /// Rust and Java nodes honour each other's records.
    pub const SHEDLOCK_RECORDS: Rule = Rule {
        id: "shedlock-records",
        text: "DESIGN.md: \"same storage layouts, so a Rust service and a Java service can share one lock table ... so Java and Rust nodes honour each other's rows.\"",
    };
    /// The harness itself must do what the kit asks of it.
    pub const HARNESS: Rule = Rule {
        id: "harness",
        text: "ConformanceHarness: node() gives an independent provider instance on a reachable backend; hooks do what their docs say.",
    };
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.id, self.text)
    }
}

/// One line of a check's timeline: a request and its answer, or a note, with offsets from the
/// check's start. A request "sent at +a, answered at +b" means the backend acted somewhere in
/// between, which is all the kit ever assumes about server-side moments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// When the request left, from the check's start.
    pub sent: Duration,
    /// When the answer came back (equal to `sent` for notes).
    pub answered: Duration,
    /// Which node acted ("A", "B", "node 3", "clock +1h"); "kit" for notes.
    pub node: String,
    /// What it did, with the lock name.
    pub action: String,
    /// What came back.
    pub outcome: String,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        if self.sent == self.answered && self.outcome.is_empty() {
            write!(
                f,
                "{:>9.1} ms               {:<10} {}",
                ms(self.sent),
                self.node,
                self.action
            )
        } else {
            write!(
                f,
                "{:>9.1} .. {:>9.1} ms  {:<10} {} -> {}",
                ms(self.sent),
                ms(self.answered),
                self.node,
                self.action,
                self.outcome
            )
        }
    }
}

/// A check the provider did not pass: which check, which rule, what was observed, and when.
#[derive(Debug, Clone)]
pub struct CheckFailure {
    /// The check's name, as `cargo test` lists it.
    pub check: &'static str,
    /// The rule the provider broke.
    pub rule: Rule,
    /// What the kit saw that the rule forbids.
    pub observed: String,
    /// Every request of the check up to the failure, in order.
    pub timeline: Vec<Event>,
}

/// How many timeline lines a failure prints; the earliest are summarised beyond this.
const TIMELINE_LINES_SHOWN: usize = 60;

impl fmt::Display for CheckFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "conformance check `{}` failed", self.check)?;
        writeln!(f, "rule broken: {}", self.rule)?;
        writeln!(f, "observed: {}", self.observed)?;
        writeln!(f, "timeline (offsets from the check's start):")?;
        let skipped = self.timeline.len().saturating_sub(TIMELINE_LINES_SHOWN);
        if skipped > 0 {
            writeln!(f, "  ... {skipped} earlier events not shown")?;
        }
        for event in &self.timeline[skipped..] {
            writeln!(f, "  {event}")?;
        }
        Ok(())
    }
}

impl std::error::Error for CheckFailure {}

/// How a check ended without breaking a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every rule held; `notes` says anything worth reporting (a documented bound observed,
    /// names the provider refused clearly).
    Passed {
        /// Facts worth a line in the report.
        notes: Vec<String>,
    },
    /// The check does not apply to this provider; shown as ignored with this reason, never as
    /// passed.
    NotApplicable(String),
}

impl Verdict {
    /// Passed with nothing to add.
    pub fn passed() -> Self {
        Verdict::Passed { notes: Vec::new() }
    }

    /// Not applicable, for `reason`.
    pub fn not_applicable(reason: impl Into<String>) -> Self {
        Verdict::NotApplicable(reason.into())
    }
}
