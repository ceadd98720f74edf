//! Backend (a): a memcached-like key-value server with per-key TTLs, `add`/`cas`/`touch`/
//! `delete`, and memcached's quirk that an expiry above 30 days is read as an absolute Unix
//! time. Expiry is decided by the server (lazily, on access, against its own clock), so the
//! provider declares server time. No listing, so no admin.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use shedlock_conformance::{Clock, ConformanceHarness, SetupError, Support, async_trait};
use shedlock_core::{
    Acquisition, Capabilities, ErrorKind, LockConfiguration, LockError, LockHandle, LockHolder,
    LockProvider, Operation, TimeSource, raw::default_holder,
};

use super::common::{Net, NetError, ServerClock, ceil_ms, unix_ms};

const PROVIDER: &str = "memkv";
/// memcached reads an expiry above 30 days as an absolute Unix time.
const THIRTY_DAYS_MS: u64 = 30 * 24 * 3600 * 1000;
/// The server refuses longer keys.
const MAX_KEY_BYTES: usize = 1024;
/// `lock:` plus at most 12 bytes per character (4 UTF-8 bytes, each `%XX`) fits 1024 bytes.
const MAX_NAME_CHARS: usize = 80;

// ------------------------------------------------------------------------------------------
// The simulated server
// ------------------------------------------------------------------------------------------

/// The shared memcached-like server all nodes of one harness talk to.
#[derive(Debug)]
pub struct MemKvServer {
    state: StdMutex<MemState>,
    clock: ServerClock,
}

#[derive(Debug, Default)]
struct MemState {
    items: HashMap<String, Item>,
    next_cas: u64,
}

#[derive(Debug)]
struct Item {
    value: String,
    expires: Option<Instant>,
    cas: u64,
}

/// The answer to a `cas` or `delete` with a cas token.
#[derive(Debug, PartialEq, Eq)]
pub enum CasOutcome {
    Stored,
    Exists,
    NotFound,
}

/// A failed request.
#[derive(Debug)]
pub enum MemError {
    Net(NetError),
    /// `CLIENT_ERROR bad command line format` and the like.
    Client(String),
}

impl MemState {
    fn live(&mut self, key: &str, now: Instant) -> Option<&mut Item> {
        let expired =
            matches!(self.items.get(key), Some(Item { expires: Some(at), .. }) if *at <= now);
        if expired {
            self.items.remove(key);
        }
        self.items.get_mut(key)
    }

    fn next_cas(&mut self) -> u64 {
        self.next_cas += 1;
        self.next_cas
    }
}

impl MemKvServer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            state: StdMutex::new(MemState::default()),
            clock: ServerClock::with_offset_ms(-300),
        })
    }

    /// memcached's exptime: 0 never expires, up to 30 days is relative, above is absolute.
    fn deadline(&self, exptime_ms: u64) -> Option<Instant> {
        let now = self.clock.instant();
        if exptime_ms == 0 {
            None
        } else if exptime_ms <= THIRTY_DAYS_MS {
            Some(now + Duration::from_millis(exptime_ms))
        } else {
            let target = UNIX_EPOCH + Duration::from_millis(exptime_ms);
            match target.duration_since(self.clock.now()) {
                Ok(left) => Some(now + left),
                Err(_) => Some(now),
            }
        }
    }
}

/// One client connection to the server.
#[derive(Debug)]
pub struct MemKvConn {
    server: Arc<MemKvServer>,
    net: Net,
}

fn check_key(key: &str) -> Result<(), MemError> {
    if key.len() > MAX_KEY_BYTES {
        return Err(MemError::Client(format!(
            "key too long ({} bytes, limit {MAX_KEY_BYTES})",
            key.len()
        )));
    }
    if key.bytes().any(|b| b <= b' ' || b >= 0x7f) {
        return Err(MemError::Client(
            "bad key: keys are printable ASCII without spaces".into(),
        ));
    }
    Ok(())
}

impl MemKvConn {
    pub fn new(server: Arc<MemKvServer>, net: Net) -> Self {
        Self { server, net }
    }

