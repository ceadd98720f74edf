//! The Mongo provider against a real server: ShedLock's document layout and Java's own
//! commands, fencing across Java acquisitions, documents of the wrong shape, racing upserts,
//! write and read concerns on the wire, names, settings, unreachable servers and credential
//! redaction.
//!
//! Needs `SHEDLOCK_TEST_MONGO_URL` (e.g. `mongodb://127.0.0.1:27017`; `ci/start-backends.sh`
//! starts one). Every test uses a collection of its own, so tests run in parallel and
//! repeatedly on one server.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use mongodb::bson::{Bson, DateTime, Document, doc};
use mongodb::event::EventHandler;
use mongodb::event::command::CommandEvent;
use mongodb::options::{ClientOptions, ReadConcern, WriteConcern};
use mongodb::{Client, Collection};
use shedlock_core::{
    Acquisition, ErrorKind, LockConfiguration, LockError, LockProvider, LockingTaskExecutor,
    TaskOutcome,
};
use shedlock_mongo::{
    MAX_LOCK_DURATION, MAX_NAME_CHARS, MongoLockProvider, MongoLockProviderBuilder,
};
use shedlock_test_support::kv::errors::{assert_configuration_error, full_text};
use shedlock_test_support::kv::locks::{SECRET, acquire, config, config_with_at_least};
use shedlock_test_support::settings;
use tokio::time::Instant;

const DATABASE: &str = "shedlock_tests";

fn unique_collection() -> String {
    format!("locks_{}", uuid::Uuid::new_v4().simple())
}

fn builder(collection: &str) -> MongoLockProviderBuilder {
    MongoLockProvider::builder()
        .database(DATABASE)
        .collection(collection)
}

/// A node on a collection of its own, and that collection seen through a plain client.
async fn node_and_raw_collection() -> (MongoLockProvider, Collection<Document>) {
    let collection = unique_collection();
    let provider = builder(&collection)
        .connect(&settings::MONGO.value())
        .await
        .unwrap();
    (provider, raw(&collection).await)
}

async fn raw(collection: &str) -> Collection<Document> {
    Client::with_uri_str(settings::MONGO.value())
        .await
        .unwrap()
        .database(DATABASE)
        .collection(collection)
}

async fn read(collection: &Collection<Document>, name: &str) -> Option<Document> {
    collection.find_one(doc! { "_id": name }).await.unwrap()
}

fn minute(name: &str) -> LockConfiguration {
    config(name, Duration::from_secs(60))
}

fn date(document: &Document, field: &str) -> DateTime {
    match document.get(field) {
        Some(Bson::DateTime(date)) => *date,
        other => panic!("{field} should be a date, got {other:?} in {document}"),
    }
}

