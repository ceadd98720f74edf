//! MongoDB lock provider for shedlock-rs, on Java ShedLock's own collection, so Java and Rust
//! nodes can share locks during a migration.
//!
//! # The collection
//!
//! ShedLock's collection, `shedLock` unless configured, in the database named by the URL
//! (`mongodb://host/app`) or by [`MongoLockProviderBuilder::database`]. One document per lock,
//! exactly as Java's `MongoLockProvider` writes it, plus one field Java leaves alone:
//!
//! ```text
//! { _id: "<lock name>",
//!   lockUntil: ISODate(...),        // when the lock frees itself (BSON date, UTC milliseconds)
//!   lockedAt:  ISODate(...),        // when it was taken
//!   lockedBy:  "<holder>#<32 hex>", // unique per acquisition (Java writes its host name)
//!   fencingToken: NumberLong(7) }   // this provider's counter; Java's $set never touches it
//! ```
//!
//! The collection needs no index beyond `_id` and no schema; MongoDB creates it on the first
//! write. Names are `_id` strings compared byte for byte, so every distinct name is its own
//! lock; names longer than [`MAX_NAME_CHARS`] characters are refused before anything is sent.
//! Documents are kept after release, as ShedLock keeps them. The collection must be an ordinary
//! one: [`MongoLockProviderBuilder::connect`] refuses a view, a capped collection (which drops
//! its oldest documents, held locks included, when full) and a time-series collection.
//!
//! # Time: the server's `$$NOW`
//!
//! Every comparison and every new `lockUntil` is computed by the server from `$$NOW` inside
//! aggregation-pipeline updates, never from the node's clock (`TimeSource::Server`): a node
//! whose clock is wrong by any amount can neither take a held lock nor move its own lock's
//! times. (Java's `MongoLockProvider` sends its JVM's clock.) BSON dates and `$$NOW` count
//! whole milliseconds, the declared [`Capabilities::time_precision`]; durations are rounded up
//! to the next millisecond, so a lock is never shorter than asked, and durations longer than
//! [`MAX_LOCK_DURATION`] (1000 years) are refused before anything is sent. Needs MongoDB 4.2 or
//! later (pipeline updates, `$$NOW`, `$replaceWith`); [`MongoLockProviderBuilder::connect`]
//! checks.
//!
//! # The commands: one round trip each
//!
//! Every operation is one `findAndModify` command, one wire round trip, including the first
//! acquire of a name never seen (there is no separate insert, and no name cache is consulted):
//!
//! ```text
//! acquire:  findOneAndUpdate({_id: name},
//!             [{$replaceWith: {$cond: {
//!                if: <the document is new (only _id)> or <lockUntil is a date <= $$NOW>,
//!                then: {$mergeObjects: ["$$ROOT", {lockUntil: $$NOW + at_most,
//!                       lockedAt: $$NOW, lockedBy: me, fencingToken: (fencingToken ?? 0) + 1}]},
//!                else: "$$ROOT"}}}],
//!             {upsert: true, returnDocument: "after"})
//!           -> lockedBy == me: acquired, with the fencingToken; otherwise not acquired
//! release:  findOneAndUpdate({_id: name, lockedBy: me, $expr: {$gt: ["$lockUntil", "$$NOW"]}},
//!             [{$set: {lockUntil: {$max: ["$$NOW", lockedAt + at_least]}}}])
//! extend:   findOneAndUpdate({_id: name, lockedBy: me, $expr: {$gt: ["$lockUntil", "$$NOW"]}},
//!             [{$set: {lockUntil: $$NOW + new_at_most}}])
//! ```
//!
//! where `date + millis` is `{$toDate: {$add: [{$toLong: date}, millis]}}` (MongoDB 4.0+):
//! `$add` of a date and a number is standard too, but not every MongoDB-compatible server
//! implements it, and `$dateAdd` needs MongoDB 5.0.
//!
//! A released handle answers `false` without asking. The one case of two round trips: a
//! compatible server that answers an upsert with no document (SecantusDB does for the loser
//! of two upserts racing to create a name's document; MongoDB itself never does) is asked once
//! more, which is safe because the command carries this acquisition's own identity.
//!
//! A held lock is answered "not acquired" without writing anything (the update leaves the
//! document as it is) and without a duplicate-key error, so the server log stays quiet. Two
//! nodes racing to create a new name's document can still meet MongoDB's duplicate-key error
//! (11000): the loser is told "not acquired", never an error. A document whose fields are not
//! ShedLock's (say `lockUntil` stored as a string) is left unchanged and the acquire fails with
//! an error naming the field and its type: the provider never guesses whether such a lock is
//! held.
//!
//! Release and extend match `lockedBy`, unique per acquisition, so a node whose lock expired
//! and was taken over can neither release nor extend the new holder's lock (Java's release has
//! no owner filter at all: ShedLock issue #74).
//!
//! # Fencing tokens
//!
//! Each acquisition adds one to the document's `fencingToken` and returns the new value, so
//! tokens strictly increase per name, across releases, expiries and take-overs, and across a
//! Java node's acquisitions in between (Java's `$set` of its three fields leaves the counter
//! alone). Tokens restart if the document is deleted by hand.
//!
//! # Sharing the collection with Java ShedLock
//!
//! Java and Rust nodes honour each other's documents: a Java document whose `lockUntil` has
//! not passed keeps Rust nodes out, an expired one is taken over, and Java's acquire
//! (`findOneAndUpdate({_id, lockUntil: {$lte: now}}, {$set: ...}, upsert)`) is refused by a
//! Rust node's live document. Java decides with its JVM's clock, so mixed fleets need that
//! clock close to the server's. A Java node's unlock is not owner-checked: a Java node whose
//! lock expired while its task still ran can shorten a lock a Rust node then took.
//!
//! # Seeing and freeing locks
//!
//! [`MongoLockProvider`] implements [`LockAdmin`](shedlock_core::LockAdmin) for operators.
//! Documents are kept after release, so a listing shows free locks as well as held ones, each
//! judged by the server's `$$NOW` read in the same command; `held_until` is `lockUntil` as
//! stored. A page is one `aggregate` (`$match` on an `_id` range after the last name of the
//! previous page, `$sort`, `$limit`, `$project` with `$$NOW`), inspect one `aggregate`. An
//! acquisition id is `<lockedAt ms>/<fencingToken>/<lockedBy>`; force-unlock is one
//! `findAndModify` matching those fields and a `lockUntil` after `$$NOW`, setting `lockUntil`
//! to `$$NOW`, as a release does, so the document and its fencing counter stay.
//!
//! # Consistency, timeouts, credentials
//!
//! Writes use `w: "majority"` (with `wtimeout` = the operation timeout) and reads
//! `readConcern: "majority"` by default, so an acquisition survives a failover; both are
//! configurable. Every lock command is bounded three ways: the server's `maxTimeMS`, the
//! driver's server selection timeout ([`DEFAULT_SERVER_SELECTION_TIMEOUT`], also its connect
//! timeout) and the operation timeout ([`DEFAULT_OPERATION_TIMEOUT`]); an unreachable server is
//! an error within those bounds, never "not acquired". A password in the URL is kept by the
//! driver only: the provider's `Debug` output, its errors and its messages show the URL with
//! the password (and `authMechanismProperties`) masked.
//!
//! # TLS
//!
//! The `mongodb` driver is built with its default TLS, rustls on ring (its `rustls-tls`
//! feature, on by default, from Rust and ring's bundled C): the URL's TLS options go to the
//! driver as they are. `?tls=true` (or `ssl=true`) turns it on (`mongodb+srv://` URLs have it
//! on unless `tls=false`), trusting Mozilla's roots, compiled in; `tlsCAFile=/path/ca.pem`
//! trusts a private CA instead; `tlsCertificateKeyFile=/path/client.pem` presents a client
//! certificate (certificate and unencrypted key in one PEM: an encrypted key's
//! `tlsCertificateKeyFilePassword` needs the driver's `cert-key-password` feature, which this
//! crate leaves off). With rustls the driver applies `tlsAllowInvalidCertificates` but not
//! `tlsAllowInvalidHostnames`. A certificate must name the host the driver connects to, which
//! for a replica set is each member as the set announces it (`directConnection=true` keeps to
//! the URL's host). A refused certificate is the connect error's cause, in rustls' words
//! (`invalid peer certificate: UnknownIssuer`, `certificate not valid for name "..."`).
//! `tests/tls.rs` checks a lock cycle with `tls=true&tlsCAFile=` and those refusals against a
//! server that serves TLS only.
//!
//! Tested on SecantusDB 0.5.3-beta.196 (a MongoDB 8.2 wire-compatible server on WiredTiger,
//! announcing a one-node replica set), with the `mongodb` driver 3.9; the conformance kit can
//! also start the official `mongo` image with testcontainers where Docker runs.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_mongo::MongoLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = Arc::new(
//!     MongoLockProvider::builder()
//!         .collection("shedLock")
//!         .connect("mongodb://app:secret@db1,db2,db3/app?replicaSet=rs0")
//!         .await?,
//! );
//! let executor = LockingTaskExecutor::from_arc(provider.clone());
//! let config = LockConfiguration::new("nightly-report", Duration::from_secs(600), Duration::ZERO)?;
//! let _ = executor.execute(&config, async { /* at most one node at a time */ }).await?;
//! // Done with locks: shut the client down before the runtime ends (see "Shutting down").
//! provider.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! # Shutting down
//!
//! Call [`MongoLockProvider::shutdown`] when the application is done with locks, after its
//! scheduler has stopped and before its async runtime ends. It shuts down, within the
//! operation timeout, the client that [`connect`](MongoLockProviderBuilder::connect) or
//! [`connect_lazy`](MongoLockProviderBuilder::connect_lazy) made, which every node made with
//! [`node`](MongoLockProvider::node) shares: from then on each of their operations, and the
//! release and extend of handles still held, fails with an error saying the client was shut
//! down, having sent nothing. A provider made with [`build`](MongoLockProviderBuilder::build)
//! leaves the application's client alone: the application calls [`Client::shutdown`] on it.
//! A refused `connect` shuts down the client it made before returning the error.
//!
//! ## Known issue: the driver's panic at exit (`mongodb` 3.9.1)
//!
//! A client still alive when its runtime ends (never shut down, or dropped just before the
//! runtime ends) cleans up in a task of the driver's (`endSessions`) that races the runtime's end,
//! and the driver then panics now and then, a backtrace printed after the program's output:
//!
//! ```text
//! thread 'tokio-rt-worker' panicked at .../mongodb-3.9.1/src/cmap/connection_requester.rs:42:14:
//! called `Result::unwrap()` on an `Err` value: SendError { .. }
//! ```
//!
//! The driver unwraps a send to its connection pool's task, which the runtime has already
//! dropped. This is the driver's, not this crate's: the panic is in the driver's own background
//! task, so the process still exits with its own status (unless built with `panic = "abort"`)
//! and whatever the program did and decided stands. Measured here with a client dropped at the
//! end of `block_on` on a two-thread runtime: about 2 runtime ends in 100 (23 in 1,000); after
//! [`MongoLockProvider::shutdown`], none in 500 (`tests/shutdown.rs`). The workaround is that
//! call, or [`Client::shutdown`] for a client of the application's, before the runtime ends.
//!
//! [`Capabilities::time_precision`]: shedlock_core::Capabilities::time_precision