    async fn exec<R>(
        &self,
        key: &str,
        f: impl FnOnce(&MemKvServer, &mut MemState, Instant) -> R,
    ) -> Result<R, MemError> {
        self.net.send().await.map_err(MemError::Net)?;
        check_key(key)?;
        let result = {
            let mut state = self.server.state.lock().unwrap();
            f(&self.server, &mut state, self.server.clock.instant())
        };
        self.net.receive().await;
        Ok(result)
    }

    pub async fn gets(&self, key: &str) -> Result<Option<(String, u64)>, MemError> {
        self.exec(key, |_, s, now| {
            s.live(key, now).map(|i| (i.value.clone(), i.cas))
        })
        .await
    }

    pub async fn add(&self, key: &str, value: &str, exptime_ms: u64) -> Result<bool, MemError> {
        self.exec(key, |server, s, now| {
            if s.live(key, now).is_some() {
                return false;
            }
            let cas = s.next_cas();
            s.items.insert(
                key.to_owned(),
                Item {
                    value: value.to_owned(),
                    expires: server.deadline(exptime_ms),
                    cas,
                },
            );
            true
        })
        .await
    }

    pub async fn cas(
        &self,
        key: &str,
        value: &str,
        exptime_ms: u64,
        cas: u64,
    ) -> Result<CasOutcome, MemError> {
        self.exec(key, |server, s, now| {
            let next = s.next_cas();
            match s.live(key, now) {
                None => CasOutcome::NotFound,
                Some(item) if item.cas != cas => CasOutcome::Exists,
                Some(item) => {
                    item.value = value.to_owned();
                    item.expires = server.deadline(exptime_ms);
                    item.cas = next;
                    CasOutcome::Stored
                }
            }
        })
        .await
    }

    pub async fn touch(&self, key: &str, exptime_ms: u64) -> Result<bool, MemError> {
        self.exec(key, |server, s, now| match s.live(key, now) {
            None => false,
            Some(item) => {
                item.expires = server.deadline(exptime_ms);
                true
            }
        })
        .await
    }

    pub async fn delete(&self, key: &str) -> Result<bool, MemError> {
        self.exec(key, |_, s, now| {
            s.live(key, now).is_some() && s.items.remove(key).is_some()
        })
        .await
    }

    pub async fn delete_cas(&self, key: &str, cas: u64) -> Result<CasOutcome, MemError> {
        self.exec(key, |_, s, now| match s.live(key, now) {
            None => CasOutcome::NotFound,
            Some(item) if item.cas != cas => CasOutcome::Exists,
            Some(_) => {
                s.items.remove(key);
                CasOutcome::Stored
            }
        })
        .await
    }

    /// Meta arithmetic with auto-create: the counter starts at 1.
    pub async fn incr(&self, key: &str) -> Result<u64, MemError> {
        self.exec(key, |_, s, now| {
            let cas = s.next_cas();
            match s.live(key, now) {
                Some(item) => {
                    let n = item.value.parse::<u64>().unwrap_or(0) + 1;
                    item.value = n.to_string();
                    item.cas = cas;
                    n
                }
                None => {
                    s.items.insert(
                        key.to_owned(),
                        Item {
                            value: "1".into(),
                            expires: None,
                            cas,
                        },
                    );
                    1
                }
            }
        })
        .await
    }

    /// `stats` → `time`: the server's wall clock.
    pub async fn server_time(&self) -> Result<SystemTime, MemError> {
        self.exec("stats", |server, _, _| server.clock.now()).await
    }
}

// ------------------------------------------------------------------------------------------
// The provider
// ------------------------------------------------------------------------------------------

