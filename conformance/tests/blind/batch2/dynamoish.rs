//! Backend (b): a DynamoDB-like table. Items are maps of string (`S`) and number (`N`)
//! attributes under a partition key `_id`. Writes take a condition expression that the
//! server evaluates atomically against the stored item; comparing values of different
//! types is simply false. The server has no "now" a condition could use, so the times in
//! the items are the nodes' (client time). Reads are eventually consistent unless asked
//! otherwise (a replica may answer with the item as it was up to half a second earlier),
//! about 2 % of requests are throttled (`ProvisionedThroughputExceededException`, which
//! the SDK retries), and every answer carries an HTTP `Date` header in whole seconds of the
//! server's clock. `Scan` visits items in hash order and its `Limit` counts items read
//! before the filter.
//!
//! The layout is Java ShedLock's DynamoDB one: `_id`, `lockUntil`, `lockedAt` (ISO-8601
//! text with milliseconds, which sorts like time) and `lockedBy`, plus a `fence` number Java
//! never needs. Like `StorageBasedLockProvider`, a node remembers which names have an item
//! and then skips the insert.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockHolder, LockInfo, LockPage, LockProvider, LockState, Operation, PageCursor,
    PageRequest, TimeSource, raw::default_holder,
};

use super::common::{
    ISO_MAX_MS, Net, NetError, Rng, ServerClock, ceil_ms, from_unix_ms, iso_ms, nfkc_lite,
    parse_iso_ms, unix_ms,
};

const PROVIDER: &str = "dynamoish";
/// A partition key holds 2048 bytes: 512 characters of up to four bytes each.
const MAX_NAME_CHARS: usize = 512;
const MAX_KEY_BYTES: usize = 2048;
/// How often the table throttles a request, per mille.
const THROTTLE_PER_MILLE: u64 = 20;
/// The longest a replica lags behind, for eventually consistent reads.
const MAX_REPLICA_LAG_MS: u64 = 500;

// ------------------------------------------------------------------------------------------
// The simulated server
// ------------------------------------------------------------------------------------------

/// An attribute value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attr {
    S(String),
    N(String),
}

impl Attr {
    fn as_s(&self) -> Option<&str> {
        match self {
            Attr::S(s) => Some(s),
            Attr::N(_) => None,
        }
    }

    fn as_n(&self) -> Option<i64> {
        match self {
            Attr::N(n) => n.parse().ok(),
            Attr::S(_) => None,
        }
    }
}

pub type Item = BTreeMap<String, Attr>;

/// `a < b` as DynamoDB orders values of the same type; `None` for different types.
fn compare(a: &Attr, b: &Attr) -> Option<std::cmp::Ordering> {
    match (a, b) {
        (Attr::S(a), Attr::S(b)) => Some(a.as_bytes().cmp(b.as_bytes())),
        (Attr::N(a), Attr::N(b)) => {
            let (a, b) = (a.parse::<i128>().ok()?, b.parse::<i128>().ok()?);
            Some(a.cmp(&b))
        }
        _ => None,
    }
}