mod admin;
mod credentials;
mod storage;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mongodb::bson::{Document, doc};
use mongodb::options::{
    Acknowledgment, ClientOptions, CollectionOptions, ReadConcern, WriteConcern,
};
use mongodb::{Client, Collection};
use shedlock_core::{
    Acquisition, Capabilities, ErrorKind, LockConfiguration, LockError, LockProvider, Operation,
    StorageBasedLockProvider,
};

use storage::MongoStorage;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "mongo";

/// ShedLock's collection name.
pub const DEFAULT_COLLECTION: &str = "shedLock";

/// The longest lock name accepted, in characters: at most 4 KiB of UTF-8 in `_id`, far below
/// MongoDB's limits, and long enough for any task name. A longer name is refused with
/// [`LockError::InvalidName`], never truncated.
pub const MAX_NAME_CHARS: usize = 1024;

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::DEFAULT_OPERATION_TIMEOUT;

/// The longest `lock_at_most_for` (and `lock_at_least_for`, and extend) accepted: a thousand
/// years, as ZooKeeper's provider. A BSON date reaches the year 292 million, but a date past
/// the year 9999 has no RFC 3339 form, the one operators' tools print (and `chrono` stops at
/// the year 262143); a thousand years keep every `lockUntil` a four-digit-year date for the
/// next seven millennia. A longer duration is refused before anything is written.
pub const MAX_LOCK_DURATION: Duration = Duration::from_secs(1000 * 365 * 24 * 60 * 60);

