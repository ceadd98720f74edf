//! Check 13: the operator's view (`LockAdmin`) shows what nodes hold, and a force-unlock frees
//! exactly the acquisition it names.

use std::collections::HashSet;
use std::time::Duration;

use shedlock_core::{
    Acquisition, LockAdmin, LockError, LockHandle, LockInfo, LockProvider, LockState, PageRequest,
};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::{ConformanceHarness, Support};
use crate::names::NameSpace;
use crate::trace::{OPERATION_LIMIT, Trace, config};

use super::{node, timing_of};

/// The page size of the listing check: small, so three pages hold the names.
const PAGE_SIZE: usize = 2;

/// The admin of `node`, or why the check does not apply.
pub(super) fn admin_of<'node, H: ConformanceHarness>(
    harness: &H,
    node: &'node H::Node,
) -> Result<&'node dyn LockAdmin, Verdict> {
    match harness.admin(node) {
        Support::Supported(admin) => Ok(admin),
        Support::NotApplicable(reason) => Err(Verdict::NotApplicable(reason)),
    }
}

/// Why listing is not checked, when `admin` declares it unsupported: its `list_locks` answers
/// [`LockError::Unsupported`]. A listing then must stay unsupported, also with a lock under the
/// prefix, and inspect must still work: a name never used inspects as `None`, a held one as a
/// lock. `None` when the provider lists.
async fn listing_unsupported(
    trace: &Trace,
    a: &dyn LockProvider,
    admin: &dyn LockAdmin,
    prefix: &str,
    long: Duration,
) -> Result<Option<String>, CheckFailure> {
    let request = PageRequest::first(prefix).with_limit(PAGE_SIZE);
    let ask = || tokio::time::timeout(OPERATION_LIMIT, admin.list_locks(&request));
    if !matches!(ask().await, Ok(Err(LockError::Unsupported { .. }))) {
        return Ok(None);
    }
    let never = format!("{prefix}never-used");
    if let Some(lock) = trace.inspect_lock("B", admin, &never).await? {
        return Err(trace.failure(
            Rule::ADMIN,
            format!("lock {never:?} was never used, but inspecting it shows {lock:?}"),
        ));
    }
    // Asked again with a lock under the prefix: a listing that fails only when empty shows.
    let held = format!("{prefix}held");
    let handle = trace
        .must_acquire_free("A", a, &config(&held, long, Duration::ZERO))
        .await?;
    trace.must_inspect_held("B", admin, &held, "A").await?;
    let again = ask().await;
    trace.must_release("A", &*handle.value).await?;
    match again {
        Ok(Err(LockError::Unsupported { .. })) => Ok(Some(
            "the provider declares listing unsupported (list_locks answers LockError::Unsupported): inspect and force-unlock are checked by admin_force_unlock and admin_concurrent_force_unlock".to_owned(),
        )),
        other => Err(trace.failure(
            Rule::ADMIN,
            format!(
                "list_locks answered LockError::Unsupported, then {other:?}: a provider without a listing says so every time"
            ),
        )),
    }
}

/// The listed lock named `name`, exactly once.
fn listed<'list>(
    trace: &Trace,
    locks: &'list [LockInfo],
    name: &str,
) -> Result<Option<&'list LockInfo>, CheckFailure> {
    let mut found = locks.iter().filter(|lock| lock.name == name);
    let first = found.next();
    if found.next().is_some() {
        return Err(trace.failure(
            Rule::ADMIN,
            format!("lock {name:?} is listed more than once"),
        ));
    }
    Ok(first)
}

