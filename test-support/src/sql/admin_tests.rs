//! What every SQL provider's operator view ([`LockAdmin`]) must do, against the real database:
//! listing by prefix in pages, the fields and states of held, released and planted rows,
//! inspect, and a force-unlock that frees exactly the acquisition it names. Each provider's
//! admin tests call these on their own nodes; rows written as Java does are planted through
//! the kit's harness ([`PlantRecords`]).

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::TryStreamExt;
use shedlock_conformance::PlantedRecord;
use shedlock_core::{
    AcquisitionId, Clock, LockAdmin, LockError, LockInfo, LockProvider, LockState, Operation,
    PageRequest, SystemClock, list_all_locks, raw::SkewedClock,
};
use shedlock_sql::{SqlBackend, SqlLockProvider};
use sqlx::Pool;

use super::conformance_harness::{DatabaseOf, PlantRecords};
use super::provider_tests::{config, lock};

const MINUTE: Duration = Duration::from_secs(60);

/// Every lock whose name starts with `prefix`, through [`list_all_locks`] in pages of
/// `page_size`.
pub async fn list_all(admin: &dyn LockAdmin, prefix: &str, page_size: usize) -> Vec<LockInfo> {
    list_all_locks(admin, prefix, page_size)
        .try_collect()
        .await
        .unwrap_or_else(|e| panic!("listing {prefix:?}: {e}"))
}

fn names(locks: &[LockInfo]) -> Vec<String> {
    locks.iter().map(|lock| lock.name.clone()).collect()
}

/// Reads every page by hand: none holds more than `limit` locks, the listing ends, and what it
/// returns is what [`list_all_locks`] returns.
async fn pages(admin: &dyn LockAdmin, prefix: &str, limit: usize) -> (Vec<String>, usize) {
    let mut request = PageRequest::first(prefix).with_limit(limit);
    let mut listed = Vec::new();
    for page_count in 1..=1_000 {
        let page = admin.list_locks(&request).await.unwrap();
        assert!(
            page.locks.len() <= limit,
            "page {page_count} of {prefix:?} holds {} locks, more than {limit}",
            page.locks.len()
        );
        listed.extend(names(&page.locks));
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => return (listed, page_count),
        }
    }
    panic!("the listing of {prefix:?} did not end within 1,000 pages");
}

/// `%`, `_`, `\` and `!` (the provider's `LIKE` escape) in a prefix are literal, a sibling that
/// shares a shorter prefix or differs in case is left out, and pages of two list every name
/// once, in name order. The database orders names as Rust does here (binary or C collations).
/// Every name starts with `l.`, so other locks in the table do not matter, except to the empty
/// prefix, under which these names appear among the others in the same order.
pub async fn listing_pages_through_a_prefix_literally_in_name_order(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
) {
    let held = [
        "job-1", "job-2", "job-3", "job-4", "job-5", "job-6", "job", "job_1", "jobs-1", "Job-7",
        "50%-off", "500-x", "a\\b-1", "ab-1", "a\\\\b-2", "hi!-1", "hi-1",
    ];
    let mut handles = Vec::new();
    for name in held {
        let name = format!("l.{name}");
        handles.push(lock(node, &name, MINUTE).await.expect("a new name is free"));
    }
    let probes: [(&str, &[&str]); 7] = [
        (
            "job-",
            &["job-1", "job-2", "job-3", "job-4", "job-5", "job-6"],
        ),
        ("job_", &["job_1"]),
        ("50%", &["50%-off"]),
        ("a\\b", &["a\\b-1"]),
        ("hi!", &["hi!-1"]),
        ("no-such-prefix", &[]),
        ("", &held),
    ];
    for (prefix, expected) in probes {
        let prefix = format!("l.{prefix}");
        let mut expected: Vec<String> = expected.iter().map(|name| format!("l.{name}")).collect();
        expected.sort();
        let listed = list_all(admin, &prefix, 2).await;
        assert_eq!(names(&listed), expected, "prefix {prefix:?}");
        let (by_hand, _) = pages(admin, &prefix, 2).await;
        assert_eq!(by_hand, expected, "prefix {prefix:?}, page by page");
    }
    let (_, page_count) = pages(admin, "l.job-", 2).await;
    assert!(
        (3..=4).contains(&page_count),
        "six names in pages of two: {page_count} pages"
    );
    let everything = names(&list_all(admin, "", 2).await);
    let mut sorted = everything.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(everything, sorted, "every name once, in name order");
    let ours: Vec<&String> = everything
        .iter()
        .filter(|name| name.starts_with("l."))
        .collect();
    assert_eq!(ours.len(), held.len(), "{everything:?}");
    for handle in handles {
        assert!(handle.unlock().await.unwrap());
    }
}

