//! Every provider of the batch: its name, whether it is meant to be broken, the rule its bug
//! breaks, and how to run the kit against it.

use std::process::ExitCode;

use shedlock_conformance::Arguments;

use super::memkv::{MemBug, MemKvHarness};
use super::natskv::{NatsBug, NatsHarness};
use super::sqlish::{SqlBug, SqlHarness};

/// One provider under test.
pub struct Entry {
    pub name: String,
    /// The rule its bug breaks; `None` for a correct control.
    pub rule: Option<&'static str>,
    pub launch: Box<dyn Fn(Arguments) -> ExitCode>,
}

fn memkv(name: &str, rule: Option<&'static str>, bug: Option<MemBug>) -> Entry {
    let n = name.to_owned();
    Entry {
        name: name.to_owned(),
        rule,
        launch: Box::new(move |args| {
            let n = n.clone();
            shedlock_conformance::run_with_args(args, move || async move {
                Ok(MemKvHarness::new(&n, bug))
            })
        }),
    }
}

fn natskv(name: &str, rule: Option<&'static str>, bug: Option<NatsBug>) -> Entry {
    let n = name.to_owned();
    Entry {
        name: name.to_owned(),
        rule,
        launch: Box::new(move |args| {
            let n = n.clone();
            shedlock_conformance::run_with_args(args, move || async move {
                Ok(NatsHarness::new(&n, bug))
            })
        }),
    }
}

fn sqlish(name: &str, rule: Option<&'static str>, bug: Option<SqlBug>) -> Entry {
    let n = name.to_owned();
    Entry {
        name: name.to_owned(),
        rule,
        launch: Box::new(move |args| {
            let n = n.clone();
            shedlock_conformance::run_with_args(args, move || async move {
                Ok(SqlHarness::new(&n, bug))
            })
        }),
    }
}

