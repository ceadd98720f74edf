//! Backend (c): a SQL-like server holding ShedLock's table (`name`, `lock_until`,
//! `locked_at`, `locked_by`, plus a `fence` column Java never needs), with conditional
//! `UPDATE ... RETURNING`, `INSERT` that fails on a duplicate key, `LIKE` with an escape
//! character, and its own clock (`now()`), 750 ms ahead of the machine's. Like MySQL in its
//! old non-strict mode it silently truncates a `VARCHAR(64)` value that is too long, and its
//! DDL decides the collation and the precision of timestamps.
//!
//! The provider declares server time: every time it writes or compares is the server's `now()`.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockHolder, LockInfo, LockPage, LockProvider, LockState, Operation, PageCursor,
    PageRequest, TimeSource, raw::default_holder,
};

use super::common::{Net, NetError, ServerClock, add_ms, ceil_ms, from_unix_ms, unix_ms};

const PROVIDER: &str = "sqlish";
/// `name VARCHAR(64)`.
const NAME_CHARS: usize = 64;

// ------------------------------------------------------------------------------------------
// The simulated server
// ------------------------------------------------------------------------------------------

/// How the table was created.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ddl {
    /// `COLLATE utf8mb4_general_ci` (case-insensitive, trailing spaces ignored) instead of a
    /// binary collation.
    pub case_insensitive: bool,
    /// `TIMESTAMP` (whole seconds) instead of `TIMESTAMP(3)`.
    pub second_timestamps: bool,
}

/// One row of the lock table.
#[derive(Debug, Clone)]
pub struct Row {
    pub name: String,
    pub lock_until: SystemTime,
    pub locked_at: SystemTime,
    pub locked_by: String,
    pub fence: i64,
}

/// A time expression, evaluated by the server when it applies the statement.
#[derive(Debug, Clone)]
pub enum TExpr {
    /// `now()`.
    Now,
    /// `now() + INTERVAL ? MILLISECOND`.
    NowPlusMs(i64),
    /// A value the client sent.
    Value(SystemTime),
    /// `GREATEST(now(), locked_at + INTERVAL ? MILLISECOND)`, with the row's current `locked_at`.
    GreatestNowLockedAtPlusMs(i64),
}

/// A `SET` clause.
#[derive(Debug, Clone)]
pub enum Set {
    LockUntil(TExpr),
    LockedAt(TExpr),
    LockedBy(String),
    /// `fence = fence + 1`.
    FenceIncrement,
}

/// A `WHERE` condition (besides `name = ?`).
#[derive(Debug, Clone)]
pub enum Cond {
    LockUntilLeNow,
    LockUntilGtNow,
    LockUntilLe(SystemTime),
    LockedByEq(String),
    LockedAtEq(SystemTime),
    /// `locked_by NOT LIKE '%#%'`.
    LockedByWithoutHash,
    Or(Box<Cond>, Box<Cond>),
}

/// A failed statement.
#[derive(Debug)]
pub enum SqlError {
    Net(NetError),
    /// `ERROR 1062 (23000): Duplicate entry`.
    DuplicateKey,
}

/// The shared SQL server with its one table.
#[derive(Debug)]
pub struct SqlServer {
    rows: StdMutex<BTreeMap<String, Row>>,
    clock: ServerClock,
    ddl: Ddl,
}

fn truncate_chars(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

fn like(pattern: &[char], escape: Option<char>, text: &[char]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some(&c) if Some(c) == escape && pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && like(&pattern[2..], escape, &text[1..])
        }
        Some('%') => (0..=text.len()).any(|i| like(&pattern[1..], escape, &text[i..])),
        Some('_') => !text.is_empty() && like(&pattern[1..], escape, &text[1..]),
        Some(&c) => text.first() == Some(&c) && like(&pattern[1..], escape, &text[1..]),
    }
}

impl SqlServer {
    pub fn new(ddl: Ddl) -> Arc<Self> {
        Arc::new(Self {
            rows: StdMutex::new(BTreeMap::new()),
            clock: ServerClock::with_offset_ms(750),
            ddl,
        })
    }

    /// The value as the column stores it (VARCHAR(64), non-strict mode: truncated).
    fn stored_name(&self, name: &str) -> String {
        truncate_chars(name, NAME_CHARS)
    }

