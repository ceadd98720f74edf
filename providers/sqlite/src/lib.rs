//! SQLite lock provider for shedlock-rs: ShedLock's table in a database file that several
//! processes on one machine share.
//!
//! # The table
//!
//! ```sql
//! CREATE TABLE shedlock (
//!     name       VARCHAR(64)  NOT NULL,
//!     lock_until TIMESTAMP(3) NOT NULL,
//!     locked_at  TIMESTAMP(3) NOT NULL,
//!     locked_by  VARCHAR(255) NOT NULL,
//!     PRIMARY KEY (name)
//! );
//! -- optional, for fencing tokens:
//! ALTER TABLE shedlock ADD COLUMN fencing_token BIGINT NOT NULL DEFAULT 0;
//! ```
//!
//! Times are stored as SQLite's own date-time text in UTC with milliseconds,
//! `YYYY-MM-DD HH:MM:SS.SSS` (what `strftime('%Y-%m-%d %H:%M:%f', 'now')` returns). The width
//! is fixed, so comparing the text compares the times. Another program writing this table must
//! use the same format (a Java node with sqlite-jdbc: `date_class=TEXT`,
//! `date_string_format=yyyy-MM-dd HH:mm:ss.SSS`, a UTC JVM); numbers or other formats would not
//! compare correctly.
//!
//! SQLite does not enforce `VARCHAR(64)`, but this provider does: the declared length becomes
//! [`Capabilities::max_name_chars`] and a longer name is [`LockError::InvalidName`], as on the
//! server databases. A missing table, a missing column, a column of the wrong type or a `name`
//! that is not the primary key is an error at connect that says how to fix it;
//! [`SqliteLockProviderBuilder::create_table_if_missing`] creates the table.
//!
//! # The statements
//!
//! Every operation is one statement, outside any transaction of the caller, on a connection
//! the provider opened itself (for a URL) with no health check before or after it, except the
//! take-over of a name whose row the node has seen: a read, then, only when the read finds the
//! lock free (or the row gone), the upsert below. SQLite has no row locks: any write statement
//! takes the database's write lock, whether it changes anything or not, so nodes refused a held
//! lock would queue on that lock one after another. The read takes a shared lock only, and it
//! tells a refused node who holds the lock and until when. The upsert checks `lock_until` again
//! (another node may have taken the lock since the read), and brings back a row deleted by
//! hand. A node's first attempt on a name whose row it has not seen since it started is the
//! insert, then the take-over. A node that takes a lock again after its own release left it free
//! (its `lock_at_least_for` had passed) sends the upsert without the read, so a cycle is two
//! statements; if another node took the lock in between, that attempt is refused by the upsert
//! (naming nobody, having waited for the write lock), and the next one reads first again.
//! A provider's writes (the insert, the upsert, release, extend and force-unlock) take turns,
//! one at a time in the order they were asked: SQLite's busy handler retries a waiting writer
//! at growing intervals, so among several connections of one process a call that started
//! waiting early could be overtaken again and again until its operation timeout ran out. Only
//! writers of other processes (and other providers) wait in the busy handler.
//! `?4` is the time: the text `'now'` by default, so SQLite's own clock decides ([`TimeSource::Server`]: every
//! process sharing the file reads the same machine clock, and a node clock passed with
//! `with_clock` decides nothing); or the node's UTC time with [`TimeSource::Client`].
//!
//! ```sql
//! -- acquire of a name the node has seen: the read (?2 = the time)
//! SELECT lock_until <= strftime('%Y-%m-%d %H:%M:%f', ?2), locked_by, lock_until
//!   FROM shedlock WHERE name = ?1
//! -- then, unless it found the lock held (?3 = '+60.000 seconds'); for a name the node has
//! -- not seen, the same INSERT with ON CONFLICT (name) DO NOTHING:
//! INSERT INTO shedlock (name, lock_until, locked_at, locked_by)
//!   VALUES (?1, strftime('%Y-%m-%d %H:%M:%f', ?4, ?3), strftime('%Y-%m-%d %H:%M:%f', ?4), ?2)
//!   ON CONFLICT (name) DO UPDATE SET lock_until = excluded.lock_until,
//!     locked_at = excluded.locked_at, locked_by = excluded.locked_by
//!   WHERE lock_until <= strftime('%Y-%m-%d %H:%M:%f', ?4)
//!   RETURNING 0                  -- or the new fencing token; no row: not acquired
//! -- release (?3 = lock_at_least_for):
//! UPDATE shedlock SET lock_until = max(strftime('%Y-%m-%d %H:%M:%f', ?4),
//!     strftime('%Y-%m-%d %H:%M:%f', locked_at, ?3))
//!   WHERE name = ?1 AND locked_by = ?2 AND lock_until > strftime('%Y-%m-%d %H:%M:%f', ?4)
//!     AND lock_until > locked_at
//! -- extend (?3 = the new lock_at_most_for):
//! UPDATE shedlock SET lock_until = strftime('%Y-%m-%d %H:%M:%f', ?4, ?3)
//!   WHERE name = ?1 AND locked_by = ?2 AND lock_until > strftime('%Y-%m-%d %H:%M:%f', ?4)
//!     AND lock_until > locked_at
//! ```
//!
//! `locked_by` is `<holder>#<random>`, unique per acquisition, so a node whose lock expired and
//! was taken over can neither release nor extend the new holder's lock. With the fencing
//! column (default name `fencing_token`), the acquire increments it and returns it as the
//! lock's fencing token.
//!
//! ```no_run
//! use std::time::Duration;
//! use shedlock_core::{LockConfiguration, LockingTaskExecutor};
//! use shedlock_sqlite::SqliteLockProvider;
//! # async fn run() -> Result<(), shedlock_core::LockError> {
//! let provider = SqliteLockProvider::builder()
//!     .create_table_with_fencing_if_missing()
//!     .connect("sqlite://locks.db?mode=rwc")
//!     .await?;
//! let executor = LockingTaskExecutor::new(provider);
//! let config = LockConfiguration::new("report", Duration::from_secs(60), Duration::ZERO)?;
//! executor.execute(&config, async { /* at most one process at a time */ }).await?;
//! # Ok(()) }
//! ```
//!
//! # Seeing and freeing locks
//!
//! [`SqliteLockProvider`] is also the table's [`LockAdmin`]: an operator lists the locks whose
//! names start with a prefix, inspects one, and frees one a dead process left behind.
//!
//! - **List** shows every row, released ones too: name, `locked_by`, `locked_at`, `lock_until`
//!   as `held_until`, the fencing token where the column exists, and held or free with the time
//!   left, judged by the same clock and the same text comparison as the lock statements
//!   (SQLite's `'now'`, or the node's clock for [`TimeSource::Client`]). A time another program
//!   wrote in another format shows no instant; its state is still that comparison. Pages are
//!   keyset pages in name order, one statement each (`WHERE name > ?4 AND name LIKE ?1 ESCAPE
//!   '!' ORDER BY name LIMIT n + 1`, the prefix's `%`, `_` and `!` escaped). SQLite's `LIKE`
//!   ignores ASCII case, so rows that do not start with the exact prefix are dropped from the
//!   page, which may then hold fewer locks than asked and still not be the last.
//! - **Inspect** reads one row; a name longer than the declared column is refused as the lock
//!   operations refuse it.
//! - **The acquisition id** is `<locked_by>/<locked_at>/<fencing_token>`, `locked_at` being the
//!   stored text exactly (`/<fencing_token>` only with the fencing column), each part
//!   percent-encoded where it holds `%`, `/` or white space:
//!   `rust-node#4f1c...e2/2024-06-10%2012:00:00.123/7`.
//! - **Force-unlock** is one compare-and-free statement that keeps the row and the fencing
//!   counter:
//!
//! ```sql
//! UPDATE shedlock SET lock_until = min(strftime('%Y-%m-%d %H:%M:%f', ?4), locked_at)
//!   WHERE name = ?1 AND locked_by = ?2 AND locked_at = ?3
//!     AND fencing_token IS ?5                       -- with the fencing column
//!     AND lock_until > strftime('%Y-%m-%d %H:%M:%f', ?4) AND lock_until > locked_at
//! ```
//!
//! It answers true only if that acquisition still held the lock; the lock is then free for
//! any process at once, and the old holder's release and extend answer false. Each call is one
//! statement, bounded by the operation timeout (the busy timeout).
//! A freed acquisition's `lock_until` is set no later than its `locked_at`, which no held lock
//! has, and every release, extend and force-unlock asks for `lock_until > locked_at` as well as
//! for a `lock_until` still ahead: a call of that acquisition that comes after it (a second
//! operator's force-unlock, the holder's extend) therefore finds it freed whatever clock it
//! compares with, the node's own under client time included.
//!
//! [`Capabilities::max_name_chars`]: shedlock_core::Capabilities::max_name_chars
//! [`LockAdmin`]: shedlock_core::LockAdmin
//! [`LockError::InvalidName`]: shedlock_core::LockError::InvalidName
//! [`TimeSource::Client`]: shedlock_core::TimeSource::Client
//! [`TimeSource::Server`]: shedlock_core::TimeSource::Server

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
pub use storage::{SqliteBackend, create_table_statement};

/// A lock provider on a table in a SQLite file: one node's view of it. The shared provider, with this
/// crate's statements; see [`SqlLockProvider`] for its methods.
pub type SqliteLockProvider = SqlLockProvider<SqliteBackend>;

/// Configures and connects a [`SqliteLockProvider`]. Every setting has ShedLock's default; see
/// [`SqlLockProviderBuilder`] for the settings.
pub type SqliteLockProviderBuilder = SqlLockProviderBuilder<SqliteBackend>;