/// The one bug a broken memkv provider has; `None` is the correct control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemBug {
    /// The node remembers which names it currently holds and, asked again for one of them,
    /// answers acquired with a second handle on the same acquisition ("re-entrant, like a
    /// ReentrantLock"). Breaks `[mutual-exclusion]`: locking twice from the same node must be
    /// refused, and after the node's lock expired and another node took it, this node still
    /// believes it holds it. Plausible: the author wanted nested tasks to share a lock.
    Reentrant,
    /// The node keeps one map name -> value-of-my-latest-acquisition, and handles look their
    /// value up there at release/extend instead of carrying it. A stale handle of an expired
    /// acquisition then releases the newer acquisition the same node made. Breaks
    /// `[ownership]`. Plausible: "the node is the owner", and the map was added for a
    /// keep-alive loop.
    TokenByName,
    /// The node keeps a single "current acquisition" slot (written by every acquire, any name)
    /// and handles release with the value in that slot. Two tasks sharing the node with two
    /// locks: the first to release sends the other's value, gets "not mine" and answers
    /// `false` while its lock stays held. Breaks `[release-result]`. Plausible: written for a
    /// one-job-per-process world.
    CurrentSlot,
    /// Release sets the key's TTL to the full `lock_at_least_for` (`touch key at_least`), so
    /// the lock is held until release + at-least instead of acquired_at + at-least. Breaks
    /// `[at-least]`. Plausible: "touch with the minimum hold" reads right at first sight.
    TouchAtLeast,
    /// Release never deletes the key: since memcached reads exptime 0 as "never expire", the
    /// author clamps the remaining at-least to at least 1 s. With `lock_at_least_for = 0` the
    /// lock then stays held for a second after release. Breaks `[at-least]` (a release with
    /// zero at-least frees at once). Plausible: defending against the exptime-0 trap.
    MinTtlOneSecond,
    /// Passes every TTL as a relative exptime, not knowing that memcached reads values above
    /// 30 days as an absolute Unix time (which is in 1970, so the key expires at once). A lock
    /// with `lock_at_most_for` of 30+ days is free right after it is taken. Breaks `[at-most]`.
    /// Plausible: the 30-day rule is a footnote of memcached's protocol.txt.
    RawLongTtl,
    /// Extend on a missing key re-adds it ("it may have been evicted under memory pressure"),
    /// so an extend after expiry answers `true` and revives the lock. Breaks `[extend]`.
    ExtendRecreates,
    /// Release is owner-blind (`touch`/`delete` on the key, no cas compare), guarded only by a
    /// local "lost" flag that a failed extend sets. A handle whose lock expired without an
    /// extend in between frees (or prolongs) whoever holds the lock now. Breaks `[ownership]`.
    /// Plausible: the author believed "if I had lost it, extend would have told me".
    LostFlagBlindRelease,
    /// Any failure to talk to the server is answered `NotAcquired` ("someone else must have
    /// it"). Breaks `[fail-closed]`: an outage makes every node skip the task silently.
    ErrorsAsNotAcquired,
    /// On a connection failure, try_lock retries with backoff until the server is back, never
    /// giving up. Breaks `[bounded-time]`. Plausible: "the lock must not be skipped because of a
    /// network blip".
    RetryForever,
    /// Escapes the characters memcached and the key layout reserve (space, control, non-ASCII,
    /// `/` and `:`) as `%XX` but not `%` itself, so `a/b` and `a%2Fb` share the key
    /// `lock:a%2Fb`. Breaks `[names-are-data]`.
    PercentNotEscaped,
    /// Checks the 80-character limit with `name.len()` (bytes), refusing 80-character names
    /// with multi-byte characters. Breaks `[name-length]` (counted as characters, not bytes).
    ByteLengthLimit,
    /// Declares no `max_name_chars`, although the server refuses keys over 1024 bytes: a
    /// 1024-character name fails with a backend error. Breaks `[honest-capabilities]`.
    UndeclaredKeyLimit,
    /// Declares fencing with a per-name `incr` counter taken *before* the `add`: a racer that
    /// drew a smaller number but added later (after the winner released) holds the lock with a
    /// smaller token. Breaks `[fencing]`. Plausible: incr and add look independent.
    IncrThenAddFencing,
    /// A failed release (server unreachable mid-operation) answers `Ok(false)` instead of an
    /// error. Breaks `[three-outcomes]`: `false` is an answer about the lock; an error means
    /// the provider does not know.
    UnlockErrorAsFalse,
}