    /// The collation's comparison key.
    fn key(&self, name: &str) -> String {
        let stored = self.stored_name(name);
        if self.ddl.case_insensitive {
            stored.to_lowercase().trim_end_matches(' ').to_owned()
        } else {
            stored
        }
    }

    /// The value as a `TIMESTAMP(3)` (or `TIMESTAMP`) column stores it: truncated.
    fn stored_time(&self, t: SystemTime) -> SystemTime {
        let ms = unix_ms(t);
        let unit = if self.ddl.second_timestamps { 1000 } else { 1 };
        from_unix_ms(ms.div_euclid(unit) * unit)
    }

    fn eval(&self, e: &TExpr, row: Option<&Row>, now: SystemTime) -> SystemTime {
        let t = match e {
            TExpr::Now => now,
            TExpr::NowPlusMs(ms) => add_ms(now, *ms),
            TExpr::Value(t) => *t,
            TExpr::GreatestNowLockedAtPlusMs(ms) => {
                let at = row.map(|r| add_ms(r.locked_at, *ms)).unwrap_or(now);
                at.max(now)
            }
        };
        self.stored_time(t)
    }

    fn holds(cond: &Cond, row: &Row, now: SystemTime) -> bool {
        match cond {
            Cond::LockUntilLeNow => row.lock_until <= now,
            Cond::LockUntilGtNow => row.lock_until > now,
            Cond::LockUntilLe(t) => row.lock_until <= *t,
            Cond::LockedByEq(by) => row.locked_by == *by,
            Cond::LockedAtEq(at) => row.locked_at == *at,
            Cond::LockedByWithoutHash => !row.locked_by.contains('#'),
            Cond::Or(a, b) => Self::holds(a, row, now) || Self::holds(b, row, now),
        }
    }

    /// Writes a record as Java ShedLock would (the harness's `write_record`): the fence column
    /// keeps its value, or takes its default 0 on a new row.
    pub fn plant(&self, record: &PlantedRecord) {
        let mut rows = self.rows.lock().unwrap();
        let key = self.key(&record.name);
        let fence = rows.get(&key).map(|r| r.fence).unwrap_or(0);
        let name = rows
            .get(&key)
            .map(|r| r.name.clone())
            .unwrap_or_else(|| self.stored_name(&record.name));
        rows.insert(
            key,
            Row {
                name,
                lock_until: self.stored_time(record.lock_until),
                locked_at: self.stored_time(record.locked_at),
                locked_by: record.locked_by.clone(),
                fence,
            },
        );
    }
}

/// One client connection.
#[derive(Debug)]
pub struct SqlConn {
    server: Arc<SqlServer>,
    net: Net,
}

impl SqlConn {
    async fn exec<R>(
        &self,
        f: impl FnOnce(&SqlServer, &mut BTreeMap<String, Row>, SystemTime) -> R,
    ) -> Result<R, SqlError> {
        self.net.send().await.map_err(SqlError::Net)?;
        let result = {
            let mut rows = self.server.rows.lock().unwrap();
            f(&self.server, &mut rows, self.server.clock.now())
        };
        self.net.receive().await;
        Ok(result)
    }

    /// `INSERT INTO shedlock (...) VALUES (...) RETURNING *`.
    pub async fn insert(
        &self,
        name: &str,
        lock_until: TExpr,
        locked_at: TExpr,
        locked_by: &str,
    ) -> Result<Row, SqlError> {
        self.exec(|server, rows, now| {
            let key = server.key(name);
            if rows.contains_key(&key) {
                return Err(SqlError::DuplicateKey);
            }
            let row = Row {
                name: server.stored_name(name),
                lock_until: server.eval(&lock_until, None, now),
                locked_at: server.eval(&locked_at, None, now),
                locked_by: locked_by.to_owned(),
                fence: 1,
            };
            rows.insert(key, row.clone());
            Ok(row)
        })
        .await?
    }

