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
//! A released handle, or one whose extend answered `false`, answers `false` without asking.
//! The one case of two round trips: a compatible server that answers an upsert with no
//! document (SecantusDB does for the loser of two upserts racing to create a name's document;
//! MongoDB itself never does) is asked once more, which is safe because the command carries
//! this acquisition's own identity.
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
//! [`Client::shutdown`]: mongodb::Client::shutdown

mod admin;
mod builder;
mod checks;
mod credentials;
mod failure;
mod provider;
mod storage;
mod url;

use std::time::Duration;

pub use builder::MongoLockProviderBuilder;
pub use provider::MongoLockProvider;

/// The provider's name in errors and logs.
pub const PROVIDER: &str = "mongo";

/// ShedLock's collection name.
pub const DEFAULT_COLLECTION: &str = "shedLock";

/// The longest lock name accepted, in characters: at most 4 KiB of UTF-8 in `_id`, far below
/// MongoDB's limits, and long enough for any task name. A longer name is refused with
/// [`LockError::InvalidName`], never truncated.
///
/// [`LockError::InvalidName`]: shedlock_core::LockError::InvalidName
pub const MAX_NAME_CHARS: usize = 1024;

/// How long one lock operation may take before it fails with [`LockError::Timeout`].
///
/// [`LockError::Timeout`]: shedlock_core::LockError::Timeout
pub const DEFAULT_OPERATION_TIMEOUT: Duration = shedlock_core::raw::DEFAULT_OPERATION_TIMEOUT;

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