/// How long the driver looks for a usable server (and waits for a connection) before an
/// operation fails: shorter than the operation timeout, so an unreachable server is reported
/// as such rather than as a timeout with unknown outcome.
pub const DEFAULT_SERVER_SELECTION_TIMEOUT: Duration = Duration::from_secs(3);

/// The oldest server wire version with pipeline updates and `$$NOW` (MongoDB 4.2).
const MIN_WIRE_VERSION: i64 = 8;

/// Settings for a [`MongoLockProvider`]; finish with [`connect`](Self::connect),
/// [`connect_lazy`](Self::connect_lazy) or [`build`](Self::build).
#[derive(Debug, Clone)]
pub struct MongoLockProviderBuilder {
    database: Option<String>,
    collection: String,
    holder: Option<String>,
    operation_timeout: Duration,
    server_selection_timeout: Duration,
    write_concern: Option<WriteConcern>,
    read_concern: ReadConcern,
}

impl Default for MongoLockProviderBuilder {
    fn default() -> Self {
        Self {
            database: None,
            collection: DEFAULT_COLLECTION.to_owned(),
            holder: None,
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
            server_selection_timeout: DEFAULT_SERVER_SELECTION_TIMEOUT,
            write_concern: None,
            read_concern: ReadConcern::majority(),
        }
    }
}

