//! Demonstrations outside the kit that each broken provider really has its bug: a short
//! scenario per bug, run against the broken provider and against its backend's control,
//! through the public API only. Run with `-- --demo` (about two minutes: two scenarios wait
//! for an unreachable backend's timeouts); `-- --demo WORD` runs the scenarios whose label
//! contains WORD.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use shedlock_conformance::{ConformanceHarness, PlantedRecord, Support};
use shedlock_core::{
    Clock, LockAdmin, LockConfiguration, LockHandle, LockProvider, PageCursor, PageRequest,
    SystemClock,
    raw::{ManualClock, SkewedClock},
};

use super::dynamoish::{DynBug, DynHarness};
use super::etcdish::{EtcdBug, EtcdHarness};
use super::mongoish::{MongoBug, MongoHarness};

const MS: Duration = Duration::from_millis(1);
const HOUR: Duration = Duration::from_secs(3600);

fn cfg(name: &str, at_most_ms: u64, at_least_ms: u64) -> LockConfiguration {
    LockConfiguration::new(
        name,
        Duration::from_millis(at_most_ms),
        Duration::from_millis(at_least_ms),
    )
    .unwrap()
}

fn sys() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

fn skewed(ahead: bool, by: Duration) -> Arc<dyn Clock> {
    if ahead {
        Arc::new(SkewedClock::ahead(sys(), by))
    } else {
        Arc::new(SkewedClock::behind(sys(), by))
    }
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// `try_lock`, as "acquired", "refused" or the error.
async fn attempt<N: LockProvider>(node: &N, config: &LockConfiguration) -> String {
    match node.try_lock(config).await {
        Ok(a) if a.is_acquired() => "acquired".into(),
        Ok(_) => "refused".into(),
        Err(e) => format!("error ({e})"),
    }
}

async fn take<N: LockProvider>(node: &N, config: &LockConfiguration) -> Box<dyn LockHandle> {
    node.try_lock(config)
        .await
        .unwrap()
        .into_handle()
        .expect("a free lock")
}

fn answer(result: Result<bool, shedlock_core::LockError>) -> String {
    match result {
        Ok(b) => b.to_string(),
        Err(e) => format!("error ({e})"),
    }
}

async fn node<H: ConformanceHarness>(h: &H) -> H::Node {
    h.node(sys()).await.unwrap()
}

// ------------------------------------------------------------------------------------------
// Scenarios, each generic over the backend where it can be
// ------------------------------------------------------------------------------------------

/// A holds two locks of the same duration and releases one; can B take the other?
async fn two_locks_one_release<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let x = take(&a, &cfg("x", 5000, 0)).await;
    let _y = take(&a, &cfg("y", 5000, 0)).await;
    let released = answer(x.unlock().await);
    let other = attempt(&b, &cfg("y", 5000, 0)).await;
    format!("A released x: {released}; B on y (still held by A): {other}")
}

/// A takes a 1 s lock and vanishes; is it free 1.6 s later?
async fn dropped_holder<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    drop(take(&a, &cfg("d", 1000, 0)).await);
    let early = attempt(&b, &cfg("d", 1000, 0)).await;
    sleep_ms(1600).await;
    let late = attempt(&b, &cfg("d", 1000, 0)).await;
    format!("B right after the drop: {early}; 1.6 s later: {late}")
}

/// A releases with 0.6 s of a 1.5 s at-least left; is the lock free 1.5 s later?
async fn short_rest_release<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let handle = take(&a, &cfg("r", 10_000, 1500)).await;
    sleep_ms(900).await;
    let released = answer(handle.unlock().await);
    let during = attempt(&b, &cfg("r", 10_000, 0)).await;
    sleep_ms(1500).await;
    let after = attempt(&b, &cfg("r", 10_000, 0)).await;
    format!("release: {released}; B inside at-least: {during}; B after it: {after}")
}

/// A releases at once a lock with 3 s at-least; does B get it right away?
async fn release_inside_at_least<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let handle = take(&a, &cfg("l", 10_000, 3000)).await;
    let released = answer(handle.unlock().await);
    let during = attempt(&b, &cfg("l", 10_000, 0)).await;
    format!("release: {released}; B 0 s into a 3 s at-least: {during}")
}

