//! The operator's view (`LockAdmin`) against a real server (`SHEDLOCK_TEST_MONGO_URL`): listing
//! by prefix across pages, what a listed lock shows, inspect, force-unlock as a
//! compare-and-free, documents Java ShedLock wrote, and a listing of 1,000 names.
//!
//! Every test uses a collection of its own, dropped at the end, so runs never see each
//! other's documents.

use std::collections::HashSet;
use std::time::{Duration, Instant, SystemTime};

use futures_util::TryStreamExt;
use mongodb::bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use mongodb::{Client, Collection};
use shedlock_core::{
    Acquisition, AcquisitionId, ConfigurationError, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockInfo, LockProvider, LockState, Operation, PageCursor, PageRequest,
    list_all_locks,
};
use shedlock_mongo::{MAX_NAME_CHARS, MongoLockProvider};

const DATABASE: &str = "shedlock_admin_tests";
const SECOND: Duration = Duration::from_secs(1);

fn mongo_url() -> String {
    std::env::var("SHEDLOCK_TEST_MONGO_URL").unwrap_or_else(|_| {
        panic!(
            "SHEDLOCK_TEST_MONGO_URL is not set: point it at a MongoDB server, e.g. \
             SHEDLOCK_TEST_MONGO_URL=mongodb://127.0.0.1:27017 (ci/start-backends.sh starts one)"
        )
    })
}

/// A collection of this test's own, seen through a plain client.
async fn collection() -> Collection<Document> {
    Client::with_uri_str(mongo_url())
        .await
        .unwrap()
        .database(DATABASE)
        .collection(&format!("admin_{}", uuid::Uuid::new_v4().simple()))
}

/// A node of its own (its own client, as another process would have) on `collection`.
async fn node(collection: &Collection<Document>, holder: &str) -> MongoLockProvider {
    MongoLockProvider::builder()
        .database(DATABASE)
        .collection(collection.name())
        .holder(holder)
        .connect(&mongo_url())
        .await
        .unwrap()
}

fn config(name: &str, at_most: Duration, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, at_most, at_least).unwrap()
}

async fn acquire(node: &MongoLockProvider, config: &LockConfiguration) -> Box<dyn LockHandle> {
    match node.try_lock(config).await.unwrap() {
        Acquisition::Acquired(handle) => handle,
        other => panic!("expected to acquire {:?}, got {other:?}", config.name()),
    }
}

async fn assert_refused(node: &MongoLockProvider, name: &str) {
    let outcome = node
        .try_lock(&config(name, 10 * SECOND, Duration::ZERO))
        .await
        .unwrap();
    assert!(!outcome.is_acquired(), "{name:?} should still be held");
}

async fn list(admin: &dyn LockAdmin, prefix: &str, page_size: usize) -> Vec<LockInfo> {
    list_all_locks(admin, prefix, page_size)
        .try_collect()
        .await
        .unwrap()
}

fn names(locks: &[LockInfo]) -> Vec<&str> {
    locks.iter().map(|lock| lock.name.as_str()).collect()
}

async fn read(collection: &Collection<Document>, name: &str) -> Document {
    collection
        .find_one(doc! { "_id": name })
        .await
        .unwrap()
        .unwrap()
}

fn date(document: &Document, field: &str) -> SystemTime {
    match document.get(field) {
        Some(Bson::DateTime(date)) => date.to_system_time(),
        other => panic!("{field} should be a date, got {other:?} in {document}"),
    }
}

/// What Java ShedLock's `MongoLockProvider` leaves: three fields, no fencing counter.
fn java_document(name: &str, locked_at: SystemTime, lock_until: SystemTime) -> Document {
    doc! {
        "_id": name,
        "lockUntil": DateTime::from_system_time(lock_until),
        "lockedAt": DateTime::from_system_time(locked_at),
        "lockedBy": "java-host",
    }
}

