//! Long durations and large counts: a lock of a month or a year is held for that long, many
//! locks held at once all stay held, and fencing tokens keep increasing past what a small
//! counter holds. The counts grow in deep mode ([`DEEP_VARIABLE`]).

use std::time::{Duration, SystemTime};

use futures_util::stream::{self, StreamExt, TryStreamExt};

use shedlock_core::{Acquisition, LockError, LockHandle, LockProvider};

use crate::failure::{CheckFailure, Rule, Verdict};
use crate::harness::{ConformanceHarness, Support};
use crate::names::NameSpace;
use crate::trace::{Trace, config};

use super::admin::admin_of;
use super::{node, timing_of};

/// Set to `1` to run [`check_long_durations_and_counts`] at full size: 10,000 names held at
/// once and 65,600 acquisitions of one name (past a 16-bit counter) instead of 200 and none.
pub const DEEP_VARIABLE: &str = "SHEDLOCK_CONFORMANCE_DEEP";

/// Whether deep mode is on, or a failure naming a value that is neither `0` nor `1`.
fn deep(trace: &Trace) -> Result<bool, CheckFailure> {
    match std::env::var(DEEP_VARIABLE).as_deref() {
        Err(_) | Ok("") | Ok("0") => Ok(false),
        Ok("1") => Ok(true),
        Ok(other) => Err(trace.failure(
            Rule::HARNESS,
            format!(
                "the environment variable {DEEP_VARIABLE} is {other:?}, not 1 (deep) or 0 (normal); correct it or unset it"
            ),
        )),
    }
}

/// Month-, year- and ten-millennia-long locks, in days: the last ends past the year 9999, where
/// four-digit years and some date types end.
const LONG_DAYS: [u64; 3] = [30, 365, 3_652_500];

/// How many calls one node has in flight while it takes, and another probes and releases, the
/// names held at once.
const IN_FLIGHT: usize = 16;

/// How many names are held at once: normally, and in deep mode.
const MANY_NAMES: (usize, usize) = (200, 10_000);

/// How many acquisitions of one name deep mode makes: past 65,535, the largest 16-bit count.
const DEEP_ACQUISITIONS: u64 = 65_600;

/// Where deep mode asks the harness to move a name's tokens
/// ([`ConformanceHarness::advance_fencing_tokens`]), so that [`AFTER_ADVANCE`] acquisitions
/// cross 65,535 instead of [`DEEP_ACQUISITIONS`].
const ADVANCED_PAST: u64 = 65_500;

/// How many acquisitions follow the harness's advance: the last token is at least 65,600.
const AFTER_ADVANCE: u64 = 100;