/// A's 1 s lock expires, B takes it; what does A's stale release do?
async fn stale_release_after_takeover<H: ConformanceHarness>(h: &H, secs: bool) -> String {
    let (a, b, c) = (node(h).await, node(h).await, node(h).await);
    let stale = take(&a, &cfg("o", 1000, 0)).await;
    sleep_ms(if secs { 2100 } else { 1200 }).await;
    let _fresh = take(&b, &cfg("o", 10_000, 0)).await;
    let released = answer(stale.unlock().await);
    let third = attempt(&c, &cfg("o", 10_000, 0)).await;
    format!("A's stale release: {released}; C on B's lock: {third}")
}

/// Tokens of alternating acquisitions of one name.
async fn tokens<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let mut seen = Vec::new();
    for i in 0..6 {
        let n = if i % 2 == 0 { &a } else { &b };
        let handle = take(n, &cfg("f", 5000, 0)).await;
        seen.push(handle.fencing_token().unwrap_or(0));
        handle.unlock().await.unwrap();
    }
    let increasing = seen.windows(2).all(|w| w[0] < w[1]);
    format!("tokens {seen:?}, strictly increasing: {increasing}")
}

/// A extends a 2 s lock to 6 s; is it still held 3.5 s later?
async fn extend_longer<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let handle = take(&a, &cfg("e", 2000, 0)).await;
    let extended = answer(handle.extend(6000 * MS).await);
    let right_after = attempt(&b, &cfg("e", 2000, 0)).await;
    sleep_ms(3500).await;
    let later = attempt(&b, &cfg("e", 2000, 0)).await;
    format!("extend: {extended}; B right after: {right_after}; B 3.5 s later: {later}")
}

/// Extend of a lock that expired with nobody taking it.
async fn extend_expired<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let handle = take(&a, &cfg("x", 1000, 0)).await;
    sleep_ms(2100).await;
    format!(
        "extend after expiry: {}",
        answer(handle.extend(5000 * MS).await)
    )
}

/// A node whose backend is down.
async fn unreachable<H: ConformanceHarness>(h: &H) -> String {
    let Ok(Support::Supported(n)) = h.unreachable_node().await else {
        return "no unreachable node".into();
    };
    let started = Instant::now();
    let outcome = attempt(&n, &cfg("u", 5000, 0)).await;
    format!("{outcome} after {:.1} s", started.elapsed().as_secs_f64())
}

/// What the provider declares, and a 300 ms lock's real length.
async fn short_lock_length<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let precision = a.capabilities().time_precision;
    drop(take(&a, &cfg("p", 300, 0)).await);
    sleep_ms(400).await;
    let after = attempt(&b, &cfg("p", 300, 0)).await;
    format!("declared precision {precision:?}; a 300 ms lock, 400 ms later: {after}")
}

async fn handle_name<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let handle = take(&a, &cfg("reports", 1000, 0)).await;
    format!(
        "asked for \"reports\", handle.name() = {:?}, time_source() = {:?}, declared {:?}",
        handle.name(),
        handle.time_source(),
        a.capabilities().time_source
    )
}

/// Two distinct names, held at once by two nodes?
async fn pair<H: ConformanceHarness>(h: &H, first: &str, second: &str) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let _held = take(&a, &cfg(first, 5000, 0)).await;
    let other = attempt(&b, &cfg(second, 5000, 0)).await;
    format!("A holds {first:?}; B on {second:?}: {other}")
}

/// A node with a clock an hour ahead asks for a lock another node holds.
async fn skewed_node_on_held<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let ahead = h.node(skewed(true, HOUR)).await.unwrap();
    let _held = take(&a, &cfg("s", 5000, 0)).await;
    format!(
        "node 1 h ahead on a held 5 s lock: {}",
        attempt(&ahead, &cfg("s", 5000, 0)).await
    )
}

/// Acquire and release the same name twice from one node.
async fn twice_from_one_node<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let first = take(&a, &cfg("t", 10_000, 0)).await;
    let one = answer(first.unlock().await);
    let Some(second) = a
        .try_lock(&cfg("t", 10_000, 0))
        .await
        .unwrap()
        .into_handle()
    else {
        return format!("first release: {one}; the released lock was refused to A's second try");
    };
    let two = answer(second.unlock().await);
    let other = attempt(&b, &cfg("t", 10_000, 0)).await;
    format!("first release: {one}; second release: {two}; B then: {other}")
}

