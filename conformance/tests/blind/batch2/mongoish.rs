//! Backend (c): a MongoDB-like document store. One collection of documents keyed by a
//! unique `_id`; `findOneAndUpdate` and `updateOne` take a query filter and an update
//! pipeline whose expressions see `$$NOW`, the server's clock (2.5 s ahead of the
//! machine's). An upsert whose filter matches nothing inserts a document with the filter's
//! `_id`, and fails with `E11000 duplicate key` if one exists. Query operators compare only
//! values of the same BSON type (`{lockUntil: {$lte: "$$NOW"}}` compares a date with a
//! string and matches nothing); `$expr` is where `$$NOW` means now. As in MongoDB 4.0, an
//! `_id` longer than 1024 bytes cannot be indexed. A client that finds no server answers
//! after its server selection timeout.
//!
//! The layout is Java ShedLock's MongoDB one (`_id`, `lockUntil`, `lockedAt`, `lockedBy`,
//! dates in milliseconds) plus a `fence` counter Java never needs. Every time is `$$NOW`,
//! so the provider declares server time.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant};

use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockHolder, LockInfo, LockPage, LockProvider, LockState, Operation, PageCursor,
    PageRequest, TimeSource, raw::default_holder,
};

use super::common::{Net, NetError, ServerClock, ceil_ms, from_unix_ms, is_invisible, unix_ms};

const PROVIDER: &str = "mongoish";
/// The longest `_id` the index takes, in bytes.
const MAX_ID_BYTES: usize = 1024;
/// 1024 bytes of UTF-8 always hold 256 characters.
const MAX_NAME_CHARS: usize = 256;
/// `RetryUpsertOnDuplicate`: how long the retries go on.
const RETRY_LIMIT: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------------------------------
// The simulated server
// ------------------------------------------------------------------------------------------

/// A BSON value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Bson {
    Null,
    Int64(i64),
    Str(String),
    /// Milliseconds since the Unix epoch.
    Date(i64),
}

impl Bson {
    /// BSON's order of types for comparisons across types.
    fn rank(&self) -> u8 {
        match self {
            Bson::Null => 0,
            Bson::Int64(_) => 1,
            Bson::Str(_) => 2,
            Bson::Date(_) => 3,
        }
    }

    fn cmp_total(&self, other: &Bson) -> std::cmp::Ordering {
        match (self, other) {
            (Bson::Int64(a), Bson::Int64(b)) | (Bson::Date(a), Bson::Date(b)) => a.cmp(b),
            (Bson::Str(a), Bson::Str(b)) => a.as_bytes().cmp(b.as_bytes()),
            _ => self.rank().cmp(&other.rank()),
        }
    }

    fn as_date(&self) -> Option<i64> {
        match self {
            Bson::Date(ms) => Some(*ms),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Bson::Str(s) => Some(s),
            _ => None,
        }
    }
}

pub type Doc = BTreeMap<String, Bson>;

fn field<'a>(doc: &'a Doc, name: &str) -> &'a Bson {
    doc.get(name).unwrap_or(&Bson::Null)
}