/// Long durations and large counts (\[at-most\], \[fencing\], \[names-are-data\]).
///
/// - A `lock_at_most_for` of 30 days, of 365 days and of 10,000 years is either refused up front with a clear error
///   ([`LockError::Configuration`] or [`LockError::InvalidRequest`]) or held: another node is
///   refused at once and again two units later (a duration stored as something short, wrapped
///   or read as an absolute time shows), and the operator view, where the harness provides one,
///   shows it held until no earlier than the duration asks.
/// - In deep mode, with fencing declared, tokens of one name keep strictly increasing past
///   65,535 (a counter of 16 bits wraps there): the harness moves the name's tokens past
///   65,500 ([`ConformanceHarness::advance_fencing_tokens`]) and 100 acquisitions follow, or,
///   without that hook, 65,600 acquisitions are taken one after another.
/// - 200 names (10,000 in deep mode) held at once by one node all stay held: another node is
///   refused every one of them after all were taken (none evicted, none merged), and every
///   release answers `true`. Each node has 16 calls in flight at a time.
pub async fn check_long_durations_and_counts<H: ConformanceHarness>(
    harness: &H,
    names: &NameSpace,
) -> Result<Verdict, CheckFailure> {
    let trace = Trace::new("long_durations_and_counts");
    let deep = deep(&trace)?;
    let a = node(harness, &trace, "A").await?;
    let b = node(harness, &trace, "B").await?;
    let capabilities = a.capabilities();
    let timing = timing_of(&capabilities);
    let admin = admin_of(harness, &b).ok();
    let mut notes = Vec::new();

    for days in LONG_DAYS {
        let at_most = Duration::from_secs(days * 24 * 3600);
        let lock = config(&names.name(&format!("days{days}")), at_most, Duration::ZERO);
        let asked_at = SystemTime::now();
        let handle = match trace.try_lock("A", &a, &lock).await?.value {
            Ok(Acquisition::Acquired(handle)) => handle,
            Err(LockError::Configuration(_) | LockError::InvalidRequest { .. }) => {
                notes.push(format!("{days} days: refused up front"));
                continue;
            }
            Ok(Acquisition::NotAcquired(holder)) => {
                return Err(trace.failure(
                    Rule::FREE_LOCK_IS_TAKEN,
                    format!(
                        "node A was refused {:?} for {days} days, a name nobody has used ({holder:?}): a duration the provider cannot store is refused up front with LockError::Configuration or LockError::InvalidRequest, never answered \"not acquired\"",
                        lock.name()
                    ),
                ));
            }
            other => {
                return Err(trace.failure(
                    Rule::AT_MOST,
                    format!(
                        "a free lock asked for {days} days answered {:?}: it must be held, or refused up front with LockError::Configuration or LockError::InvalidRequest naming the limit",
                        other.map(|acquisition| crate::trace::describe_acquisition(&Ok(acquisition)))
                    ),
                ));
            }
        };
        let why = format!(
            "node A holds it for {days} days: a duration is never stored as something shorter (a wrapped integer, a TTL read as a date)"
        );
        trace
            .must_not_acquire("B", &b, &lock, Rule::AT_MOST, &why)
            .await?;
        trace
            .sleep_until(tokio::time::Instant::now() + timing.units(2))
            .await;
        trace
            .must_not_acquire("B", &b, &lock, Rule::AT_MOST, &why)
            .await?;
        if let Some(admin) = admin
            && let Some(seen) = trace.inspect_lock("B", admin, lock.name()).await?
            && let Some(held_until) = seen.held_until
        {
            // A layout whose dates end with the year 9999 may keep a longer lock until then.
            let end_of_9999 = SystemTime::UNIX_EPOCH + Duration::from_secs(253_402_300_799);
            let earliest = (asked_at + at_most - Duration::from_secs(60)).min(end_of_9999);
            if held_until < earliest {
                return Err(trace.failure(
                    Rule::AT_MOST,
                    format!(
                        "node A took {:?} for {days} days, but the operator view shows it held only until {} ({} days from now)",
                        lock.name(),
                        shedlock_core::raw::Rfc3339::micros(held_until),
                        held_until
                            .duration_since(SystemTime::now())
                            .map_or(0, |left| left.as_secs() / 86_400)
                    ),
                ));
            }
        }
        trace
            .must_unlock_with("A", &*handle, true, Rule::RELEASE_RESULT, &why)
            .await?;
        notes.push(format!("{days} days: held"));
    }

    let long = timing.units(100);
    if deep && capabilities.fencing {
        let lock = config(&names.name("tokens"), long, Duration::ZERO);
        let advanced = harness
            .advance_fencing_tokens(lock.name(), ADVANCED_PAST)
            .await
            .map_err(|error| {
                trace.failure(
                    Rule::HARNESS,
                    format!("advance_fencing_tokens failed: {error}"),
                )
            })?;
        let (count, above) = match advanced {
            Support::Supported(()) => (AFTER_ADVANCE, Some(ADVANCED_PAST)),
            Support::NotApplicable(_) => (DEEP_ACQUISITIONS, None),
        };
        let last = increasing_tokens(&trace, &a, &lock, count, above).await?;
        notes.push(match above {
            Some(past) => format!(
                "tokens of one name moved past {past} by the harness, then {count} acquisitions, tokens increasing to {last}"
            ),
            None => format!("{count} acquisitions of one name, tokens increasing to {last}"),
        });
    }
    let count = if deep { MANY_NAMES.1 } else { MANY_NAMES.0 };
    // An hour: taking 10,000 names takes a while on a backend that syncs every write to disk,
    // and the first must still be held when the last is taken.
    let hour = Duration::from_secs(3600);
    let many: Vec<_> = (0..count)
        .map(|index| config(&names.name(&format!("n{index}")), hour, Duration::ZERO))
        .collect();
    // Several calls at a time on one node, as the tasks of a service would send them: the
    // names are all different, so none may wait for or displace another.
    let held: Vec<Box<dyn LockHandle>> = stream::iter(&many)
        .map(|lock| quiet_acquire(&trace, &a, lock))
        .buffered(IN_FLIGHT)
        .try_collect()
        .await?;
    trace.note(format!("node A holds {count} names at once"));
    let (trace, b) = (&trace, &b);
    let mut refusals = stream::iter(&many)
        .map(|lock| async move { (lock, trace.acquire_unrecorded("B", b, lock).await) })
        .buffer_unordered(IN_FLIGHT);
    while let Some((lock, answer)) = refusals.next().await {
        if let Acquisition::Acquired(_) = answer?.value {
            return Err(trace.failure(
                Rule::MUTUAL_EXCLUSION,
                format!(
                    "node B acquired {:?}, one of {count} names node A took and still holds: was it evicted, or merged with another?",
                    lock.name()
                ),
            ));
        }
    }
    let mut releases = stream::iter(many.iter().zip(&held))
        .map(|(lock, handle)| async move {
            (
                lock,
                tokio::time::timeout(crate::trace::OPERATION_LIMIT, handle.unlock()).await,
            )
        })
        .buffer_unordered(IN_FLIGHT);
    while let Some((lock, answer)) = releases.next().await {
        if !matches!(answer, Ok(Ok(true))) {
            return Err(trace.failure(
                Rule::RELEASE_RESULT,
                format!(
                    "node A's release of {:?}, one of {count} names it holds, answered {answer:?}",
                    lock.name()
                ),
            ));
        }
    }
    notes.push(format!("{count} names held at once"));

    if !deep {
        notes.push(format!(
            "set {DEEP_VARIABLE}=1 for 10,000 names and {DEEP_ACQUISITIONS} acquisitions of one name"
        ));
    }
    Ok(Verdict::Passed { notes })
}