/// Lists `names` (all held) page by page with pages of 2.
async fn listing<H>(h: &H, names: &[&str], prefix: &str) -> String
where
    H: ConformanceHarness,
    H::Node: LockAdmin,
{
    let a = node(h).await;
    let mut held = Vec::new();
    for name in names {
        held.push(take(&a, &cfg(name, 10_000, 0)).await);
    }
    let admin = node(h).await;
    let mut listed = Vec::new();
    let mut sizes = Vec::new();
    let mut after: Option<PageCursor> = None;
    for _ in 0..20 {
        let request = PageRequest {
            prefix: prefix.to_owned(),
            after: after.clone(),
            limit: 2,
        };
        let page = admin.list_locks(&request).await.unwrap();
        sizes.push(page.locks.len());
        listed.extend(page.locks.into_iter().map(|l| l.name));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    format!("page sizes {sizes:?}, listed {listed:?}")
}

/// Two tasks of one node ask for the same lock at the same moment.
async fn same_node_race<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let config = cfg("sf", 5000, 0);
    let (x, y) = tokio::join!(a.try_lock(&config), a.try_lock(&config));
    let won = [x, y]
        .into_iter()
        .filter(|r| r.as_ref().is_ok_and(|a| a.is_acquired()))
        .count();
    format!("two concurrent try_lock on one node: {won} acquired")
}

/// A holds a lock for 300 ms; B asks right after A's release.
async fn poll_after_release<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let mut refused = 0;
    for round in 0..20 {
        let name = format!("p{round}");
        let handle = take(&a, &cfg(&name, 5000, 0)).await;
        sleep_ms(300).await;
        handle.unlock().await.unwrap();
        if !b
            .try_lock(&cfg(&name, 5000, 0))
            .await
            .is_ok_and(|r| r.is_acquired())
        {
            refused += 1;
        }
    }
    format!("free locks refused to B right after release: {refused} of 20")
}

/// Many acquisitions of fresh names.
async fn fresh_names<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let mut refused = 0;
    for i in 0..300 {
        if !a
            .try_lock(&cfg(&format!("n{i}"), 5000, 0))
            .await
            .is_ok_and(|r| r.is_acquired())
        {
            refused += 1;
        }
    }
    format!("fresh names refused: {refused} of 300")
}

/// A releases a lock with 1.2 s at-least at once; B tries 500 ms later.
async fn at_least_over_a_second<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let handle = take(&a, &cfg("al", 10_000, 1200)).await;
    handle.unlock().await.unwrap();
    sleep_ms(500).await;
    format!(
        "B 0.5 s into a 1.2 s at-least: {}",
        attempt(&b, &cfg("al", 10_000, 0)).await
    )
}

/// A's lock expires with nobody taking it; A releases.
async fn release_after_expiry<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let handle = take(&a, &cfg("re", 500, 0)).await;
    sleep_ms(700).await;
    format!("release after expiry: {}", answer(handle.unlock().await))
}

/// Under a stopped clock, an operator frees A's lock and B takes it in the same
/// millisecond; then A releases.
async fn same_millisecond<H>(h: &H) -> String
where
    H: ConformanceHarness,
    H::Node: LockAdmin,
{
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(SystemTime::now()));
    let a = h.node(clock.clone()).await.unwrap();
    let b = h.node(clock.clone()).await.unwrap();
    let c = h.node(clock).await.unwrap();
    let stale = take(&a, &cfg("ms", 10_000, 0)).await;
    let info = a.inspect_lock("ms").await.unwrap().unwrap();
    let freed = answer(a.force_unlock("ms", &info.acquisition).await);
    let _fresh = take(&b, &cfg("ms", 10_000, 0)).await;
    let released = answer(stale.unlock().await);
    let third = attempt(&c, &cfg("ms", 10_000, 0)).await;
    format!("force-unlock: {freed}; A's stale release: {released}; C on B's lock: {third}")
}

/// A extends a 1 s lock by 1 s at once; is it free 1.5 s later?
async fn extend_right_away<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let handle = take(&a, &cfg("ex", 1000, 0)).await;
    let extended = answer(handle.extend(1000 * MS).await);
    sleep_ms(1500).await;
    let later = attempt(&b, &cfg("ex", 1000, 0)).await;
    format!("extend(1 s): {extended}; B 1.5 s later: {later}")
}