    /// `UPDATE shedlock SET ... WHERE name = ? AND ... RETURNING *`.
    pub async fn update(
        &self,
        name: &str,
        sets: Vec<Set>,
        conds: Vec<Cond>,
    ) -> Result<Option<Row>, SqlError> {
        self.exec(|server, rows, now| {
            let row = rows.get_mut(&server.key(name))?;
            if !conds.iter().all(|c| SqlServer::holds(c, row, now)) {
                return None;
            }
            let old = row.clone();
            for set in &sets {
                match set {
                    Set::LockUntil(e) => row.lock_until = server.eval(e, Some(&old), now),
                    Set::LockedAt(e) => row.locked_at = server.eval(e, Some(&old), now),
                    Set::LockedBy(by) => row.locked_by = by.clone(),
                    Set::FenceIncrement => row.fence = old.fence + 1,
                }
            }
            Some(row.clone())
        })
        .await
    }

    /// `SELECT *, now() FROM shedlock WHERE name = ?`.
    pub async fn select(&self, name: &str) -> Result<(Option<Row>, SystemTime), SqlError> {
        self.exec(|server, rows, now| (rows.get(&server.key(name)).cloned(), now))
            .await
    }

    /// `SELECT *, now() FROM shedlock WHERE name LIKE ? [ESCAPE ?] AND name > ? ORDER BY name LIMIT ?`.
    pub async fn select_like(
        &self,
        pattern: &str,
        escape: Option<char>,
        after: Option<String>,
        after_inclusive: bool,
        limit: usize,
    ) -> Result<(Vec<Row>, SystemTime), SqlError> {
        self.exec(|server, rows, now| {
            let ci = server.ddl.case_insensitive;
            let fold = |s: &str| if ci { s.to_lowercase() } else { s.to_owned() };
            let pattern: Vec<char> = fold(pattern).chars().collect();
            let after = after.map(|a| server.key(&a));
            let found = rows
                .iter()
                .filter(|(key, _)| match &after {
                    None => true,
                    Some(a) if after_inclusive => *key >= a,
                    Some(a) => *key > a,
                })
                .filter(|(_, row)| {
                    like(
                        &pattern,
                        escape,
                        &fold(&row.name).chars().collect::<Vec<_>>(),
                    )
                })
                .take(limit)
                .map(|(_, row)| row.clone())
                .collect();
            (found, now)
        })
        .await
    }

    /// `DELETE FROM shedlock WHERE name = ? AND ...`.
    pub async fn delete(&self, name: &str, conds: Vec<Cond>) -> Result<bool, SqlError> {
        self.exec(|server, rows, now| {
            let key = server.key(name);
            match rows.get(&key) {
                Some(row) if conds.iter().all(|c| SqlServer::holds(c, row, now)) => {
                    rows.remove(&key);
                    true
                }
                _ => false,
            }
        })
        .await
    }
}

// ------------------------------------------------------------------------------------------
// The provider
// ------------------------------------------------------------------------------------------