/// Controls first, then the broken providers.
pub fn entries() -> Vec<Entry> {
    use MemBug as M;
    use NatsBug as N;
    use SqlBug as S;
    vec![
        memkv("memkv", None, None),
        natskv("natskv", None, None),
        sqlish("sqlish", None, None),
        // memkv: server time, TTLs
        memkv(
            "memkv-reentrant-node",
            Some("mutual-exclusion"),
            Some(M::Reentrant),
        ),
        memkv(
            "memkv-token-by-name",
            Some("ownership"),
            Some(M::TokenByName),
        ),
        memkv(
            "memkv-current-slot",
            Some("release-result"),
            Some(M::CurrentSlot),
        ),
        memkv(
            "memkv-touch-at-least",
            Some("at-least"),
            Some(M::TouchAtLeast),
        ),
        memkv(
            "memkv-min-ttl-1s",
            Some("at-least"),
            Some(M::MinTtlOneSecond),
        ),
        memkv("memkv-raw-long-ttl", Some("at-most"), Some(M::RawLongTtl)),
        memkv(
            "memkv-extend-recreates",
            Some("extend"),
            Some(M::ExtendRecreates),
        ),
        memkv(
            "memkv-lost-flag-blind-release",
            Some("ownership"),
            Some(M::LostFlagBlindRelease),
        ),
        memkv(
            "memkv-errors-not-acquired",
            Some("fail-closed"),
            Some(M::ErrorsAsNotAcquired),
        ),
        memkv(
            "memkv-retry-forever",
            Some("bounded-time"),
            Some(M::RetryForever),
        ),
        memkv(
            "memkv-percent-unescaped",
            Some("names-are-data"),
            Some(M::PercentNotEscaped),
        ),
        memkv(
            "memkv-byte-length",
            Some("name-length"),
            Some(M::ByteLengthLimit),
        ),
        memkv(
            "memkv-undeclared-key-limit",
            Some("honest-capabilities"),
            Some(M::UndeclaredKeyLimit),
        ),
        memkv(
            "memkv-incr-then-add-fencing",
            Some("fencing"),
            Some(M::IncrThenAddFencing),
        ),
        memkv(
            "memkv-unlock-error-false",
            Some("three-outcomes"),
            Some(M::UnlockErrorAsFalse),
        ),
        // natskv: client time, revisions
        natskv(
            "natskv-put-without-revision",
            Some("mutual-exclusion"),
            Some(N::PutWithoutRevision),
        ),
        natskv(
            "natskv-conflict-is-error",
            Some("three-outcomes"),
            Some(N::ConflictIsError),
        ),
        natskv(
            "natskv-system-clock",
            Some("client-time"),
            Some(N::SystemClock),
        ),
        natskv(
            "natskv-negative-cache",
            Some("free-lock-is-taken"),
            Some(N::NegativeCache),
        ),
        natskv(
            "natskv-holder-only-owner",
            Some("ownership"),
            Some(N::HolderOnlyOwnership),
        ),
        natskv(
            "natskv-extend-never-shortens",
            Some("extend"),
            Some(N::ExtendNeverShortens),
        ),
        natskv(
            "natskv-listing-filter-after-limit",
            Some("admin"),
            Some(N::ListingFilterAfterLimit),
        ),
        natskv(
            "natskv-trimmed-names",
            Some("names-are-data"),
            Some(N::TrimmedNames),
        ),
        natskv(
            "natskv-slash-tokens",
            Some("names-are-data"),
            Some(N::SlashTokens),
        ),
        natskv(
            "natskv-utf16-escape",
            Some("names-are-data"),
            Some(N::Utf16Escape),
        ),
        natskv(
            "natskv-extend-undeclared",
            Some("honest-capabilities"),
            Some(N::ExtendUndeclaredButWorks),
        ),
        natskv("natskv-u16-token", Some("fencing"), Some(N::U16Token)),
        // sqlish: server time, ShedLock's table
        sqlish(
            "sqlish-second-timestamps",
            Some("at-most"),
            Some(S::SecondTimestamps),
        ),
        sqlish(
            "sqlish-second-timestamps-coarse",
            Some("honest-capabilities"),
            Some(S::SecondTimestampsDeclaredCoarse),
        ),
        sqlish("sqlish-int-millis", Some("at-most"), Some(S::IntMillis)),
        sqlish(
            "sqlish-client-lock-until",
            Some("server-time"),
            Some(S::ClientLockUntil),
        ),
        sqlish(
            "sqlish-client-now-compare",
            Some("server-time"),
            Some(S::ClientNowCompare),
        ),
        sqlish(
            "sqlish-release-node-clock",
            Some("server-time"),
            Some(S::ReleaseNodeClock),
        ),
        sqlish(
            "sqlish-takeover-keeps-locked-at",
            Some("at-least"),
            Some(S::TakeoverKeepsLockedAt),
        ),
        sqlish(
            "sqlish-extend-moves-locked-at",
            Some("extend"),
            Some(S::ExtendMovesLockedAt),
        ),
        sqlish(
            "sqlish-release-flag-after-await",
            Some("release-result"),
            Some(S::ReleaseFlagAfterAwait),
        ),
        sqlish(
            "sqlish-release-ignores-expiry",
            Some("release-result"),
            Some(S::ReleaseIgnoresExpiry),
        ),
        sqlish(
            "sqlish-release-read-then-write",
            Some("ownership"),
            Some(S::ReleaseReadThenWrite),
        ),
        sqlish(
            "sqlish-extend-read-then-write",
            Some("extend"),
            Some(S::ExtendReadThenWrite),
        ),
        sqlish(
            "sqlish-ci-collation",
            Some("names-are-data"),
            Some(S::CaseInsensitiveCollation),
        ),
        sqlish(
            "sqlish-varchar-truncation",
            Some("name-length"),
            Some(S::VarcharTruncation),
        ),
        sqlish(
            "sqlish-unlock-needs-cached-name",
            Some("name-cache"),
            Some(S::UnlockNeedsCachedName),
        ),
        sqlish(
            "sqlish-duplicate-not-acquired",
            Some("free-lock-is-taken"),
            Some(S::DuplicateIsNotAcquired),
        ),
        sqlish(
            "sqlish-delete-on-release",
            Some("fencing"),
            Some(S::DeleteOnRelease),
        ),
        sqlish(
            "sqlish-fence-from-locked-at",
            Some("fencing"),
            Some(S::FenceFromLockedAt),
        ),
        sqlish(
            "sqlish-force-unlock-deletes",
            Some("admin"),
            Some(S::ForceUnlockDeletes),
        ),
        sqlish(
            "sqlish-java-host-is-own",
            Some("shedlock-records"),
            Some(S::JavaHostIsOwn),
        ),
        sqlish(
            "sqlish-foreign-format-takeover",
            Some("shedlock-records"),
            Some(S::ForeignFormatTakeover),
        ),
        sqlish(
            "sqlish-like-unescaped",
            Some("admin"),
            Some(S::LikeUnescaped),
        ),
        sqlish(
            "sqlish-force-unlock-by-name",
            Some("admin"),
            Some(S::ForceUnlockByName),
        ),
        sqlish(
            "sqlish-force-unlock-read-then-write",
            Some("admin"),
            Some(S::ForceUnlockReadThenWrite),
        ),
        sqlish(
            "sqlish-admin-system-clock",
            Some("admin"),
            Some(S::AdminSystemClock),
        ),
        sqlish(
            "sqlish-listing-cursor-inclusive",
            Some("admin"),
            Some(S::ListingCursorInclusive),
        ),
    ]
}