/// An aggregation expression, evaluated against the document before the update.
#[derive(Debug, Clone)]
pub enum Expr {
    Now,
    Field(&'static str),
    Lit(Bson),
    /// `$add`: date + number is a date; anything + null is null.
    Add(Box<Expr>, Box<Expr>),
    Max(Box<Expr>, Box<Expr>),
    Min(Box<Expr>, Box<Expr>),
    IfNull(Box<Expr>, Box<Expr>),
    Lte(Box<Expr>, Box<Expr>),
    Gt(Box<Expr>, Box<Expr>),
}

impl Expr {
    fn eval(&self, doc: &Doc, now: i64) -> Bson {
        let two = |a: &Expr, b: &Expr| (a.eval(doc, now), b.eval(doc, now));
        match self {
            Expr::Now => Bson::Date(now),
            Expr::Field(f) => field(doc, f).clone(),
            Expr::Lit(v) => v.clone(),
            Expr::Add(a, b) => match two(a, b) {
                (Bson::Date(d), Bson::Int64(n)) | (Bson::Int64(n), Bson::Date(d)) => {
                    Bson::Date(d.saturating_add(n))
                }
                (Bson::Int64(a), Bson::Int64(b)) => Bson::Int64(a.saturating_add(b)),
                _ => Bson::Null,
            },
            Expr::Max(a, b) => {
                let (a, b) = two(a, b);
                if a.cmp_total(&b).is_ge() { a } else { b }
            }
            Expr::Min(a, b) => {
                let (a, b) = two(a, b);
                if a.cmp_total(&b).is_le() { a } else { b }
            }
            Expr::IfNull(a, b) => match a.eval(doc, now) {
                Bson::Null => b.eval(doc, now),
                v => v,
            },
            Expr::Lte(a, b) => {
                let (a, b) = two(a, b);
                Bson::Int64(i64::from(a.cmp_total(&b).is_le()))
            }
            Expr::Gt(a, b) => {
                let (a, b) = two(a, b);
                Bson::Int64(i64::from(a.cmp_total(&b).is_gt()))
            }
        }
    }
}

fn b(e: Expr) -> Box<Expr> {
    Box::new(e)
}

/// A query filter. Query operators (`Eq`, `Lte`) match only values of the same type.
#[derive(Debug, Clone)]
pub enum Filter {
    Eq(&'static str, Bson),
    Lte(&'static str, Bson),
    /// `{$expr: ...}`.
    Expr(Expr),
}

impl Filter {
    fn matches(&self, doc: &Doc, now: i64) -> bool {
        match self {
            Filter::Eq(f, v) => field(doc, f) == v,
            Filter::Lte(f, v) => {
                let x = field(doc, f);
                x.rank() == v.rank() && x.cmp_total(v).is_le()
            }
            Filter::Expr(e) => e.eval(doc, now) == Bson::Int64(1),
        }
    }
}

/// `$set` stage of an update pipeline: every expression sees the document as it was.
pub type Pipeline = Vec<(&'static str, Expr)>;

/// A failed command.
#[derive(Debug)]
pub enum MongoError {
    /// No server answered within the server selection timeout.
    Net(NetError),
    /// `E11000 duplicate key error collection: shedlock index: _id_`.
    DuplicateKey,
    /// `WriteError 17280: key too large to index`.
    KeyTooLarge(usize),
}

/// The shared database with its `shedLock` collection.
#[derive(Debug)]
pub struct MongoServer {
    docs: StdMutex<BTreeMap<String, Doc>>,
    clock: ServerClock,
}

impl MongoServer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            docs: StdMutex::new(BTreeMap::new()),
            clock: ServerClock::with_offset_ms(2_500),
        })
    }

    fn now(&self) -> i64 {
        unix_ms(self.clock.now())
    }

    /// Writes a record as Java ShedLock does (`$set` of its three fields, with upsert):
    /// other fields, such as `fence`, keep their values.
    pub fn plant(&self, record: &PlantedRecord) {
        let mut docs = self.docs.lock().unwrap();
        let doc = docs.entry(record.name.clone()).or_default();
        doc.insert("_id".into(), Bson::Str(record.name.clone()));
        doc.insert("lockUntil".into(), Bson::Date(unix_ms(record.lock_until)));
        doc.insert("lockedAt".into(), Bson::Date(unix_ms(record.locked_at)));
        doc.insert("lockedBy".into(), Bson::Str(record.locked_by.clone()));
    }

    pub fn delete_prefix(&self, prefix: &str) {
        self.docs
            .lock()
            .unwrap()
            .retain(|id, _| !id.starts_with(prefix));
    }
}

/// How `find` sorts.
#[derive(Debug, Clone, Copy)]
pub enum Sort {
    /// By `_id`, byte by byte (the default).
    Binary,
    /// With `collation: {locale: "en", strength: 2}`: by `_id` without case first.
    Collated,
}

/// One driver client.
#[derive(Debug)]
pub struct MongoConn {
    server: Arc<MongoServer>,
    net: Net,
}

impl MongoConn {
    pub fn new(server: Arc<MongoServer>, net: Net) -> Self {
        Self { server, net }
    }

    async fn exec<R>(
        &self,
        f: impl FnOnce(&mut BTreeMap<String, Doc>, i64) -> R,
    ) -> Result<R, MongoError> {
        self.net.send().await.map_err(MongoError::Net)?;
        let result = {
            let mut docs = self.server.docs.lock().unwrap();
            f(&mut docs, self.server.now())
        };
        self.net.receive().await;
        Ok(result)
    }

