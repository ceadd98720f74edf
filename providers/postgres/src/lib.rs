//! PostgreSQL lock provider for shedlock-rs, on Java ShedLock's own table, so Java and Rust
//! nodes can share locks during a migration.
//!
//! # The table
//!
//! ShedLock's PostgreSQL table (names configurable, schema-qualified allowed):
//!
//! ```sql
//! CREATE TABLE shedlock (
//!     name       VARCHAR(64)  NOT NULL,
//!     lock_until TIMESTAMP    NOT NULL,
//!     locked_at  TIMESTAMP    NOT NULL,
//!     locked_by  VARCHAR(255) NOT NULL,
//!     PRIMARY KEY (name)
//! );
//! -- optional, for fencing tokens; Java ShedLock ignores it:
//! ALTER TABLE shedlock ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! ```
//!
//! Times are UTC wall times in `TIMESTAMP` columns, as ShedLock writes them. `TIMESTAMPTZ`
//! columns are accepted too (the statements then compare instants). [`create_table_statement`]
//! gives the DDL for any configured names, and
//! [`PostgresLockProviderBuilder::create_table_if_missing`] runs it.
//!
//! Connecting reads the table from the catalog: a missing table, a missing column, a column of
//! the wrong type or a `name` without a unique index is an error that says how to fix it. The
//! `name` column's declared length becomes [`Capabilities::max_name_chars`]: a longer name is
//! refused with [`LockError::InvalidName`] before anything is written, never truncated.
//!
//! # The statements
//!
//! Server time (the default) uses the database clock, `timezone('utc', CURRENT_TIMESTAMP)`, so
//! the nodes' clocks do not matter. Every operation is one statement, outside any transaction
//! of the caller, in autocommit:
//!
//! ```sql
//! -- acquire of a name this node has not seen ($3 = lock_at_most_for in seconds):
//! INSERT INTO shedlock AS lock_row (name, lock_until, locked_at, locked_by)
//!   VALUES ($1, now + make_interval(secs => $3), now, $2)
//!   ON CONFLICT (name) DO NOTHING
//!   RETURNING 0::int8                     -- or the new fencing token; no row: not inserted
//! -- acquire of a name it has seen (the row exists):
//! WITH current AS MATERIALIZED (SELECT ctid AS row_id, lock_until <= now AS free,
//!     locked_by AS holder, lock_until AS held_until FROM shedlock WHERE name = $1),
//! taken AS (UPDATE shedlock AS lock_row
//!     SET lock_until = now + make_interval(secs => $3), locked_at = now, locked_by = $2
//!     WHERE lock_row.ctid = (SELECT ctid FROM shedlock
//!         WHERE ctid = (SELECT row_id FROM current WHERE free) AND lock_until <= now
//!         FOR UPDATE SKIP LOCKED)
//!       AND lock_row.lock_until <= now
//!     RETURNING 0::int8)                  -- or the new fencing token
//! SELECT (SELECT * FROM taken), free, holder, held_until  -- no row: the row is missing
//! -- release ($3 = lock_at_least_for):
//! UPDATE shedlock SET lock_until = GREATEST(now, locked_at + make_interval(secs => $3))
//!   WHERE name = $1 AND locked_by = $2 AND lock_until > now AND lock_until > locked_at
//! -- extend ($3 = the new lock_at_most_for):
//! UPDATE shedlock SET lock_until = now + make_interval(secs => $3)
//!   WHERE name = $1 AND locked_by = $2 AND lock_until > now AND lock_until > locked_at
//! ```
//!
//! An acquire never waits for another transaction:
//! - on a held lock it neither waits nor writes: `current` reads the row once (one index
//!   probe, as Java ShedLock's plain `UPDATE` makes), finds it held, and the rest of the
//!   statement has no row to look at. (An `INSERT ... ON CONFLICT DO UPDATE ... WHERE` would
//!   lock the row even when its `WHERE` is false, so under contention every refused attempt
//!   would queue behind the others.)
//! - on an expired lock that another node is taking over at this moment, `SKIP LOCKED` answers
//!   "not acquired" at once instead of waiting for that node's commit. Whoever holds the row
//!   lock is changing the lock; if its transaction fails, the lock is free for the next tick.
//! - a free lock is locked and updated through the `ctid` that read found, with no second
//!   index probe.
//!
//! The same read tells a held row from one deleted by hand (no row comes back), which the next
//! statement inserts again.
//!
//! # What an operation costs
//!
//! A provider built from a URL opens its own connections (up to
//! [`max_connections`](PostgresLockProviderBuilder::max_connections)) and sends each statement
//! alone: acquire, release and extend are one wire round trip each, including the first acquire
//! of a new name. The exception is a node's first attempt on a name whose row exists but that
//! the node has not seen since it started: the insert is refused and the take-over follows, two
//! round trips, once per name for the life of the node. No health check is sent: a broken
//! connection fails the statement sent on it (an error, so the task does not run), and the next
//! operation connects afresh. A connection idle for the idle-check interval (60 s unless set)
//! is pinged in the background, off the caller's path, and replaced there if it is dead, so a
//! job that runs hourly still finds a connection ready; one left idle four minutes unchecked is
//! closed rather than reused.
//!
//! On a pool of yours ([`PostgresLockProvider::builder`]) sqlx pings each connection when it
//! goes back to the pool and, unless you turned `test_before_acquire` off, before handing it
//! out: three round trips per operation instead of one.
//!
//! `locked_by` is `<holder>#<random>`, unique per acquisition, so a node whose lock expired and
//! was taken over can neither release nor extend the new holder's lock. A Java node's rows
//! (`locked_by` = its host name) are honoured exactly like Rust ones.
//!
//! With [`TimeSource::Client`] the node's clock is bound as `$4` instead of `now`; exclusion
//! then holds only while the nodes' clocks differ by less than `lock_at_most_for` minus the
//! task's run time.
//!
//! # Sharing the table with Java ShedLock
//!
//! Java nodes and Rust nodes honour each other's rows (tested with ShedLock's own statements).
//! On the Java side: `JdbcTemplateLockProvider` with `usingDbTime()` uses the same server
//! clock; the plain `JdbcLockProvider` writes its JVM's clock through the JVM's default time
//! zone, so that JVM must run in UTC (`-Duser.timezone=UTC`) and its clock must be close to
//! the database's. Java's unlock checks only its host name, not its acquisition: a Java node
//! whose lock expired while its task still ran can shorten a lock a Rust node then took
//! (ShedLock issues #186, #317). Rust's release and extend never touch another acquisition.
//!
//! # Fencing
//!
//! If the table has the fencing column (default name `fencing_token`, an integer), each
//! acquisition increments it in its acquire statement and returns the new value as the lock's
//! fencing token. Without the column the table stays exactly ShedLock's and
//! [`Capabilities::fencing`] is false. Tokens restart if a row is deleted by hand.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_postgres::PostgresLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = PostgresLockProvider::builder()
//!     .create_table_with_fencing_if_missing()
//!     .connect("postgres://app@db/app")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
//! executor.execute(&config, async { /* at most one node at a time */ }).await?;
//! # Ok(()) }
//! ```
//!
//! # Seeing and freeing locks
//!
//! [`PostgresLockProvider`] is also the table's [`LockAdmin`]: an operator lists the locks
//! whose names start with a prefix, inspects one, and frees one a dead holder left behind.
//!
//! - **List** shows every row, released ones too (ShedLock keeps rows): name, `locked_by`,
//!   `locked_at`, `lock_until` as `held_until`, the fencing token where the column exists (a row
//!   no fencing acquisition wrote, such as a Java node's, shows none), and held or free with the
//!   time left, judged by the database's clock read in the same statement (the node's clock for
//!   [`TimeSource::Client`], as its lock statements judge). Pages are keyset pages in the name
//!   column's order, one statement each (`WHERE name > $cursor AND name LIKE $prefix ESCAPE '!'
//!   ORDER BY name LIMIT n + 1`, the prefix's `%`, `_` and `!` escaped), so 100,000 locks are
//!   never read at once.
//! - **Inspect** reads one row; a name the lock operations refuse (too long, NUL) is refused the
//!   same way.
//! - **The acquisition id** is `<locked_by>/<locked_at>/<fencing_token>`, `locked_at` in
//!   microseconds since the Unix epoch exactly as stored (`/<fencing_token>` only with the
//!   fencing column), each part percent-encoded where it holds `%`, `/` or white space:
//!   `rust-node#4f1c...e2/1718012345678901/7`. The stored `locked_at` makes it name one
//!   acquisition even of a Java node, whose `locked_by` is only its host name.
//! - **Force-unlock** is one compare-and-free statement that keeps the row and the fencing
//!   counter:
//!
//! ```sql
//! UPDATE shedlock SET lock_until = LEAST(now, locked_at)
//!   WHERE name = $1 AND locked_by = $2 AND locked_at = $3
//!     AND fencing_token IS NOT DISTINCT FROM $4      -- with the fencing column
//!     AND lock_until > now AND lock_until > locked_at
//! ```
//!
//! It answers true only if that acquisition still held the lock; the lock is then free for
//! any node at once, and the old holder's release and extend answer false.
//! A freed acquisition's `lock_until` is set no later than its `locked_at`, which no held lock
//! has, and every release, extend and force-unlock asks for `lock_until > locked_at` as well as
//! for a `lock_until` still ahead: a call of that acquisition that comes after it (a second
//! operator's force-unlock, the holder's extend) therefore finds it freed whatever clock it
//! compares with, the node's own under client time included.
//!
//! Each call is one round trip on the provider's own connections, bounded by the operation
//! timeout (on a pool of yours, sqlx's pings add theirs).
//!
//! # TLS
//!
//! The URL asks for it, as with `libpq`: `?sslmode=require` (encrypted, the certificate not
//! checked), `verify-ca` (signed by a trusted CA) or `verify-full` (and issued for the URL's
//! host); `sslrootcert=/path/ca.pem` trusts a private CA, as cloud databases need. The default,
//! `prefer`, uses TLS when the server offers it and falls back to plain otherwise, so it
//! protects against nothing: say `require` or stronger where the network is not yours. With the
//! `tls-rustls` feature (on by default) the roots trusted without `sslrootcert` are Mozilla's,
//! compiled in; `tls-rustls-native-roots` trusts the system's store instead. Without either, a
//! URL that needs TLS fails to connect with an error naming the feature.
//!
//! ```no_run
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! use shedlock_postgres::PostgresLockProvider;
//!
//! let provider =
//!     PostgresLockProvider::connect("postgres://app@db.example.com/app?sslmode=verify-full&sslrootcert=/etc/ssl/db-ca.pem").await?;
//! # let _ = provider; Ok(()) }
//! ```
//!
//! [`Capabilities::max_name_chars`]: shedlock_core::Capabilities::max_name_chars
//! [`Capabilities::fencing`]: shedlock_core::Capabilities::fencing
//! [`LockAdmin`]: shedlock_core::LockAdmin
//! [`LockError::InvalidName`]: shedlock_core::LockError::InvalidName
//! [`TimeSource::Client`]: shedlock_core::TimeSource::Client

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod storage;

pub use shedlock_sql::{
    Column, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_CHECK_INTERVAL, DEFAULT_MAX_CONNECTIONS,
    LockTable,
};
// Inlined so this crate's docs list their methods: an alias page shows the impls of a type
// documented in the same run only, and `cargo doc -p <this crate> --no-deps` documents no other.
#[doc(inline)]
pub use shedlock_sql::{SqlLockProvider, SqlLockProviderBuilder};
pub use storage::{PostgresBackend, create_table_statement};

/// A lock provider on a PostgreSQL table: one node's view of it. The shared provider, with this
/// crate's statements; see [`SqlLockProvider`] for its methods.
pub type PostgresLockProvider = SqlLockProvider<PostgresBackend>;

/// Configures and connects a [`PostgresLockProvider`]. Every setting has ShedLock's default; see
/// [`SqlLockProviderBuilder`] for the settings.
pub type PostgresLockProviderBuilder = SqlLockProviderBuilder<PostgresBackend>;