/// A condition expression.
#[derive(Debug, Clone)]
pub enum Cond {
    NotExists(&'static str),
    Exists(&'static str),
    Eq(&'static str, Attr),
    Le(&'static str, Attr),
    Gt(&'static str, Attr),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
}

impl Cond {
    fn and(self, other: Cond) -> Cond {
        Cond::And(Box::new(self), Box::new(other))
    }

    fn or(self, other: Cond) -> Cond {
        Cond::Or(Box::new(self), Box::new(other))
    }

    fn holds(&self, item: Option<&Item>) -> bool {
        let get = |attr: &str| item.and_then(|i| i.get(attr));
        match self {
            Cond::NotExists(a) => get(a).is_none(),
            Cond::Exists(a) => get(a).is_some(),
            Cond::Eq(a, v) => get(a).is_some_and(|x| x == v),
            Cond::Le(a, v) => {
                get(a).and_then(|x| compare(x, v)) == Some(std::cmp::Ordering::Less)
                    || get(a).and_then(|x| compare(x, v)) == Some(std::cmp::Ordering::Equal)
            }
            Cond::Gt(a, v) => {
                get(a).and_then(|x| compare(x, v)) == Some(std::cmp::Ordering::Greater)
            }
            Cond::And(a, b) => a.holds(item) && b.holds(item),
            Cond::Or(a, b) => a.holds(item) || b.holds(item),
        }
    }
}

/// An update action.
#[derive(Debug, Clone)]
pub enum Action {
    Set(&'static str, Attr),
    /// `ADD attr :n`: a missing attribute counts as 0.
    Add(&'static str, i64),
}

/// A `Scan` filter on the partition key.
#[derive(Debug, Clone)]
pub enum KeyFilter {
    BeginsWith(String),
}

/// A failed request.
#[derive(Debug)]
pub enum DynError {
    Net(NetError),
    ConditionalCheckFailed,
    Throttled,
    Validation(String),
}

#[derive(Debug, Default)]
struct Table {
    items: HashMap<String, Item>,
    /// Recent versions of each item, for eventually consistent reads: (written at, item).
    versions: HashMap<String, VecDeque<(Instant, Option<Item>)>>,
}

impl Table {
    fn write(&mut self, pk: &str, item: Option<Item>, now: Instant) {
        let versions = self.versions.entry(pk.to_owned()).or_default();
        versions.push_back((now, item.clone()));
        let horizon = Duration::from_millis(MAX_REPLICA_LAG_MS * 2);
        while versions.len() > 1 && now.duration_since(versions[1].0) > horizon {
            versions.pop_front();
        }
        match item {
            Some(item) => self.items.insert(pk.to_owned(), item),
            None => self.items.remove(pk),
        };
    }

    /// The item as a replica `lag` behind has it.
    fn stale(&self, pk: &str, now: Instant, lag: Duration) -> Option<Item> {
        let Some(versions) = self.versions.get(pk) else {
            return self.items.get(pk).cloned();
        };
        let seen = now.checked_sub(lag).unwrap_or(now);
        versions
            .iter()
            .rev()
            .find(|(at, _)| *at <= seen)
            .map(|(_, item)| item.clone())
            .unwrap_or(None)
    }
}

/// The shared table.
#[derive(Debug)]
pub struct DynServer {
    table: StdMutex<Table>,
    clock: ServerClock,
    rng: Rng,
}

fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl DynServer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            table: StdMutex::new(Table::default()),
            clock: ServerClock::with_offset_ms(-1_800),
            rng: Rng::new(0x5eed_d1a0),
        })
    }

    /// Writes a record as Java ShedLock does: `PutItem` for a new name, `UpdateItem` of the
    /// three fields for an existing one (which keeps the `fence`).
    pub fn plant(&self, record: &PlantedRecord) {
        let mut table = self.table.lock().unwrap();
        let mut item = table.items.get(&record.name).cloned().unwrap_or_default();
        item.insert("_id".into(), Attr::S(record.name.clone()));
        item.insert(
            "lockUntil".into(),
            Attr::S(iso_ms(unix_ms(record.lock_until))),
        );
        item.insert(
            "lockedAt".into(),
            Attr::S(iso_ms(unix_ms(record.locked_at))),
        );
        item.insert("lockedBy".into(), Attr::S(record.locked_by.clone()));
        table.write(&record.name, Some(item), Instant::now());
    }

    pub fn delete_prefix(&self, prefix: &str) {
        let mut table = self.table.lock().unwrap();
        let keys: Vec<String> = table
            .items
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect();
        for key in keys {
            table.write(&key, None, Instant::now());
        }
    }
}

/// How the client retries.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts for a throttled request.
    throttle_attempts: u32,
    /// Attempts for a request that could not connect.
    connect_attempts: u32,
}

/// One SDK client.
#[derive(Debug)]
pub struct DynConn {
    server: Arc<DynServer>,
    net: Net,
    retry: RetryPolicy,
    /// The `Date` header of the last answer, with when it arrived.
    last_date: StdMutex<Option<(SystemTime, Instant)>>,
}

fn check_pk(pk: &str) -> Result<(), DynError> {
    if pk.is_empty() || pk.len() > MAX_KEY_BYTES {
        return Err(DynError::Validation(format!(
            "One or more parameter values were invalid: partition key is {} bytes, limit {MAX_KEY_BYTES}",
            pk.len()
        )));
    }
    Ok(())
}

impl DynConn {
    pub fn new(server: Arc<DynServer>, net: Net, retry: RetryPolicy) -> Self {
        Self {
            server,
            net,
            retry,
            last_date: StdMutex::new(None),
        }
    }

    async fn exec_once<R>(
        &self,
        f: &mut impl FnMut(&DynServer, &mut Table, Instant) -> Result<R, DynError>,
    ) -> Result<R, DynError> {
        self.net.send().await.map_err(DynError::Net)?;
        let server = &self.server;
        let result = if server.rng.chance(THROTTLE_PER_MILLE) {
            Err(DynError::Throttled)
        } else {
            let mut table = server.table.lock().unwrap();
            f(server, &mut table, Instant::now())
        };
        let date = unix_ms(server.clock.now()).div_euclid(1000) * 1000;
        self.net.receive().await;
        *self.last_date.lock().unwrap() = Some((from_unix_ms(date), Instant::now()));
        result
    }

    /// One request, retried as the client's policy says.
    async fn exec<R>(
        &self,
        mut f: impl FnMut(&DynServer, &mut Table, Instant) -> Result<R, DynError>,
    ) -> Result<R, DynError> {
        let (mut throttled, mut unreachable) = (0, 0);
        loop {
            match self.exec_once(&mut f).await {
                Err(DynError::Throttled) if throttled + 1 < self.retry.throttle_attempts => {
                    throttled += 1;
                    let backoff = (5u64 << throttled).min(500);
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                }
                Err(DynError::Net(_)) if unreachable + 1 < self.retry.connect_attempts => {
                    unreachable += 1;
                    let backoff = (250u64 << unreachable).min(4_000);
                    tokio::time::sleep(Duration::from_millis(backoff)).await;
                }
                other => return other,
            }
        }
    }

    pub async fn put_item(&self, item: Item, cond: Option<Cond>) -> Result<(), DynError> {
        let pk = match item.get("_id") {
            Some(Attr::S(pk)) => pk.clone(),
            _ => return Err(DynError::Validation("missing _id".into())),
        };
        check_pk(&pk)?;
        self.exec(|_, table, now| {
            if let Some(cond) = &cond
                && !cond.holds(table.items.get(&pk))
            {
                return Err(DynError::ConditionalCheckFailed);
            }
            table.write(&pk, Some(item.clone()), now);
            Ok(())
        })
        .await
    }

    /// `UpdateItem ... ReturnValues=ALL_NEW`; creates the item when it is missing and the
    /// condition allows.
    pub async fn update_item(
        &self,
        pk: &str,
        actions: &[Action],
        cond: &Cond,
    ) -> Result<Item, DynError> {
        check_pk(pk)?;
        self.exec(|_, table, now| {
            let current = table.items.get(pk);
            if !cond.holds(current) {
                return Err(DynError::ConditionalCheckFailed);
            }
            let mut item = current.cloned().unwrap_or_default();
            item.insert("_id".into(), Attr::S(pk.to_owned()));
            for action in actions {
                match action {
                    Action::Set(a, v) => {
                        item.insert((*a).to_owned(), v.clone());
                    }
                    Action::Add(a, n) => {
                        let old = item.get(*a).and_then(Attr::as_n).unwrap_or(0);
                        item.insert((*a).to_owned(), Attr::N((old + n).to_string()));
                    }
                }
            }
            table.write(pk, Some(item.clone()), now);
            Ok(item)
        })
        .await
    }

    pub async fn get_item(&self, pk: &str, consistent: bool) -> Result<Option<Item>, DynError> {
        check_pk(pk)?;
        self.exec(|server, table, now| {
            if consistent {
                Ok(table.items.get(pk).cloned())
            } else {
                let lag = Duration::from_millis(server.rng.next() % (MAX_REPLICA_LAG_MS + 1));
                Ok(table.stale(pk, now, lag))
            }
        })
        .await
    }

    /// `Scan` in hash order after `start`, reading at most `limit` items (before the
    /// filter); the last key read when the limit was reached.
    pub async fn scan(
        &self,
        filter: &KeyFilter,
        start: Option<&str>,
        limit: Option<usize>,
    ) -> Result<(Vec<Item>, Option<String>), DynError> {
        self.exec(|_, table, _| {
            let mut keys: Vec<(u64, &String)> = table.items.keys().map(|k| (fnv(k), k)).collect();
            keys.sort();
            let after = start.map(|s| (fnv(s), s.to_owned()));
            let mut read = 0;
            let mut last = None;
            let mut found = Vec::new();
            for (hash, key) in keys {
                if let Some((h, k)) = &after
                    && (hash, key) <= (*h, k)
                {
                    continue;
                }
                if limit.is_some_and(|limit| read >= limit) {
                    return Ok((found, last));
                }
                read += 1;
                last = Some(key.clone());
                let KeyFilter::BeginsWith(prefix) = filter;
                if key.starts_with(prefix.as_str()) {
                    found.push(table.items[key].clone());
                }
            }
            let last = if limit.is_some_and(|limit| read >= limit) {
                last
            } else {
                None
            };
            Ok((found, last))
        })
        .await
    }

    /// A second client on the same path that does not retry throttled requests.
    pub fn fast_fail(&self) -> Self {
        Self::new(
            self.server.clone(),
            self.net.same_path(),
            RetryPolicy {
                throttle_attempts: 1,
                ..self.retry
            },
        )
    }

    /// The `Date` header of the last answer, moved on by the time since it arrived.
    fn date_now(&self) -> Option<SystemTime> {
        self.last_date
            .lock()
            .unwrap()
            .map(|(date, at)| date + at.elapsed())
    }
}

// ------------------------------------------------------------------------------------------
// The provider
// ------------------------------------------------------------------------------------------

/// The one bug a broken dynamoish provider has; `None` is the correct control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DynBug {
    /// Concurrent `try_lock` calls for one name on one node share a single request
    /// ("single-flight, to save write capacity when many tasks poll"): every waiter gets a
    /// handle on the same acquisition, so two tasks of one node run at once. Breaks
    /// `[mutual-exclusion]`.
    SingleFlight,
    /// Before the conditional write, reads the item with the SDK's default (eventually
    /// consistent) `GetItem` and answers not acquired if it looks held, to save a write. A
    /// replica that has not seen the release yet refuses a free lock. Breaks
    /// `[free-lock-is-taken]`.
    EventuallyConsistentPrecheck,
    /// The acquire path uses a fast-fail client (one attempt, "keep try_lock latency
    /// predictable") and reads `ProvisionedThroughputExceededException` as "the table is
    /// busy: another node is locking", answering not acquired. A throttled request has an
    /// unknown outcome for the lock. Breaks `[three-outcomes]`.
    ThrottleIsNotAcquired,
    /// Release adds `lock_at_least_for.subsec_millis()` (the milliseconds *part*) to
    /// `lockedAt`, mistaken for `as_millis()`: an at-least of 2.5 s holds for 500 ms. Breaks
    /// `[at-least]`.
    SubsecMillisAtLeast,
    /// A failed release condition is answered `true` ("release is idempotent: if the
    /// condition failed, it is already released"). Breaks `[release-result]`.
    IdempotentRelease,
    /// Release and extend find their own acquisition by `lockedAt` (the operator's
    /// acquisition id uses it, and "milliseconds never collide"), not by the unique
    /// `lockedBy`. Two acquisitions in the same millisecond of the node's clock (a coarse or
    /// a stopped clock) are confused, and a stale handle frees the new holder's lock. Breaks
    /// `[ownership]`.
    OwnerByLockedAt,
    /// Extend sets `lockUntil` to the handle's last known `lockUntil` + the new duration
    /// ("extend by"), not now + the duration. Breaks `[extend]`.
    ExtendFromLockUntil,
    /// The handle's `time_source()` answers `Server`, copied from another provider, while
    /// `capabilities()` declares `Client`. Breaks `[honest-capabilities]`.
    HandleSaysServer,
    /// Acquire reads the item's `fence` with a consistent `GetItem`, then writes the whole
    /// item with `fence + 1` under the condition "missing or expired": two nodes that read
    /// the same fence can both win one after the other (the first releases in between), so
    /// two acquisitions carry the same token. Breaks `[fencing]`.
    FenceReadThenPut,
    /// The node reads the clock it is given once, when it is built, and then counts on
    /// `Instant` ("immune to NTP steps"): a clock that is set or moved later is ignored.
    /// Breaks `[client-time]`.
    ClockReadOnce,
    /// "Now" is the `Date` header of the last answer from the table plus the time since
    /// ("closer to a server time"), while the provider still declares client time: the clock
    /// it is given is never read, and the header's whole seconds differ between nodes by up
    /// to a second. Breaks `[client-time]`.
    DateHeaderNow,
    /// Keys are the NFKC form of the name ("so that a name typed with full-width letters or
    /// a ligature finds the same lock"): `ｊｏｂ`/`job`, `ﬁle`/`file` and NFD/NFC pairs share
    /// an item. Breaks `[names-are-data]`.
    NfkcNames,
    /// Checks the name length with `>=` instead of `>`: a name of exactly 512 characters is
    /// refused. Breaks `[name-length]`.
    OffByOneLimit,
    /// Extend goes through the same "write the lock item" helper as acquire, which for a
    /// name the node's cache does not know inserts with `attribute_not_exists(_id)`: after
    /// the cache is cleared, extend of a held lock fails its condition and answers `false`.
    /// Breaks `[name-cache]`.
    ExtendThroughInsertPath,
    /// Stores `lockUntil` and `lockedAt` as epoch-millisecond numbers ("faster to compare
    /// than text") while keeping Java's attribute names. DynamoDB compares values of
    /// different types as false, so an expired record Java wrote (text) is never taken
    /// over. Breaks `[shedlock-records]`.
    EpochMillisNumbers,
    /// The admin listing scans without a `Limit` ("Scan pages by 1 MB itself") and returns
    /// every match in one page, however small a page was asked for. Breaks `[admin]`.
    ScanPageLimitIgnored,
    /// The client retries connection failures ten times with exponential backoff ("be
    /// resilient to blips"), each after a 2 s connect timeout: an unreachable table answers
    /// after about 40 s. Breaks `[bounded-time]`.
    RetriesTooLong,
    /// Formats `lockUntil` for any duration: a `lock_at_most_for` reaching past the year 9999
    /// gives a five-digit year, which sorts before every four-digit one, so the lock looks
    /// expired at once. Breaks `[at-most]`.
    IsoYearOverflow,
}

/// The harness for dynamoish providers.
pub struct DynHarness {
    name: String,
    server: Arc<DynServer>,
    bug: Option<DynBug>,
}

impl DynHarness {
    pub fn new(name: &str, bug: Option<DynBug>) -> Self {
        Self {
            name: name.to_owned(),
            server: DynServer::new(),
            bug,
        }
    }