/// The harness for memkv providers.
pub struct MemKvHarness {
    name: String,
    server: Arc<MemKvServer>,
    bug: Option<MemBug>,
}

impl MemKvHarness {
    pub fn new(name: &str, bug: Option<MemBug>) -> Self {
        Self {
            name: name.to_owned(),
            server: MemKvServer::new(),
            bug,
        }
    }
}

#[async_trait]
impl ConformanceHarness for MemKvHarness {
    type Node = MemKvNode;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<MemKvNode, SetupError> {
        // Server time: the node's clock decides nothing, so it is not even kept.
        Ok(MemKvNode::new(
            MemKvConn::new(self.server.clone(), Net::up()),
            self.bug,
        ))
    }

    async fn cut_off(&self, node: &MemKvNode) -> Result<Support<()>, SetupError> {
        node.0.conn.net.cut();
        Ok(Support::Supported(()))
    }

    async fn unreachable_node(&self) -> Result<Support<MemKvNode>, SetupError> {
        Ok(Support::Supported(MemKvNode::new(
            MemKvConn::new(self.server.clone(), Net::down(Duration::from_secs(2))),
            self.bug,
        )))
    }
}

/// A memkv node: one client connection and this node's identity.
#[derive(Clone)]
pub struct MemKvNode(Arc<NodeInner>);

struct NodeInner {
    conn: MemKvConn,
    holder: String,
    bug: Option<MemBug>,
    /// `Reentrant`: names this node holds, with the acquisition's core.
    held: StdMutex<HashMap<String, Arc<Core>>>,
    /// `TokenByName`: name -> value of this node's latest acquisition.
    by_name: StdMutex<HashMap<String, String>>,
    /// `CurrentSlot`: the value of this node's latest acquisition, any name.
    current: StdMutex<Option<String>>,
}

impl fmt::Debug for MemKvNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemKvNode")
            .field("holder", &self.0.holder)
            .field("bug", &self.0.bug)
            .finish()
    }
}

static NODE_SEQ: AtomicUsize = AtomicUsize::new(0);

fn lock_error(error: MemError, operation: Operation, name: &str) -> LockError {
    match error {
        MemError::Net(NetError::ConnectTimeout(after)) => LockError::Timeout {
            provider: PROVIDER,
            operation,
            name: name.to_owned(),
            after,
        },
        MemError::Client(message) => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            message,
        ),
    }
}

/// `lock:` + the name with every byte outside `[A-Za-z0-9._-]` as `%XX`.
fn key_for(name: &str, bug: Option<MemBug>) -> String {
    let mut key = String::from("lock:");
    for &b in name.as_bytes() {
        let keep = if bug == Some(MemBug::PercentNotEscaped) {
            b > b' ' && b < 0x7f && b != b'/' && b != b':'
        } else {
            b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-'
        };
        if keep {
            key.push(b as char);
        } else {
            key.push_str(&format!("%{b:02X}"));
        }
    }
    key
}

impl MemKvNode {
    fn new(conn: MemKvConn, bug: Option<MemBug>) -> Self {
        let seq = NODE_SEQ.fetch_add(1, Ordering::Relaxed);
        Self(Arc::new(NodeInner {
            conn,
            holder: format!("{}-memkv{seq}", default_holder()),
            bug,
            held: StdMutex::new(HashMap::new()),
            by_name: StdMutex::new(HashMap::new()),
            current: StdMutex::new(None),
        }))
    }

    fn is(&self, bug: MemBug) -> bool {
        self.0.bug == Some(bug)
    }
}