/// Node A takes and releases `lock` `count` times, outside the timeline: every token must be
/// above the one before (and the first above `above`, where the harness moved the name's tokens
/// there). The last token.
async fn increasing_tokens(
    trace: &Trace,
    a: &dyn LockProvider,
    lock: &shedlock_core::LockConfiguration,
    count: u64,
    above: Option<u64>,
) -> Result<u64, CheckFailure> {
    let mut previous = above;
    for acquisition in 1..=count {
        let handle = quiet_acquire(trace, a, lock).await?;
        match (handle.fencing_token(), previous) {
            (None, _) => {
                return Err(trace.failure(
                    Rule::FENCING,
                    format!(
                        "acquisition {acquisition} of {:?} carries no fencing token",
                        lock.name()
                    ),
                ));
            }
            (Some(token), Some(before)) if token <= before => {
                let after = if acquisition == 1 {
                    format!(
                        "the harness's advance_fencing_tokens moved the name's tokens past {before}: either the hook moved nothing, or the provider does not issue its tokens from what the hook moved"
                    )
                } else {
                    format!("the previous acquisition got {before}")
                };
                return Err(trace.failure(
                    Rule::FENCING,
                    format!(
                        "acquisition {acquisition} of {:?} got token {token}, but {after}: tokens must keep increasing however many acquisitions a name sees (a counter narrower than 64 bits wraps)",
                        lock.name()
                    ),
                ));
            }
            (token, _) => previous = token,
        }
        if !matches!(handle.unlock().await, Ok(true)) {
            return Err(trace.failure(
                Rule::RELEASE_RESULT,
                format!(
                    "acquisition {acquisition} of {:?} was not released with true",
                    lock.name()
                ),
            ));
        }
    }
    Ok(previous.unwrap_or_default())
}

/// Node A takes `lock`, which nobody holds, outside the timeline.
async fn quiet_acquire(
    trace: &Trace,
    provider: &dyn LockProvider,
    lock: &shedlock_core::LockConfiguration,
) -> Result<Box<dyn LockHandle>, CheckFailure> {
    match trace.acquire_unrecorded("A", provider, lock).await?.value {
        Acquisition::Acquired(handle) => Ok(handle),
        Acquisition::NotAcquired(holder) => Err(trace.failure(
            Rule::FREE_LOCK_IS_TAKEN,
            format!(
                "node A was refused {:?}, which nobody holds (it holds other names, and released this one if it held it before): {holder:?}",
                lock.name()
            ),
        )),
    }
}