/// The one bug a broken sqlish provider has; `None` is the correct control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SqlBug {
    /// The table's DDL uses `TIMESTAMP` (whole seconds, truncated) instead of `TIMESTAMP(3)`,
    /// while the provider declares 1 ms precision: `lock_until` lands up to a second early.
    /// Breaks `[at-most]`. Plausible: MySQL's `TIMESTAMP` has no fraction unless asked.
    SecondTimestamps,
    /// The same whole-second column, but the author, having seen the checks fail, declares
    /// `time_precision = 1 s` to "excuse" it, although the lock still ends up to a second
    /// *before* acquired_at + lock_at_most_for (rounding down, not up). Breaks
    /// `[honest-capabilities]` / `[at-most]`.
    SecondTimestampsDeclaredCoarse,
    /// Binds `lock_at_most_for` in milliseconds as a 32-bit integer (`setInt`), which wraps
    /// negative above 24.8 days: a 30-day lock is written already expired. Breaks `[at-most]`.
    IntMillis,
    /// Writes `lock_until` and `locked_at` from the node's `SystemTime::now()` (as Java
    /// ShedLock does without `usingDbTime()`) while the `WHERE lock_until <= now()` is the
    /// server's: with the server's clock 750 ms ahead, locks end 750 ms early. Breaks
    /// `[server-time]` (values the node computes from its wall clock must not be sent as times).
    ClientLockUntil,
    /// Acquires with `WHERE lock_until <= ?` bound to `SystemTime::now()` instead of
    /// `now()`: expiry judged by the node's system clock, so locks look held 750 ms too long.
    /// Breaks `[server-time]`.
    ClientNowCompare,
    /// Release computes `GREATEST(now, locked_at + at_least)` on the node with the clock it
    /// was given, and sends the result: a node whose clock is an hour ahead keeps the lock for
    /// an hour. Breaks `[server-time]`. Plausible: "release is rare, compute it client-side".
    ReleaseNodeClock,
    /// Taking over an expired row does not set `locked_at` (only `lock_until` and
    /// `locked_by`), so a release counts at-least from the previous holder's acquisition.
    /// Breaks `[at-least]`.
    TakeoverKeepsLockedAt,
    /// Extend also sets `locked_at = now()` (copied from the acquire statement), so a release
    /// after an extend holds until extend + at-least. Breaks `[extend]` (an extend does not
    /// change acquired_at).
    ExtendMovesLockedAt,
    /// The handle checks its "released" flag, awaits the `UPDATE`, then sets the flag: two
    /// tasks releasing one handle at once are both told `true` (the row still names this
    /// acquisition during at-least). Breaks `[release-result]`.
    ReleaseFlagAfterAwait,
    /// Release's `UPDATE` matches `locked_by` only, not `lock_until > now()`: a release after
    /// the lock expired answers `true`. Breaks `[release-result]`.
    ReleaseIgnoresExpiry,
    /// Release as read-then-write: `SELECT` checks owner and expiry, then `UPDATE ... WHERE
    /// name = ?` without conditions, so a release that reaches the server late frees whoever
    /// took the lock in between. Breaks `[ownership]` (check and write must be one step).
    ReleaseReadThenWrite,
    /// Extend as read-then-write, as above: a late `UPDATE` extends another holder's lock, or
    /// revives an expired one. Breaks `[extend]` / `[ownership]`.
    ExtendReadThenWrite,
    /// The table's `name` column has a case-insensitive, pad-space collation:
    /// `Report`/`report` and `job`/`job ` share a row. Breaks `[names-are-data]`.
    CaseInsensitiveCollation,
    /// No length check: relies on the column, which (non-strict mode) truncates a 65-character
    /// name to the 64-character name of another lock. Breaks `[name-length]`.
    VarcharTruncation,
    /// Release answers `false` without asking when the name is not in the node's cache of
    /// known rows ("we never inserted it, nothing to release"): after the cache is cleared,
    /// the holder cannot release its lock. Breaks `[name-cache]`.
    UnlockNeedsCachedName,
    /// A duplicate-key error on the insert is answered `NotAcquired` without trying the
    /// update: an existing, free row is refused to every node that did not create it, at its
    /// first try. Breaks `[free-lock-is-taken]`.
    DuplicateIsNotAcquired,
    /// Release with `lock_at_least_for = 0` deletes the row (to keep the table small), so the
    /// next acquisition inserts a new row and its fence starts at 1 again. Breaks `[fencing]`
    /// (records are kept; tokens never go back).
    DeleteOnRelease,
    /// The fencing token is `locked_at` in epoch seconds ("ShedLock's table has no counter"):
    /// two acquisitions within one second share it. Breaks `[fencing]`.
    FenceFromLockedAt,
    /// Force-unlock deletes the row instead of setting `lock_until = now()`: the next
    /// acquisition restarts the fence. Breaks `[admin]` (force-unlock keeps records so tokens
    /// keep increasing).
    ForceUnlockDeletes,
    /// Acquire also takes rows whose `locked_by` is this host's bare name ("our own lock from
    /// before a restart"), which is exactly what a Java ShedLock node on the same host writes.
    /// Breaks `[shedlock-records]`.
    JavaHostIsOwn,
    /// Acquire treats rows whose `locked_by` has no `#id` as left over by an old version and
    /// takes them over even when held. Breaks `[shedlock-records]`.
    ForeignFormatTakeover,
    /// Listing uses `name LIKE '<prefix>%'` without escaping `%`, `_` and `\` in the prefix:
    /// names outside the prefix are listed. Breaks `[admin]`.
    LikeUnescaped,
    /// Force-unlock ignores the acquisition id (`WHERE name = ? AND lock_until > now()`):
    /// it frees a newer acquisition than the operator saw. Breaks `[admin]`.
    ForceUnlockByName,
    /// Force-unlock as read-then-write: `SELECT` compares the acquisition, then an
    /// unconditional `UPDATE`: two operators are both told `true`, and one may free a newer
    /// acquisition. Breaks `[admin]`.
    ForceUnlockReadThenWrite,
    /// The admin judges held/free and the remaining time with `SystemTime::now()` instead of
    /// the `now()` the same statement returned, so with the server 750 ms ahead it shows
    /// expired locks as held and overstates the remaining time. Breaks `[admin]`.
    AdminSystemClock,
    /// The listing's next page is `WHERE name >= <cursor>`, repeating each page's last lock.
    /// Breaks `[admin]` (every lock exactly once).
    ListingCursorInclusive,
}