/// A held lock shows its holder, times, remaining time and fencing token; a released one is
/// free; one released within its `lock_at_least_for` is still held. `holder` is the node's
/// holder name.
pub async fn held_released_and_at_least_locks_show_their_state(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
    holder: &str,
) {
    let before = SystemTime::now();
    let held = lock(node, "state-held", MINUTE).await.unwrap();
    let info = admin
        .inspect_lock("state-held")
        .await
        .unwrap()
        .expect("a row");
    assert_eq!(info.name, "state-held");
    assert_eq!(info.state, LockState::Held, "{info:?}");
    let locked_by = info.locked_by.as_deref().unwrap();
    assert!(locked_by.starts_with(&format!("{holder}#")), "{locked_by}");
    let locked_at = info.locked_at.unwrap();
    let off = locked_at
        .duration_since(before)
        .unwrap_or_else(|e| e.duration());
    assert!(
        off < Duration::from_secs(5),
        "locked_at is now (UTC): {off:?} off"
    );
    let held_for = info.held_until.unwrap().duration_since(locked_at).unwrap();
    assert!(
        held_for.abs_diff(MINUTE) <= Duration::from_millis(2),
        "held_until - locked_at = {held_for:?}"
    );
    let remaining = info.remaining.unwrap();
    assert!(
        remaining <= MINUTE && remaining > MINUTE - Duration::from_secs(5),
        "{remaining:?}"
    );
    assert_eq!(info.fencing_token, held.fencing_token());

    let released = lock(node, "state-released", MINUTE).await.unwrap();
    assert!(released.unlock().await.unwrap());
    let info = admin.inspect_lock("state-released").await.unwrap().unwrap();
    assert_eq!(info.state, LockState::Free, "{info:?}");
    assert_eq!(info.remaining, None);

    let at_least = node
        .try_lock(&config("state-at-least", MINUTE, Duration::from_secs(30)))
        .await
        .unwrap()
        .into_handle()
        .unwrap();
    assert!(at_least.unlock().await.unwrap());
    let info = admin.inspect_lock("state-at-least").await.unwrap().unwrap();
    assert_eq!(
        info.state,
        LockState::Held,
        "within lock_at_least_for: {info:?}"
    );
    let remaining = info.remaining.unwrap();
    assert!(
        remaining <= Duration::from_secs(30) && remaining > Duration::from_secs(25),
        "{remaining:?}"
    );

    let listed = list_all(admin, "state-", 2).await;
    let states: Vec<(String, LockState)> = listed
        .iter()
        .map(|lock| (lock.name.clone(), lock.state))
        .collect();
    assert_eq!(
        states,
        [
            ("state-at-least".to_owned(), LockState::Held),
            ("state-held".to_owned(), LockState::Held),
            ("state-released".to_owned(), LockState::Free),
        ]
    );
    assert!(held.unlock().await.unwrap());
}

/// The fields that do not change between two reads (`remaining` does).
fn stable(info: &LockInfo) -> impl PartialEq + std::fmt::Debug {
    (
        info.name.clone(),
        info.state,
        info.locked_by.clone(),
        info.locked_at,
        info.held_until,
        info.fencing_token,
        info.acquisition.clone(),
    )
}

/// Inspect agrees with the listing, answers `None` for a name never used, and refuses a name
/// the lock operations refuse (longer than `max_name_chars`), as they do.
pub async fn inspect_matches_the_listing_and_refuses_names_locks_refuse(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
) {
    let held = lock(node, "seen", MINUTE).await.unwrap();
    let inspected = admin.inspect_lock("seen").await.unwrap().unwrap();
    let listed = list_all(admin, "seen", 10).await;
    assert_eq!(listed.len(), 1);
    assert_eq!(stable(&inspected), stable(&listed[0]));
    assert_eq!(admin.inspect_lock("never-used").await.unwrap(), None);

    let max = node
        .capabilities()
        .max_name_chars
        .expect("a declared column length");
    let too_long = "n".repeat(max + 1);
    let error = admin.inspect_lock(&too_long).await.unwrap_err();
    assert!(
        matches!(&error, LockError::InvalidName { name, .. } if *name == too_long),
        "{error:?}"
    );
    assert_eq!(admin.inspect_lock(&"n".repeat(max)).await.unwrap(), None);
    assert!(held.unlock().await.unwrap());
}