/// A time to the millisecond, as BSON keeps it.
fn millis(time: SystemTime) -> SystemTime {
    DateTime::from_system_time(time).to_system_time()
}

#[tokio::test(flavor = "multi_thread")]
async fn listing_by_prefix_reads_small_pages_in_name_order_and_matches_literally() {
    let collection = collection().await;
    let a = node(&collection, "node-a").await;
    let long = 30 * SECOND;
    let inside = [
        "jobs/",
        "jobs/a",
        "jobs/b:with:colons",
        "jobs/c d é",
        "jobs/e",
        "jobs/f",
        "jobs/f\u{10ffff}",
    ];
    // Share all or part of the prefix without starting with it.
    let outside = ["jobs", "jobs.", "jobs0", "job", "Jobs/a", "jobt/a"];
    let literal_inside = ["p%_.*[(^$a", "p%_.*[(^$b"];
    let lookalikes = ["pab.*[(^$a", "p%_xy[(^$a", "p%_.*[(^", "p%_.*[(^#"];
    for name in inside
        .iter()
        .chain(&outside)
        .chain(&literal_inside)
        .chain(&lookalikes)
    {
        acquire(&a, &config(name, long, Duration::ZERO)).await;
    }
    // A document no lock of ShedLock's is (an ObjectId _id) is passed over.
    collection
        .insert_one(doc! { "_id": ObjectId::new(), "note": "not a lock" })
        .await
        .unwrap();

    let operator = node(&collection, "operator").await;
    let listed = list(&operator, "jobs/", 2).await;
    let mut expected = inside.to_vec();
    expected.sort_unstable();
    assert_eq!(names(&listed), expected, "every name once, in name order");
    assert!(listed.iter().all(|lock| lock.state == LockState::Held));

    // Pages hold at most the limit, and the last one says it is the last.
    let mut request = PageRequest::first("jobs/").with_limit(2);
    let mut pages = Vec::new();
    loop {
        let page = operator.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= 2, "{page:?}");
        pages.push(page.locks.len());
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => break,
        }
    }
    assert_eq!(pages, [2, 2, 2, 1]);

    // Pattern and regular expression characters of a prefix are characters.
    assert_eq!(
        names(&list(&operator, "p%_.*[(^$", 2).await),
        literal_inside
    );
    let all = list(&operator, "", 3).await;
    assert_eq!(
        all.len(),
        inside.len() + outside.len() + literal_inside.len() + lookalikes.len()
    );
    let mut sorted = names(&all);
    sorted.sort_unstable();
    assert_eq!(names(&all), sorted, "byte order, as Rust sorts strings");
    assert!(list(&operator, "nothing-here", 2).await.is_empty());
    // A page that starts after the prefix's last name is empty and the last.
    let past = operator
        .list_locks(&PageRequest {
            after: Some(PageCursor::new("jobs0")),
            ..PageRequest::first("jobs/")
        })
        .await
        .unwrap();
    assert!(past.locks.is_empty() && past.next.is_none());
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_listed_lock_shows_the_document_judged_by_the_servers_now() {
    let collection = collection().await;
    let a = node(&collection, "node-a").await;
    let operator = node(&collection, "operator").await;
    let held = acquire(&a, &config("held", 10 * SECOND, Duration::ZERO)).await;
    let released = acquire(&a, &config("released", 10 * SECOND, Duration::ZERO)).await;
    assert!(released.unlock().await.unwrap());
    let kept = acquire(&a, &config("kept", 10 * SECOND, 6 * SECOND)).await;
    assert!(kept.unlock().await.unwrap());

    let listed = list(&operator, "", 2).await;
    assert_eq!(names(&listed), ["held", "kept", "released"]);
    let lock = &listed[0];
    let stored = read(&collection, "held").await;
    assert_eq!(lock.state, LockState::Held);
    let locked_by = lock.locked_by.as_deref().unwrap();
    assert_eq!(Some(locked_by), stored.get_str("lockedBy").ok());
    let id = locked_by.strip_prefix("node-a#").unwrap();
    assert!(id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(lock.locked_at, Some(date(&stored, "lockedAt")));
    assert_eq!(lock.held_until, Some(date(&stored, "lockUntil")));
    assert_eq!(
        lock.held_until
            .unwrap()
            .duration_since(lock.locked_at.unwrap())
            .ok(),
        Some(10 * SECOND),
        "lockUntil = $$NOW + lock_at_most_for, as stored"
    );
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining > 8 * SECOND && remaining <= 10 * SECOND,
        "{remaining:?} of a lock just taken for 10 s"
    );
    assert_eq!(lock.fencing_token, held.fencing_token());
    let token = held.fencing_token().unwrap();
    let locked_at_ms = DateTime::from_system_time(lock.locked_at.unwrap()).timestamp_millis();
    assert_eq!(
        lock.acquisition.as_str(),
        format!("{locked_at_ms}/{token}/{locked_by}")
    );

    // Released within lock_at_least_for: held until lockedAt + 6 s.
    let kept_lock = &listed[1];
    assert_eq!(kept_lock.state, LockState::Held);
    let remaining = kept_lock.remaining.unwrap();
    assert!(
        remaining > 4 * SECOND && remaining <= 6 * SECOND,
        "{remaining:?}"
    );
    assert_eq!(kept_lock.fencing_token, kept.fencing_token());
    // Released at once: the document stays, free.
    let free = &listed[2];
    assert_eq!((free.state, free.remaining), (LockState::Free, None));
    assert!(free.held_until.unwrap() <= SystemTime::now() + SECOND);
    assert!(free.locked_by.as_deref().unwrap().starts_with("node-a#"));

    // Inspect shows what the listing showed.
    let inspected = operator.inspect_lock("held").await.unwrap().unwrap();
    assert_eq!(
        (
            &inspected.acquisition,
            &inspected.locked_by,
            inspected.locked_at,
            inspected.held_until,
            inspected.fencing_token,
            inspected.state
        ),
        (
            &lock.acquisition,
            &lock.locked_by,
            lock.locked_at,
            lock.held_until,
            lock.fencing_token,
            lock.state
        )
    );
    assert!(inspected.remaining.unwrap() <= remaining.max(lock.remaining.unwrap()));
    assert!(operator.inspect_lock("never-used").await.unwrap().is_none());
    // Names the provider refuses for locks are refused here too.
    let too_long = "n".repeat(MAX_NAME_CHARS + 1);
    assert!(matches!(
        operator.inspect_lock(&too_long).await,
        Err(LockError::InvalidName { .. })
    ));
    assert!(matches!(
        operator.inspect_lock("").await,
        Err(LockError::Configuration(ConfigurationError::EmptyName))
    ));

    // A document of the wrong shape no acquire takes: held, with no end, and not freed.
    collection
        .insert_one(doc! { "_id": "odd", "lockUntil": "tomorrow", "lockedBy": "someone" })
        .await
        .unwrap();
    let odd = operator.inspect_lock("odd").await.unwrap().unwrap();
    assert_eq!((odd.state, odd.remaining), (LockState::Held, None));
    assert!(
        !operator
            .force_unlock("odd", &odd.acquisition)
            .await
            .unwrap()
    );
    // A document with only its _id, as an acquire's upsert creates it, is free.
    collection.insert_one(doc! { "_id": "bare" }).await.unwrap();
    let bare = operator.inspect_lock("bare").await.unwrap().unwrap();
    assert_eq!((bare.state, bare.locked_by), (LockState::Free, None));
    assert_eq!(bare.acquisition.as_str(), "-/-/");
    assert_eq!(
        read(&collection, "odd").await.get_str("lockUntil"),
        Ok("tomorrow")
    );
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn force_unlock_frees_exactly_the_acquisition_it_names() {
    let collection = collection().await;
    let a = node(&collection, "node-a").await;
    let b = node(&collection, "node-b").await;
    let c = node(&collection, "node-c").await;
    let operator = node(&collection, "operator").await;
    // lock_at_least_for as long as the lock: only a force-unlock frees it early.
    let x = config("x", 30 * SECOND, 30 * SECOND);
    let held = acquire(&a, &x).await;
    let seen = operator.inspect_lock("x").await.unwrap().unwrap();
    assert!(operator.force_unlock("x", &seen.acquisition).await.unwrap());
    // The document stays, freed as a release frees it, with the fencing token counted up:
    // that retires the acquisition, so its id names it no more.
    let freed = operator.inspect_lock("x").await.unwrap().unwrap();
    assert_eq!(freed.state, LockState::Free);
    assert_ne!(freed.acquisition, seen.acquisition);
    assert_eq!(
        freed.fencing_token,
        held.fencing_token().map(|token| token + 1)
    );

    let taken = acquire(&b, &x).await;
    assert_eq!(
        taken.fencing_token(),
        held.fencing_token().map(|token| token + 2),
        "the counter kept counting, past the force-unlock's own count"
    );
    assert!(!held.unlock().await.unwrap(), "A's acquisition was freed");
    assert!(!held.extend(30 * SECOND).await.unwrap());
    assert_refused(&c, "x").await;
    assert!(
        !operator.force_unlock("x", &seen.acquisition).await.unwrap(),
        "a stale id frees nothing"
    );
    assert_refused(&c, "x").await;
    let now_seen = operator.inspect_lock("x").await.unwrap().unwrap();
    assert_ne!(now_seen.acquisition, seen.acquisition);
    assert!(now_seen.locked_by.unwrap().starts_with("node-b#"));

    // An id stays valid across an extend of its acquisition.
    let y = acquire(&a, &config("y", 10 * SECOND, Duration::ZERO)).await;
    let seen_y = operator.inspect_lock("y").await.unwrap().unwrap();
    assert!(y.extend(20 * SECOND).await.unwrap());
    assert!(
        operator
            .force_unlock("y", &seen_y.acquisition)
            .await
            .unwrap()
    );
    acquire(&c, &config("y", 10 * SECOND, Duration::ZERO)).await;

    // Released, expired, never used: nothing to free.
    let free = acquire(&a, &config("free", 10 * SECOND, Duration::ZERO)).await;
    let seen_free = operator.inspect_lock("free").await.unwrap().unwrap();
    assert!(free.unlock().await.unwrap());
    assert!(
        !operator
            .force_unlock("free", &seen_free.acquisition)
            .await
            .unwrap()
    );
    let short = config("short", Duration::from_millis(100), Duration::ZERO);
    let _short = acquire(&a, &short).await;
    let seen_short = operator.inspect_lock("short").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !operator
            .force_unlock("short", &seen_short.acquisition)
            .await
            .unwrap()
    );
    assert!(
        !operator
            .force_unlock("never-used", &seen.acquisition)
            .await
            .unwrap()
    );

    // An id this provider did not write is refused, and the lock is left alone.
    let error = operator
        .force_unlock("x", &AcquisitionId::new("7@123/host"))
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("is not one the mongo provider produced"),
        "{error}"
    );
    assert!(
        matches!(
            error,
            LockError::InvalidRequest {
                operation: Operation::ForceUnlock,
                ..
            }
        ),
        "{error:?}"
    );
    assert_refused(&c, "x").await;
    assert!(taken.unlock().await.unwrap());
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_document_java_shedlock_wrote_is_listed_and_freed_by_its_locked_at() {
    let collection = collection().await;
    let operator = node(&collection, "operator").await;
    let locked_at = millis(SystemTime::now() - 5 * SECOND);
    let lock_until = millis(SystemTime::now() + 30 * SECOND);
    collection
        .insert_one(java_document("java-job", locked_at, lock_until))
        .await
        .unwrap();

    let listed = list(&operator, "java", 10).await;
    assert_eq!(names(&listed), ["java-job"]);
    let lock = &listed[0];
    assert_eq!(lock.state, LockState::Held);
    assert_eq!(lock.locked_by.as_deref(), Some("java-host"));
    assert_eq!(lock.locked_at, Some(locked_at));
    assert_eq!(lock.held_until, Some(lock_until));
    let remaining = lock.remaining.unwrap();
    assert!(
        remaining > 28 * SECOND && remaining <= 30 * SECOND,
        "{remaining:?}"
    );
    assert_eq!(lock.fencing_token, None);
    let locked_at_ms = DateTime::from_system_time(locked_at).timestamp_millis();
    assert_eq!(
        lock.acquisition.as_str(),
        format!("{locked_at_ms}/-/java-host")
    );

    assert!(
        operator
            .force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    let freed = read(&collection, "java-job").await;
    assert!(date(&freed, "lockUntil") <= SystemTime::now() + SECOND);
    assert_eq!(
        freed.get_str("lockedBy"),
        Ok("java-host"),
        "the record stays"
    );
    let b = node(&collection, "node-b").await;
    acquire(&b, &config("java-job", 10 * SECOND, Duration::ZERO)).await;

    // The same host again, at another time: the old id is stale.
    let again = millis(SystemTime::now());
    collection
        .replace_one(
            doc! { "_id": "java-job" },
            java_document("java-job", again, again + 30 * SECOND),
        )
        .await
        .unwrap();
    assert!(
        !operator
            .force_unlock("java-job", &lock.acquisition)
            .await
            .unwrap()
    );
    let stored = read(&collection, "java-job").await;
    assert!(date(&stored, "lockUntil") > SystemTime::now() + 20 * SECOND);

    // A Java acquisition leaves the counter of the last Rust one: it is part of the id (it
    // does not change while Java holds the lock) but not shown as this acquisition's token.
    collection
        .update_one(
            doc! { "_id": "java-job" },
            doc! { "$set": { "fencingToken": 41_i64 } },
        )
        .await
        .unwrap();
    let seen = operator.inspect_lock("java-job").await.unwrap().unwrap();
    assert_eq!(seen.fencing_token, None);
    assert!(seen.acquisition.as_str().contains("/41/java-host"));
    assert!(
        operator
            .force_unlock("java-job", &seen.acquisition)
            .await
            .unwrap()
    );
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thousand_locks_list_exactly_once_a_hundred_per_page() {
    let collection = collection().await;
    let now = SystemTime::now();
    let names: Vec<String> = (0..1000).map(|i| format!("bulk-{i:04}")).collect();
    let documents: Vec<Document> = names
        .iter()
        .map(|name| java_document(name, now, now + 60 * SECOND))
        .collect();
    collection.insert_many(documents).await.unwrap();
    let operator = node(&collection, "operator").await;
    let started = Instant::now();
    let mut request = PageRequest::first("bulk-").with_limit(100);
    let mut listed = Vec::new();
    let mut pages = 0;
    loop {
        let page = operator.list_locks(&request).await.unwrap();
        assert!(page.locks.len() <= 100);
        assert!(page.locks.iter().all(|lock| lock.state == LockState::Held));
        pages += 1;
        listed.extend(page.locks.into_iter().map(|lock| lock.name));
        match page.next {
            Some(cursor) => request.after = Some(cursor),
            None => break,
        }
    }
    let took = started.elapsed();
    assert_eq!(listed, names, "all 1,000, once each, in name order");
    assert_eq!(listed.iter().collect::<HashSet<_>>().len(), 1000);
    assert_eq!(pages, 10);
    assert!(took < 10 * SECOND, "took {took:?}");
    collection.drop().await.unwrap();
}