impl NodeInner {
    /// The exptime for a lock of `d`: relative up to 30 days, absolute (server time) above.
    async fn exptime(
        &self,
        d: Duration,
        operation: Operation,
        name: &str,
    ) -> Result<u64, LockError> {
        let ms = ceil_ms(d).max(1);
        if ms <= THIRTY_DAYS_MS || self.bug == Some(MemBug::RawLongTtl) {
            return Ok(ms);
        }
        let now = self
            .conn
            .server_time()
            .await
            .map_err(|e| lock_error(e, operation, name))?;
        Ok(u64::try_from(unix_ms(now)).unwrap_or(0).saturating_add(ms))
    }
}

/// What an acquisition is, shared by the handles that point at it.
#[derive(Debug)]
struct Core {
    name: String,
    key: String,
    value: String,
    at_least: Duration,
    /// When the acquire was answered, on the node's monotonic clock: the rest of at-least is
    /// counted from here, which can only make the lock last longer.
    answered: Instant,
    token: Option<u64>,
    state: tokio::sync::Mutex<HandleState>,
}

#[derive(Debug, Default)]
struct HandleState {
    released: bool,
    lost: bool,
}

#[async_trait]
impl LockProvider for MemKvNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        if self.is(MemBug::ByteLengthLimit) {
            if name.len() > MAX_NAME_CHARS {
                return Err(LockError::invalid_name(
                    PROVIDER,
                    name,
                    format!("longer than {MAX_NAME_CHARS} characters"),
                ));
            }
        } else {
            self.capabilities().check_name_length(PROVIDER, name)?;
        }
        if self.is(MemBug::Reentrant) {
            let held = self.0.held.lock().unwrap().get(name).cloned();
            if let Some(core) = held {
                return Ok(Acquisition::Acquired(Box::new(MemKvHandle {
                    node: self.clone(),
                    core,
                })));
            }
        }
        let key = key_for(name, self.0.bug);
        let token = if self.is(MemBug::IncrThenAddFencing) {
            let counter = format!("fence:{}", &key["lock:".len()..]);
            Some(
                self.0
                    .conn
                    .incr(&counter)
                    .await
                    .map_err(|e| lock_error(e, Operation::Acquire, name))?,
            )
        } else {
            None
        };
        let value = format!("{}#{}", self.0.holder, uuid::Uuid::new_v4().simple());
        let exptime = self
            .0
            .exptime(config.lock_at_most_for(), Operation::Acquire, name)
            .await?;
        let mut backoff = Duration::from_millis(100);
        let added = loop {
            match self.0.conn.add(&key, &value, exptime).await {
                Ok(added) => break added,
                Err(MemError::Net(_)) if self.is(MemBug::ErrorsAsNotAcquired) => {
                    return Ok(Acquisition::NotAcquired(None));
                }
                Err(MemError::Net(_)) if self.is(MemBug::RetryForever) => {
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
                Err(e) => return Err(lock_error(e, Operation::Acquire, name)),
            }
        };
        if !added {
            return Ok(Acquisition::NotAcquired(Some(LockHolder::default())));
        }
        let core = Arc::new(Core {
            name: name.to_owned(),
            key,
            value: value.clone(),
            at_least: config.lock_at_least_for(),
            answered: Instant::now(),
            token,
            state: tokio::sync::Mutex::new(HandleState::default()),
        });
        if self.is(MemBug::Reentrant) {
            self.0
                .held
                .lock()
                .unwrap()
                .insert(name.to_owned(), core.clone());
        }
        self.0
            .by_name
            .lock()
            .unwrap()
            .insert(name.to_owned(), value.clone());
        *self.0.current.lock().unwrap() = Some(value);
        Ok(Acquisition::Acquired(Box::new(MemKvHandle {
            node: self.clone(),
            core,
        })))
    }

    fn capabilities(&self) -> Capabilities {
        let caps = Capabilities::new(TimeSource::Server)
            .with_extend(true)
            .with_fencing(self.is(MemBug::IncrThenAddFencing))
            .with_time_precision(Duration::from_millis(1));
        if self.is(MemBug::UndeclaredKeyLimit) {
            caps
        } else {
            caps.with_max_name_chars(MAX_NAME_CHARS)
        }
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// One acquisition on memkv.
pub struct MemKvHandle {
    node: MemKvNode,
    core: Arc<Core>,
}

impl fmt::Debug for MemKvHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemKvHandle")
            .field("name", &self.core.name)
            .field("value", &self.core.value)
            .finish()
    }
}

