//! What a check reports: the rule it holds the provider to, and, when broken, what happened when.

use std::fmt;
use std::time::Duration;

/// One rule of the kit's rulebook, `RULES.md` in the `shedlock-conformance` crate (also
/// rendered as the docs of the module `shedlock_conformance::rules`), quoted so a failure says
/// exactly which promise the provider broke and where to read more.
///
/// The rulebook has one section per rule, anchored by the rule's [`id`](Self::id)
/// (`RULES.md#at-least`); [`text`](Self::text) is that section's opening, normative sentences,
/// word for word. `Display` prints both and points at the section.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rule {
    /// A short handle for the rule, stable across releases: the anchor of its section in
    /// `RULES.md`.
    pub id: &'static str,
    /// The rule itself, quoted verbatim from the opening of its section in `RULES.md`.
    pub text: &'static str,
}

impl Rule {
    /// A free lock is taken: the provider's first promise.
    pub const FREE_LOCK_IS_TAKEN: Rule = Rule {
        id: "free-lock-is-taken",
        text: "try_lock on a lock that nobody holds answers acquired, and the lock is then held by that acquisition until it is released or expires.",
    };
    /// Acquire has three outcomes that must never be confused.
    pub const THREE_OUTCOMES: Rule = Rule {
        id: "three-outcomes",
        text: "try_lock never waits for a holder and answers one of three outcomes, never confused: acquired (a handle), not acquired (another acquisition holds the lock), or an error (the outcome is unknown, or the request was refused). On a working backend, an ordinary answer is never an error, and an unknown outcome is never an ordinary answer.",
    };
    /// Every operation answers in bounded time.
    pub const BOUNDED_TIME: Rule = Rule {
        id: "bounded-time",
        text: "Every operation (try_lock, unlock, extend) answers within a bound the provider enforces with connection and operation timeouts. Past that bound it returns LockError::Timeout; it never hangs.",
    };
    /// At most one holder at a time.
    pub const MUTUAL_EXCLUSION: Rule = Rule {
        id: "mutual-exclusion",
        text: "At any moment at most one acquisition holds a lock name. While it holds it, every other try_lock of that name answers not acquired, from any node, including the holder's own node.",
    };
    /// The lock frees itself at `lock_at_most_for`, not before and not (much) after.
    pub const AT_MOST: Rule = Rule {
        id: "at-most",
        text: "An acquisition that is never released holds the lock until acquired_at + lock_at_most_for, not before. Then the lock frees itself, no later than the declared time_precision allows.",
    };
    /// Release keeps the lock until `acquired_at + lock_at_least_for`.
    pub const AT_LEAST: Rule = Rule {
        id: "at-least",
        text: "A successful release sets held-until to max(now, acquired_at + lock_at_least_for), where now and acquired_at are read on the deciding clock. The lock is free again at acquired_at + lock_at_least_for, or at the release if that is later, never at the release time plus lock_at_least_for.",
    };
    /// What `unlock` answers.
    pub const RELEASE_RESULT: Rule = Rule {
        id: "release-result",
        text: "A handle's unlock answers true once, while its acquisition still holds the lock, and releases it. It answers false and changes nothing once that handle was released (even while lock_at_least_for still holds the lock), once the acquisition expired (even if nobody took the lock since), or once another acquisition holds the lock.",
    };
    /// Release and extend touch only the caller's own acquisition.
    pub const OWNERSHIP: Rule = Rule {
        id: "ownership",
        text: "Release and extend act only on the caller's own acquisition, identified by a value unique to that acquisition. They never change a lock that another acquisition holds, even one taken by the same node, process or host.",
    };
    /// Extend moves held-until for a holder whose lock has not expired.
    pub const EXTEND: Rule = Rule {
        id: "extend",
        text: "Extend, by a holder whose acquisition has not expired and was not released, moves held-until to now + the new lock_at_most_for and answers true; it does not change acquired_at. Otherwise it answers false and changes nothing. A provider that does not declare extend answers LockError::Unsupported.",
    };
    /// Declared capabilities must be true.
    pub const HONEST_CAPABILITIES: Rule = Rule {
        id: "honest-capabilities",
        text: "What capabilities() declares is what the provider does; each field is a promise the kit holds it to. Each handle reports the name it acquired and the declared time source.",
    };
    /// Fencing tokens strictly increase per name.
    pub const FENCING: Rule = Rule {
        id: "fencing",
        text: "A provider that declares fencing gives every acquisition a u64 token, strictly greater than the token of every earlier acquisition of the same name, whether the earlier lock was released, expired, or taken under contention.",
    };
    /// Server time: client skew cannot break exclusion.
    pub const SERVER_TIME: Rule = Rule {
        id: "server-time",
        text: "With time_source Server, every comparison and every new held-until, in acquire, extend and release alike, is computed from the backend's clock or from durations the backend measures, such as TTLs and leases. The node's clock decides nothing: a node whose clock is off by any amount can neither take a held lock, nor make its own lock look expired, nor make a release or extend land at the wrong time.",
    };
    /// Client time: exclusion holds while skew stays below the documented bound.
    pub const CLIENT_TIME: Rule = Rule {
        id: "client-time",
        text: "With time_source Client, the node's clock as given to the provider decides every comparison and every held-until. Exclusion then holds only while the nodes' clocks differ by less than lock_at_most_for minus the task's run time, and the provider must read the clock it is given, not another one.",
    };
    /// The executor fails closed.
    pub const FAIL_CLOSED: Rule = Rule {
        id: "fail-closed",
        text: "When the provider cannot tell whether it got the lock, it answers an error, never acquired and never not acquired, and the executor does not run the task. An unreachable backend is such an error, returned in bounded time.",
    };
    /// Over-long names are refused, never truncated.
    pub const NAME_LENGTH: Rule = Rule {
        id: "name-length",
        text: "A provider that declares max_name_chars accepts every name of up to that many characters, counted as Unicode scalar values and not bytes, each as its own lock. A name one character longer is refused with LockError::InvalidName before anything is written; it is never truncated.",
    };
    /// Names are data.
    pub const NAMES_ARE_DATA: Rule = Rule {
        id: "names-are-data",
        text: "A lock name is data, never code or syntax: every distinct name is its own lock, or is refused with LockError::InvalidName before anything is written. No two names that differ in any way share a lock, and no name changes what a statement, key or path means.",
    };
    /// The name cache is an optimisation that never changes an answer.
    pub const NAME_CACHE: Rule = Rule {
        id: "name-cache",
        text: "A cache of names known to have a record is only an optimisation: clearing it at any moment changes no answer of try_lock, unlock or extend. A name is forgotten when an update for it fails, and a record deleted behind the cache's back is created again, not taken for a held lock.",
    };
    /// Rust and Java nodes honour each other's records.
    pub const SHEDLOCK_RECORDS: Rule = Rule {
        id: "shedlock-records",
        text: "A provider that uses ShedLock's storage layout honours the records Java ShedLock writes: a record whose lock_until has not passed keeps every node out, and one whose lock_until has passed is taken over like any expired lock.",
    };
    /// What an operator sees and frees is what nodes hold.
    pub const ADMIN: Rule = Rule {
        id: "admin",
        text: "A provider's LockAdmin shows every lock under a prefix exactly once, as held while it is held, with the holder's identity; and force_unlock frees a lock only if the acquisition it names still holds it, after which any node may take it at once and the former holder's release and extend change nothing.",
    };
    /// Nodes recover by themselves when the backend comes back.
    pub const RECOVERY: Rule = Rule {
        id: "recovery",
        text: "When the backend comes back after a restart or a network stall, every node answers ordinary outcomes again by itself, within a bounded time, without being rebuilt. A lock held when the backend went away is still held by the same acquisition afterwards, unless the provider's documentation says the backend loses locks on restart; and a request delayed by the stall that reaches the backend late acts only as the rules above allow.",
    };
    /// Nodes that start together on new storage all start.
    pub const FIRST_USE: Rule = Rule {
        id: "first-use",
        text: "Any number of nodes built at the same instant on storage nothing has used yet are all built, and their first operations answer as on storage used before: whatever the provider creates on first use (a table, a collection, an index, a root node, a counter) is created once, whoever is first, and every node ends with it checked. A node that finds another creating it at the same moment waits for it or accepts it; it never fails.",
    };
    /// The harness itself must do what the kit asks of it.
    pub const HARNESS: Rule = Rule {
        id: "harness",
        text: "The harness gives the kit what it asks for: node() returns a new, independent provider instance on the same working backend, reading the clock it is handed, and each hook does what its docs say. A failure of the harness's own setup is a SetupError, not a lock outcome.",
    };
}