impl MongoLockProviderBuilder {
    /// The database holding the lock collection, instead of the one in the URL's path. One of
    /// the two must name it: the provider never picks a database by itself.
    pub fn database(mut self, database: impl Into<String>) -> Self {
        self.database = Some(database.into());
        self
    }

    /// The lock collection (default `shedLock`, ShedLock's). Java nodes sharing locks must use
    /// the same one.
    pub fn collection(mut self, collection: impl Into<String>) -> Self {
        self.collection = collection.into();
        self
    }

    /// The readable part of `lockedBy` (default: the host name, what ShedLock writes). Each
    /// acquisition appends `#<id>`, unique to it, so two processes on one host never release
    /// each other's locks.
    pub fn holder(mut self, holder: impl Into<String>) -> Self {
        self.holder = Some(holder.into());
        self
    }

    /// The longest one lock operation may take (default 5 s) before it fails with
    /// [`LockError::Timeout`]; also sent as each command's `maxTimeMS` and as the default
    /// write concern's `wtimeout`, so the server gives up too.
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long the driver looks for a usable server, and waits to connect (default 3 s):
    /// past it an operation fails with an error saying the server is unreachable.
    pub fn server_selection_timeout(mut self, timeout: Duration) -> Self {
        self.server_selection_timeout = timeout;
        self
    }

    /// The write concern of every lock command (default `w: "majority"` with `wtimeout` = the
    /// operation timeout): an acquisition acknowledged with less may be lost in a failover and
    /// taken again by another node.
    pub fn write_concern(mut self, write_concern: WriteConcern) -> Self {
        self.write_concern = Some(write_concern);
        self
    }

    /// The read concern of what the provider reads (default `"majority"`): the collection check
    /// of [`connect`](Self::connect). The lock commands themselves are writes, which always
    /// act on the primary's current documents; their durability is the write concern's.
    pub fn read_concern(mut self, read_concern: ReadConcern) -> Self {
        self.read_concern = read_concern;
        self
    }

