//! Check 10: names at the length limit work, longer ones are a clear error, and odd characters
//! stay distinct and harmless.

use std::time::Duration;

use shedlock_core::{Acquisition, LockError, LockHandle, LockProvider};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::ConformanceHarness;
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::{node, timing_of};

/// How long the name checks hold their locks: 100 units, and at least ten minutes. They take
/// and release up to 160 names one by one while other checks load the backend (on one here,
/// 160 names took 11 s), and a release after the hold ran out rightly answers `false`; the
/// names are released at the end, so nothing waits for this.
fn held_through_the_check(capabilities: &shedlock_core::Capabilities) -> Duration {
    timing_of(capabilities)
        .units(100)
        .max(Duration::from_secs(600))
}

/// The name length tried when the provider declares no limit.
const UNLIMITED_PROBE_CHARS: usize = 1024;

/// Name length: names of exactly the declared maximum (ASCII, two-byte and three-byte
/// characters) work and stay distinct when they differ only in the last character (the limit
/// counts characters, not bytes); one character more is
/// refused with [`LockError::InvalidName`] before anything is written, even when its first
/// `max` characters name a held lock. Without a declared limit, 1024-character names must work
/// and stay distinct.
pub async fn check_name_length_limit<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("name_length_limit");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let long = held_through_the_check(&capabilities);
    let prefix = names.prefix();
    let prefix_chars = prefix.chars().count();
    let length = capabilities.max_name_chars.unwrap_or(UNLIMITED_PROBE_CHARS);
    if length < prefix_chars + 2 {
        return Ok(Verdict::not_applicable(format!(
            "the declared name limit ({length}) leaves no room after the kit's {prefix_chars}-character prefix"
        )));
    }
    let pad = |first: char, fill: char, last: char| {
        let mut name = prefix.to_owned();
        name.push(first);
        name.extend(std::iter::repeat_n(fill, length - prefix_chars - 2));
        name.push(last);
        name
    };
    // Pairs that differ only in their last character: a byte limit, a truncation or a folding
    // collation would merge each pair into one lock.
    let full_length = [
        pad('a', 'x', 'y'),
        pad('a', 'x', 'z'),
        pad('e', 'é', 'é'),
        pad('e', 'é', 'è'),
        pad('u', '锁', '锁'),
        pad('u', '锁', '钥'),
    ];
    let mut held: Vec<Box<dyn LockHandle>> = Vec::new();
    for name in &full_length {
        let lock = config(name, long, Duration::ZERO);
        let declared = capabilities.max_name_chars.map_or_else(
            || format!("no name limit ({length} characters are tried)"),
            |max| format!("a limit of {max} characters"),
        );
        let handle = match trace.try_lock("A", &a, &lock).await?.value {
            Ok(Acquisition::Acquired(handle)) => handle,
            Ok(Acquisition::NotAcquired(_)) => {
                return Err(trace.failure(
                    Rule::NAME_LENGTH,
                    format!(
                        "a {length}-character name was refused though nobody holds it: it shares a lock with one of the long names already held (truncated, or limited by bytes?)"
                    ),
                ));
            }
            Err(error @ LockError::InvalidName { .. }) => {
                return Err(trace.failure(
                    Rule::NAME_LENGTH,
                    format!(
                        "a {length}-character name was refused though the provider declares {declared}: {error}"
                    ),
                ));
            }
            // The backend cannot hold what the provider declared it accepts: a declared limit
            // counted in something other than characters, or a limit left undeclared.
            Err(error) => {
                let rule = if capabilities.max_name_chars.is_some() {
                    Rule::NAME_LENGTH
                } else {
                    Rule::HONEST_CAPABILITIES
                };
                return Err(trace.failure(
                    rule,
                    format!(
                        "the provider declares {declared}, but a {length}-character name failed: {error}; declare the limit the backend really has (max_name_chars)"
                    ),
                ));
            }
        };
        held.push(handle);
    }
    for name in &full_length {
        trace
            .must_not_acquire(
                "B",
                &b,
                &config(name, long, Duration::ZERO),
                Rule::NAME_LENGTH,
                "node A holds the lock of this long name",
            )
            .await?;
    }
    let mut notes = Vec::new();
    if let Some(max) = capabilities.max_name_chars {
        let over_held = format!("{}w", full_length[0]);
        let over_fresh = format!("{}w", pad('f', 'x', 'y'));
        for (name, why) in [
            (&over_held, "its first characters name a lock node A holds"),
            (&over_fresh, "no lock has its first characters"),
        ] {
            let lock = config(name, long, Duration::ZERO);
            let result = trace.try_lock("B", &b, &lock).await?.value;
            match result {
                Err(LockError::InvalidName { .. }) => {}
                Ok(Acquisition::Acquired(_)) | Ok(Acquisition::NotAcquired(_)) => {
                    return Err(trace.failure(
                        Rule::NAME_LENGTH,
                        format!(
                            "a {}-character name ({why}) was accepted though the declared limit is {max}: was it truncated?",
                            max + 1
                        ),
                    ));
                }
                Err(other) => {
                    return Err(trace.failure(
                        Rule::NAME_LENGTH,
                        format!(
                            "a {}-character name was refused with {other:?}; the clear error is LockError::InvalidName naming the limit ({max})",
                            max + 1
                        ),
                    ));
                }
            }
        }
        notes.push(format!(
            "{max}-character names work; {} characters are refused",
            max + 1
        ));
    } else {
        notes.push(format!(
            "no declared limit: {UNLIMITED_PROBE_CHARS}-character names work and stay distinct"
        ));
    }
    for handle in &held {
        trace.must_release("A", &**handle).await?;
    }
    Ok(Verdict::Passed { notes })
}

