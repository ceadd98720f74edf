//! The operator's view (`LockAdmin`) against a real server (`SHEDLOCK_TEST_MONGO_URL`): listing
//! by prefix across pages, what a listed lock shows, inspect, force-unlock as a
//! compare-and-free, documents Java ShedLock wrote, and a listing of 1,000 names.
//!
//! Every test uses a collection of its own, dropped at the end, so runs never see each
//! other's documents.

use std::time::{Duration, SystemTime};

use mongodb::bson::{Bson, DateTime, Document, doc, oid::ObjectId};
use mongodb::{Client, Collection};
use shedlock_core::{ConfigurationError, LockAdmin, LockError, LockState, PageCursor, PageRequest};
use shedlock_mongo::{MAX_NAME_CHARS, MongoLockProvider};
use shedlock_test_support::kv::admin::{
    PrefixListing, assert_a_released_id_frees_nothing,
    assert_a_thousand_listed_in_pages_of_a_hundred, assert_an_id_outlives_an_extend,
    assert_foreign_acquisition_refused, assert_refused, hold_all, inspect, list, names,
};
use shedlock_test_support::kv::locks::{acquire, config, config_with_at_least};
use shedlock_test_support::settings;

const DATABASE: &str = "shedlock_admin_tests";
const SECOND: Duration = Duration::from_secs(1);

/// A collection of this test's own, seen through a plain client.
async fn collection() -> Collection<Document> {
    Client::with_uri_str(settings::MONGO.value())
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
        .connect(&settings::MONGO.value())
        .await
        .unwrap()
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
    let listing = PrefixListing {
        inside: [
            "jobs/",
            "jobs/a",
            "jobs/b:with:colons",
            "jobs/c d é",
            "jobs/e",
            "jobs/f",
            "jobs/f\u{10ffff}",
        ],
        outside: &["jobs", "jobs.", "jobs0", "job", "Jobs/a", "jobt/a"],
        // Pattern and regular expression characters of a prefix are characters.
        literal_prefix: "p%_.*[(^$",
        literal_inside: &["p%_.*[(^$a", "p%_.*[(^$b"],
        lookalikes: &["pab.*[(^$a", "p%_xy[(^$a", "p%_.*[(^", "p%_.*[(^#"],
    };
    hold_all(&a, listing.all()).await;
    // A document no lock of ShedLock's is (an ObjectId _id) is passed over.
    collection
        .insert_one(doc! { "_id": ObjectId::new(), "note": "not a lock" })
        .await
        .unwrap();

    let operator = node(&collection, "operator").await;
    let all = listing.assert_listed(&operator).await;
    let mut sorted = names(&all);
    sorted.sort_unstable();
    assert_eq!(names(&all), sorted, "byte order, as Rust sorts strings");
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
    let held = acquire(&a, &config("held", 10 * SECOND)).await;
    let released = acquire(&a, &config("released", 10 * SECOND)).await;
    assert!(released.unlock().await.unwrap());
    let kept = acquire(&a, &config_with_at_least("kept", 10 * SECOND, 6 * SECOND)).await;
    assert!(kept.unlock().await.unwrap());

    let listed = list(&operator, "", 2).await;
    assert_eq!(names(&listed), ["held", "kept", "released"]);
    let lock = &listed[0];
    let stored = read(&collection, "held").await;
    assert_eq!(lock.state, LockState::Held);
    // The holder's name; the stored value's acquisition id is left out.
    assert_eq!(lock.locked_by.as_deref(), Some("node-a"));
    let stored_by = stored.get_str("lockedBy").unwrap();
    let id = stored_by.strip_prefix("node-a#").unwrap();
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
        format!("{locked_at_ms}/{token}/{stored_by}")
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
    assert_eq!(free.locked_by.as_deref(), Some("node-a"));

    // Inspect shows what the listing showed.
    let inspected = inspect(&operator, "held").await;
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
    let odd = inspect(&operator, "odd").await;
    assert_eq!((odd.state, odd.remaining), (LockState::Held, None));
    assert!(
        !operator
            .force_unlock("odd", &odd.acquisition)
            .await
            .unwrap()
    );
    // A document with only its _id, as an acquire's upsert creates it, is free.
    collection.insert_one(doc! { "_id": "bare" }).await.unwrap();
    let bare = inspect(&operator, "bare").await;
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
    let x = config_with_at_least("x", 30 * SECOND, 30 * SECOND);
    let held = acquire(&a, &x).await;
    let seen = inspect(&operator, "x").await;
    assert!(operator.force_unlock("x", &seen.acquisition).await.unwrap());
    // The document stays, freed as a release frees it, with the fencing token counted up:
    // that retires the acquisition, so its id names it no more.
    let freed = inspect(&operator, "x").await;
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
    let now_seen = inspect(&operator, "x").await;
    assert_ne!(now_seen.acquisition, seen.acquisition);
    assert_eq!(now_seen.locked_by.as_deref(), Some("node-b"));

    assert_an_id_outlives_an_extend(&a, &operator, &c).await;

    // Released, expired, never used: nothing to free.
    assert_a_released_id_frees_nothing(&a, &operator).await;
    let short = config("short", Duration::from_millis(100));
    let _short = acquire(&a, &short).await;
    let seen_short = inspect(&operator, "short").await;
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
    assert_foreign_acquisition_refused(&operator, "x", "mongo").await;
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
    acquire(&b, &config("java-job", 10 * SECOND)).await;

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
    let seen = inspect(&operator, "java-job").await;
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
    let listed = assert_a_thousand_listed_in_pages_of_a_hundred(&operator, "bulk-", &names).await;
    assert!(listed.iter().all(|lock| lock.state == LockState::Held));
    collection.drop().await.unwrap();
}