    /// `updateOne` / `findOneAndUpdate` on the document `_id`, returning the document after
    /// the update (`None`: nothing matched and no upsert).
    pub async fn update(
        &self,
        id: &str,
        filter: &[Filter],
        pipeline: &Pipeline,
        upsert: bool,
    ) -> Result<Option<Doc>, MongoError> {
        self.exec(|docs, now| {
            let matched = docs
                .get(id)
                .filter(|doc| filter.iter().all(|f| f.matches(doc, now)))
                .is_some();
            if !matched && !upsert {
                return Ok(None);
            }
            if !matched && docs.contains_key(id) {
                return Err(MongoError::DuplicateKey);
            }
            if id.len() > MAX_ID_BYTES {
                return Err(MongoError::KeyTooLarge(id.len()));
            }
            let old = docs.get(id).cloned().unwrap_or_else(|| {
                let mut doc = Doc::new();
                doc.insert("_id".into(), Bson::Str(id.to_owned()));
                doc
            });
            let mut new = old.clone();
            for (name, expr) in pipeline {
                new.insert((*name).to_owned(), expr.eval(&old, now));
            }
            docs.insert(id.to_owned(), new.clone());
            Ok(Some(new))
        })
        .await?
    }

    /// `findOne({_id})` with the server's time (`hello.localTime` of the same round trip).
    pub async fn find_one(&self, id: &str) -> Result<(Option<Doc>, i64), MongoError> {
        self.exec(|docs, now| (docs.get(id).cloned(), now)).await
    }

    /// `find({_id: {$gte: prefix, $gt: after}}).sort(...).limit(...)`, keeping the names
    /// that start with `prefix`, with the server's time.
    pub async fn find_prefix(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
        sort: Sort,
    ) -> Result<(Vec<Doc>, i64), MongoError> {
        self.exec(|docs, now| {
            let mut found: Vec<(&String, &Doc)> = docs
                .iter()
                .filter(|(id, _)| id.starts_with(prefix))
                .filter(|(id, _)| after.is_none_or(|a| id.as_str() > a))
                .collect();
            if let Sort::Collated = sort {
                found.sort_by_key(|(id, _)| (id.to_lowercase(), (*id).clone()));
            }
            let docs = found
                .into_iter()
                .take(limit)
                .map(|(_, d)| d.clone())
                .collect();
            (docs, now)
        })
        .await
    }
}

// ------------------------------------------------------------------------------------------
// The provider
// ------------------------------------------------------------------------------------------

