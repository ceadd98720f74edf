//! MySQL 8 and MariaDB 10.6+ lock provider for shedlock-rs, on Java ShedLock's own table, so
//! Java and Rust nodes can share locks during a migration.
//!
//! # The table
//!
//! ShedLock's MySQL table (names configurable, `database.table` allowed):
//!
//! ```sql
//! CREATE TABLE shedlock (
//!     name       VARCHAR(64)  NOT NULL,
//!     lock_until TIMESTAMP(3) NOT NULL,
//!     locked_at  TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
//!     locked_by  VARCHAR(255) NOT NULL,
//!     PRIMARY KEY (name)
//! );
//! -- optional, for fencing tokens; Java ShedLock ignores it:
//! ALTER TABLE shedlock ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! ```
//!
//! [`create_table_statement`] (run by [`MySqlLockProviderBuilder::create_table_if_missing`])
//! adds one thing: the `name` column gets a binary, no-pad collation (`utf8mb4_0900_bin` on
//! MySQL, `utf8mb4_nopad_bin` on MariaDB), so `Job`, `job` and `job ` stay three locks. On a
//! table with a case-insensitive collation such names share one lock (safe, but surprising; a
//! warning is logged), and with a PAD SPACE collation names ending in a space are refused.
//!
//! Times are UTC wall times, as ShedLock writes them, in `TIMESTAMP(3)` or `DATETIME(3)`
//! columns (a lower precision is accepted and reported in
//! [`Capabilities::time_precision`]). `TIMESTAMP` converts through the session time zone, so
//! sessions must be UTC: pools opened from a URL are (`time_zone = '+00:00'`, sqlx's default),
//! and connecting checks a given pool. `TIMESTAMP` ends in 2038: a `lock_until` beyond it is an
//! error, never a wrapped time.
//!
//! Connecting reads the table from `information_schema`: a missing table, a missing column, a
//! column of the wrong type or a `name` that is not the key is an error that says how to fix
//! it. The `name` column's declared length becomes [`Capabilities::max_name_chars`]: a longer
//! name is refused with [`LockError::InvalidName`] before anything is written, never
//! truncated (ShedLock's `INSERT IGNORE` can truncate silently).
//!
//! # The statements
//!
//! Server time (the default) uses the database clock, `UTC_TIMESTAMP(3)`. Every operation is
//! one statement, outside any transaction of the caller, valid on MySQL 8 and MariaDB alike (no
//! `VALUES()` function, no row alias). Acquire of a name this node has not seen:
//!
//! ```sql
//! INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
//!   VALUES (?, TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), UTC_TIMESTAMP(3),
//!           IF(LAST_INSERT_ID(1) > 0, ?, NULL))
//! ON DUPLICATE KEY UPDATE locked_by = IF(LAST_INSERT_ID(0) = 0, locked_by, NULL)
//! ```
//!
//! Acquire of a name it has seen (the row exists):
//!
//! ```sql
//! UPDATE shedlock SET
//!   locked_by  = IF(lock_until <= UTC_TIMESTAMP(3), IF(LAST_INSERT_ID(1) > 0, ?, NULL),
//!                   IF(LAST_INSERT_ID(0) = 0, locked_by, NULL)),
//!   locked_at  = IF(lock_until <= UTC_TIMESTAMP(3), UTC_TIMESTAMP(3), locked_at),
//!   lock_until = IF(lock_until <= UTC_TIMESTAMP(3),
//!                   TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3)), lock_until)
//! WHERE name = ?
//! ```
//!
//! Whether it took the lock is read from the statement's insert id, which the server sets to
//! the argument of the last `LAST_INSERT_ID(expr)` evaluated: 1 when the row was inserted or
//! taken over, 0 when it was left alone. The affected-row count cannot tell: sqlx connects with
//! `CLIENT_FOUND_ROWS`, under which "inserted" and "left unchanged" both count 1; but a
//! take-over that matched no row means the row was deleted by hand, and the next statement
//! inserts it again. With the fencing column, the take-over instead evaluates
//! `fencing_token = IF(lock_until <= now, LAST_INSERT_ID(COALESCE(fencing_token, 0) + 1),
//! fencing_token)`, so the insert id *is* the new token. Every assignment tests the old
//! `lock_until`, which is assigned last, so the statement means the same whether assignments
//! are evaluated left to right or simultaneously. (The session's `LAST_INSERT_ID()` is changed
//! as a side effect.) InnoDB locks the row for the statement either way, but a held row is
//! assigned its own values, which it does not write, so a refused attempt commits nothing and
//! holds the row lock only while its own statement runs, never across a log flush.
//!
//! **An acquire never waits for another transaction's row lock on MariaDB.** While one node
//! takes a free lock over, its transaction holds the row's lock until it commits; a statement
//! that needs that lock would queue behind it, and in a burst of nodes every loser would wait
//! for the one before it. On MariaDB the take-over is sent as `SET STATEMENT
//! innodb_lock_wait_timeout = 0 FOR UPDATE ...`: when another transaction holds the row (a
//! contender, a Java node's `UPDATE`, an operator's session), the server answers at once with
//! a lock wait error, which the provider answers as "not acquired", naming nobody (what that
//! transaction is writing is not committed). On MySQL, which has no per-statement setting and
//! no lock wait shorter than a second, the take-over waits for the row as long as the session's
//! `innodb_lock_wait_timeout` allows, which the provider sets to the operation timeout (whole
//! seconds, at least 1), and answers "not acquired" if the row is still held when that wait
//! ends (or fails with a timeout if the operation timeout ends first). So does a provider made
//! by `connect_lazy`, which reads nothing from the server and so takes MySQL's statements. The
//! insert of a name not seen yet waits on both servers, once per name.
//!
//! Each statement is one wire round trip on a connection the provider opened itself from a URL:
//! no health check is sent before or after it; a broken connection fails its statement (the
//! operation fails closed) and the next operation connects afresh. A node's first attempt on a
//! name whose row it has not seen since it started is two round trips (the insert is refused,
//! the take-over follows), once per name. On a pool of yours, sqlx's pings add up to two
//! round trips per operation.
//!
//! ```sql
//! -- release (? = lock_at_least_for in microseconds):
//! UPDATE shedlock SET lock_until = GREATEST(UTC_TIMESTAMP(3),
//!     TIMESTAMPADD(MICROSECOND, ?, locked_at))
//!   WHERE name = ? AND locked_by = ? AND lock_until > UTC_TIMESTAMP(3)
//!     AND lock_until > locked_at
//! -- extend:
//! UPDATE shedlock SET lock_until = TIMESTAMPADD(MICROSECOND, ?, UTC_TIMESTAMP(3))
//!   WHERE name = ? AND locked_by = ? AND lock_until > UTC_TIMESTAMP(3)
//!     AND lock_until > locked_at
//! ```
//!
//! `locked_by` is `<holder>#<random>`, unique per acquisition, so a node whose lock expired and
//! was taken over can neither release nor extend the new holder's lock. A Java node's rows
//! (`locked_by` = its host name) are honoured exactly like Rust ones.
//!
//! Java's `JdbcTemplateLockProvider` with `usingDbTime()` uses the same `UTC_TIMESTAMP(3)`;
//! the plain `JdbcLockProvider` writes its JVM's clock, so that JVM must run in UTC. Java's
//! unlock checks only its host name, so a Java node whose lock expired can still shorten a
//! lock a Rust node took afterwards (ShedLock issues #186, #317); Rust's never can.
//!
//! With [`TimeSource::Client`] the node's clock is bound in place of `UTC_TIMESTAMP(3)`;
//! exclusion then holds only while the nodes' clocks differ by less than `lock_at_most_for`
//! minus the task's run time.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_mysql::MySqlLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = MySqlLockProvider::builder()
//!     .create_table_with_fencing_if_missing()
//!     .connect("mysql://app@db/app")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
//! executor.execute(&config, async { /* at most one node at a time */ }).await?;
//! # Ok(()) }
//! ```
//!
//! # Seeing and freeing locks
//!
//! [`MySqlLockProvider`] is also the table's [`LockAdmin`]: an operator lists the locks whose
//! names start with a prefix, inspects one, and frees one a dead holder left behind.
//!
//! - **List** shows every row, released ones too (ShedLock keeps rows): name, `locked_by`,
//!   `locked_at`, `lock_until` as `held_until`, the fencing token where the column exists (a row
//!   no fencing acquisition wrote, such as a Java node's, shows none), and held or free with the
//!   time left, judged by `UTC_TIMESTAMP(3)` read in the same statement (the node's clock for
//!   [`TimeSource::Client`], as its lock statements judge). Pages are keyset pages in the name
//!   column's order, one statement each (`WHERE name > ? AND name LIKE ? ESCAPE '!' ORDER BY
//!   name LIMIT n + 1`, the prefix's `%`, `_` and `!` escaped), so 100,000 locks are never read
//!   at once. The prefix matches exactly, also under a case-insensitive collation: its `LIKE`
//!   matches `Job` for `job`, and such rows are dropped from the page (which may then hold fewer
//!   locks than asked and still not be the last). Such a collation's key holds no two names it
//!   calls equal, so paging in its order reads every row exactly once.
//! - **Inspect** reads one row, as the column's collation compares names (under a
//!   case-insensitive one, `JOB` finds the row `job`, whose lock it shares); a name the lock
//!   operations refuse is refused the same way.
//! - **The acquisition id** is `<locked_by>/<locked_at>/<fencing_token>`, `locked_at` in
//!   microseconds since the Unix epoch exactly as stored (`TIMESTAMP` or `DATETIME`, any
//!   precision; `/<fencing_token>` only with the fencing column), each part percent-encoded where
//!   it holds `%`, `/` or white space: `rust-node#4f1c...e2/1718012345678000/7`. The stored
//!   `locked_at` makes it name one acquisition even of a Java node, whose `locked_by` is only its
//!   host name.
//! - **Force-unlock** is one compare-and-free statement that keeps the row and the fencing
//!   counter:
//!
//! ```sql
//! UPDATE shedlock SET lock_until = LEAST(UTC_TIMESTAMP(3), locked_at)
//!   WHERE name = ? AND locked_by = ? AND locked_at = ?
//!     AND fencing_token <=> ?                       -- with the fencing column
//!     AND lock_until > locked_at AND lock_until > UTC_TIMESTAMP(3)
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
//! The URL asks for it: `?ssl-mode=REQUIRED` (encrypted, the certificate not checked),
//! `VERIFY_CA` (signed by a trusted CA) or `VERIFY_IDENTITY` (and issued for the URL's host);
//! `ssl-ca=/path/ca.pem` trusts a private CA, as cloud databases need. The default, `PREFERRED`,
//! uses TLS when the server offers it and falls back to plain otherwise, so it protects against
//! nothing: say `REQUIRED` or stronger where the network is not yours. With the `tls-rustls`
//! feature (on by default) the roots trusted without `ssl-ca` are Mozilla's, compiled in;
//! `tls-rustls-native-roots` trusts the system's store instead. Without either, a URL that
//! needs TLS fails to connect with an error naming the feature.
//!
//! ```no_run
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! use shedlock_mysql::MySqlLockProvider;
//!
//! let provider =
//!     MySqlLockProvider::connect("mysql://app@db.example.com/app?ssl-mode=VERIFY_IDENTITY&ssl-ca=/etc/ssl/db-ca.pem").await?;
//! # let _ = provider; Ok(()) }
//! ```
//!
//! [`Capabilities::max_name_chars`]: shedlock_core::Capabilities::max_name_chars
//! [`Capabilities::time_precision`]: shedlock_core::Capabilities::time_precision
//! [`LockAdmin`]: shedlock_core::LockAdmin
//! [`LockError::InvalidName`]: shedlock_core::LockError::InvalidName
//! [`TimeSource::Client`]: shedlock_core::TimeSource::Client

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod catalog;
mod statements;
mod storage;
mod table;

pub use shedlock_sql::{
    Column, DEFAULT_CONNECT_TIMEOUT, DEFAULT_IDLE_CHECK_INTERVAL, DEFAULT_MAX_CONNECTIONS,
    LockTable,
};
// Inlined so this crate's docs list their methods: an alias page shows the impls of a type
// documented in the same run only, and `cargo doc -p <this crate> --no-deps` documents no other.
#[doc(inline)]
pub use shedlock_sql::{SqlLockProvider, SqlLockProviderBuilder};
pub use storage::MySqlBackend;
pub use table::{Flavor, create_table_statement};

/// A lock provider on a MySQL or MariaDB table: one node's view of it. The shared provider, with this
/// crate's statements; see [`SqlLockProvider`] for its methods.
pub type MySqlLockProvider = SqlLockProvider<MySqlBackend>;

/// Configures and connects a [`MySqlLockProvider`]. Every setting has ShedLock's default; see
/// [`SqlLockProviderBuilder`] for the settings.
pub type MySqlLockProviderBuilder = SqlLockProviderBuilder<MySqlBackend>;