/// The harness for sqlish providers.
pub struct SqlHarness {
    name: String,
    server: Arc<SqlServer>,
    bug: Option<SqlBug>,
}

impl SqlHarness {
    pub fn new(name: &str, bug: Option<SqlBug>) -> Self {
        let ddl = Ddl {
            case_insensitive: bug == Some(SqlBug::CaseInsensitiveCollation),
            second_timestamps: matches!(
                bug,
                Some(SqlBug::SecondTimestamps) | Some(SqlBug::SecondTimestampsDeclaredCoarse)
            ),
        };
        Self {
            name: name.to_owned(),
            server: SqlServer::new(ddl),
            bug,
        }
    }
}

#[async_trait]
impl ConformanceHarness for SqlHarness {
    type Node = SqlNode;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<SqlNode, SetupError> {
        Ok(SqlNode::new(
            SqlConn {
                server: self.server.clone(),
                net: Net::up(),
            },
            clock,
            self.bug,
        ))
    }

    async fn cut_off(&self, node: &SqlNode) -> Result<Support<()>, SetupError> {
        node.0.conn.net.cut();
        Ok(Support::Supported(()))
    }

    async fn unreachable_node(&self) -> Result<Support<SqlNode>, SetupError> {
        Ok(Support::Supported(SqlNode::new(
            SqlConn {
                server: self.server.clone(),
                net: Net::down(Duration::from_secs(2)),
            },
            Arc::new(shedlock_core::SystemClock),
            self.bug,
        )))
    }

    fn clear_name_cache(&self, node: &SqlNode) -> Support<()> {
        node.0.cache.lock().unwrap().clear();
        Support::Supported(())
    }

    fn admin<'node>(&self, node: &'node SqlNode) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        // For the report: which holder the kit plants (its child's stderr goes to stderr.log).
        eprintln!(
            "write_record: name {:?} locked_by {:?}",
            record.name, record.locked_by
        );
        self.server.plant(record);
        Ok(Support::Supported(()))
    }
}

/// A sqlish node.
#[derive(Clone)]
pub struct SqlNode(Arc<SqlInner>);

struct SqlInner {
    conn: SqlConn,
    clock: Arc<dyn Clock>,
    /// ShedLock's default `locked_by`: the host name; each acquisition appends `#<uuid>`.
    holder: String,
    bug: Option<SqlBug>,
    /// Names this node knows to have a row.
    cache: StdMutex<HashSet<String>>,
}

impl fmt::Debug for SqlNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlNode")
            .field("holder", &self.0.holder)
            .field("bug", &self.0.bug)
            .finish()
    }
}

fn lock_error(error: SqlError, operation: Operation, name: &str) -> LockError {
    match error {
        SqlError::Net(NetError::ConnectTimeout(after)) => LockError::Timeout {
            provider: PROVIDER,
            operation,
            name: name.to_owned(),
            after,
        },
        SqlError::DuplicateKey => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            "duplicate key",
        ),
    }
}

fn acquisition_id(row: &Row) -> AcquisitionId {
    AcquisitionId::new(format!("{}|{}", unix_ms(row.locked_at), row.locked_by))
}