    fn retry(&self) -> RetryPolicy {
        RetryPolicy {
            // As the AWS SDK's DynamoDB client: ten attempts, so a throttled request
            // that fails for good (2 % to the tenth) never happens in a run.
            throttle_attempts: 10,
            connect_attempts: if self.bug == Some(DynBug::RetriesTooLong) {
                10
            } else {
                1
            },
        }
    }
}

#[async_trait]
impl ConformanceHarness for DynHarness {
    type Node = DynNode;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<DynNode, SetupError> {
        Ok(DynNode::new(
            DynConn::new(self.server.clone(), Net::up(), self.retry()),
            clock,
            self.bug,
        ))
    }

    async fn unreachable_node(&self) -> Result<Support<DynNode>, SetupError> {
        Ok(Support::Supported(DynNode::new(
            DynConn::new(
                self.server.clone(),
                Net::down(Duration::from_secs(2)),
                self.retry(),
            ),
            Arc::new(shedlock_core::SystemClock),
            self.bug,
        )))
    }

    fn clear_name_cache(&self, node: &DynNode) -> Support<()> {
        node.0.cache.lock().unwrap().clear();
        Support::Supported(())
    }

    fn admin<'node>(&self, node: &'node DynNode) -> Support<&'node dyn LockAdmin> {
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

/// What one acquisition is; handles point at it.
#[derive(Debug)]
struct Core {
    name: String,
    pk: String,
    locked_by: String,
    /// `lockedAt` as written, in ms of the node's clock.
    locked_at: i64,
    at_least: Duration,
    token: u64,
    /// `lockUntil` as this acquisition last wrote it (`ExtendFromLockUntil`).
    until: StdMutex<i64>,
    released: tokio::sync::Mutex<bool>,
}

enum Outcome {
    Acquired(Arc<Core>),
    NotAcquired(Option<LockHolder>),
}

type Flight = Shared<BoxFuture<'static, Result<Option<Arc<Core>>, String>>>;

/// A dynamoish node.
#[derive(Clone)]
pub struct DynNode(Arc<DynInner>);

struct DynInner {
    conn: DynConn,
    /// `ThrottleIsNotAcquired`: the fast-fail client of the acquire path.
    fast: Option<DynConn>,
    clock: Arc<dyn Clock>,
    holder: String,
    bug: Option<DynBug>,
    /// Names known to have an item.
    cache: StdMutex<HashSet<String>>,
    /// `SingleFlight`: acquisitions under way, by name.
    flights: StdMutex<HashMap<String, Flight>>,
    /// `ClockReadOnce`: the clock as read when the node was built.
    built: (SystemTime, Instant),
}

impl fmt::Debug for DynNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynNode")
            .field("holder", &self.0.holder)
            .field("bug", &self.0.bug)
            .finish()
    }
}