/// The one bug a broken mongoish provider has; `None` is the correct control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MongoBug {
    /// The acquire filter is `{lockUntil: {$lte: "$$NOW"}}`, a plain query: `$$NOW` only
    /// means now inside `$expr`, so the date is compared with the string "$$NOW" and never
    /// matches. A name whose document exists (released or expired) is never taken again.
    /// Breaks `[free-lock-is-taken]`.
    NowLiteralInFilter,
    /// On `E11000 duplicate key` the upsert is retried every 50 ms (as MongoDB's manual
    /// advises for concurrent upserts), for up to 10 s: a held lock makes try_lock wait for
    /// its holder and then acquire, or time out. Breaks `[three-outcomes]` (try_lock never
    /// waits for a holder).
    RetryUpsertOnDuplicate,
    /// The handle is an RAII guard: dropping it without `unlock` releases the lock in a
    /// spawned task. A crashed holder is modelled by a dropped handle, so the lock ends
    /// long before `lock_at_most_for`. Breaks `[at-most]`.
    ReleaseOnDrop,
    /// Release sets `lockUntil` to `min(lockUntil, max($$NOW, lockedAt + atLeast))` ("a
    /// release must never lengthen a lock"). After an extend that shortened the lock, a
    /// release frees it before `acquired_at + lock_at_least_for`. Breaks `[at-least]`.
    ReleaseNeverLengthens,
    /// No "released" flag in the handle ("the document is the source of truth"): during
    /// `lock_at_least_for` the document still names this acquisition and is still held, so a
    /// second release answers `true` again. Breaks `[release-result]`.
    NoReleasedFlag,
    /// `lockedBy` is `<host>#<node id>`, drawn once per node, not per acquisition ("the node
    /// is the owner"): a stale handle of this node releases or extends the node's newer
    /// acquisition of the same name. Breaks `[ownership]`.
    NodeScopedLockedBy,
    /// Declares `extend: false` (keep-alive was left for a later version) and answers
    /// `Ok(false)` from `extend` ("could not extend") instead of `LockError::Unsupported`.
    /// Breaks `[honest-capabilities]`.
    ExtendDisabledAnswersFalse,
    /// Extend sets `lockUntil` to the node's clock + the duration (the acquire and release
    /// use `$$NOW`; extend was written later, from the Java code of another provider).
    /// Breaks `[server-time]`.
    ExtendFromNodeClock,
    /// `lockedAt` is written from the node's clock ("it is only informational"), while
    /// `lockUntil` uses `$$NOW`; the release's `max($$NOW, lockedAt + atLeast)` then follows
    /// the node's clock. Breaks `[server-time]`.
    LockedAtFromNodeClock,
    /// The fence is `{$add: ["$fence", 1]}` without `$ifNull`: on a new document `$fence`
    /// is missing, `$add` with null is null, and it stays null; every token reads as 0.
    /// Breaks `[fencing]`.
    FenceAddNull,
    /// Strips zero-width and other invisible characters from names ("they sneak in from
    /// copy-paste in YAML"): `job` and `jo\u{200b}b` share a document. Breaks
    /// `[names-are-data]`.
    ZeroWidthStripped,
    /// Declares `max_name_chars` = 1024, the index key limit, which is in bytes: names of
    /// 1024 characters with multi-byte characters are refused by the server with a backend
    /// error, not accepted. Breaks `[name-length]`.
    LimitInBytes,
    /// When a lock is not acquired, the holder is reported by splitting `lockedBy` at `#`
    /// and failing on a value without one ("corrupt lock document"): a held record written
    /// by Java ShedLock, whose `lockedBy` is a plain host name, makes try_lock an error.
    /// Breaks `[shedlock-records]`.
    HolderParseFailsOnJava,
    /// The admin listing sorts with a case-insensitive collation ("operators read it") but
    /// pages with `_id > <last name>` in binary order: with mixed-case names some locks are
    /// listed twice and others never. Breaks `[admin]`.
    CollatedListing,
    /// Force-unlock matches `lockedBy` and `lockedAt` but not `lockUntil > $$NOW`: it answers
    /// `true` for an acquisition that already expired or was released. Breaks `[admin]`.
    ForceUnlockNoHeldCheck,
    /// Only `connectTimeoutMS` is set (2 s); `serverSelectionTimeoutMS` keeps the driver's
    /// default of 30 s, so with no server reachable every operation answers after 30 s.
    /// Breaks `[bounded-time]`.
    ServerSelection30s,
    /// A server selection timeout is read as "no primary: an election is under way, and
    /// whoever holds the lock keeps it", and answered not acquired. Breaks `[fail-closed]`.
    NoPrimaryIsNotAcquired,
}

/// The harness for mongoish providers.
pub struct MongoHarness {
    name: String,
    server: Arc<MongoServer>,
    bug: Option<MongoBug>,
}

impl MongoHarness {
    pub fn new(name: &str, bug: Option<MongoBug>) -> Self {
        Self {
            name: name.to_owned(),
            server: MongoServer::new(),
            bug,
        }
    }
}

#[async_trait]
impl ConformanceHarness for MongoHarness {
    type Node = MongoNode;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<MongoNode, SetupError> {
        Ok(MongoNode::new(
            MongoConn::new(self.server.clone(), Net::up()),
            clock,
            self.bug,
        ))
    }

    async fn unreachable_node(&self) -> Result<Support<MongoNode>, SetupError> {
        let selection = if self.bug == Some(MongoBug::ServerSelection30s) {
            Duration::from_secs(30)
        } else {
            Duration::from_secs(2)
        };
        Ok(Support::Supported(MongoNode::new(
            MongoConn::new(self.server.clone(), Net::down(selection)),
            Arc::new(shedlock_core::SystemClock),
            self.bug,
        )))
    }

    fn admin<'node>(&self, node: &'node MongoNode) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        self.server.plant(record);
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        self.server.delete_prefix(name_prefix);
        Ok(())
    }
}

/// A mongoish node.
#[derive(Clone)]
pub struct MongoNode(Arc<MongoInner>);

struct MongoInner {
    conn: MongoConn,
    clock: Arc<dyn Clock>,
    holder: String,
    /// `NodeScopedLockedBy`: the node's one `lockedBy`.
    node_locked_by: String,
    bug: Option<MongoBug>,
}