/// Node A holds a lock; the acquisition an operator read frees it at once for node B, and
/// only it: A's handle can neither release nor extend B's lock, the old id no longer frees
/// anything, nor does one of a free or expired lock or of a name never used. A malformed id is
/// an error that names the expected shape, and changes nothing. The nodes are separate provider
/// instances on the same table.
pub async fn force_unlock_frees_exactly_the_acquisition_it_names(
    node_a: &dyn LockProvider,
    node_b: &dyn LockProvider,
    node_c: &dyn LockProvider,
    admin: &dyn LockAdmin,
) {
    let fencing = node_a.capabilities().fencing;
    let a = lock(node_a, "stuck", MINUTE).await.unwrap();
    let seen = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_eq!(seen.state, LockState::Held);

    let parts = seen.acquisition.as_str().split('/').count();
    assert_eq!(parts, if fencing { 3 } else { 2 }, "{}", seen.acquisition);
    for malformed in [
        "garbage".to_owned(),
        format!("{}/x", seen.acquisition),
        seen.acquisition.as_str().replacen('/', "/%zz", 1),
    ] {
        let error = admin
            .force_unlock("stuck", &AcquisitionId::new(malformed.clone()))
            .await
            .unwrap_err();
        match &error {
            // Refused before anything was sent: the caller's mistake, not the backend's.
            LockError::InvalidRequest {
                operation: Operation::ForceUnlock,
                name,
                message,
                ..
            } => {
                assert_eq!(name, "stuck");
                assert!(message.contains("<locked_by>/<locked_at>"), "{message}");
                assert!(message.contains("nothing was changed"), "{message}");
            }
            other => panic!("{malformed}: expected InvalidRequest of ForceUnlock, got {other:?}"),
        }
    }
    let unchanged = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_eq!(
        stable(&unchanged),
        stable(&seen),
        "malformed ids changed nothing"
    );

    assert!(
        admin
            .force_unlock("stuck", &seen.acquisition)
            .await
            .unwrap()
    );
    let freed = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_eq!(freed.state, LockState::Free, "{freed:?}");
    assert_eq!(
        freed.locked_by, seen.locked_by,
        "the row stays, naming the last holder"
    );

    let b = lock(node_b, "stuck", MINUTE)
        .await
        .expect("free for another node at once");
    assert_eq!(
        b.fencing_token(),
        a.fencing_token().map(|token| token + 1),
        "the fencing counter kept counting"
    );
    assert!(
        !a.extend(MINUTE).await.unwrap(),
        "A's extend must not touch B's lock"
    );
    assert!(
        !a.unlock().await.unwrap(),
        "A's release must not touch B's lock"
    );
    assert!(
        lock(node_c, "stuck", MINUTE).await.is_none(),
        "B still holds it"
    );
    assert!(
        !admin
            .force_unlock("stuck", &seen.acquisition)
            .await
            .unwrap(),
        "the old acquisition no longer holds it"
    );
    assert!(
        lock(node_c, "stuck", MINUTE).await.is_none(),
        "B still holds it"
    );

    let b_seen = admin.inspect_lock("stuck").await.unwrap().unwrap();
    assert_ne!(b_seen.acquisition, seen.acquisition);
    assert!(b.unlock().await.unwrap());
    assert!(
        !admin
            .force_unlock("stuck", &b_seen.acquisition)
            .await
            .unwrap(),
        "a free lock is not freed again"
    );

    let short = lock(node_a, "short", Duration::from_millis(300))
        .await
        .unwrap();
    let short_seen = admin.inspect_lock("short").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        admin.inspect_lock("short").await.unwrap().unwrap().state,
        LockState::Free,
        "expired"
    );
    assert!(
        !admin
            .force_unlock("short", &short_seen.acquisition)
            .await
            .unwrap()
    );
    assert!(!short.unlock().await.unwrap());
    assert!(
        !admin
            .force_unlock("never-used", &seen.acquisition)
            .await
            .unwrap()
    );
}