/// A held lock as listed: held, with a holder where the backend stores one, time left within
/// its `lock_at_most_for`, and the handle's fencing token where the provider declares fencing.
fn check_held(
    trace: &Trace,
    stores_holder: bool,
    lock: Option<&LockInfo>,
    name: &str,
    handle: Option<&dyn LockHandle>,
    at_most: Duration,
    precision: Duration,
) -> Result<(), CheckFailure> {
    let Some(lock) = lock else {
        return Err(trace.failure(Rule::ADMIN, format!("lock {name:?} is held but not listed")));
    };
    let fail = |what: String| Err(trace.failure(Rule::ADMIN, format!("lock {name:?}: {what}")));
    if lock.state != LockState::Held {
        return fail(format!("it is held, but shown as {}", lock.state));
    }
    if stores_holder && lock.locked_by.is_none() {
        return fail(
            "it is held, but no holder is shown, though a refused try_lock names one".to_owned(),
        );
    }
    match lock.remaining {
        None => return fail("it is held, but no remaining time is shown".to_owned()),
        Some(remaining) if remaining > at_most + precision => {
            return fail(format!(
                "{remaining:?} is shown as remaining, more than its lock_at_most_for of {at_most:?}"
            ));
        }
        Some(_) => {}
    }
    let token = handle.and_then(|handle| handle.fencing_token());
    if token.is_some() && lock.fencing_token != token {
        return fail(format!(
            "its holder has fencing token {token:?}, but {:?} is shown",
            lock.fencing_token
        ));
    }
    Ok(())
}

/// Listing and inspecting: every held lock under a prefix is listed exactly once, across
/// pages, as held by someone with its time left and its fencing token; a released lock is free
/// or gone; nothing outside the prefix is listed, pattern characters in a prefix are literal,
/// and a name never used inspects as `None`.
///
/// Applies when the harness provides [`admin`](ConformanceHarness::admin).
pub async fn check_admin_listing<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("admin_listing");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let admin = match admin_of(harness, &b) {
        Ok(admin) => admin,
        Err(verdict) => return Ok(verdict),
    };
    let capabilities = a.capabilities();
    let timing = timing_of(&capabilities);
    let long = timing.units(100);
    let prefix = names.name("l-");
    // A backend that cannot enumerate its keys reliably (a cache) may offer inspect and
    // force-unlock without a listing: its list_locks answers Unsupported, always.
    if let Some(reason) = listing_unsupported(&trace, &a, admin, &prefix, long).await? {
        return Ok(Verdict::NotApplicable(reason));
    }
    // Names that a case-folding sort, or a range end built from a byte or a Latin-1
    // character, would put out of order or leave out; two pages of two hold them.
    let held_names: Vec<String> = ["a", "B", "c", "A", "b", "锁", "\u{1F512}"]
        .iter()
        .map(|local| format!("{prefix}{local}"))
        .collect();
    let mut handles = Vec::new();
    for name in &held_names {
        let handle = trace
            .must_acquire_free("A", &a, &config(name, long, Duration::ZERO))
            .await?;
        handles.push(handle.value);
    }
    // Some layouts store no holder (Curator's ZooKeeper nodes hold only lock_until): the
    // listing must name one exactly when a refused try_lock does.
    let stores_holder = match trace
        .acquire("B", &b, &config(&held_names[0], long, Duration::ZERO))
        .await?
        .value
    {
        Acquisition::NotAcquired(holder) => holder.is_some_and(|holder| holder.locked_by.is_some()),
        Acquisition::Acquired(_) => {
            return Err(trace.failure(
                Rule::MUTUAL_EXCLUSION,
                format!("node B got lock {:?}, which node A holds", held_names[0]),
            ));
        }
    };
    let released = format!("{prefix}released");
    let handle = trace
        .must_acquire_free("A", &a, &config(&released, long, Duration::ZERO))
        .await?;
    trace.must_release("A", &*handle.value).await?;
    let kept = format!("{prefix}kept");
    let kept_handle = trace
        .must_acquire_free("A", &a, &config(&kept, long, long))
        .await?;
    trace.must_release("A", &*kept_handle.value).await?;
    // Outside the prefix, though they share all but its last character.
    let outside = [names.name("l"), names.name("lx")];
    for name in &outside {
        trace
            .must_acquire_free("A", &a, &config(name, long, Duration::ZERO))
            .await?;
    }

    let locks = trace.list_locks("B", admin, &prefix, PAGE_SIZE).await?;
    for lock in &locks {
        if !lock.name.starts_with(&prefix) {
            return Err(trace.failure(
                Rule::ADMIN,
                format!(
                    "lock {:?} is listed under prefix {prefix:?}, which it does not start with",
                    lock.name
                ),
            ));
        }
    }
    let precision = capabilities.time_precision;
    for (name, handle) in held_names.iter().zip(&handles) {
        let lock = listed(&trace, &locks, name)?;
        check_held(
            &trace,
            stores_holder,
            lock,
            name,
            Some(&**handle),
            long,
            precision,
        )?;
    }
    let kept_lock = listed(&trace, &locks, &kept)?;
    if kept_lock.is_some_and(|lock| lock.state != LockState::Held) {
        // Shown free: the listing may be right and the release wrong.
        let probe = trace
            .acquire("B", &b, &config(&kept, long, Duration::ZERO))
            .await?;
        if probe.value.is_acquired() {
            return Err(trace.failure(
                Rule::AT_LEAST,
                format!(
                    "lock {kept:?} was released inside its lock_at_least_for of {long:?}, and node B got it: the release did not keep it until acquired_at + lock_at_least_for (the listing showed it free, which it was)"
                ),
            ));
        }
    }
    check_held(
        &trace,
        stores_holder,
        kept_lock,
        &kept,
        None,
        long,
        precision,
    )?;
    if let Some(lock) = listed(&trace, &locks, &released)?
        && lock.state != LockState::Free
    {
        return Err(trace.failure(
            Rule::ADMIN,
            format!(
                "lock {released:?} was released with no lock_at_least_for, but is listed as {}",
                lock.state
            ),
        ));
    }
    let distinct: HashSet<&str> = locks.iter().map(|lock| lock.name.as_str()).collect();
    if distinct.len() != locks.len() {
        return Err(trace.failure(Rule::ADMIN, "a lock is listed twice across pages"));
    }

    let inspected = trace.inspect_lock("B", admin, &held_names[0]).await?;
    let first = listed(&trace, &locks, &held_names[0])?;
    match (&inspected, first) {
        (Some(lock), Some(listed)) if lock.acquisition == listed.acquisition => {
            check_held(
                &trace,
                stores_holder,
                Some(lock),
                &held_names[0],
                Some(&*handles[0]),
                long,
                precision,
            )?;
        }
        _ => {
            return Err(trace.failure(
                Rule::ADMIN,
                format!(
                    "inspecting {:?} shows {inspected:?}, but the listing showed {first:?}",
                    held_names[0]
                ),
            ));
        }
    }
    let never = names.name("never-used");
    if let Some(lock) = trace.inspect_lock("B", admin, &never).await? {
        return Err(trace.failure(
            Rule::ADMIN,
            format!("lock {never:?} was never used, but inspecting it shows {lock:?}"),
        ));
    }

    // Pattern characters in a prefix are characters: `p%_-` must not match `pab-`.
    let literal = names.name("p%_-");
    let inside = format!("{literal}a");
    let lookalike = names.name("pab-a");
    for name in [&inside, &lookalike] {
        trace
            .must_acquire_free("A", &a, &config(name, long, Duration::ZERO))
            .await?;
    }
    let locks = trace.list_locks("B", admin, &literal, PAGE_SIZE).await?;
    let shown: Vec<&str> = locks.iter().map(|lock| lock.name.as_str()).collect();
    if shown != [inside.as_str()] {
        return Err(trace.failure(
            Rule::ADMIN,
            format!(
                "listing prefix {literal:?} shows {shown:?}; only {inside:?} starts with it (pattern characters must be literal)"
            ),
        ));
    }
    Ok(Verdict::passed())
}