impl fmt::Debug for MongoNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoNode")
            .field("holder", &self.0.holder)
            .field("bug", &self.0.bug)
            .finish()
    }
}

static NODE_SEQ: AtomicU64 = AtomicU64::new(1);

fn lock_error(error: MongoError, operation: Operation, name: &str) -> LockError {
    match error {
        MongoError::Net(NetError::ConnectTimeout(after)) => LockError::Timeout {
            provider: PROVIDER,
            operation,
            name: name.to_owned(),
            after,
        },
        MongoError::DuplicateKey => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            "E11000 duplicate key error collection: shedLock index: _id_",
        ),
        MongoError::KeyTooLarge(bytes) => LockError::backend_message(
            ErrorKind::Limit,
            PROVIDER,
            operation,
            name,
            format!("WriteError 17280: key too large to index ({bytes} bytes)"),
        ),
    }
}

fn ms_lit(ms: i64) -> Expr {
    Expr::Lit(Bson::Int64(ms))
}

impl MongoNode {
    fn new(conn: MongoConn, clock: Arc<dyn Clock>, bug: Option<MongoBug>) -> Self {
        let seq = NODE_SEQ.fetch_add(1, Ordering::Relaxed);
        let holder = format!("{}-mongo{seq}", default_holder());
        let node_locked_by = format!("{holder}#{}", uuid::Uuid::new_v4().simple());
        Self(Arc::new(MongoInner {
            conn,
            clock,
            holder,
            node_locked_by,
            bug,
        }))
    }

    fn is(&self, bug: MongoBug) -> bool {
        self.0.bug == Some(bug)
    }

    fn id_for(&self, name: &str) -> String {
        if self.is(MongoBug::ZeroWidthStripped) {
            name.chars().filter(|&c| !is_invisible(c)).collect()
        } else {
            name.to_owned()
        }
    }

    fn node_now(&self) -> i64 {
        unix_ms(self.0.clock.now())
    }

    /// "This acquisition still holds the document".
    fn mine(locked_by: &str) -> Vec<Filter> {
        vec![
            Filter::Eq("lockedBy", Bson::Str(locked_by.to_owned())),
            Filter::Expr(Expr::Gt(b(Expr::Field("lockUntil")), b(Expr::Now))),
        ]
    }

    async fn holder(&self, id: &str, name: &str) -> Result<Option<LockHolder>, LockError> {
        let (doc, _) = self
            .0
            .conn
            .find_one(id)
            .await
            .map_err(|e| lock_error(e, Operation::Acquire, name))?;
        let Some(doc) = doc else { return Ok(None) };
        let locked_by = field(&doc, "lockedBy").as_str().map(str::to_owned);
        if self.is(MongoBug::HolderParseFailsOnJava)
            && let Some(by) = &locked_by
            && by.split_once('#').is_none()
        {
            return Err(LockError::backend_message(
                ErrorKind::CorruptData,
                PROVIDER,
                Operation::Acquire,
                name,
                format!("corrupt lock document: lockedBy {by:?} is not <host>#<id>"),
            ));
        }
        Ok(Some(LockHolder {
            locked_by,
            held_until: field(&doc, "lockUntil").as_date().map(from_unix_ms),
        }))
    }

    fn info(doc: &Doc, now: i64) -> Option<LockInfo> {
        let name = field(doc, "_id").as_str()?;
        let until = field(doc, "lockUntil").as_date()?;
        let at = field(doc, "lockedAt").as_date().unwrap_or(0);
        let by = field(doc, "lockedBy").as_str().unwrap_or_default();
        let mut info = LockInfo::new(
            name,
            LockState::Free,
            AcquisitionId::new(format!("{at}|{by}")),
        )
        .with_locked_by(by)
        .with_locked_at(from_unix_ms(at));
        if let Bson::Int64(fence) = field(doc, "fence") {
            info = info.with_fencing_token(*fence as u64);
        }
        Some(info.judged_at(from_unix_ms(until), from_unix_ms(now)))
    }
}