/// A row written as Java ShedLock writes it (the host name in `locked_by`) lists with that
/// holder and its `lock_until`, and its id frees it; the same host's next acquisition (another
/// `locked_at`) makes the old id stale.
pub async fn a_java_row_lists_and_is_freed_by_its_own_acquisition_only<K: PlantRecords>(
    node: &dyn LockProvider,
    admin: &dyn LockAdmin,
    pool: &Pool<DatabaseOf<K>>,
    table: &str,
) {
    let now = SystemTime::now();
    let first = PlantedRecord {
        name: "java-job".to_owned(),
        lock_until: now + Duration::from_secs(3600),
        locked_at: now - Duration::from_secs(2),
        locked_by: "java-host".to_owned(),
    };
    K::write_record(pool, table, &first).await.unwrap();
    let listed = list_all(admin, "java-", 10).await;
    assert_eq!(names(&listed), ["java-job"]);
    let seen = &listed[0];
    assert_eq!(seen.state, LockState::Held);
    assert_eq!(seen.locked_by.as_deref(), Some("java-host"));
    assert_eq!(
        seen.fencing_token, None,
        "no Rust acquisition wrote a token"
    );
    let until = seen.held_until.unwrap();
    assert!(
        until
            .duration_since(first.lock_until)
            .unwrap_or_else(|e| e.duration())
            <= Duration::from_millis(1),
        "held_until {until:?} is the planted lock_until {:?}",
        first.lock_until
    );
    assert!(
        lock(node, "java-job", MINUTE).await.is_none(),
        "Java holds it"
    );

    let second = PlantedRecord {
        locked_at: now - Duration::from_secs(1),
        ..first.clone()
    };
    K::write_record(pool, table, &second).await.unwrap();
    assert!(
        !admin
            .force_unlock("java-job", &seen.acquisition)
            .await
            .unwrap(),
        "the same host's next acquisition is another acquisition"
    );
    assert!(lock(node, "java-job", MINUTE).await.is_none(), "still held");
    let current = admin.inspect_lock("java-job").await.unwrap().unwrap();
    assert_ne!(current.acquisition, seen.acquisition);
    assert!(
        admin
            .force_unlock("java-job", &current.acquisition)
            .await
            .unwrap()
    );
    let taken = lock(node, "java-job", MINUTE).await.expect("freed");
    assert!(taken.unlock().await.unwrap());
}

/// `expected` (1,000 names, already in the table) list in pages of 100: ten pages, each name
/// once, in order, quickly.
pub async fn a_thousand_names_list_in_ten_pages_of_a_hundred(
    admin: &dyn LockAdmin,
    prefix: &str,
    expected: &[String],
) {
    assert_eq!(expected.len(), 1_000);
    let started = Instant::now();
    let (listed, page_count) = pages(admin, prefix, 100).await;
    assert_eq!(page_count, 10);
    assert_eq!(listed, expected);
    assert_eq!(names(&list_all(admin, prefix, 100).await), expected);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

/// A client-time node judges locks by its own clock, as its lock statements do: a lock it holds
/// for a minute is held with about a minute left, yet free to a node an hour ahead, whose
/// force-unlock then finds nothing held; the node's own force-unlock frees it.
pub async fn client_time_admin_judges_by_the_nodes_clock<B: SqlBackend>(node: &SqlLockProvider<B>) {
    let held = lock(node, "client", MINUTE).await.unwrap();
    let seen = node.inspect_lock("client").await.unwrap().unwrap();
    assert_eq!(seen.state, LockState::Held);
    let remaining = seen.remaining.unwrap();
    assert!(remaining > MINUTE - Duration::from_secs(5), "{remaining:?}");
    let ahead: Arc<dyn Clock> = Arc::new(SkewedClock::ahead(
        Arc::new(SystemClock),
        Duration::from_secs(3600),
    ));
    let skewed = node.node().with_clock(ahead);
    let judged = skewed.inspect_lock("client").await.unwrap().unwrap();
    assert_eq!(judged.state, LockState::Free, "an hour ahead: {judged:?}");
    assert!(
        !skewed
            .force_unlock("client", &seen.acquisition)
            .await
            .unwrap()
    );
    assert!(
        node.force_unlock("client", &seen.acquisition)
            .await
            .unwrap()
    );
    assert!(!held.unlock().await.unwrap());
}