    /// Connects to `url` (`mongodb://[user:password@]host[:port][,...]/[database][?options]`
    /// or `mongodb+srv://...`; any other scheme is refused before anything connects) and
    /// checks, within the operation timeout, that the server is MongoDB 4.2 or later, that
    /// the lock collection can be read, and that it is an ordinary collection (not a view, a
    /// capped or a time-series collection) when the credentials may list collections. Fails
    /// with a [`LockError::Backend`] naming the redacted URL otherwise.
    pub async fn connect(self, url: &str) -> Result<MongoLockProvider, LockError> {
        let provider = self.connect_lazy(url).await?;
        if let Err(error) = provider.check_server().await {
            // The client this made goes with the refusal: shut it down here rather than leave
            // its cleanup to the runtime's end (see `MongoLockProvider::shutdown`).
            provider.shutdown().await;
            return Err(error);
        }
        Ok(provider)
    }

    /// Like [`connect`](Self::connect) without contacting the server: an application can start
    /// while MongoDB is down, and each lock operation fails (within the timeouts) until it
    /// answers. Only a `mongodb+srv://` URL is resolved here, through DNS.
    pub async fn connect_lazy(self, url: &str) -> Result<MongoLockProvider, LockError> {
        self.validate_timeouts()?;
        check_url_scheme(url)?;
        let shown = credentials::redact(url);
        let parsing = ClientOptions::parse(url);
        let mut options = match tokio::time::timeout(self.operation_timeout, parsing).await {
            Ok(Ok(options)) => options,
            Ok(Err(error)) => {
                // A malformed string, or for mongodb+srv:// a DNS lookup that failed.
                return Err(connect_error(
                    storage::kind_of(Operation::Connect, &error),
                    format!(
                        "{shown} is not a usable MongoDB connection string: {}",
                        credentials::scrub(&error.to_string(), url)
                    ),
                ));
            }
            Err(_) => {
                // Only a mongodb+srv:// URL takes time to parse: its DNS lookup did not end.
                return Err(connect_error(
                    ErrorKind::Unreachable,
                    format!(
                        "resolving {shown} took longer than {:?}",
                        self.operation_timeout
                    ),
                ));
            }
        };
        options.server_selection_timeout = Some(self.server_selection_timeout);
        options.connect_timeout = Some(self.server_selection_timeout);
        let database = match (&self.database, &options.default_database) {
            (Some(database), _) | (None, Some(database)) => database.clone(),
            (None, None) => {
                return Err(connect_error(
                    ErrorKind::Configuration,
                    format!(
                        "{shown} names no database: put it in the URL's path \
                     (mongodb://host/<database>) or call .database(...)"
                    ),
                ));
            }
        };
        let client = Client::with_options(options).map_err(|error| {
            connect_error(
                storage::kind_of(Operation::Connect, &error),
                format!(
                    "{shown} is not a usable MongoDB connection string: {}",
                    credentials::scrub(&error.to_string(), url)
                ),
            )
        })?;
        self.finish(&client, &database, shown, true)
    }

    /// Uses a client the application already has (its connection settings and timeouts are
    /// the client's; the operation timeout still bounds every lock operation). The database is
    /// the one set here, else the client's default database.
    ///
    /// The client stays the application's: [`MongoLockProvider::shutdown`] leaves it alone, and
    /// the application calls [`Client::shutdown`] itself before its runtime ends.
    pub fn build(self, client: &Client) -> Result<MongoLockProvider, LockError> {
        self.validate_timeouts()?;
        let database = match (&self.database, client.default_database()) {
            (Some(database), _) => database.clone(),
            (None, Some(database)) => database.name().to_owned(),
            (None, None) => {
                return Err(connect_error(
                    ErrorKind::Configuration,
                    "the given client has no default database: call .database(...)".to_owned(),
                ));
            }
        };
        self.finish(
            client,
            &database,
            "a client given by the application".to_owned(),
            false,
        )
    }

    fn validate_timeouts(&self) -> Result<(), LockError> {
        for (what, timeout) in [
            ("operation timeout", self.operation_timeout),
            ("server selection timeout", self.server_selection_timeout),
        ] {
            if timeout.is_zero() {
                return Err(invalid_setting(what, "0s", "it must be greater than zero"));
            }
        }
        Ok(())
    }