#[async_trait]
impl LockProvider for MongoNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        self.capabilities().check_name_length(PROVIDER, name)?;
        let id = self.id_for(name);
        let locked_by = if self.is(MongoBug::NodeScopedLockedBy) {
            self.0.node_locked_by.clone()
        } else {
            format!("{}#{}", self.0.holder, uuid::Uuid::new_v4().simple())
        };
        let free = if self.is(MongoBug::NowLiteralInFilter) {
            Filter::Lte("lockUntil", Bson::Str("$$NOW".into()))
        } else {
            Filter::Expr(Expr::Lte(b(Expr::Field("lockUntil")), b(Expr::Now)))
        };
        let locked_at = if self.is(MongoBug::LockedAtFromNodeClock) {
            Expr::Lit(Bson::Date(self.node_now()))
        } else {
            Expr::Now
        };
        let fence = if self.is(MongoBug::FenceAddNull) {
            Expr::Add(b(Expr::Field("fence")), b(ms_lit(1)))
        } else {
            Expr::Add(
                b(Expr::IfNull(b(Expr::Field("fence")), b(ms_lit(0)))),
                b(ms_lit(1)),
            )
        };
        let pipeline: Pipeline = vec![
            (
                "lockUntil",
                Expr::Add(b(Expr::Now), b(ms_lit(ceil_ms(config.lock_at_most_for())))),
            ),
            ("lockedAt", locked_at),
            ("lockedBy", Expr::Lit(Bson::Str(locked_by.clone()))),
            ("fence", fence),
        ];
        let started = Instant::now();
        let doc = loop {
            match self
                .0
                .conn
                .update(&id, std::slice::from_ref(&free), &pipeline, true)
                .await
            {
                Ok(Some(doc)) => break doc,
                Ok(None) => return Ok(Acquisition::NotAcquired(None)),
                Err(MongoError::DuplicateKey) if self.is(MongoBug::RetryUpsertOnDuplicate) => {
                    if started.elapsed() >= RETRY_LIMIT {
                        return Err(LockError::Timeout {
                            provider: PROVIDER,
                            operation: Operation::Acquire,
                            name: name.to_owned(),
                            after: RETRY_LIMIT,
                        });
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(MongoError::DuplicateKey) => {
                    return Ok(Acquisition::NotAcquired(self.holder(&id, name).await?));
                }
                Err(MongoError::Net(_)) if self.is(MongoBug::NoPrimaryIsNotAcquired) => {
                    return Ok(Acquisition::NotAcquired(None));
                }
                Err(e) => return Err(lock_error(e, Operation::Acquire, name)),
            }
        };
        let token = match field(&doc, "fence") {
            Bson::Int64(fence) => *fence as u64,
            _ => 0,
        };
        Ok(Acquisition::Acquired(Box::new(MongoHandle {
            node: self.clone(),
            name: name.to_owned(),
            id,
            locked_by,
            at_least_ms: ceil_ms(config.lock_at_least_for()),
            token,
            released: tokio::sync::Mutex::new(false),
        })))
    }

    fn capabilities(&self) -> Capabilities {
        let max = if self.is(MongoBug::LimitInBytes) {
            MAX_ID_BYTES
        } else {
            MAX_NAME_CHARS
        };
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(!self.is(MongoBug::ExtendDisabledAnswersFalse))
            .with_max_name_chars(max)
            .with_time_precision(Duration::from_millis(1))
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// One acquisition on mongoish.
pub struct MongoHandle {
    node: MongoNode,
    name: String,
    id: String,
    locked_by: String,
    at_least_ms: i64,
    token: u64,
    released: tokio::sync::Mutex<bool>,
}

impl fmt::Debug for MongoHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MongoHandle")
            .field("name", &self.name)
            .field("locked_by", &self.locked_by)
            .finish()
    }
}

/// The release's new `lockUntil`.
fn release_until(at_least_ms: i64, never_lengthen: bool) -> Expr {
    let until = Expr::Max(
        b(Expr::Now),
        b(Expr::Add(
            b(Expr::Field("lockedAt")),
            b(ms_lit(at_least_ms)),
        )),
    );
    if never_lengthen {
        Expr::Min(b(Expr::Field("lockUntil")), b(until))
    } else {
        until
    }
}

impl MongoHandle {
    async fn release_statement(&self) -> Result<bool, MongoError> {
        let node = &self.node;
        let pipeline = vec![(
            "lockUntil",
            release_until(self.at_least_ms, node.is(MongoBug::ReleaseNeverLengthens)),
        )];
        let updated = node
            .0
            .conn
            .update(
                &self.id,
                &MongoNode::mine(&self.locked_by),
                &pipeline,
                false,
            )
            .await?;
        Ok(updated.is_some())
    }
}