impl fmt::Display for Rule {
    /// `[id] text (rulebook: RULES.md#id in the shedlock-conformance crate, also in its docs,
    /// module shedlock_conformance::rules)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{id}] {text} (rulebook: RULES.md#{id} in the shedlock-conformance crate, also in its docs, module shedlock_conformance::rules)",
            id = self.id,
            text = self.text
        )
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
    /// Set when a node was refused a lock the check expected to be free: the runner then asks
    /// a fresh node for it, to learn whether the backend or the node's acquire path refused.
    pub(crate) refused: Option<Box<Refusal>>,
}

/// A lock a node was refused though the check expected it free, and the check's clock origin
/// (so a witness's requests join the same timeline).
#[derive(Debug, Clone)]
pub(crate) struct Refusal {
    pub lock: shedlock_core::LockConfiguration,
    pub start: tokio::time::Instant,
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

#[cfg(test)]
mod tests {
    use super::Rule;

    const RULEBOOK: &str = include_str!("../RULES.md");

    /// A failure quotes its rule's section, so the quote and the rulebook must not drift apart.
    #[test]
    fn every_rule_quotes_its_section_of_the_rulebook() {
        let rules = [
            Rule::FREE_LOCK_IS_TAKEN,
            Rule::THREE_OUTCOMES,
            Rule::BOUNDED_TIME,
            Rule::MUTUAL_EXCLUSION,
            Rule::AT_MOST,
            Rule::AT_LEAST,
            Rule::RELEASE_RESULT,
            Rule::OWNERSHIP,
            Rule::EXTEND,
            Rule::HONEST_CAPABILITIES,
            Rule::FENCING,
            Rule::SERVER_TIME,
            Rule::CLIENT_TIME,
            Rule::FAIL_CLOSED,
            Rule::NAME_LENGTH,
            Rule::NAMES_ARE_DATA,
            Rule::NAME_CACHE,
            Rule::SHEDLOCK_RECORDS,
            Rule::RECOVERY,
            Rule::FIRST_USE,
            Rule::HARNESS,
        ];
        for rule in rules {
            let anchor = format!("<a id=\"{}\"></a>\n## {}:", rule.id, rule.id);
            let start = RULEBOOK
                .find(&anchor)
                .unwrap_or_else(|| panic!("RULES.md has no section {:?}", rule.id));
            let section = &RULEBOOK[start..];
            let first_paragraph = section.split("\n\n").nth(1).unwrap_or_default();
            assert_eq!(
                first_paragraph.trim(),
                rule.text,
                "Rule {} must quote the first paragraph of its RULES.md section",
                rule.id
            );
        }
    }
}