/// Force-unlock frees exactly the acquisition it names: the lock is free for another node at
/// once, the former holder's release then answers `false` and leaves the new holder alone, and
/// the same acquisition id no longer frees anything, nor does one for a free or unknown lock.
/// With fencing, the acquisition after a force-unlock has a greater token than the one freed.
///
/// Applies when the harness provides [`admin`](ConformanceHarness::admin).
pub async fn check_admin_force_unlock<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("admin_force_unlock");
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let operator = node(harness, &trace, "O").await?;
    let admin = match admin_of(harness, &operator) {
        Ok(admin) => admin,
        Err(verdict) => return Ok(verdict),
    };
    let timing = timing_of(&a.capabilities());
    let long = timing.units(100);
    let lock = config(&names.name("lock"), long, long);
    let held = trace.must_acquire_free("A", &a, &lock).await?.value;
    let seen = trace
        .must_inspect_held("O", admin, lock.name(), "A")
        .await?;
    trace
        .must_force_unlock_with(
            "O",
            admin,
            lock.name(),
            &seen.acquisition,
            true,
            "node A's acquisition, the one inspected, still holds it",
        )
        .await?;
    let taken = trace
        .must_acquire(
            "B",
            &b,
            &lock,
            Rule::ADMIN,
            "the lock was force-unlocked, which frees it at once whatever lock_at_least_for is",
        )
        .await?
        .value;
    if a.capabilities().fencing
        && let (Some(before), Some(after)) = (held.fencing_token(), taken.fencing_token())
        && after <= before
    {
        return Err(trace.failure(
            Rule::ADMIN,
            format!(
                "node B's acquisition after the force-unlock has fencing token {after}, not greater than node A's {before}: a force-unlock frees the lock but keeps the record, so the counter never goes back ([fencing])"
            ),
        ));
    }
    trace
        .must_unlock_with(
            "A",
            &*held,
            false,
            Rule::OWNERSHIP,
            "node A's acquisition was force-unlocked and node B holds the lock now",
        )
        .await?;
    trace
        .must_not_acquire(
            "A",
            &a,
            &lock,
            Rule::ADMIN,
            "node B holds it; node A's late release must not have freed it",
        )
        .await?;
    trace
        .must_force_unlock_with(
            "O",
            admin,
            lock.name(),
            &seen.acquisition,
            false,
            "that acquisition was freed already and node B holds the lock now",
        )
        .await?;
    trace
        .must_not_acquire(
            "A",
            &a,
            &lock,
            Rule::ADMIN,
            "node B holds it; a stale force-unlock must not have freed it",
        )
        .await?;
    let now_seen = trace
        .must_inspect_held("O", admin, lock.name(), "B")
        .await?;
    if now_seen.acquisition == seen.acquisition || now_seen.state != LockState::Held {
        return Err(trace.failure(
            Rule::ADMIN,
            format!(
                "node B took lock {:?} after node A, but inspecting it shows {now_seen:?}, where node A's acquisition was {seen:?}",
                lock.name()
            ),
        ));
    }
    let short = config(&names.name("free"), long, Duration::ZERO);
    let released = trace.must_acquire_free("B", &b, &short).await?.value;
    let free_seen = trace.inspect_lock("O", admin, short.name()).await?;
    trace.must_release("B", &*released).await?;
    if let Some(free_seen) = free_seen {
        trace
            .must_force_unlock_with(
                "O",
                admin,
                short.name(),
                &free_seen.acquisition,
                false,
                "that acquisition released the lock already",
            )
            .await?;
    }
    trace
        .must_force_unlock_with(
            "O",
            admin,
            &names.name("never-used"),
            &seen.acquisition,
            false,
            "no lock of that name was ever taken",
        )
        .await?;
    trace.must_release("B", &*taken).await?;

    // Acquisitions in quick succession: freed and taken again within a millisecond or two, the
    // old and the new acquisition still differ in identity, so the old one's release frees
    // nothing (an identity made of a timestamp does not tell them apart).
    for round in 0..RAPID_ROUNDS {
        let lock = config(&names.name(&format!("rapid{round}")), long, Duration::ZERO);
        let old = trace.must_acquire_free("A", &a, &lock).await?.value;
        let seen = trace
            .must_inspect_held("O", admin, lock.name(), "A")
            .await?;
        trace
            .must_force_unlock_with(
                "O",
                admin,
                lock.name(),
                &seen.acquisition,
                true,
                "node A holds it",
            )
            .await?;
        let new = trace
            .must_acquire("B", &b, &lock, Rule::ADMIN, "the lock was force-unlocked")
            .await?
            .value;
        let why = format!(
            "round {round}: node A's acquisition was force-unlocked and node B took the lock right after; every acquisition has an identity of its own, however close in time"
        );
        trace
            .must_unlock_with("A", &*old, false, Rule::OWNERSHIP, &why)
            .await?;
        trace
            .must_not_acquire("A", &a, &lock, Rule::OWNERSHIP, &why)
            .await?;
        trace
            .must_unlock_with("B", &*new, true, Rule::OWNERSHIP, &why)
            .await?;
    }
    Ok(Verdict::passed())
}

/// Rounds of force-unlock and retake in quick succession.
const RAPID_ROUNDS: usize = 10;