/// Eight nodes contend for one name; how many tokens failed to exceed an earlier one?
async fn contended_tokens<H: ConformanceHarness>(h: &H) -> String {
    let last = Arc::new(std::sync::Mutex::new((0u64, 0usize, 0usize)));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let n = node(h).await;
        let last = last.clone();
        tasks.push(async move {
            for _ in 0..150 {
                if let Ok(acq) = n.try_lock(&cfg("fence", 2000, 0)).await
                    && let Some(handle) = acq.into_handle()
                {
                    let token = handle.fencing_token().unwrap_or(0);
                    {
                        let mut l = last.lock().unwrap();
                        l.2 += 1;
                        if token <= l.0 {
                            l.1 += 1;
                        }
                        l.0 = l.0.max(token);
                    }
                    let _ = handle.unlock().await;
                }
            }
        });
    }
    futures_util::future::join_all(tasks).await;
    let l = last.lock().unwrap();
    format!(
        "{} acquisitions, {} with a token not above an earlier one",
        l.2, l.1
    )
}

/// Two nodes on one manual clock: A takes a 1 s lock, the clock moves 2 s, B asks.
async fn manual_clock_moves<H: ConformanceHarness>(h: &H) -> String {
    let manual = ManualClock::new(SystemTime::now());
    let clock: Arc<dyn Clock> = Arc::new(manual.clone());
    let a = h.node(clock.clone()).await.unwrap();
    let b = h.node(clock).await.unwrap();
    let _held = take(&a, &cfg("mc", 1000, 0)).await;
    manual.advance(Duration::from_secs(2));
    format!(
        "B after the clock moved past the lock's end: {}",
        attempt(&b, &cfg("mc", 1000, 0)).await
    )
}

async fn name_of_length<H: ConformanceHarness>(h: &H, c: char, n: usize) -> String {
    let a = node(h).await;
    let name: String = std::iter::repeat_n(c, n).collect();
    format!(
        "declared max {:?}; a {n}-character name of {c:?}: {}",
        a.capabilities().max_name_chars,
        attempt(&a, &cfg(&name, 1000, 0)).await
    )
}

/// Extend after the node's name cache was cleared.
async fn extend_after_cache_clear<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let handle = take(&a, &cfg("nc", 5000, 0)).await;
    let _ = h.clear_name_cache(&a);
    format!(
        "extend after clearing the cache: {}",
        answer(handle.extend(5000 * MS).await)
    )
}

/// Java ShedLock left a record `lock_until_offset` from now (negative: expired).
async fn java_record<H: ConformanceHarness>(h: &H, expired: bool) -> String {
    let now = SystemTime::now();
    let record = PlantedRecord {
        name: "java".into(),
        lock_until: if expired { now - HOUR } else { now + HOUR },
        locked_at: now - 2 * HOUR,
        locked_by: "java-host".into(),
    };
    let _ = h.write_record(&record).await.unwrap();
    let a = node(h).await;
    let state = if expired { "expired" } else { "held" };
    format!(
        "{state} Java record: {}",
        attempt(&a, &cfg("java", 5000, 0)).await
    )
}

/// A lock for ten thousand years; is it held right after?
async fn ten_thousand_years<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let years = Duration::from_secs(10_000 * 365 * 86_400);
    let Ok(config) = LockConfiguration::new("y", years, Duration::ZERO) else {
        return "a 10,000-year lock is not a valid configuration".into();
    };
    let _held = take(&a, &config).await;
    format!(
        "B right after A took a 10,000-year lock: {}",
        attempt(&b, &config).await
    )
}

/// A holds a lock for 1 s; how long does B's try_lock take, and what does it answer?
async fn try_held_timing<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let _held = take(&a, &cfg("w", 1000, 0)).await;
    let started = Instant::now();
    let outcome = attempt(&b, &cfg("w", 1000, 0)).await;
    format!(
        "B on a lock held for 1 s more: {outcome} after {:.2} s",
        started.elapsed().as_secs_f64()
    )
}

/// A drops a 5 s lock; does B get it 100 ms later?
async fn dropped_soon<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    drop(take(&a, &cfg("dr", 5000, 0)).await);
    sleep_ms(100).await;
    format!(
        "B 0.1 s after A dropped a 5 s lock: {}",
        attempt(&b, &cfg("dr", 5000, 0)).await
    )
}