/// Names with characters that break careless providers: separators of keys and paths, SQL
/// quoting, escapes, unicode, spaces, case. Spellings that a careless escaping, a collation
/// (case-, accent- or width-insensitive, trailing spaces ignored) or a Unicode normalization
/// would merge are listed together: `a/b`, `a//b`, `a/./b`, `a/b/`, `a:b`, `a%2Fb`, `a_b`; `Report`, `report`,
/// `REPORT`, full-width `ＲＥＰＯＲＴ`; `trailing `, `trailing`; `café` (NFC), `cafe` with a
/// combining accent (NFD), `cafe`; `résumé`, `resume`; `straße`, `strasse`; the `ﬁ` ligature
/// and `fi`; a zero-width space; `🔒` (U+1F512) and U+F512, the same character cut to 16 bits.
pub const EDGE_CASE_NAMES: &[&str] = &[
    "plain",
    "with space",
    "trailing",
    "trailing ",
    " leading",
    "a/b",
    "a//b",
    "a/./b",
    "a/b/",
    "a:b",
    "a%2Fb",
    "a%3Ab",
    "a_b",
    "a.b",
    "a\\b",
    "/leading-slash",
    "trailing-slash/",
    "..",
    "%s%n%%",
    "single'quote",
    "double\"quote",
    "x'); DROP TABLE shedlock; --",
    "1' OR '1'='1",
    "*?[]{}$#",
    "Report",
    "report",
    "REPORT",
    "ünïcødé",
    "unicode",
    "cafe",
    "café",
    "cafe\u{301}",
    "resume",
    "résumé",
    "strasse",
    "straße",
    "ＲＥＰＯＲＴ",
    "ﬁle",
    "file",
    "a\u{200b}b",
    "ab",
    "tab\there",
    "tab here",
    "锁-ロック",
    "emoji-🔒",
    "emoji-\u{F512}",
];

/// Edge-case names: every name in [`EDGE_CASE_NAMES`] is either a lock of its own (all held at
/// once, so two names merged into one lock would show) or refused with
/// [`LockError::InvalidName`] (a provider may reject separators it reserves). Another node is
/// refused each held one, each release answers `true`, and the other node can then take each.
/// The plain name must be accepted.
pub async fn check_name_edge_cases<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("name_edge_cases");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let long = held_through_the_check(&capabilities);
    let mut held = Vec::new();
    let mut refused = Vec::new();
    let mut too_long = Vec::new();
    for local in EDGE_CASE_NAMES {
        let name = names.name(local);
        if capabilities
            .max_name_chars
            .is_some_and(|max| name.chars().count() > max)
        {
            too_long.push(*local);
            continue;
        }
        let lock = config(&name, long, Duration::ZERO);
        match trace.try_lock("A", &a, &lock).await?.value {
            Ok(Acquisition::Acquired(handle)) => held.push((lock, handle)),
            Ok(Acquisition::NotAcquired(_)) => {
                let merged: Vec<&str> =
                    held.iter().map(|(held_lock, _)| held_lock.name()).collect();
                return Err(trace.failure(
                    Rule::NAMES_ARE_DATA,
                    format!(
                        "lock {name:?} was refused though nobody holds it: it was merged with one of the names node A already holds: {merged:?}"
                    ),
                ));
            }
            Err(LockError::InvalidName { rule, .. }) if *local != "plain" => {
                refused.push(format!("{local:?} ({rule})"));
            }
            Err(error) => {
                return Err(trace.failure(
                    Rule::NAMES_ARE_DATA,
                    format!(
                        "lock {name:?} failed with an error other than a clear LockError::InvalidName: {error}"
                    ),
                ));
            }
        }
    }
    each_its_own_lock(&trace, &b, &held).await?;
    let mut notes = vec![format!(
        "{} edge-case names held as distinct locks",
        held.len()
    )];
    if !refused.is_empty() {
        notes.push(format!("refused with InvalidName: {}", refused.join(", ")));
    }
    if !too_long.is_empty() {
        notes.push(format!(
            "not tried (over the name limit with the prefix): {too_long:?}"
        ));
    }
    Ok(Verdict::Passed { notes })
}

