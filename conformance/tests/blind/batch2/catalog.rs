//! Every provider of the batch: its name, the rule its bug breaks (`None` for a correct
//! control), and how to run the kit against it.

use std::process::ExitCode;

use shedlock_conformance::{Arguments, ConformanceHarness};

use super::dynamoish::{DynBug, DynHarness};
use super::etcdish::{EtcdBug, EtcdHarness};
use super::mongoish::{MongoBug, MongoHarness};

/// One provider under test.
pub struct Entry {
    pub name: String,
    /// The rule its bug breaks; `None` for a correct control.
    pub rule: Option<&'static str>,
    pub launch: Box<dyn Fn(Arguments) -> ExitCode>,
}

fn entry<H: ConformanceHarness>(
    name: &str,
    rule: Option<&'static str>,
    make: impl Fn(&str) -> H + Copy + Send + 'static,
) -> Entry {
    let owned = name.to_owned();
    Entry {
        name: name.to_owned(),
        rule,
        launch: Box::new(move |args| {
            let name = owned.clone();
            shedlock_conformance::run_with_args(args, move || async move { Ok(make(&name)) })
        }),
    }
}

fn etcd(name: &str, rule: &'static str, bug: EtcdBug) -> Entry {
    entry(name, Some(rule), move |n| EtcdHarness::new(n, Some(bug)))
}

fn dynamo(name: &str, rule: &'static str, bug: DynBug) -> Entry {
    entry(name, Some(rule), move |n| DynHarness::new(n, Some(bug)))
}

fn mongo(name: &str, rule: &'static str, bug: MongoBug) -> Entry {
    entry(name, Some(rule), move |n| MongoHarness::new(n, Some(bug)))
}