    fn finish(
        self,
        client: &Client,
        database: &str,
        shown: String,
        owns_client: bool,
    ) -> Result<MongoLockProvider, LockError> {
        check_database_name(database)?;
        check_collection_name(database, &self.collection)?;
        let write_concern = self.write_concern.unwrap_or_else(|| {
            WriteConcern::builder()
                .w(Acknowledgment::Majority)
                .w_timeout(self.operation_timeout)
                .build()
        });
        let options = CollectionOptions::builder()
            .write_concern(write_concern)
            .read_concern(self.read_concern)
            .build();
        let collection = client
            .database(database)
            .collection_with_options::<Document>(&self.collection, options);
        let storage = Arc::new(MongoStorage {
            collection,
            operation_timeout: self.operation_timeout,
            target: format!("{shown} (collection {database}.{})", self.collection),
            owns_client,
        });
        Ok(MongoLockProvider::on_storage(
            storage,
            self.holder,
            self.operation_timeout,
        ))
    }
}

/// Refuses a URL meant for another backend before the driver reads it, naming its scheme
/// (never the rest of the URL, which may hold a password) and the accepted ones.
fn check_url_scheme(url: &str) -> Result<(), LockError> {
    let refused = match url.split_once("://") {
        Some((scheme, _))
            if scheme.eq_ignore_ascii_case("mongodb")
                || scheme.eq_ignore_ascii_case("mongodb+srv") =>
        {
            return Ok(());
        }
        Some((scheme, _))
            if scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("the URL's scheme is {scheme:?}")
        }
        _ => "the text is not a URL (no scheme:// in front)".to_owned(),
    };
    Err(connect_error(
        ErrorKind::Configuration,
        format!(
            "{refused}, which is not a MongoDB connection string: the mongo provider accepts \
         mongodb://... or mongodb+srv://..."
        ),
    ))
}

fn connect_error(kind: ErrorKind, message: String) -> LockError {
    LockError::backend_message(kind, PROVIDER, Operation::Connect, "", message)
}

fn invalid_setting(what: &str, value: &str, rule: &str) -> LockError {
    connect_error(
        ErrorKind::Configuration,
        format!("invalid {what} {value:?}: {rule}"),
    )
}

/// MongoDB's rules for database names, checked here so a bad name is refused with the rule
/// rather than by the first lock command.
fn check_database_name(database: &str) -> Result<(), LockError> {
    let rule = if database.is_empty() {
        "it must not be empty"
    } else if let Some(bad) = database.chars().find(|c| "/\\. \"$\0".contains(*c)) {
        return Err(invalid_setting(
            "database name",
            database,
            &format!("MongoDB database names cannot contain {bad:?}"),
        ));
    } else if database.len() >= 64 {
        "MongoDB database names must be shorter than 64 bytes"
    } else {
        return Ok(());
    };
    Err(invalid_setting("database name", database, rule))
}

/// MongoDB's rules for collection names.
fn check_collection_name(database: &str, collection: &str) -> Result<(), LockError> {
    let rule = if collection.is_empty() {
        "it must not be empty"
    } else if collection.contains('$') || collection.contains('\0') {
        "MongoDB collection names cannot contain '$' or NUL"
    } else if collection.starts_with("system.") {
        "names starting with \"system.\" are reserved by MongoDB"
    } else if database.len() + 1 + collection.len() > 255 {
        "with the database name it must fit MongoDB's 255-byte namespace"
    } else {
        return Ok(());
    };
    Err(invalid_setting("collection name", collection, rule))
}

/// Locks in a MongoDB collection, one document per name; see the crate docs for the layout,
/// the commands and the guarantees.
///
/// Not `Clone`: call [`node`](Self::node) for another node on the same client (its own
/// identity and name cache), as tests of several nodes do.
pub struct MongoLockProvider {
    inner: StorageBasedLockProvider,
    storage: Arc<MongoStorage>,
    operation_timeout: Duration,
}

impl fmt::Debug for MongoLockProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoLockProvider")
            .field("inner", &self.inner)
            .finish()
    }
}

impl MongoLockProvider {
    /// A builder with ShedLock's defaults.
    pub fn builder() -> MongoLockProviderBuilder {
        MongoLockProviderBuilder::default()
    }