static NODE_SEQ: AtomicU64 = AtomicU64::new(1);

fn lock_error(error: DynError, operation: Operation, name: &str) -> LockError {
    match error {
        DynError::Net(NetError::ConnectTimeout(after)) => LockError::Timeout {
            provider: PROVIDER,
            operation,
            name: name.to_owned(),
            after,
        },
        DynError::ConditionalCheckFailed => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            "ConditionalCheckFailedException",
        ),
        DynError::Throttled => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            "ProvisionedThroughputExceededException after retries",
        ),
        DynError::Validation(message) => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            message,
        ),
    }
}

fn holder_of(item: &Item) -> LockHolder {
    LockHolder {
        locked_by: item.get("lockedBy").and_then(Attr::as_s).map(str::to_owned),
        held_until: item.get("lockUntil").and_then(time_of).map(from_unix_ms),
    }
}

/// A time attribute as ms, text or number.
fn time_of(attr: &Attr) -> Option<i64> {
    match attr {
        Attr::S(s) => parse_iso_ms(s),
        Attr::N(_) => attr.as_n(),
    }
}

impl DynNode {
    fn new(conn: DynConn, clock: Arc<dyn Clock>, bug: Option<DynBug>) -> Self {
        let seq = NODE_SEQ.fetch_add(1, Ordering::Relaxed);
        let built = (clock.now(), Instant::now());
        let fast = (bug == Some(DynBug::ThrottleIsNotAcquired)).then(|| conn.fast_fail());
        Self(Arc::new(DynInner {
            conn,
            fast,
            clock,
            holder: format!("{}-dyn{seq}", default_holder()),
            bug,
            cache: StdMutex::new(HashSet::new()),
            flights: StdMutex::new(HashMap::new()),
            built,
        }))
    }