/// Controls first, then the broken providers.
pub fn entries() -> Vec<Entry> {
    use DynBug as D;
    use EtcdBug as E;
    use MongoBug as M;
    vec![
        entry("etcdish", None, |n| EtcdHarness::new(n, None)),
        entry("dynamoish", None, |n| DynHarness::new(n, None)),
        entry("mongoish", None, |n| MongoHarness::new(n, None)),
        // etcdish: server time, leases in whole seconds, revisions
        etcd("etcdish-lease-reuse", "mutual-exclusion", E::LeaseReuse),
        etcd("etcdish-session-lease", "at-most", E::SessionLease),
        etcd(
            "etcdish-zero-lease-short-rest",
            "at-least",
            E::ZeroLeaseForShortRest,
        ),
        etcd("etcdish-revoke-on-release", "at-least", E::RevokeOnRelease),
        etcd("etcdish-compare-version", "ownership", E::CompareVersion),
        etcd("etcdish-fence-from-version", "fencing", E::FenceFromVersion),
        etcd("etcdish-fence-is-lease-id", "fencing", E::FenceIsLeaseId),
        etcd("etcdish-keepalive-extend", "extend", E::KeepAliveExtend),
        etcd(
            "etcdish-extend-revokes-first",
            "extend",
            E::ExtendRevokesFirst,
        ),
        etcd(
            "etcdish-extend-missing-is-error",
            "three-outcomes",
            E::ExtendMissingIsError,
        ),
        etcd("etcdish-fail-open", "fail-closed", E::FailOpen),
        etcd(
            "etcdish-declared-ms-precision",
            "honest-capabilities",
            E::DeclaredMillisPrecision,
        ),
        etcd(
            "etcdish-handle-name-is-key",
            "free-lock-is-taken",
            E::HandleNameIsKey,
        ),
        etcd(
            "etcdish-slash-to-underscore",
            "names-are-data",
            E::SlashToUnderscore,
        ),
        etcd(
            "etcdish-value-deadline-takeover",
            "server-time",
            E::ValueDeadlineTakeover,
        ),
        etcd("etcdish-prefix-end-by-char", "admin", E::PrefixEndByChar),
        etcd(
            "etcdish-released-set-by-name",
            "release-result",
            E::ReleasedSetByName,
        ),
        // dynamoish: client time, conditional writes, ShedLock's layout, a name cache
        dynamo(
            "dynamoish-single-flight",
            "mutual-exclusion",
            D::SingleFlight,
        ),
        dynamo(
            "dynamoish-eventually-consistent-precheck",
            "free-lock-is-taken",
            D::EventuallyConsistentPrecheck,
        ),
        dynamo(
            "dynamoish-throttle-not-acquired",
            "three-outcomes",
            D::ThrottleIsNotAcquired,
        ),
        dynamo(
            "dynamoish-subsec-millis-at-least",
            "at-least",
            D::SubsecMillisAtLeast,
        ),
        dynamo(
            "dynamoish-idempotent-release",
            "release-result",
            D::IdempotentRelease,
        ),
        dynamo(
            "dynamoish-owner-by-locked-at",
            "ownership",
            D::OwnerByLockedAt,
        ),
        dynamo(
            "dynamoish-extend-from-lock-until",
            "extend",
            D::ExtendFromLockUntil,
        ),
        dynamo(
            "dynamoish-handle-says-server",
            "honest-capabilities",
            D::HandleSaysServer,
        ),
        dynamo(
            "dynamoish-fence-read-then-put",
            "fencing",
            D::FenceReadThenPut,
        ),
        dynamo("dynamoish-clock-read-once", "client-time", D::ClockReadOnce),
        dynamo("dynamoish-date-header-now", "client-time", D::DateHeaderNow),
        dynamo("dynamoish-nfkc-names", "names-are-data", D::NfkcNames),
        dynamo(
            "dynamoish-off-by-one-limit",
            "name-length",
            D::OffByOneLimit,
        ),
        dynamo(
            "dynamoish-extend-through-insert-path",
            "name-cache",
            D::ExtendThroughInsertPath,
        ),
        dynamo(
            "dynamoish-epoch-millis-numbers",
            "shedlock-records",
            D::EpochMillisNumbers,
        ),
        dynamo(
            "dynamoish-scan-page-limit-ignored",
            "admin",
            D::ScanPageLimitIgnored,
        ),
        dynamo(
            "dynamoish-retries-too-long",
            "bounded-time",
            D::RetriesTooLong,
        ),
        dynamo("dynamoish-iso-year-overflow", "at-most", D::IsoYearOverflow),
        // mongoish: server time ($$NOW), upserts on a unique _id, ShedLock's layout
        mongo(
            "mongoish-now-literal-in-filter",
            "free-lock-is-taken",
            M::NowLiteralInFilter,
        ),
        mongo(
            "mongoish-retry-upsert-on-duplicate",
            "three-outcomes",
            M::RetryUpsertOnDuplicate,
        ),
        mongo("mongoish-release-on-drop", "at-most", M::ReleaseOnDrop),
        mongo(
            "mongoish-release-never-lengthens",
            "at-least",
            M::ReleaseNeverLengthens,
        ),
        mongo(
            "mongoish-no-released-flag",
            "release-result",
            M::NoReleasedFlag,
        ),
        mongo(
            "mongoish-node-scoped-locked-by",
            "ownership",
            M::NodeScopedLockedBy,
        ),
        mongo(
            "mongoish-extend-disabled-answers-false",
            "honest-capabilities",
            M::ExtendDisabledAnswersFalse,
        ),
        mongo(
            "mongoish-extend-from-node-clock",
            "server-time",
            M::ExtendFromNodeClock,
        ),
        mongo(
            "mongoish-locked-at-from-node-clock",
            "server-time",
            M::LockedAtFromNodeClock,
        ),
        mongo("mongoish-fence-add-null", "fencing", M::FenceAddNull),
        mongo(
            "mongoish-zero-width-stripped",
            "names-are-data",
            M::ZeroWidthStripped,
        ),
        mongo("mongoish-limit-in-bytes", "name-length", M::LimitInBytes),
        mongo(
            "mongoish-holder-parse-fails-on-java",
            "shedlock-records",
            M::HolderParseFailsOnJava,
        ),
        mongo("mongoish-collated-listing", "admin", M::CollatedListing),
        mongo(
            "mongoish-force-unlock-no-held-check",
            "admin",
            M::ForceUnlockNoHeldCheck,
        ),
        mongo(
            "mongoish-server-selection-30s",
            "bounded-time",
            M::ServerSelection30s,
        ),
        mongo(
            "mongoish-no-primary-not-acquired",
            "fail-closed",
            M::NoPrimaryIsNotAcquired,
        ),
    ]
}