    /// Connects to `url` with every default; see [`MongoLockProviderBuilder::connect`].
    pub async fn connect(url: &str) -> Result<Self, LockError> {
        Self::builder().connect(url).await
    }

    fn on_storage(
        storage: Arc<MongoStorage>,
        holder: Option<String>,
        operation_timeout: Duration,
    ) -> Self {
        let mut inner = StorageBasedLockProvider::from_arc(storage.clone())
            .with_operation_timeout(operation_timeout);
        if let Some(holder) = holder {
            inner = inner.with_holder(holder);
        }
        Self {
            inner,
            storage,
            operation_timeout,
        }
    }

    /// Another node on the same client and collection, with the host name as holder and a
    /// name cache of its own.
    pub fn node(&self) -> Self {
        Self::on_storage(self.storage.clone(), None, self.operation_timeout)
    }

    /// Shuts down the MongoDB client the provider created, within the operation timeout: call
    /// it once the application is done with locks, before its async runtime ends.
    ///
    /// Without it the client cleans up when the runtime drops it, racing the runtime's own
    /// end: the `mongodb` driver (3.9.1) then panics now and then in one of its tasks
    /// (`SendError` in `cmap/connection_requester.rs`), a backtrace printed as the process
    /// exits; see "Known issue" in the crate docs. Shutting the client down first ends its
    /// tasks in order and tells the server the client's sessions are over.
    ///
    /// The client is shared by every node made with [`node`](Self::node), so any one node
    /// shuts it down for all; from then on every operation of every node, and the release and
    /// extend of every handle still held, fails with [`LockError::Backend`] saying the client
    /// was shut down, without sending anything: never "not acquired" nor `Ok(false)`, and a
    /// lock still held stays held until its `lock_at_most_for`, as after a crash. Release
    /// locks first to free them at once. A provider moved into a
    /// [`LockingTaskExecutor`](shedlock_core::LockingTaskExecutor) can be reached through a
    /// node made before the move, or by giving the executor an `Arc` of it.
    ///
    /// Returns `true` once the client is shut down (`true` again if it already was). The
    /// driver's shutdown waits for the operations still running on the client, any node's,
    /// so stop the scheduler and let its tasks end first. It never waits longer than the
    /// operation timeout: if the client is not shut down by then (other nodes still busy, a
    /// server that stopped answering), this gives up and returns `false`; the client may be
    /// left partly shut down, so the operations of nodes still running go on or fail with an
    /// error (never a wrong answer), and this may be called again once they have stopped.
    ///
    /// A provider made with [`MongoLockProviderBuilder::build`] did not create its client and
    /// leaves it alone: this returns `false` at once, and the application calls
    /// [`Client::shutdown`] on its client itself.
    pub async fn shutdown(&self) -> bool {
        if !self.storage.owns_client {
            return false;
        }
        let client = self.storage.collection.client().clone();
        tokio::time::timeout(self.operation_timeout, client.shutdown())
            .await
            .is_ok()
    }

    /// Forgets which names this node has seen, as a restarted node would. Acquire is one
    /// upsert that never consults the cache, so no answer and no cost depends on it.
    pub fn clear_name_cache(&self) {
        self.inner.clear_name_cache();
    }

    /// The lock collection, with the provider's read and write concerns, for operators who
    /// want to inspect or free a lock by hand.
    pub fn collection(&self) -> &Collection<Document> {
        &self.storage.collection
    }