    fn is(&self, bug: DynBug) -> bool {
        self.0.bug == Some(bug)
    }

    /// "Now" in ms, on the node's clock.
    fn now_ms(&self) -> i64 {
        let now = match self.0.bug {
            Some(DynBug::ClockReadOnce) => self.0.built.0 + self.0.built.1.elapsed(),
            Some(DynBug::DateHeaderNow) => {
                self.0.conn.date_now().unwrap_or_else(|| self.0.clock.now())
            }
            _ => self.0.clock.now(),
        };
        unix_ms(now)
    }

    fn pk_for(&self, name: &str) -> String {
        if self.is(DynBug::NfkcNames) {
            nfkc_lite(name)
        } else {
            name.to_owned()
        }
    }

    /// A time as the layout stores it.
    fn time_attr(&self, ms: i64) -> Attr {
        if self.is(DynBug::EpochMillisNumbers) {
            Attr::N(ms.to_string())
        } else if self.is(DynBug::IsoYearOverflow) {
            Attr::S(iso_ms(ms))
        } else {
            Attr::S(iso_ms(ms.min(ISO_MAX_MS)))
        }
    }

    fn check_name(&self, name: &str) -> Result<(), LockError> {
        if self.is(DynBug::OffByOneLimit) {
            if name.chars().count() >= MAX_NAME_CHARS {
                return Err(LockError::invalid_name(
                    PROVIDER,
                    name,
                    format!("names are limited to {MAX_NAME_CHARS} characters"),
                ));
            }
            return Ok(());
        }
        self.capabilities().check_name_length(PROVIDER, name)
    }