impl MemKvHandle {
    /// The value this handle compares with: its own, except for the node-wide-slot bugs.
    fn my_value(&self) -> String {
        if self.node.is(MemBug::TokenByName)
            && let Some(v) = self.node.0.by_name.lock().unwrap().get(&self.core.name)
        {
            return v.clone();
        }
        if self.node.is(MemBug::CurrentSlot)
            && let Some(v) = self.node.0.current.lock().unwrap().clone()
        {
            return v;
        }
        self.core.value.clone()
    }

    async fn release_once(&self) -> Result<bool, MemError> {
        let conn = &self.node.0.conn;
        let key = &self.core.key;
        let rest = self
            .core
            .at_least
            .saturating_sub(self.core.answered.elapsed());
        if self.node.is(MemBug::LostFlagBlindRelease) {
            return if rest.is_zero() {
                conn.delete(key).await
            } else {
                conn.touch(key, ceil_ms(rest).max(1)).await
            };
        }
        let Some((value, cas)) = conn.gets(key).await? else {
            return Ok(false);
        };
        if value != self.my_value() {
            return Ok(false);
        }
        let outcome = if self.node.is(MemBug::TouchAtLeast) {
            if self.core.at_least.is_zero() {
                conn.delete_cas(key, cas).await?
            } else {
                conn.cas(key, &value, ceil_ms(self.core.at_least), cas)
                    .await?
            }
        } else if self.node.is(MemBug::MinTtlOneSecond) {
            conn.cas(key, &value, ceil_ms(rest).max(1000), cas).await?
        } else if rest.is_zero() {
            conn.delete_cas(key, cas).await?
        } else {
            conn.cas(key, &value, ceil_ms(rest).max(1), cas).await?
        };
        Ok(outcome == CasOutcome::Stored)
    }
}

#[async_trait]
impl LockHandle for MemKvHandle {
    fn name(&self) -> &str {
        &self.core.name
    }

    fn fencing_token(&self) -> Option<u64> {
        self.core.token
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let mut state = self.core.state.lock().await;
        if state.released || (self.node.is(MemBug::LostFlagBlindRelease) && state.lost) {
            return Ok(false);
        }
        match self.release_once().await {
            Ok(released) => {
                state.released = true;
                if self.node.is(MemBug::Reentrant) {
                    self.node.0.held.lock().unwrap().remove(&self.core.name);
                }
                Ok(released)
            }
            Err(MemError::Net(_)) if self.node.is(MemBug::UnlockErrorAsFalse) => Ok(false),
            Err(e) => Err(lock_error(e, Operation::Release, &self.core.name)),
        }
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        let name = &self.core.name;
        if lock_at_most_for.is_zero() {
            return Err(
                LockConfiguration::new(name.as_str(), Duration::ZERO, Duration::ZERO)
                    .unwrap_err()
                    .into(),
            );
        }
        let mut state = self.core.state.lock().await;
        if state.released {
            return Ok(false);
        }
        let conn = &self.node.0.conn;
        let key = &self.core.key;
        let exptime = self
            .node
            .0
            .exptime(lock_at_most_for, Operation::Extend, name)
            .await?;
        let err = |e| lock_error(e, Operation::Extend, name);
        let Some((value, cas)) = conn.gets(key).await.map_err(err)? else {
            if self.node.is(MemBug::ExtendRecreates) {
                return conn.add(key, &self.my_value(), exptime).await.map_err(err);
            }
            state.lost = true;
            return Ok(false);
        };
        if value != self.my_value() {
            state.lost = true;
            return Ok(false);
        }
        let extended =
            conn.cas(key, &value, exptime, cas).await.map_err(err)? == CasOutcome::Stored;
        if !extended {
            state.lost = true;
        }
        Ok(extended)
    }
}