    /// `hello` for the server's wire version, then a read of the collection (a point lookup of
    /// `_id: ""`, a name no lock can have): proves the server is new enough and the
    /// credentials may read the locks.
    async fn check_server(&self) -> Result<(), LockError> {
        let storage = &*self.storage;
        let target = &storage.target;
        let check = async {
            let hello = storage
                .collection
                .client()
                .database("admin")
                .run_command(doc! { "hello": 1 })
                .await?;
            let probe = storage
                .collection
                .find_one(doc! { "_id": "" })
                .projection(doc! { "_id": 1 })
                .max_time(self.operation_timeout)
                .await;
            Ok::<_, mongodb::error::Error>((hello, probe))
        };
        let (hello, probe) = match tokio::time::timeout(self.operation_timeout, check).await {
            Ok(Ok(answers)) => answers,
            Ok(Err(error)) => {
                // A server that refused the credentials answered: it is running and reachable.
                let message = if matches!(
                    *error.kind,
                    mongodb::error::ErrorKind::Authentication { .. }
                ) {
                    format!(
                        "MongoDB at {target} refused the credentials: check the user name and \
                         password in the URL, and its authSource (the database the user is \
                         defined in)"
                    )
                } else {
                    format!("could not reach MongoDB at {target}: is it running and reachable?")
                };
                return Err(LockError::backend(
                    storage::kind_of(Operation::Connect, &error),
                    PROVIDER,
                    Operation::Connect,
                    "",
                    message,
                    error,
                ));
            }
            Err(_) => {
                return Err(connect_error(
                    ErrorKind::Unreachable,
                    format!(
                        "MongoDB at {target} did not answer within {:?}: is it running and reachable?",
                        self.operation_timeout
                    ),
                ));
            }
        };
        let wire_version = hello
            .get("maxWireVersion")
            .and_then(|version| match version {
                mongodb::bson::Bson::Int32(version) => Some(i64::from(*version)),
                mongodb::bson::Bson::Int64(version) => Some(*version),
                _ => None,
            })
            .unwrap_or(0);
        if wire_version < MIN_WIRE_VERSION {
            return Err(connect_error(
                ErrorKind::Configuration,
                format!(
                    "the server at {target} reports wire version {wire_version}; the provider needs \
                 MongoDB 4.2 or later (wire version {MIN_WIRE_VERSION}: pipeline updates and $$NOW)"
                ),
            ));
        }
        probe.map(|_| ()).map_err(|error| {
            LockError::backend(
                storage::kind_of(Operation::Connect, &error),
                PROVIDER,
                Operation::Connect,
                "",
                format!("could not read the lock collection at {target}"),
                error,
            )
        })?;
        self.check_collection_kind().await
    }

    /// Refuses a lock collection that cannot keep locks: a view (it takes no writes), a capped
    /// collection (it drops its oldest documents when full, and with them locks still held), a
    /// time-series collection. One `listCollections` for the collection's name; a user not
    /// allowed to list collections is not refused for that, and the lock commands decide.
    async fn check_collection_kind(&self) -> Result<(), LockError> {
        let storage = &*self.storage;
        let collection = &storage.collection;
        let listing = collection
            .client()
            .database(collection.namespace().db.as_str());
        let command = doc! {
            "listCollections": 1,
            "filter": { "name": collection.name() },
        };
        let answer = tokio::time::timeout(self.operation_timeout, listing.run_command(command));
        let listed = match answer.await {
            Ok(Ok(listed)) => listed,
            // Refused (not authorized to list collections) or not answered: nothing to judge.
            Ok(Err(_)) | Err(_) => return Ok(()),
        };
        let first = listed
            .get_document("cursor")
            .ok()
            .and_then(|cursor| cursor.get_array("firstBatch").ok())
            .and_then(|batch| batch.first())
            .and_then(mongodb::bson::Bson::as_document);
        let Some(spec) = first else {
            // Not created yet: the first acquire creates an ordinary collection.
            return Ok(());
        };
        let kind = spec.get_str("type").unwrap_or("collection");
        let capped = spec
            .get_document("options")
            .ok()
            .and_then(|options| options.get("capped"))
            .and_then(mongodb::bson::Bson::as_bool)
            .unwrap_or(false);
        let rule = match kind {
            "view" => "is a view, which takes no writes",
            "timeseries" => "is a time-series collection, which cannot keep one document per lock",
            "collection" if capped => {
                "is a capped collection, which drops its oldest documents when it is full, and \
                 with them locks still held, which other nodes would then take"
            }
            "collection" => return Ok(()),
            _ => "is not an ordinary collection",
        };
        Err(connect_error(
            ErrorKind::Configuration,
            format!(
                "{} {rule}: the lock collection must be an ordinary collection; nothing was \
             written (give the provider another with MongoLockProviderBuilder::collection)",
                storage.target
            ),
        ))
    }
}

#[async_trait]
impl LockProvider for MongoLockProvider {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.inner.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
}