    fn new_item(&self, pk: &str, until: i64, now: i64, locked_by: &str, fence: i64) -> Item {
        let mut item = Item::new();
        item.insert("_id".into(), Attr::S(pk.to_owned()));
        item.insert("lockUntil".into(), self.time_attr(until));
        item.insert("lockedAt".into(), self.time_attr(now));
        item.insert("lockedBy".into(), Attr::S(locked_by.to_owned()));
        item.insert("fence".into(), Attr::N(fence.to_string()));
        item
    }

    /// A conditional insert of a new item: `Ok(false)` when an item exists.
    async fn insert(&self, item: Item) -> Result<bool, DynError> {
        let conn = self.0.fast.as_ref().unwrap_or(&self.0.conn);
        match conn.put_item(item, Some(Cond::NotExists("_id"))).await {
            Ok(()) => Ok(true),
            Err(DynError::ConditionalCheckFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn acquire(&self, config: &LockConfiguration) -> Result<Outcome, DynError> {
        let name = config.name();
        let conn = self.0.fast.as_ref().unwrap_or(&self.0.conn);
        let pk = self.pk_for(name);
        if self.is(DynBug::DateHeaderNow) && conn.date_now().is_none() {
            // A first round trip, for a `Date` header to start from.
            conn.get_item("__shedlock_clock__", true).await?;
        }
        let now = self.now_ms();
        let until = now.saturating_add(ceil_ms(config.lock_at_most_for()));
        let locked_by = format!("{}#{}", self.0.holder, uuid::Uuid::new_v4().simple());
        let core = |token: i64| {
            Outcome::Acquired(Arc::new(Core {
                name: name.to_owned(),
                pk: pk.clone(),
                locked_by: locked_by.clone(),
                locked_at: now,
                at_least: config.lock_at_least_for(),
                token: token as u64,
                until: StdMutex::new(until),
                released: tokio::sync::Mutex::new(false),
            }))
        };
        let expired = Cond::Le("lockUntil", self.time_attr(now));
        if self.is(DynBug::EventuallyConsistentPrecheck)
            && let Some(item) = conn.get_item(&pk, false).await?
            && item
                .get("lockUntil")
                .and_then(time_of)
                .is_some_and(|t| t > now)
        {
            return Ok(Outcome::NotAcquired(Some(holder_of(&item))));
        }
        if self.is(DynBug::FenceReadThenPut) {
            let current = conn.get_item(&pk, true).await?;
            let fence = current
                .as_ref()
                .and_then(|i| i.get("fence"))
                .and_then(Attr::as_n)
                .unwrap_or(0)
                + 1;
            let item = self.new_item(&pk, until, now, &locked_by, fence);
            return match conn
                .put_item(item, Some(Cond::NotExists("_id").or(expired)))
                .await
            {
                Ok(()) => Ok(core(fence)),
                Err(DynError::ConditionalCheckFailed) => {
                    Ok(Outcome::NotAcquired(current.as_ref().map(holder_of)))
                }
                Err(e) => Err(e),
            };
        }
        let cached = self.0.cache.lock().unwrap().contains(name);
        if !cached {
            let inserted = self
                .insert(self.new_item(&pk, until, now, &locked_by, 1))
                .await?;
            self.0.cache.lock().unwrap().insert(name.to_owned());
            if inserted {
                return Ok(core(1));
            }
        }
        let actions = [
            Action::Set("lockUntil", self.time_attr(until)),
            Action::Set("lockedAt", self.time_attr(now)),
            Action::Set("lockedBy", Attr::S(locked_by.clone())),
            Action::Add("fence", 1),
        ];
        match conn
            .update_item(&pk, &actions, &Cond::Exists("_id").and(expired))
            .await
        {
            Ok(item) => {
                let fence = item.get("fence").and_then(Attr::as_n).unwrap_or(1);
                Ok(core(fence))
            }
            Err(DynError::ConditionalCheckFailed) => match conn.get_item(&pk, true).await? {
                Some(item) => Ok(Outcome::NotAcquired(Some(holder_of(&item)))),
                None => {
                    // Deleted behind the cache's back: create it again.
                    self.0.cache.lock().unwrap().remove(name);
                    if self
                        .insert(self.new_item(&pk, until, now, &locked_by, 1))
                        .await?
                    {
                        self.0.cache.lock().unwrap().insert(name.to_owned());
                        Ok(core(1))
                    } else {
                        Ok(Outcome::NotAcquired(None))
                    }
                }
            },
            Err(e) => Err(e),
        }
    }

    /// `try_lock` without the node-level wrapping.
    async fn try_lock_direct(&self, config: &LockConfiguration) -> Result<Outcome, LockError> {
        let name = config.name();
        self.check_name(name)?;
        match self.acquire(config).await {
            Ok(outcome) => Ok(outcome),
            Err(DynError::Throttled) if self.is(DynBug::ThrottleIsNotAcquired) => {
                Ok(Outcome::NotAcquired(None))
            }
            Err(e) => Err(lock_error(e, Operation::Acquire, name)),
        }
    }

    /// `SingleFlight`: joins an acquisition of the same name already under way.
    async fn try_lock_shared(&self, config: &LockConfiguration) -> Result<Outcome, LockError> {
        let name = config.name().to_owned();
        let flight = {
            let mut flights = self.0.flights.lock().unwrap();
            match flights.get(&name) {
                Some(flight) => flight.clone(),
                None => {
                    let node = self.clone();
                    let config = config.clone();
                    let flight: Flight = async move {
                        match node.try_lock_direct(&config).await {
                            Ok(Outcome::Acquired(core)) => Ok(Some(core)),
                            Ok(Outcome::NotAcquired(_)) => Ok(None),
                            Err(e) => Err(e.to_string()),
                        }
                    }
                    .boxed()
                    .shared();
                    flights.insert(name.clone(), flight.clone());
                    flight
                }
            }
        };
        let result = flight.await;
        self.0.flights.lock().unwrap().remove(&name);
        match result {
            Ok(Some(core)) => Ok(Outcome::Acquired(core)),
            Ok(None) => Ok(Outcome::NotAcquired(None)),
            Err(message) => Err(LockError::backend_message(
                ErrorKind::OutcomeUnknown,
                PROVIDER,
                Operation::Acquire,
                name,
                message,
            )),
        }
    }

    fn info(&self, item: &Item, now: i64) -> Option<LockInfo> {
        let name = item.get("_id").and_then(Attr::as_s)?;
        let until = item.get("lockUntil").and_then(time_of)?;
        let at = item.get("lockedAt").and_then(time_of).unwrap_or(0);
        let by = item
            .get("lockedBy")
            .and_then(Attr::as_s)
            .unwrap_or_default();
        let mut info = LockInfo::new(
            name,
            LockState::Free,
            AcquisitionId::new(format!("{at}|{by}")),
        )
        .with_locked_by(by)
        .with_locked_at(from_unix_ms(at));
        if let Some(fence) = item.get("fence").and_then(Attr::as_n) {
            info = info.with_fencing_token(fence as u64);
        }
        Some(info.judged_at(from_unix_ms(until), from_unix_ms(now)))
    }
}

#[async_trait]
impl LockProvider for DynNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let outcome = if self.is(DynBug::SingleFlight) {
            self.try_lock_shared(config).await?
        } else {
            self.try_lock_direct(config).await?
        };
        Ok(match outcome {
            Outcome::Acquired(core) => Acquisition::Acquired(Box::new(DynHandle {
                node: self.clone(),
                core,
            })),
            Outcome::NotAcquired(holder) => Acquisition::NotAcquired(holder),
        })
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Client)
            .with_fencing(true)
            .with_extend(true)
            .with_max_name_chars(MAX_NAME_CHARS)
            .with_time_precision(Duration::from_millis(1))
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// One acquisition on dynamoish.
pub struct DynHandle {
    node: DynNode,
    core: Arc<Core>,
}

impl fmt::Debug for DynHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynHandle")
            .field("name", &self.core.name)
            .field("locked_by", &self.core.locked_by)
            .finish()
    }
}