impl Drop for MongoHandle {
    fn drop(&mut self) {
        if !self.node.is(MongoBug::ReleaseOnDrop) {
            return;
        }
        let released = self.released.try_lock().map(|r| *r).unwrap_or(true);
        if released {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let node = self.node.clone();
        let (id, locked_by, at_least_ms) =
            (self.id.clone(), self.locked_by.clone(), self.at_least_ms);
        runtime.spawn(async move {
            let pipeline = vec![("lockUntil", release_until(at_least_ms, false))];
            let _ = node
                .0
                .conn
                .update(&id, &MongoNode::mine(&locked_by), &pipeline, false)
                .await;
        });
    }
}

#[async_trait]
impl LockHandle for MongoHandle {
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
        let mut released = self.released.lock().await;
        if *released && !self.node.is(MongoBug::NoReleasedFlag) {
            return Ok(false);
        }
        let answer = self
            .release_statement()
            .await
            .map_err(|e| lock_error(e, Operation::Release, &self.name))?;
        *released = true;
        Ok(answer)
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        let name = self.name.as_str();
        if lock_at_most_for.is_zero() {
            return Err(LockConfiguration::new(name, Duration::ZERO, Duration::ZERO)
                .unwrap_err()
                .into());
        }
        let node = &self.node;
        if node.is(MongoBug::ExtendDisabledAnswersFalse) {
            return Ok(false);
        }
        let released = self.released.lock().await;
        if *released {
            return Ok(false);
        }
        let ms = ceil_ms(lock_at_most_for);
        let until = if node.is(MongoBug::ExtendFromNodeClock) {
            Expr::Lit(Bson::Date(node.node_now().saturating_add(ms)))
        } else {
            Expr::Add(b(Expr::Now), b(ms_lit(ms)))
        };
        let updated = node
            .0
            .conn
            .update(
                &self.id,
                &MongoNode::mine(&self.locked_by),
                &vec![("lockUntil", until)],
                false,
            )
            .await
            .map_err(|e| lock_error(e, Operation::Extend, name))?;
        drop(released);
        Ok(updated.is_some())
    }
}

#[async_trait]
impl LockAdmin for MongoNode {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let limit = request.limit.max(1);
        let sort = if self.is(MongoBug::CollatedListing) {
            Sort::Collated
        } else {
            Sort::Binary
        };
        let after = request.after.as_ref().map(PageCursor::as_str);
        let (docs, now) = self
            .0
            .conn
            .find_prefix(&request.prefix, after, limit, sort)
            .await
            .map_err(|e| lock_error(e, Operation::List, ""))?;
        let next = if docs.len() == limit {
            docs.last()
                .and_then(|d| field(d, "_id").as_str())
                .map(PageCursor::new)
        } else {
            None
        };
        let locks = docs.iter().filter_map(|d| Self::info(d, now)).collect();
        Ok(LockPage { locks, next })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let (doc, now) = self
            .0
            .conn
            .find_one(&self.id_for(name))
            .await
            .map_err(|e| lock_error(e, Operation::Inspect, name))?;
        Ok(doc.and_then(|d| Self::info(&d, now)))
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let malformed = || {
            LockError::invalid_request(
                PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "the acquisition id {:?} is not <lockedAt ms>|<lockedBy>",
                    acquisition.as_str()
                ),
            )
        };
        let (at, by) = acquisition.as_str().split_once('|').ok_or_else(malformed)?;
        let at: i64 = at.parse().map_err(|_| malformed())?;
        let mut filter = vec![
            Filter::Eq("lockedBy", Bson::Str(by.to_owned())),
            Filter::Eq("lockedAt", Bson::Date(at)),
        ];
        if !self.is(MongoBug::ForceUnlockNoHeldCheck) {
            filter.push(Filter::Expr(Expr::Gt(
                b(Expr::Field("lockUntil")),
                b(Expr::Now),
            )));
        }
        let updated = self
            .0
            .conn
            .update(
                &self.id_for(name),
                &filter,
                &vec![("lockUntil", Expr::Now)],
                false,
            )
            .await
            .map_err(|e| lock_error(e, Operation::ForceUnlock, name))?;
        Ok(updated.is_some())
    }
}