/// Java ShedLock's acquire, as its `MongoLockProvider` sends it (its JVM's clock as `now`).
/// `true` when it took the lock; a duplicate key error is its "not acquired".
async fn java_acquire(collection: &Collection<Document>, name: &str, hold: Duration) -> bool {
    let now = SystemTime::now();
    let answer = collection
        .find_one_and_update(
            doc! { "_id": name, "lockUntil": { "$lte": DateTime::from_system_time(now) } },
            doc! { "$set": {
                "lockUntil": DateTime::from_system_time(now + hold),
                "lockedAt": DateTime::from_system_time(now),
                "lockedBy": "java-host",
            } },
        )
        .upsert(true)
        .await;
    match answer {
        Ok(_) => true,
        Err(error) if error.to_string().contains("11000") => false,
        Err(error) => panic!("Java's acquire failed: {error}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn documents_have_shedlocks_layout_and_server_times() {
    let (provider, collection) = node_and_raw_collection().await;
    let handle = acquire(
        &provider,
        &config_with_at_least("report", Duration::from_secs(30), Duration::from_secs(10)),
    )
    .await;
    let document = read(&collection, "report").await.unwrap();
    let mut keys: Vec<&str> = document.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["_id", "fencingToken", "lockUntil", "lockedAt", "lockedBy"],
        "ShedLock's fields, plus the fencing counter"
    );
    let (locked_at, lock_until) = (date(&document, "lockedAt"), date(&document, "lockUntil"));
    assert_eq!(
        lock_until.timestamp_millis() - locked_at.timestamp_millis(),
        30_000,
        "lockUntil = $$NOW + lock_at_most_for, to the millisecond"
    );
    let skew = SystemTime::now()
        .duration_since(locked_at.to_system_time())
        .unwrap_or_default();
    assert!(
        skew < Duration::from_secs(60),
        "lockedAt is the server's now: {skew:?} ago"
    );
    let locked_by = document.get_str("lockedBy").unwrap();
    let (host, id) = locked_by.rsplit_once('#').unwrap();
    assert_eq!(host, shedlock_core::raw::default_holder());
    assert_eq!(id.len(), 32);
    assert!(id.bytes().all(|b| b.is_ascii_hexdigit()));
    assert_eq!(document.get("fencingToken"), Some(&Bson::Int64(1)));
    assert_eq!(handle.fencing_token(), Some(1));

    // Release keeps the document and holds it until lockedAt + lock_at_least_for.
    assert!(handle.unlock().await.unwrap());
    let released = read(&collection, "report").await.unwrap();
    assert_eq!(
        date(&released, "lockUntil").timestamp_millis() - locked_at.timestamp_millis(),
        10_000,
        "released within lock_at_least_for: lockUntil = lockedAt + lock_at_least_for"
    );
    assert_eq!(released.get_str("lockedBy").unwrap(), locked_by);
    assert!(
        !provider
            .try_lock(&minute("report"))
            .await
            .unwrap()
            .is_acquired(),
        "held for the rest of lock_at_least_for"
    );

    // Extend moves lockUntil to the server's now + the new duration.
    let other = acquire(&provider, &minute("other")).await;
    let before = read(&collection, "other").await.unwrap();
    assert!(other.extend(Duration::from_secs(3600)).await.unwrap());
    let after = read(&collection, "other").await.unwrap();
    let moved = after_minus(date(&after, "lockUntil"), date(&before, "lockUntil"));
    assert!(
        (3_540_000..3_605_000).contains(&moved),
        "extend moved lockUntil from acquire + 1 min to about extend + 1 h: {moved} ms"
    );
    assert_eq!(
        date(&after, "lockedAt"),
        date(&before, "lockedAt"),
        "extend keeps lockedAt"
    );
    assert!(other.unlock().await.unwrap());
    let released = read(&collection, "other").await.unwrap();
    assert!(
        date(&released, "lockUntil") <= DateTime::now(),
        "released with no lock_at_least_for: lockUntil is the server's now"
    );
    collection.drop().await.unwrap();
}

fn after_minus(after: DateTime, before: DateTime) -> i64 {
    after.timestamp_millis() - before.timestamp_millis()
}

#[tokio::test(flavor = "multi_thread")]
async fn durations_round_up_to_whole_milliseconds() {
    let (provider, collection) = node_and_raw_collection().await;
    let handle = acquire(
        &provider,
        &config_with_at_least(
            "job",
            Duration::from_micros(60_000_001),
            Duration::from_nanos(1),
        ),
    )
    .await;
    let document = read(&collection, "job").await.unwrap();
    assert_eq!(
        after_minus(date(&document, "lockUntil"), date(&document, "lockedAt")),
        60_001,
        "never shorter than asked"
    );
    assert!(handle.unlock().await.unwrap());
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn java_documents_are_honoured_and_java_honours_ours() {
    let (provider, collection) = node_and_raw_collection().await;

    // A Java node holds "report" (its own acquire on a new name inserts the document).
    assert!(java_acquire(&collection, "report", Duration::from_secs(60)).await);
    let java_document = read(&collection, "report").await.unwrap();
    match provider.try_lock(&minute("report")).await.unwrap() {
        Acquisition::NotAcquired(Some(holder)) => {
            assert_eq!(holder.locked_by.as_deref(), Some("java-host"));
            assert_eq!(
                holder.held_until,
                Some(date(&java_document, "lockUntil").to_system_time())
            );
        }
        other => panic!("a Java node's live document must keep us out, got {other:?}"),
    }
    assert_eq!(
        read(&collection, "report").await.unwrap(),
        java_document,
        "a refused acquire changes nothing"
    );

    // Its lock expires: we take the document over, and its counter starts.
    collection
        .update_one(
            doc! { "_id": "report" },
            doc! { "$set": { "lockUntil": DateTime::from_millis(DateTime::now().timestamp_millis() - 1) } },
        )
        .await
        .unwrap();
    let ours = acquire(&provider, &minute("report")).await;
    assert_eq!(ours.fencing_token(), Some(1));
    assert!(
        !java_acquire(&collection, "report", Duration::from_secs(60)).await,
        "Java's acquire is refused while we hold the lock"
    );
    assert!(ours.unlock().await.unwrap());

    // Java takes it after our release, then releases it its way; the counter survives, so
    // our next token is still greater than every earlier one.
    assert!(java_acquire(&collection, "report", Duration::from_secs(60)).await);
    let java_held = read(&collection, "report").await.unwrap();
    assert_eq!(java_held.get_str("lockedBy").unwrap(), "java-host");
    assert_eq!(java_held.get("fencingToken"), Some(&Bson::Int64(1)));
    assert!(
        !provider
            .try_lock(&minute("report"))
            .await
            .unwrap()
            .is_acquired(),
        "Java holds it again"
    );
    collection
        .update_one(
            doc! { "_id": "report" },
            doc! { "$set": { "lockUntil": DateTime::from_system_time(SystemTime::now() - Duration::from_secs(1)) } },
        )
        .await
        .unwrap();
    let again = acquire(&provider, &minute("report")).await;
    assert_eq!(
        again.fencing_token(),
        Some(2),
        "strictly greater across Java's acquisition"
    );
    assert!(again.unlock().await.unwrap());
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn documents_of_the_wrong_shape_are_errors_and_stay_unchanged() {
    let (provider, collection) = node_and_raw_collection().await;
    let past = DateTime::from_system_time(SystemTime::now() - Duration::from_secs(3600));
    let future = DateTime::from_system_time(SystemTime::now() + Duration::from_secs(3600));
    for (name, document, expected) in [
        (
            "string-until",
            doc! { "lockUntil": "2020-01-01T00:00:00Z", "lockedAt": past, "lockedBy": "x" },
            "lockUntil is string",
        ),
        (
            "no-until",
            doc! { "lockedAt": past, "lockedBy": "x" },
            "lockUntil is missing",
        ),
        (
            "number-by",
            doc! { "lockUntil": future, "lockedAt": past, "lockedBy": 7 },
            "lockedBy is int",
        ),
        (
            "no-at",
            doc! { "lockUntil": future, "lockedBy": "x" },
            "lockedAt is missing",
        ),
        (
            "null-until",
            doc! { "lockUntil": Bson::Null, "lockedAt": past, "lockedBy": "x" },
            "lockUntil is null",
        ),
    ] {
        let mut planted = doc! { "_id": name };
        planted.extend(document);
        collection.insert_one(planted.clone()).await.unwrap();
        let error = provider.try_lock(&minute(name)).await.unwrap_err();
        let text = error.to_string();
        assert!(matches!(error, LockError::Backend { .. }), "{error:?}");
        assert_eq!(error.kind(), ErrorKind::CorruptData, "{text}");
        assert!(
            text.contains(expected) && text.contains("not a ShedLock lock document"),
            "{name}: {text}"
        );
        assert!(
            text.contains(&format!("{DATABASE}.")),
            "names the collection: {text}"
        );
        assert_eq!(
            read(&collection, name).await.unwrap(),
            planted,
            "{name} was left unchanged"
        );
    }

    // An expired lock whose counter is not a number: the server refuses the increment.
    let planted = doc! {
        "_id": "bad-token", "lockUntil": past, "lockedAt": past, "lockedBy": "x",
        "fencingToken": "seven",
    };
    collection.insert_one(planted.clone()).await.unwrap();
    let error = provider.try_lock(&minute("bad-token")).await.unwrap_err();
    assert!(error.to_string().contains("nothing was written"), "{error}");
    assert_eq!(
        error.kind(),
        ErrorKind::CorruptData,
        "{}",
        full_text(&error)
    );
    assert_eq!(read(&collection, "bad-token").await.unwrap(), planted);

    // A document holding only its name holds no lock.
    collection.insert_one(doc! { "_id": "bare" }).await.unwrap();
    let handle = acquire(&provider, &minute("bare")).await;
    assert_eq!(handle.fencing_token(), Some(1));
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn durations_past_a_thousand_years_are_refused_before_anything_is_written() {
    let (provider, collection) = node_and_raw_collection().await;
    assert_eq!(MAX_LOCK_DURATION, Duration::from_secs(31_536_000_000));
    let bson_millis = Duration::from_millis(i64::MAX as u64);
    // Past a thousand years; near the end of a BSON date, where the server's own arithmetic
    // overflowed; and past it.
    for too_long in [
        MAX_LOCK_DURATION + Duration::from_nanos(1),
        bson_millis - Duration::from_secs(60 * 60 * 24 * 365 * 60),
        bson_millis - Duration::from_secs(1),
        bson_millis + Duration::from_millis(1),
        Duration::MAX,
    ] {
        let error = provider
            .try_lock(&config("job", too_long))
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::InvalidRequest {
                    operation: shedlock_core::Operation::Acquire,
                    ..
                }
            ),
            "{error:?}"
        );
        let text = error.to_string();
        assert!(
            text.contains(&format!(
                "lock_at_most_for {too_long:?} is longer than a lock this provider writes (at \
                 most 31536000000 s, 1000 years"
            )) && text.contains("before sending anything"),
            "{text}"
        );
        assert_eq!(collection.count_documents(doc! {}).await.unwrap(), 0);
    }

    // A thousand years is written as a date ten centuries on; extending past it is refused.
    let handle = acquire(
        &provider,
        &config_with_at_least("job", MAX_LOCK_DURATION, MAX_LOCK_DURATION),
    )
    .await;
    let document = read(&collection, "job").await.unwrap();
    let until = date(&document, "lockUntil").to_system_time();
    let at = date(&document, "lockedAt").to_system_time();
    assert_eq!(until.duration_since(at).unwrap(), MAX_LOCK_DURATION);
    let error = handle
        .extend(MAX_LOCK_DURATION + Duration::from_millis(1))
        .await
        .unwrap_err();
    assert!(
        error.to_string().contains("before sending anything"),
        "{error}"
    );
    assert_eq!(read(&collection, "job").await.unwrap(), document);
    assert!(handle.unlock().await.unwrap());
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn a_view_or_a_capped_collection_is_refused_at_connect() {
    let database = Client::with_uri_str(settings::MONGO.value())
        .await
        .unwrap()
        .database(DATABASE);
    let base = unique_collection();
    database.create_collection(&base).await.unwrap();
    let view = unique_collection();
    database
        .create_collection(&view)
        .view_on(base.clone())
        .pipeline(vec![doc! { "$match": {} }])
        .await
        .unwrap();
    let capped = unique_collection();
    database
        .create_collection(&capped)
        .capped(true)
        .size(4096)
        .await
        .unwrap();
    for (collection, rule) in [
        (&view, "is a view, which takes no writes"),
        (
            &capped,
            "is a capped collection, which drops its oldest documents",
        ),
    ] {
        let error = builder(collection)
            .connect(&settings::MONGO.value())
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                LockError::Backend {
                    operation: shedlock_core::Operation::Connect,
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
        let text = error.to_string();
        for part in [
            &format!("(collection {DATABASE}.{collection}) {rule}"),
            "the lock collection must be an ordinary collection; nothing was written",
        ] {
            assert!(text.contains(part), "{part:?} in {text}");
        }
    }
    for collection in [&base, &capped] {
        let documents = raw(collection)
            .await
            .count_documents(doc! {})
            .await
            .unwrap();
        assert_eq!(documents, 0, "nothing was written into {collection}");
    }
    // A provider built on a client of the application's is not checked, and a view still
    // refuses its writes: the acquire says so and that nothing was written.
    let client = Client::with_uri_str(settings::MONGO.value()).await.unwrap();
    let unchecked = builder(&view).build(&client).unwrap();
    let error = unchecked.try_lock(&minute("job")).await.unwrap_err();
    assert!(
        error.to_string().contains("is a view")
            && error.to_string().contains("nothing was written"),
        "{error}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    for collection in [&view, &base, &capped] {
        raw(collection).await.drop().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn racing_nodes_on_a_new_name_get_one_lock_and_no_errors() {
    let collection = unique_collection();
    let first = builder(&collection)
        .connect(&settings::MONGO.value())
        .await
        .unwrap();
    let nodes: Vec<Arc<MongoLockProvider>> = (0..16).map(|_| Arc::new(first.node())).collect();
    for round in 0..10 {
        let name = format!("race-{round}");
        let attempts: Vec<_> = nodes
            .iter()
            .map(|node| {
                let node = node.clone();
                let config = minute(&name);
                tokio::spawn(async move { node.try_lock(&config).await })
            })
            .collect();
        let mut winners = Vec::new();
        for attempt in attempts {
            match attempt.await.unwrap() {
                Ok(Acquisition::Acquired(handle)) => winners.push(handle),
                Ok(Acquisition::NotAcquired(_)) => {}
                Err(error) => panic!("a racing upsert is not an error: {error}"),
            }
        }
        assert_eq!(
            winners.len(),
            1,
            "round {round}: exactly one node takes a new name"
        );
        assert_eq!(winners[0].fencing_token(), Some(1));
    }
    raw(&collection).await.drop().await.unwrap();
}

/// An integer field, whichever width the driver chose.
fn integer(document: &Document, key: &str) -> Option<i64> {
    match document.get(key)? {
        Bson::Int32(value) => Some(i64::from(*value)),
        Bson::Int64(value) => Some(*value),
        _ => None,
    }
}

/// Options for a client whose `findAndModify` commands are recorded, as the driver's command
/// monitoring sees them.
async fn recording_client_options(url: &str) -> (Arc<Mutex<Vec<Document>>>, ClientOptions) {
    let seen: Arc<Mutex<Vec<Document>>> = Arc::default();
    let recorder = seen.clone();
    let mut options = ClientOptions::parse(url).await.unwrap();
    options.command_event_handler = Some(EventHandler::callback(move |event| {
        if let CommandEvent::Started(started) = event
            && started.command_name == "findAndModify"
        {
            recorder.lock().unwrap().push(started.command);
        }
    }));
    (seen, options)
}

#[tokio::test(flavor = "multi_thread")]
async fn commands_carry_majority_write_concern_and_max_time_unless_configured() {
    let (seen, options) = recording_client_options(&settings::MONGO.value()).await;
    let client = Client::with_options(options).unwrap();
    let collection = unique_collection();

    let provider = builder(&collection)
        .operation_timeout(Duration::from_millis(4500))
        .build(&client)
        .unwrap();
    let handle = acquire(&provider, &minute("job")).await;
    assert!(handle.extend(Duration::from_secs(60)).await.unwrap());
    assert!(handle.unlock().await.unwrap());
    let commands = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(commands.len(), 3, "acquire, extend, release");
    for command in &commands {
        let concern = command.get_document("writeConcern").unwrap();
        assert_eq!(concern.get_str("w"), Ok("majority"), "{command}");
        assert_eq!(integer(concern, "wtimeout"), Some(4500), "{command}");
        assert_eq!(integer(command, "maxTimeMS"), Some(4500), "{command}");
    }
    assert_eq!(commands[0].get_bool("upsert"), Ok(true));
    assert_eq!(
        commands[0].get_str("findAndModify"),
        Ok(collection.as_str())
    );

    let configured = builder(&collection)
        .write_concern(WriteConcern::nodes(1))
        .read_concern(ReadConcern::local())
        .build(&client)
        .unwrap();
    let handle = acquire(&configured, &minute("job")).await;
    assert!(handle.unlock().await.unwrap());
    let commands = std::mem::take(&mut *seen.lock().unwrap());
    assert_eq!(commands.len(), 2, "acquire, release");
    for command in commands.iter() {
        let concern = command.get_document("writeConcern").unwrap();
        assert_eq!(integer(concern, "w"), Some(1), "{command}");
        assert!(!concern.contains_key("wtimeout"), "{command}");
    }
    configured.collection().drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn names_are_ids_and_over_long_names_are_refused_before_anything_is_written() {
    let (provider, collection) = node_and_raw_collection().await;
    assert_eq!(provider.capabilities().max_name_chars, Some(MAX_NAME_CHARS));
    let longest = "🔒".repeat(MAX_NAME_CHARS);
    let handle = acquire(&provider, &minute(&longest)).await;
    assert!(
        read(&collection, &longest).await.is_some(),
        "stored whole as _id"
    );
    let mut neighbour = "🔒".repeat(MAX_NAME_CHARS - 1);
    neighbour.push('🔓');
    let other = acquire(&provider, &minute(&neighbour)).await;
    assert!(handle.unlock().await.unwrap() && other.unlock().await.unwrap());

    let too_long = format!("{longest}x");
    match provider.try_lock(&minute(&too_long)).await {
        Err(LockError::InvalidName { rule, .. }) => {
            assert!(rule.contains("1025") && rule.contains("1024"), "{rule}")
        }
        other => panic!("an over-long name must be refused, got {other:?}"),
    }
    assert_eq!(
        collection.count_documents(doc! {}).await.unwrap(),
        2,
        "nothing was written for the refused name"
    );

    // A holder that looks like a field path or an operator is data too.
    let odd = builder(collection.name())
        .holder("$lockedAt.{$gt: 1}")
        .connect(&settings::MONGO.value())
        .await
        .unwrap();
    let handle = acquire(&odd, &minute("odd-holder")).await;
    let document = read(&collection, "odd-holder").await.unwrap();
    assert!(
        document
            .get_str("lockedBy")
            .unwrap()
            .starts_with("$lockedAt.{$gt: 1}#"),
        "{document}"
    );
    assert!(handle.unlock().await.unwrap());

    // Operators and query syntax in names are data.
    for name in ["$where", "{\"$gt\": \"\"}", "a.b", "$$NOW", "x\u{0}y"] {
        let handle = acquire(&provider, &minute(name)).await;
        assert!(
            read(&collection, name).await.is_some(),
            "{name:?} is its own _id"
        );
        assert!(handle.unlock().await.unwrap());
    }
    collection.drop().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_settings_are_refused_with_the_rule() {
    let url = settings::MONGO.value();
    for (builder, what) in [
        (
            MongoLockProvider::builder().database("a.b"),
            "database name",
        ),
        (MongoLockProvider::builder().database(""), "database name"),
        (
            MongoLockProvider::builder().database("x".repeat(64)),
            "shorter than 64 bytes",
        ),
        (
            MongoLockProvider::builder().database("d").collection(""),
            "collection name",
        ),
        (
            MongoLockProvider::builder().database("d").collection("a$b"),
            "collection name",
        ),
        (
            MongoLockProvider::builder()
                .database("d")
                .collection("system.locks"),
            "reserved",
        ),
        (
            MongoLockProvider::builder()
                .database("d")
                .operation_timeout(Duration::ZERO),
            "operation timeout",
        ),
        (
            MongoLockProvider::builder()
                .database("d")
                .server_selection_timeout(Duration::ZERO),
            "server selection timeout",
        ),
        (MongoLockProvider::builder(), "names no database"),
    ] {
        let error = builder.connect(&url).await.unwrap_err();
        assert!(error.to_string().contains(what), "{what}: {error}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
    let client = Client::with_uri_str(settings::MONGO.value()).await.unwrap();
    if client.default_database().is_none() {
        let error = MongoLockProvider::builder().build(&client).unwrap_err();
        assert!(error.to_string().contains("no default database"), "{error}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
    }
    let error = MongoLockProvider::connect("postgres://127.0.0.1/x")
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("the URL's scheme is \"postgres\", which is not a MongoDB connection string"),
        "{error}"
    );
    assert_eq!(error.kind(), ErrorKind::Configuration, "{error}");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unreachable_server_is_a_clear_error_within_the_timeouts() {
    let unreachable = "mongodb://127.0.0.1:1/locks?directConnection=true";
    let started = Instant::now();
    let error = MongoLockProvider::builder()
        .server_selection_timeout(Duration::from_millis(800))
        .connect(unreachable)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(error.to_string().contains("127.0.0.1:1"), "{error}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{error}");

    let lazy = MongoLockProvider::builder()
        .server_selection_timeout(Duration::from_millis(800))
        .connect_lazy(unreachable)
        .await
        .unwrap();
    let started = Instant::now();
    let error = lazy.try_lock(&minute("job")).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    let text = error.to_string();
    assert!(
        text.contains("server selection")
            && text.contains("the task must not run")
            && text.contains("\"job\""),
        "{text}"
    );
    // No server was selected: the command was never sent.
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");

    // The executor fails closed: the task does not run.
    let executor = LockingTaskExecutor::new(lazy);
    let ran = Arc::new(Mutex::new(false));
    let flag = ran.clone();
    let outcome = executor
        .execute(&minute("job"), async move { *flag.lock().unwrap() = true })
        .await;
    assert!(outcome.is_err(), "{outcome:?}");
    assert!(!*ran.lock().unwrap());

    // A server that accepts connections but never answers: the operation timeout bounds it.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = silent.local_addr().unwrap();
    let _held = tokio::spawn(async move {
        let mut open = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            open.push(socket);
        }
    });
    let hanging = MongoLockProvider::builder()
        .database("locks")
        .operation_timeout(Duration::from_millis(700))
        .server_selection_timeout(Duration::from_secs(30))
        .connect_lazy(&format!("mongodb://{address}/?directConnection=true"))
        .await
        .unwrap();
    let started = Instant::now();
    match hanging.try_lock(&minute("job")).await {
        Err(LockError::Timeout { .. }) => {}
        other => panic!("a silent server must time out, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    assert!(matches!(
        executor_outcome(hanging).await,
        Err(LockError::Timeout { .. })
    ));
}

async fn executor_outcome(provider: MongoLockProvider) -> Result<TaskOutcome<()>, LockError> {
    LockingTaskExecutor::new(provider)
        .execute(&minute("job"), async { panic!("the task must not run") })
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn credentials_never_appear_in_errors_or_debug_output() {
    // Against a closed port.
    let url = format!("mongodb://app:{SECRET}@127.0.0.1:1/locks?directConnection=true");
    let fast = || MongoLockProvider::builder().server_selection_timeout(Duration::from_millis(500));
    let error = fast().connect(&url).await.unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("app:***@127.0.0.1:1"), "{text}");
    assert_eq!(error.kind(), ErrorKind::Unreachable, "{text}");

    let lazy = fast().connect_lazy(&url).await.unwrap();
    let debug = format!("{lazy:?}");
    assert!(
        !debug.contains(SECRET) && debug.contains("app:***@"),
        "{debug}"
    );
    let error = lazy.try_lock(&minute("job")).await.unwrap_err();
    let text = full_text(&error);
    assert!(!text.contains(SECRET), "{text}");

    // URLs the driver refuses, whose messages may quote them.
    for bad in [
        format!("mongodb://app:{SECRET}@127.0.0.1:99999/locks"),
        format!("mongodb://app:{SECRET}@/locks"),
        format!("mongodb://app:{SECRET}@127.0.0.1/locks?authMechanism=NOPE"),
        format!("mongodb://app:{SECRET}:extra@127.0.0.1/locks"),
        format!("mongodb://127.0.0.1/locks?tlsCertificateKeyFilePassword={SECRET}&tls=maybe"),
    ] {
        let error = fast().connect_lazy(&bad).await.unwrap_err();
        let text = full_text(&error);
        assert!(!text.contains(SECRET), "{text}");
        assert!(text.contains("connection string"), "{text}");
        assert_eq!(error.kind(), ErrorKind::Configuration, "{text}");
    }

    // Against the real server, which does not know this user: it answered, so the error
    // says the credentials were refused, not that it may be down.
    let real = settings::MONGO.value();
    let (_, host) = real.split_once("://").unwrap();
    let with_user = format!("mongodb://app:{SECRET}@{host}");
    match fast().database("locks").connect(&with_user).await {
        Err(error) => {
            let text = full_text(&error);
            assert!(!text.contains(SECRET), "{text}");
            if text.contains("Authentication failed") {
                assert!(
                    error
                        .to_string()
                        .contains("refused the credentials: check the user name")
                        && !error.to_string().contains("is it running"),
                    "{error}"
                );
                assert_eq!(error.kind(), ErrorKind::CredentialsRefused, "{text}");
            }
        }
        Ok(provider) => {
            let debug = format!("{provider:?}");
            assert!(!debug.contains(SECRET), "{debug}");
            if let Err(error) = provider.try_lock(&minute("job")).await {
                let text = full_text(&error);
                assert!(!text.contains(SECRET), "{text}");
            }
        }
    }
}

#[tokio::test]
async fn urls_of_other_backends_are_refused_by_their_scheme_before_connecting() {
    for (url, refused) in [
        (
            format!("postgres://app:{SECRET}@127.0.0.1:5432/test"),
            "the URL's scheme is \"postgres\"",
        ),
        (
            format!("redis://:{SECRET}@127.0.0.1:6379"),
            "the URL's scheme is \"redis\"",
        ),
        ("127.0.0.1:27017/app".to_owned(), "not a URL"),
    ] {
        let error = MongoLockProvider::connect(&url).await.unwrap_err();
        assert_configuration_error(&error, refused, SECRET);
        assert_configuration_error(&error, "accepts mongodb://... or mongodb+srv://...", SECRET);
    }
}

/// A new deployment: 16 nodes, each with its own client, connect at the same instant on a
/// database and collection that do not exist yet, and all try the same new name at once.
/// MongoDB creates both on the first upsert, which races between them: all must start,
/// exactly one acquires, and tokens go on increasing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixteen_nodes_start_at_once_on_a_new_database() {
    use shedlock_conformance::{FIRST_USE_NODES, check_first_use};
    for round in 0..10 {
        let database = format!("shedlock_first_use_{}", uuid::Uuid::new_v4().simple());
        let verdict = check_first_use(FIRST_USE_NODES, |index| {
            let database = database.clone();
            async move {
                MongoLockProvider::builder()
                    .database(database)
                    .holder(format!("node-{index}"))
                    .connect(&settings::MONGO.value())
                    .await
            }
        })
        .await;
        let client = Client::with_uri_str(settings::MONGO.value()).await.unwrap();
        let _ = client.database(&database).drop().await;
        verdict.unwrap_or_else(|failure| panic!("round {round}: {failure}"));
    }
}