/// A shortens its lock with extend, then releases with at-least 3 s; B asks 1.5 s later.
async fn shorten_then_release<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let handle = take(&a, &cfg("sh", 10_000, 3000)).await;
    let extended = answer(handle.extend(1000 * MS).await);
    let released = answer(handle.unlock().await);
    sleep_ms(1500).await;
    let b_try = attempt(&b, &cfg("sh", 10_000, 0)).await;
    format!("extend(1 s): {extended}; release: {released}; B at 1.5 s of a 3 s at-least: {b_try}")
}

async fn release_twice<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let handle = take(&a, &cfg("rt", 10_000, 2000)).await;
    let one = answer(handle.unlock().await);
    let two = answer(handle.unlock().await);
    format!("first release: {one}; second release: {two}")
}

/// A's lock expires, A takes it again; A's first (stale) handle releases.
async fn stale_handle_same_node<H: ConformanceHarness>(h: &H) -> String {
    let (a, b) = (node(h).await, node(h).await);
    let stale = take(&a, &cfg("sn", 500, 0)).await;
    sleep_ms(700).await;
    let _fresh = take(&a, &cfg("sn", 10_000, 0)).await;
    let released = answer(stale.unlock().await);
    let other = attempt(&b, &cfg("sn", 10_000, 0)).await;
    format!("stale handle's release: {released}; B on A's new lock: {other}")
}

async fn extend_undeclared<H: ConformanceHarness>(h: &H) -> String {
    let a = node(h).await;
    let handle = take(&a, &cfg("xu", 5000, 0)).await;
    format!(
        "declared extend: {}; extend answers {}",
        a.capabilities().extend,
        answer(handle.extend(5000 * MS).await)
    )
}

/// A node with a clock `ahead`/behind by an hour extends or releases its own lock; B asks.
async fn skewed_own_lock<H: ConformanceHarness>(h: &H, ahead: bool, extend: bool) -> String {
    let a = h.node(skewed(ahead, HOUR)).await.unwrap();
    let b = node(h).await;
    let handle = take(&a, &cfg("so", 10_000, 1000)).await;
    let what = if extend {
        format!("extend(2 s): {}", answer(handle.extend(2000 * MS).await))
    } else {
        format!("release (1 s at-least): {}", answer(handle.unlock().await))
    };
    sleep_ms(100).await;
    let early = attempt(&b, &cfg("so", 10_000, 0)).await;
    sleep_ms(2000).await;
    let late = attempt(&b, &cfg("so", 10_000, 0)).await;
    let side = if ahead { "ahead" } else { "behind" };
    format!("node 1 h {side}, {what}; B at 0.1 s: {early}; B at 2.1 s: {late}")
}

/// An operator force-unlocks an acquisition that already expired.
async fn force_unlock_expired<H>(h: &H) -> String
where
    H: ConformanceHarness,
    H::Node: LockAdmin,
{
    let a = node(h).await;
    let _handle = take(&a, &cfg("fx", 300, 0)).await;
    let info = a.inspect_lock("fx").await.unwrap().unwrap();
    sleep_ms(500).await;
    format!(
        "force-unlock of an expired acquisition: {}",
        answer(a.force_unlock("fx", &info.acquisition).await)
    )
}

// ------------------------------------------------------------------------------------------
// The table
// ------------------------------------------------------------------------------------------

macro_rules! demo {
    ($filter:expr, $label:expr, $harness:ident, $bug:expr, |$h:ident| $body:expr) => {{
        let label: &str = $label;
        if $filter.as_deref().is_none_or(|f| label.contains(f)) {
            let control = {
                let $h = &$harness::new("demo", None);
                $body.await
            };
            let broken = {
                let $h = &$harness::new("demo", Some($bug));
                $body.await
            };
            println!("{label}\n    control: {control}\n    broken:  {broken}");
        }
    }};
}