fn escape_like(prefix: &str) -> String {
    let mut out = String::new();
    for c in prefix.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl SqlNode {
    fn new(conn: SqlConn, clock: Arc<dyn Clock>, bug: Option<SqlBug>) -> Self {
        Self(Arc::new(SqlInner {
            conn,
            clock,
            holder: default_holder(),
            bug,
            cache: StdMutex::new(HashSet::new()),
        }))
    }

    fn is(&self, bug: SqlBug) -> bool {
        self.0.bug == Some(bug)
    }

    fn ms(&self, d: Duration) -> i64 {
        if self.is(SqlBug::IntMillis) {
            d.as_millis() as i32 as i64
        } else {
            i64::try_from(ceil_ms(d)).unwrap_or(i64::MAX / 4)
        }
    }

    fn until_expr(&self, d: Duration) -> TExpr {
        if self.is(SqlBug::ClientLockUntil) {
            TExpr::Value(add_ms(SystemTime::now(), self.ms(d)))
        } else {
            TExpr::NowPlusMs(self.ms(d))
        }
    }

    fn at_expr(&self) -> TExpr {
        if self.is(SqlBug::ClientLockUntil) {
            TExpr::Value(SystemTime::now())
        } else {
            TExpr::Now
        }
    }

    fn free_cond(&self) -> Cond {
        match self.0.bug {
            Some(SqlBug::ClientNowCompare) => Cond::LockUntilLe(SystemTime::now()),
            Some(SqlBug::JavaHostIsOwn) => Cond::Or(
                Box::new(Cond::LockUntilLeNow),
                Box::new(Cond::LockedByEq(self.0.holder.clone())),
            ),
            Some(SqlBug::ForeignFormatTakeover) => Cond::Or(
                Box::new(Cond::LockUntilLeNow),
                Box::new(Cond::LockedByWithoutHash),
            ),
            _ => Cond::LockUntilLeNow,
        }
    }

    fn acquired(&self, name: &str, row: Row, at_least: Duration) -> Acquisition {
        let token = if self.is(SqlBug::FenceFromLockedAt) {
            row.locked_at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        } else {
            row.fence as u64
        };
        Acquisition::Acquired(Box::new(SqlHandle {
            node: self.clone(),
            name: name.to_owned(),
            locked_by: row.locked_by,
            locked_at: row.locked_at,
            at_least_ms: self.ms(at_least),
            token,
            released: tokio::sync::Mutex::new(false),
            released_flag: AtomicBool::new(false),
        }))
    }

    fn info(&self, row: &Row, now: SystemTime) -> LockInfo {
        let judge = if self.is(SqlBug::AdminSystemClock) {
            SystemTime::now()
        } else {
            now
        };
        LockInfo::new(row.name.clone(), LockState::Free, acquisition_id(row))
            .with_locked_by(row.locked_by.clone())
            .with_locked_at(row.locked_at)
            .with_fencing_token(row.fence as u64)
            .judged_at(row.lock_until, judge)
    }
}

#[async_trait]
impl LockProvider for SqlNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        if !self.is(SqlBug::VarcharTruncation) {
            self.capabilities().check_name_length(PROVIDER, name)?;
        }
        let err = |e| lock_error(e, Operation::Acquire, name);
        let conn = &self.0.conn;
        let at_most = config.lock_at_most_for();
        let at_least = config.lock_at_least_for();
        let locked_by = format!("{}#{}", self.0.holder, uuid::Uuid::new_v4().simple());
        let cached = self.0.cache.lock().unwrap().contains(name);
        if !cached {
            match conn
                .insert(name, self.until_expr(at_most), self.at_expr(), &locked_by)
                .await
            {
                Ok(row) => {
                    self.0.cache.lock().unwrap().insert(name.to_owned());
                    return Ok(self.acquired(name, row, at_least));
                }
                Err(SqlError::DuplicateKey) => {
                    self.0.cache.lock().unwrap().insert(name.to_owned());
                    if self.is(SqlBug::DuplicateIsNotAcquired) {
                        return Ok(Acquisition::NotAcquired(None));
                    }
                }
                Err(e) => return Err(err(e)),
            }
        }
        let mut sets = vec![Set::LockUntil(self.until_expr(at_most))];
        if !self.is(SqlBug::TakeoverKeepsLockedAt) {
            sets.push(Set::LockedAt(self.at_expr()));
        }
        sets.push(Set::LockedBy(locked_by.clone()));
        sets.push(Set::FenceIncrement);
        if let Some(row) = conn
            .update(name, sets, vec![self.free_cond()])
            .await
            .map_err(err)?
        {
            return Ok(self.acquired(name, row, at_least));
        }
        match conn.select(name).await.map_err(err)? {
            (Some(row), _) => Ok(Acquisition::NotAcquired(Some(LockHolder {
                locked_by: Some(row.locked_by),
                held_until: Some(row.lock_until),
            }))),
            (None, _) => {
                // The row was deleted behind the cache's back: create it again.
                self.0.cache.lock().unwrap().remove(name);
                match conn
                    .insert(name, self.until_expr(at_most), self.at_expr(), &locked_by)
                    .await
                {
                    Ok(row) => {
                        self.0.cache.lock().unwrap().insert(name.to_owned());
                        Ok(self.acquired(name, row, at_least))
                    }
                    Err(SqlError::DuplicateKey) => Ok(Acquisition::NotAcquired(None)),
                    Err(e) => Err(err(e)),
                }
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        let precision = if self.is(SqlBug::SecondTimestampsDeclaredCoarse) {
            Duration::from_secs(1)
        } else {
            Duration::from_millis(1)
        };
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
            .with_max_name_chars(NAME_CHARS)
            .with_time_precision(precision)
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// One acquisition on sqlish.
pub struct SqlHandle {
    node: SqlNode,
    name: String,
    locked_by: String,
    /// The server's `locked_at` of this acquisition, as `RETURNING` gave it.
    locked_at: SystemTime,
    at_least_ms: i64,
    token: u64,
    released: tokio::sync::Mutex<bool>,
    /// `ReleaseFlagAfterAwait` only.
    released_flag: AtomicBool,
}

impl fmt::Debug for SqlHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlHandle")
            .field("name", &self.name)
            .field("locked_by", &self.locked_by)
            .finish()
    }
}

impl SqlHandle {
    async fn release_statement(&self) -> Result<bool, LockError> {
        let node = &self.node;
        let conn = &node.0.conn;
        let name = self.name.as_str();
        let err = |e| lock_error(e, Operation::Release, name);
        if node.is(SqlBug::UnlockNeedsCachedName) && !node.0.cache.lock().unwrap().contains(name) {
            return Ok(false);
        }
        let mine = Cond::LockedByEq(self.locked_by.clone());
        if node.is(SqlBug::ReleaseReadThenWrite) {
            let (row, now) = conn.select(name).await.map_err(err)?;
            return match row {
                Some(row) if row.locked_by == self.locked_by && row.lock_until > now => {
                    let until = TExpr::GreatestNowLockedAtPlusMs(self.at_least_ms);
                    conn.update(name, vec![Set::LockUntil(until)], vec![])
                        .await
                        .map_err(err)?;
                    Ok(true)
                }
                _ => Ok(false),
            };
        }
        if node.is(SqlBug::DeleteOnRelease) && self.at_least_ms == 0 {
            return conn
                .delete(name, vec![mine, Cond::LockUntilGtNow])
                .await
                .map_err(err);
        }
        let until = match node.0.bug {
            Some(SqlBug::ClientLockUntil) => {
                TExpr::Value(SystemTime::now().max(add_ms(self.locked_at, self.at_least_ms)))
            }
            Some(SqlBug::ReleaseNodeClock) => TExpr::Value(
                node.0
                    .clock
                    .now()
                    .max(add_ms(self.locked_at, self.at_least_ms)),
            ),
            _ => TExpr::GreatestNowLockedAtPlusMs(self.at_least_ms),
        };
        let conds = if node.is(SqlBug::ReleaseIgnoresExpiry) {
            vec![mine]
        } else {
            vec![mine, Cond::LockUntilGtNow]
        };
        Ok(conn
            .update(name, vec![Set::LockUntil(until)], conds)
            .await
            .map_err(err)?
            .is_some())
    }
}

#[async_trait]
impl LockHandle for SqlHandle {
    fn name(&self) -> &str {
        &self.name
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        if self.node.is(SqlBug::ReleaseFlagAfterAwait) {
            if self.released_flag.load(Ordering::SeqCst) {
                return Ok(false);
            }
            let answer = self.release_statement().await;
            if answer.is_ok() {
                self.released_flag.store(true, Ordering::SeqCst);
            }
            return answer;
        }
        let mut released = self.released.lock().await;
        if *released {
            return Ok(false);
        }
        let answer = self.release_statement().await;
        if answer.is_ok() {
            *released = true;
        }
        answer
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        let name = self.name.as_str();
        if lock_at_most_for.is_zero() {
            return Err(LockConfiguration::new(name, Duration::ZERO, Duration::ZERO)
                .unwrap_err()
                .into());
        }
        let released = self.released.lock().await;
        if *released || self.released_flag.load(Ordering::SeqCst) {
            return Ok(false);
        }
        let node = &self.node;
        let conn = &node.0.conn;
        let err = |e| lock_error(e, Operation::Extend, name);
        if node.is(SqlBug::ExtendReadThenWrite) {
            let (row, now) = conn.select(name).await.map_err(err)?;
            return match row {
                Some(row) if row.locked_by == self.locked_by && row.lock_until > now => {
                    let until = node.until_expr(lock_at_most_for);
                    conn.update(name, vec![Set::LockUntil(until)], vec![])
                        .await
                        .map_err(err)?;
                    Ok(true)
                }
                _ => Ok(false),
            };
        }
        let mut sets = vec![Set::LockUntil(node.until_expr(lock_at_most_for))];
        if node.is(SqlBug::ExtendMovesLockedAt) {
            sets.push(Set::LockedAt(TExpr::Now));
        }
        let conds = vec![
            Cond::LockedByEq(self.locked_by.clone()),
            Cond::LockUntilGtNow,
        ];
        Ok(conn.update(name, sets, conds).await.map_err(err)?.is_some())
    }
}

#[async_trait]
impl LockAdmin for SqlNode {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let err = |e| lock_error(e, Operation::List, "");
        let (pattern, escape) = if self.is(SqlBug::LikeUnescaped) {
            (format!("{}%", request.prefix), None)
        } else {
            (format!("{}%", escape_like(&request.prefix)), Some('\\'))
        };
        let limit = request.limit.max(1);
        let after = request.after.as_ref().map(|c| c.as_str().to_owned());
        let (rows, now) = self
            .0
            .conn
            .select_like(
                &pattern,
                escape,
                after,
                self.is(SqlBug::ListingCursorInclusive),
                limit,
            )
            .await
            .map_err(err)?;
        let next = if rows.len() == limit {
            rows.last().map(|r| PageCursor::new(r.name.clone()))
        } else {
            None
        };
        Ok(LockPage {
            locks: rows.iter().map(|r| self.info(r, now)).collect(),
            next,
        })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let (row, now) = self
            .0
            .conn
            .select(name)
            .await
            .map_err(|e| lock_error(e, Operation::Inspect, name))?;
        Ok(row.map(|r| self.info(&r, now)))
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let err = |e| lock_error(e, Operation::ForceUnlock, name);
        let malformed = || {
            LockError::invalid_request(
                PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "acquisition {:?} is not <locked_at ms>|<locked_by>",
                    acquisition.as_str()
                ),
            )
        };
        let (at, by) = acquisition.as_str().split_once('|').ok_or_else(malformed)?;
        let at = from_unix_ms(at.parse::<i64>().map_err(|_| malformed())?);
        let conn = &self.0.conn;
        let same = vec![
            Cond::LockedByEq(by.to_owned()),
            Cond::LockedAtEq(at),
            Cond::LockUntilGtNow,
        ];
        match self.0.bug {
            Some(SqlBug::ForceUnlockDeletes) => conn.delete(name, same).await.map_err(err),
            Some(SqlBug::ForceUnlockByName) => Ok(conn
                .update(
                    name,
                    vec![Set::LockUntil(TExpr::Now)],
                    vec![Cond::LockUntilGtNow],
                )
                .await
                .map_err(err)?
                .is_some()),
            Some(SqlBug::ForceUnlockReadThenWrite) => {
                let (row, now) = conn.select(name).await.map_err(err)?;
                match row {
                    Some(row)
                        if row.locked_by == by && row.locked_at == at && row.lock_until > now =>
                    {
                        conn.update(name, vec![Set::LockUntil(TExpr::Now)], vec![])
                            .await
                            .map_err(err)?;
                        Ok(true)
                    }
                    _ => Ok(false),
                }
            }
            _ => Ok(conn
                .update(name, vec![Set::LockUntil(TExpr::Now)], same)
                .await
                .map_err(err)?
                .is_some()),
        }
    }
}