/// The pieces generated names are made of: spellings that a backend could normalise, escape,
/// fold, truncate or match as a pattern into one another. `🔒` (U+1F512) and U+F512 are the
/// same character cut to 16 bits; so are `𝐀` (U+1D400) and U+D400; `é` and `e` with a
/// combining accent are one character after Unicode normalisation; `=F512` is what a
/// hex escape could write for either.
const NAME_PIECES: &[&str] = &[
    "a",
    "A",
    "b",
    "/",
    "//",
    "./",
    ".",
    "..",
    "_",
    "%",
    "*",
    "?",
    "\\",
    ":",
    "=",
    "=F512",
    "\u{1F512}",
    "\u{F512}",
    "\u{1D400}",
    "\u{D400}",
    "é",
    "e\u{301}",
    " ",
    "-",
];

/// How many names [`check_generated_names`] generates.
const GENERATED_NAMES: usize = 160;

/// Generated names: 160 names drawn at random (a proptest strategy, seeded by
/// `SHEDLOCK_CONFORMANCE_SEED`) from pieces that look alike to a careless backend (path
/// separators doubled or dotted, pattern characters, astral characters and their 16-bit
/// truncations, composed and decomposed accents, escape-like text). Every distinct name is held
/// at once by one node, so two names merged into one lock show as a refusal; the other node is
/// refused each, each release answers `true`, and the other node can then take each. A name may
/// be refused with [`LockError::InvalidName`], never with anything else.
pub async fn check_generated_names<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    use proptest::strategy::{Strategy, ValueTree};

    let trace = Trace::new("generated_names");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let long = held_through_the_check(&capabilities);
    let seed = super::model::seed_from_env(&trace)?;
    let mut runner = super::model::generator(seed);
    let strategy = proptest::collection::vec(
        proptest::collection::vec(proptest::sample::select(NAME_PIECES), 1..=5)
            .prop_map(|pieces| pieces.concat()),
        GENERATED_NAMES,
    );
    let mut generated = strategy
        .new_tree(&mut runner)
        .map_err(|why| trace.failure(Rule::HARNESS, format!("generating names: {why}")))?
        .current();
    generated.sort();
    generated.dedup();
    trace.note(format!(
        "{} distinct names generated (seed {seed}; {} replays them)",
        generated.len(),
        super::SEED_VARIABLE
    ));
    let mut held: Vec<(shedlock_core::LockConfiguration, Box<dyn LockHandle>)> = Vec::new();
    let mut refused = 0;
    for local in &generated {
        let name = names.name(local);
        if capabilities
            .max_name_chars
            .is_some_and(|max| name.chars().count() > max)
        {
            continue;
        }
        let lock = config(&name, long, Duration::ZERO);
        match trace.try_lock("A", &a, &lock).await?.value {
            Ok(Acquisition::Acquired(handle)) => held.push((lock, handle)),
            Ok(Acquisition::NotAcquired(_)) => {
                let held_names: Vec<&str> = held
                    .iter()
                    .map(|(held_lock, _)| &held_lock.name()[names.prefix().len()..])
                    .collect();
                return Err(trace.failure(
                    Rule::NAMES_ARE_DATA,
                    format!(
                        "lock {local:?} (after the prefix {:?}) was refused though nobody holds it: it was merged with one of the {} names node A already holds: {held_names:?} (seed {seed}; {}={seed} replays it)",
                        names.prefix(),
                        held_names.len(),
                        super::SEED_VARIABLE
                    ),
                ));
            }
            Err(LockError::InvalidName { .. }) => refused += 1,
            Err(error) => {
                return Err(trace.failure(
                    Rule::NAMES_ARE_DATA,
                    format!(
                        "lock {name:?} failed with an error other than a clear LockError::InvalidName: {error}"
                    ),
                ));
            }
        }
    }
    each_its_own_lock(&trace, &b, &held).await?;
    Ok(Verdict::Passed {
        notes: vec![format!(
            "{} generated names held as distinct locks, {refused} refused with InvalidName (seed {seed})",
            held.len()
        )],
    })
}

/// The names node A holds in `held` are each a lock of their own: node B is refused each, each
/// of A's releases answers `true`, and then B takes and releases each.
async fn each_its_own_lock(
    trace: &Trace,
    b: &dyn LockProvider,
    held: &[(shedlock_core::LockConfiguration, Box<dyn LockHandle>)],
) -> Result<(), CheckFailure> {
    let holds = "node A holds the lock of exactly this name";
    for (lock, _) in held {
        trace
            .must_not_acquire("B", b, lock, Rule::NAMES_ARE_DATA, holds)
            .await?;
    }
    for (_, handle) in held {
        trace
            .must_unlock_with("A", &**handle, true, Rule::NAMES_ARE_DATA, holds)
            .await?;
    }
    for (lock, _) in held {
        trace
            .must_acquire_and_release(
                "B",
                b,
                lock,
                Rule::NAMES_ARE_DATA,
                "node A released the lock of exactly this name",
            )
            .await?;
    }
    Ok(())
}