async fn all(filter: Option<String>) {
    use DynBug as D;
    use EtcdBug as E;
    use MongoBug as M;
    let f = filter;
    demo!(f, "etcdish-lease-reuse", EtcdHarness, E::LeaseReuse, |h| {
        two_locks_one_release(h)
    });
    demo!(
        f,
        "etcdish-session-lease",
        EtcdHarness,
        E::SessionLease,
        |h| { dropped_holder(h) }
    );
    demo!(
        f,
        "etcdish-zero-lease-short-rest",
        EtcdHarness,
        E::ZeroLeaseForShortRest,
        |h| short_rest_release(h)
    );
    demo!(
        f,
        "etcdish-revoke-on-release",
        EtcdHarness,
        E::RevokeOnRelease,
        |h| release_inside_at_least(h)
    );
    demo!(
        f,
        "etcdish-compare-version",
        EtcdHarness,
        E::CompareVersion,
        |h| stale_release_after_takeover(h, true)
    );
    demo!(
        f,
        "etcdish-fence-from-version",
        EtcdHarness,
        E::FenceFromVersion,
        |h| tokens(h)
    );
    demo!(
        f,
        "etcdish-fence-is-lease-id",
        EtcdHarness,
        E::FenceIsLeaseId,
        |h| tokens(h)
    );
    demo!(
        f,
        "etcdish-keepalive-extend",
        EtcdHarness,
        E::KeepAliveExtend,
        |h| extend_longer(h)
    );
    demo!(
        f,
        "etcdish-extend-revokes-first",
        EtcdHarness,
        E::ExtendRevokesFirst,
        |h| extend_longer(h)
    );
    demo!(
        f,
        "etcdish-extend-missing-is-error",
        EtcdHarness,
        E::ExtendMissingIsError,
        |h| extend_expired(h)
    );
    demo!(f, "etcdish-fail-open", EtcdHarness, E::FailOpen, |h| {
        unreachable(h)
    });
    demo!(
        f,
        "etcdish-declared-ms-precision",
        EtcdHarness,
        E::DeclaredMillisPrecision,
        |h| short_lock_length(h)
    );
    demo!(
        f,
        "etcdish-handle-name-is-key",
        EtcdHarness,
        E::HandleNameIsKey,
        |h| handle_name(h)
    );
    demo!(
        f,
        "etcdish-slash-to-underscore",
        EtcdHarness,
        E::SlashToUnderscore,
        |h| pair(h, "a/b", "a_b")
    );
    demo!(
        f,
        "etcdish-value-deadline-takeover",
        EtcdHarness,
        E::ValueDeadlineTakeover,
        |h| skewed_node_on_held(h)
    );
    demo!(
        f,
        "etcdish-prefix-end-by-char",
        EtcdHarness,
        E::PrefixEndByChar,
        |h| listing(h, &["pfx-a", "pfx-é", "pfx-Ā", "pfx-€"], "pfx-")
    );
    demo!(
        f,
        "etcdish-released-set-by-name",
        EtcdHarness,
        E::ReleasedSetByName,
        |h| twice_from_one_node(h)
    );

    demo!(
        f,
        "dynamoish-single-flight",
        DynHarness,
        D::SingleFlight,
        |h| { same_node_race(h) }
    );
    demo!(
        f,
        "dynamoish-eventually-consistent-precheck",
        DynHarness,
        D::EventuallyConsistentPrecheck,
        |h| poll_after_release(h)
    );
    demo!(
        f,
        "dynamoish-throttle-not-acquired",
        DynHarness,
        D::ThrottleIsNotAcquired,
        |h| fresh_names(h)
    );
    demo!(
        f,
        "dynamoish-subsec-millis-at-least",
        DynHarness,
        D::SubsecMillisAtLeast,
        |h| at_least_over_a_second(h)
    );
    demo!(
        f,
        "dynamoish-idempotent-release",
        DynHarness,
        D::IdempotentRelease,
        |h| release_after_expiry(h)
    );
    demo!(
        f,
        "dynamoish-owner-by-locked-at",
        DynHarness,
        D::OwnerByLockedAt,
        |h| same_millisecond(h)
    );
    demo!(
        f,
        "dynamoish-extend-from-lock-until",
        DynHarness,
        D::ExtendFromLockUntil,
        |h| extend_right_away(h)
    );
    demo!(
        f,
        "dynamoish-handle-says-server",
        DynHarness,
        D::HandleSaysServer,
        |h| handle_name(h)
    );
    demo!(
        f,
        "dynamoish-fence-read-then-put",
        DynHarness,
        D::FenceReadThenPut,
        |h| contended_tokens(h)
    );
    demo!(
        f,
        "dynamoish-clock-read-once",
        DynHarness,
        D::ClockReadOnce,
        |h| manual_clock_moves(h)
    );
    demo!(
        f,
        "dynamoish-date-header-now",
        DynHarness,
        D::DateHeaderNow,
        |h| skewed_node_on_held(h)
    );
    demo!(f, "dynamoish-nfkc-names", DynHarness, D::NfkcNames, |h| {
        pair(h, "ｊｏｂ", "job")
    });
    demo!(
        f,
        "dynamoish-off-by-one-limit",
        DynHarness,
        D::OffByOneLimit,
        |h| name_of_length(h, 'x', 512)
    );
    demo!(
        f,
        "dynamoish-extend-through-insert-path",
        DynHarness,
        D::ExtendThroughInsertPath,
        |h| extend_after_cache_clear(h)
    );
    demo!(
        f,
        "dynamoish-epoch-millis-numbers",
        DynHarness,
        D::EpochMillisNumbers,
        |h| java_record(h, true)
    );
    demo!(
        f,
        "dynamoish-scan-page-limit-ignored",
        DynHarness,
        D::ScanPageLimitIgnored,
        |h| listing(h, &["pfx-a", "pfx-b", "pfx-c", "pfx-d", "pfx-e"], "pfx-")
    );
    demo!(
        f,
        "dynamoish-iso-year-overflow",
        DynHarness,
        D::IsoYearOverflow,
        |h| ten_thousand_years(h)
    );
    demo!(
        f,
        "dynamoish-retries-too-long",
        DynHarness,
        D::RetriesTooLong,
        |h| unreachable(h)
    );

    demo!(
        f,
        "mongoish-now-literal-in-filter",
        MongoHarness,
        M::NowLiteralInFilter,
        |h| twice_from_one_node(h)
    );
    demo!(
        f,
        "mongoish-retry-upsert-on-duplicate",
        MongoHarness,
        M::RetryUpsertOnDuplicate,
        |h| try_held_timing(h)
    );
    demo!(
        f,
        "mongoish-release-on-drop",
        MongoHarness,
        M::ReleaseOnDrop,
        |h| dropped_soon(h)
    );
    demo!(
        f,
        "mongoish-release-never-lengthens",
        MongoHarness,
        M::ReleaseNeverLengthens,
        |h| shorten_then_release(h)
    );
    demo!(
        f,
        "mongoish-no-released-flag",
        MongoHarness,
        M::NoReleasedFlag,
        |h| release_twice(h)
    );
    demo!(
        f,
        "mongoish-node-scoped-locked-by",
        MongoHarness,
        M::NodeScopedLockedBy,
        |h| stale_handle_same_node(h)
    );
    demo!(
        f,
        "mongoish-extend-disabled-answers-false",
        MongoHarness,
        M::ExtendDisabledAnswersFalse,
        |h| extend_undeclared(h)
    );
    demo!(
        f,
        "mongoish-extend-from-node-clock",
        MongoHarness,
        M::ExtendFromNodeClock,
        |h| skewed_own_lock(h, false, true)
    );
    demo!(
        f,
        "mongoish-locked-at-from-node-clock",
        MongoHarness,
        M::LockedAtFromNodeClock,
        |h| skewed_own_lock(h, true, false)
    );
    demo!(
        f,
        "mongoish-fence-add-null",
        MongoHarness,
        M::FenceAddNull,
        |h| { tokens(h) }
    );
    demo!(
        f,
        "mongoish-zero-width-stripped",
        MongoHarness,
        M::ZeroWidthStripped,
        |h| pair(h, "job", "jo\u{200b}b")
    );
    demo!(
        f,
        "mongoish-limit-in-bytes",
        MongoHarness,
        M::LimitInBytes,
        |h| name_of_length(h, 'é', 1024)
    );
    demo!(
        f,
        "mongoish-holder-parse-fails-on-java",
        MongoHarness,
        M::HolderParseFailsOnJava,
        |h| java_record(h, false)
    );
    demo!(
        f,
        "mongoish-collated-listing",
        MongoHarness,
        M::CollatedListing,
        |h| listing(h, &["pfx-a", "pfx-B", "pfx-c", "pfx-D", "pfx-e"], "pfx-")
    );
    demo!(
        f,
        "mongoish-force-unlock-no-held-check",
        MongoHarness,
        M::ForceUnlockNoHeldCheck,
        |h| force_unlock_expired(h)
    );
    demo!(
        f,
        "mongoish-no-primary-not-acquired",
        MongoHarness,
        M::NoPrimaryIsNotAcquired,
        |h| unreachable(h)
    );
    demo!(
        f,
        "mongoish-server-selection-30s",
        MongoHarness,
        M::ServerSelection30s,
        |h| unreachable(h)
    );
}

/// Runs the demonstrations (those whose label contains the first non-flag argument).
pub fn run() {
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(all(filter));
}