impl DynHandle {
    /// "This acquisition still holds the item", as of `now`.
    fn mine(&self, now: i64) -> Cond {
        let owner = if self.node.is(DynBug::OwnerByLockedAt) {
            Cond::Eq("lockedAt", self.node.time_attr(self.core.locked_at))
        } else {
            Cond::Eq("lockedBy", Attr::S(self.core.locked_by.clone()))
        };
        owner.and(Cond::Gt("lockUntil", self.node.time_attr(now)))
    }

    async fn set_until(&self, until: i64, now: i64) -> Result<bool, DynError> {
        let actions = [Action::Set("lockUntil", self.node.time_attr(until))];
        match self
            .node
            .0
            .conn
            .update_item(&self.core.pk, &actions, &self.mine(now))
            .await
        {
            Ok(_) => Ok(true),
            Err(DynError::ConditionalCheckFailed) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[async_trait]
impl LockHandle for DynHandle {
    fn name(&self) -> &str {
        &self.core.name
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.core.token)
    }

    fn time_source(&self) -> TimeSource {
        if self.node.is(DynBug::HandleSaysServer) {
            TimeSource::Server
        } else {
            TimeSource::Client
        }
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let mut released = self.core.released.lock().await;
        if *released {
            return Ok(false);
        }
        let now = self.node.now_ms();
        let at_least_ms = if self.node.is(DynBug::SubsecMillisAtLeast) {
            i64::from(self.core.at_least.subsec_millis())
        } else {
            ceil_ms(self.core.at_least)
        };
        let until = now.max(self.core.locked_at.saturating_add(at_least_ms));
        match self.set_until(until, now).await {
            Ok(answer) => {
                *released = true;
                Ok(answer || self.node.is(DynBug::IdempotentRelease))
            }
            Err(e) => Err(lock_error(e, Operation::Release, &self.core.name)),
        }
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        let name = self.core.name.as_str();
        if lock_at_most_for.is_zero() {
            return Err(LockConfiguration::new(name, Duration::ZERO, Duration::ZERO)
                .unwrap_err()
                .into());
        }
        let released = self.core.released.lock().await;
        if *released {
            return Ok(false);
        }
        let node = &self.node;
        let err = |e| lock_error(e, Operation::Extend, name);
        let now = node.now_ms();
        let from = if node.is(DynBug::ExtendFromLockUntil) {
            *self.core.until.lock().unwrap()
        } else {
            now
        };
        let until = from.saturating_add(ceil_ms(lock_at_most_for));
        if node.is(DynBug::ExtendThroughInsertPath) && !node.0.cache.lock().unwrap().contains(name)
        {
            let item = node.new_item(
                &self.core.pk,
                until,
                self.core.locked_at,
                &self.core.locked_by,
                self.core.token as i64,
            );
            return node.insert(item).await.map_err(err);
        }
        let extended = self.set_until(until, now).await.map_err(err)?;
        if extended {
            *self.core.until.lock().unwrap() = until;
        }
        drop(released);
        Ok(extended)
    }
}

#[async_trait]
impl LockAdmin for DynNode {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let err = |e| lock_error(e, Operation::List, "");
        let filter = KeyFilter::BeginsWith(request.prefix.clone());
        let now = self.now_ms();
        if self.is(DynBug::ScanPageLimitIgnored) {
            let (items, _) = self.0.conn.scan(&filter, None, None).await.map_err(err)?;
            let locks = items.iter().filter_map(|i| self.info(i, now)).collect();
            return Ok(LockPage { locks, next: None });
        }
        let limit = request.limit.max(1);
        let start = request.after.as_ref().map(|c| c.as_str().to_owned());
        // Read at least 100 items per request (the filter runs after the limit), and cut
        // the matches at the page size: the cursor is then the last lock returned.
        let (items, last) = self
            .0
            .conn
            .scan(&filter, start.as_deref(), Some(limit.max(100)))
            .await
            .map_err(err)?;
        let cut = items.len() > limit;
        let page: Vec<&Item> = items.iter().take(limit).collect();
        let next = if cut {
            page.last()
                .and_then(|i| i.get("_id"))
                .and_then(Attr::as_s)
                .map(PageCursor::new)
        } else {
            last.map(PageCursor::new)
        };
        let locks = page.iter().filter_map(|i| self.info(i, now)).collect();
        Ok(LockPage { locks, next })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let item = self
            .0
            .conn
            .get_item(&self.pk_for(name), true)
            .await
            .map_err(|e| lock_error(e, Operation::Inspect, name))?;
        let now = self.now_ms();
        Ok(item.and_then(|i| self.info(&i, now)))
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
        let now = self.now_ms();
        let cond = Cond::Eq("lockedBy", Attr::S(by.to_owned()))
            .and(Cond::Eq("lockedAt", self.time_attr(at)))
            .and(Cond::Gt("lockUntil", self.time_attr(now)));
        // Each operator's "now" is read on its own node before the request, so a later
        // write may carry an earlier "now": marking `lockedBy` makes sure no second
        // force-unlock, and no late release or extend of the holder, matches again.
        let actions = [
            Action::Set("lockUntil", self.time_attr(now)),
            Action::Set("lockedBy", Attr::S(format!("{by} (force-unlocked)"))),
        ];
        match self
            .0
            .conn
            .update_item(&self.pk_for(name), &actions, &cond)
            .await
        {
            Ok(_) => Ok(true),
            Err(DynError::ConditionalCheckFailed) => Ok(false),
            Err(e) => Err(lock_error(e, Operation::ForceUnlock, name)),
        }
    }
}
