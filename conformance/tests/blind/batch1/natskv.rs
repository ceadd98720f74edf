//! Backend (b): a NATS-JetStream-like key-value bucket: every write gets the stream's next
//! sequence number as its revision, `create` only succeeds on a missing (or deleted) key,
//! `update` only at the expected revision. No per-key TTL: expiry is judged from the
//! timestamps the nodes store in the record, so the provider declares client time and reads
//! the clock the kit hands it. Fencing tokens are the revision of the acquiring write.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use shedlock_conformance::{Clock, ConformanceHarness, SetupError, Support, async_trait};
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockHolder, LockInfo, LockPage, LockProvider, LockState, Operation, PageCursor,
    PageRequest, TimeSource, raw::default_holder,
};

use super::common::{Net, NetError, ceil_ms, from_unix_ms, unix_ms};

const PROVIDER: &str = "natskv";
const KEY_PREFIX: &str = "lock.";

// ------------------------------------------------------------------------------------------
// The simulated server
// ------------------------------------------------------------------------------------------

/// The shared bucket.
#[derive(Debug, Default)]
pub struct NatsServer {
    state: StdMutex<NatsState>,
}

#[derive(Debug, Default)]
struct NatsState {
    seq: u64,
    entries: BTreeMap<String, Entry>,
}

#[derive(Debug)]
struct Entry {
    /// `None`: a delete marker.
    value: Option<String>,
    revision: u64,
}

/// A failed request.
#[derive(Debug)]
pub enum KvError {
    Net(NetError),
    /// `create` on a key that has a value.
    KeyExists,
    /// `update` at a revision that is not the key's last.
    WrongLastSequence,
    /// An invalid key.
    BadKey(String),
}

fn check_key(key: &str) -> Result<(), KvError> {
    let valid_chars = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-/_=.".contains(&b));
    if key.is_empty()
        || !valid_chars
        || key.starts_with('.')
        || key.ends_with('.')
        || key.contains("..")
    {
        return Err(KvError::BadKey(format!("invalid key {key:?}")));
    }
    Ok(())
}

/// One client connection.
#[derive(Debug)]
pub struct NatsConn {
    server: Arc<NatsServer>,
    net: Net,
}

impl NatsConn {
    async fn exec<R>(&self, key: &str, f: impl FnOnce(&mut NatsState) -> R) -> Result<R, KvError> {
        self.net.send().await.map_err(KvError::Net)?;
        if !key.is_empty() {
            check_key(key)?;
        }
        let result = f(&mut self.server.state.lock().unwrap());
        self.net.receive().await;
        Ok(result)
    }

    pub async fn get(&self, key: &str) -> Result<Option<(String, u64)>, KvError> {
        self.exec(key, |s| {
            s.entries
                .get(key)
                .and_then(|e| e.value.as_ref().map(|v| (v.clone(), e.revision)))
        })
        .await
    }

    pub async fn create(&self, key: &str, value: &str) -> Result<u64, KvError> {
        self.exec(key, |s| {
            if matches!(s.entries.get(key), Some(Entry { value: Some(_), .. })) {
                return Err(KvError::KeyExists);
            }
            s.seq += 1;
            s.entries.insert(
                key.to_owned(),
                Entry {
                    value: Some(value.to_owned()),
                    revision: s.seq,
                },
            );
            Ok(s.seq)
        })
        .await?
    }

    pub async fn update(&self, key: &str, value: &str, expected: u64) -> Result<u64, KvError> {
        self.exec(key, |s| {
            let last = s.entries.get(key).map(|e| e.revision).unwrap_or(0);
            if last != expected {
                return Err(KvError::WrongLastSequence);
            }
            s.seq += 1;
            s.entries.insert(
                key.to_owned(),
                Entry {
                    value: Some(value.to_owned()),
                    revision: s.seq,
                },
            );
            Ok(s.seq)
        })
        .await?
    }

    pub async fn put(&self, key: &str, value: &str) -> Result<u64, KvError> {
        self.exec(key, |s| {
            s.seq += 1;
            s.entries.insert(
                key.to_owned(),
                Entry {
                    value: Some(value.to_owned()),
                    revision: s.seq,
                },
            );
            s.seq
        })
        .await
    }

    /// Keys with a value, in order, starting with `prefix`, after `after`, at most `limit`.
    pub async fn keys(
        &self,
        prefix: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<String>, KvError> {
        self.exec("", |s| {
            let start = match after {
                Some(a) if a >= prefix => std::ops::Bound::Excluded(a.to_owned()),
                _ => std::ops::Bound::Included(prefix.to_owned()),
            };
            s.entries
                .range((start, std::ops::Bound::Unbounded))
                .take_while(|(k, _)| k.starts_with(prefix))
                .filter(|(_, e)| e.value.is_some())
                .take(limit)
                .map(|(k, _)| k.clone())
                .collect()
        })
        .await
    }
}

// ------------------------------------------------------------------------------------------
// The provider
// ------------------------------------------------------------------------------------------

/// The record stored under each lock's key, in the node's clock (client time).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Record {
    lock_until: i64,
    locked_at: i64,
    locked_by: String,
    /// The fencing token (revision) of the acquisition, once a later write (release, extend,
    /// force-unlock) has moved the entry's revision; until then it is the entry's revision.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    token: Option<u64>,
}

/// The one bug a broken natskv provider has; `None` is the correct control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatsBug {
    /// Takes over an expired record with a plain `put` instead of `update` at the revision it
    /// read, so two nodes that both saw the record expired both believe they took it. Breaks
    /// `[mutual-exclusion]`. Plausible: "it is expired, nobody owns it, just overwrite".
    PutWithoutRevision,
    /// A lost `create`/`update` race (key exists / wrong last sequence) is returned as a
    /// backend error instead of `NotAcquired`. Breaks `[three-outcomes]`. Plausible: the
    /// client library reports the conflict as an error, and the author passes errors up.
    ConflictIsError,
    /// Reads `SystemTime::now()` instead of the clock the node was given. Breaks
    /// `[client-time]`: the provider must read the clock it is handed. Plausible: the clock
    /// parameter looked like test plumbing.
    SystemClock,
    /// After a refusal, the node caches "held until <lock_until>" and answers `NotAcquired`
    /// without asking until then, so a lock released early (at-least 0) looks held to every
    /// node that was once refused. Breaks `[free-lock-is-taken]`. Plausible: avoiding hammering
    /// the bucket when many tasks poll.
    NegativeCache,
    /// Release and extend compare only the holder part of `locked_by` (the host name before
    /// `#`), not the unique id: a stale handle frees or extends a newer acquisition from the same
    /// host. Breaks `[ownership]`. Plausible: "locked_by is the host, as in ShedLock".
    HolderOnlyOwnership,
    /// Extend writes max(current lock_until, now + d): an extend can only lengthen. Breaks
    /// `[extend]` (it honours its argument, shorter or longer). Plausible: "extend" sounds
    /// like it never shortens.
    ExtendNeverShortens,
    /// Listing pages through all keys of the bucket with the page limit, filters each page by
    /// prefix, and stops at the first page that came back short after filtering: locks under
    /// the prefix behind other keys are skipped. Breaks `[admin]`.
    ListingFilterAfterLimit,
    /// The key is built from `name.trim()`: `job`, `job ` and ` job` share a lock. Breaks
    /// `[names-are-data]`. Plausible: names come from config files.
    TrimmedNames,
    /// Path-like names become subject tokens: `/` maps to `.` and empty tokens are dropped (a
    /// NATS key cannot have them), so `a/b`, `a//b`, `/a/b` and `a/b/` share a key. Breaks
    /// `[names-are-data]`.
    SlashTokens,
    /// Escapes each character as `=` plus four hex digits of `c as u16`, truncating astral
    /// characters: U+1F512 and U+F512 share a key. Breaks `[names-are-data]`. Plausible:
    /// written by someone used to UTF-16 strings.
    Utf16Escape,
    /// Declares `extend: false` (the keep-alive was judged risky) but leaves `extend`
    /// working, answering `true`/`false`. Breaks `[honest-capabilities]` (without extend it
    /// must answer `LockError::Unsupported`).
    ExtendUndeclaredButWorks,
    /// Fencing token is the revision stored in a `u16` field of the guarded resource's
    /// protocol, so it wraps after 65,535 writes to the bucket. Breaks `[fencing]`. Plausible:
    /// the resource's header had a 16-bit slot.
    U16Token,
}

/// The harness for natskv providers.
pub struct NatsHarness {
    name: String,
    server: Arc<NatsServer>,
    bug: Option<NatsBug>,
}

impl NatsHarness {
    pub fn new(name: &str, bug: Option<NatsBug>) -> Self {
        Self {
            name: name.to_owned(),
            server: Arc::new(NatsServer::default()),
            bug,
        }
    }
}

#[async_trait]
impl ConformanceHarness for NatsHarness {
    type Node = NatsNode;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<NatsNode, SetupError> {
        Ok(NatsNode::new(
            NatsConn {
                server: self.server.clone(),
                net: Net::up(),
            },
            clock,
            self.bug,
        ))
    }

    async fn cut_off(&self, node: &NatsNode) -> Result<Support<()>, SetupError> {
        node.0.conn.net.cut();
        Ok(Support::Supported(()))
    }

    async fn unreachable_node(&self) -> Result<Support<NatsNode>, SetupError> {
        Ok(Support::Supported(NatsNode::new(
            NatsConn {
                server: self.server.clone(),
                net: Net::down(Duration::from_secs(2)),
            },
            Arc::new(shedlock_core::SystemClock),
            self.bug,
        )))
    }

    fn admin<'node>(&self, node: &'node NatsNode) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }
}

/// A natskv node.
#[derive(Clone)]
pub struct NatsNode(Arc<NatsInner>);

struct NatsInner {
    conn: NatsConn,
    clock: Arc<dyn Clock>,
    holder: String,
    bug: Option<NatsBug>,
    /// `NegativeCache`: name -> lock_until seen when refused.
    refused_until: StdMutex<HashMap<String, i64>>,
}

impl fmt::Debug for NatsNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsNode")
            .field("holder", &self.0.holder)
            .field("bug", &self.0.bug)
            .finish()
    }
}

fn lock_error(error: KvError, operation: Operation, name: &str) -> LockError {
    match error {
        KvError::Net(NetError::ConnectTimeout(after)) => LockError::Timeout {
            provider: PROVIDER,
            operation,
            name: name.to_owned(),
            after,
        },
        KvError::KeyExists => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            "key exists",
        ),
        KvError::WrongLastSequence => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            "wrong last sequence",
        ),
        KvError::BadKey(m) => {
            LockError::backend_message(ErrorKind::OutcomeUnknown, PROVIDER, operation, name, m)
        }
    }
}

fn escape(name: &str, bug: Option<NatsBug>) -> String {
    let mut out = String::new();
    if bug == Some(NatsBug::Utf16Escape) {
        for c in name.chars() {
            if c.is_ascii_alphanumeric() || c == '-' {
                out.push(c);
            } else {
                out.push_str(&format!("={:04X}", c as u32 as u16));
            }
        }
        return out;
    }
    for &b in name.as_bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' {
            out.push(b as char);
        } else {
            out.push_str(&format!("={b:02X}"));
        }
    }
    out
}

fn unescape(escaped: &str, bug: Option<NatsBug>) -> String {
    let width = if bug == Some(NatsBug::Utf16Escape) {
        4
    } else {
        2
    };
    let bytes = escaped.as_bytes();
    let mut out: Vec<u8> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'=' && i + width < bytes.len() {
            let hex = &escaped[i + 1..i + 1 + width];
            let code = u32::from_str_radix(hex, 16).unwrap_or(0xFFFD);
            if width == 4 {
                let c = char::from_u32(code).unwrap_or('\u{FFFD}');
                let mut buf = [0; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            } else {
                out.push(code as u8);
            }
            i += 1 + width;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn key_for(name: &str, bug: Option<NatsBug>) -> String {
    match bug {
        Some(NatsBug::TrimmedNames) => format!("{KEY_PREFIX}{}", escape(name.trim(), bug)),
        Some(NatsBug::SlashTokens) => {
            let tokens: Vec<String> = name
                .split('/')
                .filter(|t| !t.is_empty())
                .map(|t| escape(t, bug))
                .collect();
            format!("{KEY_PREFIX}{}", tokens.join("."))
        }
        _ => format!("{KEY_PREFIX}{}", escape(name, bug)),
    }
}

fn name_for(key: &str, bug: Option<NatsBug>) -> String {
    let rest = &key[KEY_PREFIX.len()..];
    if bug == Some(NatsBug::SlashTokens) {
        return rest
            .split('.')
            .map(|t| unescape(t, bug))
            .collect::<Vec<_>>()
            .join("/");
    }
    unescape(rest, bug)
}

fn parse(value: &str, operation: Operation, name: &str) -> Result<Record, LockError> {
    serde_json::from_str(value).map_err(|e| {
        LockError::backend(
            ErrorKind::CorruptData,
            PROVIDER,
            operation,
            name,
            "unreadable lock record",
            e,
        )
    })
}

fn ms_of(d: Duration) -> i64 {
    i64::try_from(ceil_ms(d)).unwrap_or(i64::MAX / 4)
}

impl NatsNode {
    fn new(conn: NatsConn, clock: Arc<dyn Clock>, bug: Option<NatsBug>) -> Self {
        Self(Arc::new(NatsInner {
            conn,
            clock,
            holder: default_holder(),
            bug,
            refused_until: StdMutex::new(HashMap::new()),
        }))
    }

    fn is(&self, bug: NatsBug) -> bool {
        self.0.bug == Some(bug)
    }

    /// "Now" in ms, on the node's clock.
    fn now(&self) -> i64 {
        if self.is(NatsBug::SystemClock) {
            unix_ms(SystemTime::now())
        } else {
            unix_ms(self.0.clock.now())
        }
    }

    fn owns(&self, record: &Record, mine: &str) -> bool {
        if self.is(NatsBug::HolderOnlyOwnership) {
            record.locked_by.split('#').next() == mine.split('#').next()
        } else {
            record.locked_by == mine
        }
    }

    fn info(&self, name: String, record: &Record, revision: u64, now: i64) -> LockInfo {
        LockInfo::new(
            name,
            LockState::Free,
            AcquisitionId::new(format!("{}@{}", record.locked_at, record.locked_by)),
        )
        .with_locked_by(record.locked_by.clone())
        .with_fencing_token(record.token.unwrap_or(revision))
        .with_locked_at(from_unix_ms(record.locked_at))
        .judged_at(from_unix_ms(record.lock_until), from_unix_ms(now))
    }

    fn acquired(
        &self,
        name: &str,
        key: String,
        record: Record,
        revision: u64,
        at_least: Duration,
    ) -> Acquisition {
        let token = if self.is(NatsBug::U16Token) {
            revision as u16 as u64
        } else {
            revision
        };
        Acquisition::Acquired(Box::new(NatsHandle {
            node: self.clone(),
            name: name.to_owned(),
            key,
            locked_by: record.locked_by,
            token,
            at_least_ms: ms_of(at_least),
            released: tokio::sync::Mutex::new(false),
        }))
    }
}

#[async_trait]
impl LockProvider for NatsNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        let bug = self.0.bug;
        let key = key_for(name, bug);
        let err = |e| lock_error(e, Operation::Acquire, name);
        let now = self.now();
        if self.is(NatsBug::NegativeCache)
            && let Some(&until) = self.0.refused_until.lock().unwrap().get(name)
            && until > now
        {
            return Ok(Acquisition::NotAcquired(None));
        }
        let record = Record {
            lock_until: now.saturating_add(ms_of(config.lock_at_most_for())),
            locked_at: now,
            locked_by: format!("{}#{}", self.0.holder, uuid::Uuid::new_v4().simple()),
            token: None,
        };
        let json = serde_json::to_string(&record).expect("a record serializes");
        let lost = |e: KvError| match e {
            KvError::KeyExists | KvError::WrongLastSequence
                if !self.is(NatsBug::ConflictIsError) =>
            {
                Ok(Acquisition::NotAcquired(None))
            }
            e => Err(lock_error(e, Operation::Acquire, name)),
        };
        match self.0.conn.get(&key).await.map_err(err)? {
            None => match self.0.conn.create(&key, &json).await {
                Ok(revision) => {
                    Ok(self.acquired(name, key, record, revision, config.lock_at_least_for()))
                }
                Err(e) => lost(e),
            },
            Some((value, revision)) => {
                let current = parse(&value, Operation::Acquire, name)?;
                if current.lock_until > now {
                    if self.is(NatsBug::NegativeCache) {
                        self.0
                            .refused_until
                            .lock()
                            .unwrap()
                            .insert(name.to_owned(), current.lock_until);
                    }
                    return Ok(Acquisition::NotAcquired(Some(LockHolder {
                        locked_by: Some(current.locked_by),
                        held_until: Some(from_unix_ms(current.lock_until)),
                    })));
                }
                let written = if self.is(NatsBug::PutWithoutRevision) {
                    self.0.conn.put(&key, &json).await
                } else {
                    self.0.conn.update(&key, &json, revision).await
                };
                match written {
                    Ok(revision) => {
                        Ok(self.acquired(name, key, record, revision, config.lock_at_least_for()))
                    }
                    Err(e) => lost(e),
                }
            }
        }
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Client)
            .with_fencing(true)
            .with_extend(!self.is(NatsBug::ExtendUndeclaredButWorks))
            .with_time_precision(Duration::from_millis(1))
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

/// One acquisition on natskv.
pub struct NatsHandle {
    node: NatsNode,
    name: String,
    key: String,
    locked_by: String,
    token: u64,
    at_least_ms: i64,
    released: tokio::sync::Mutex<bool>,
}

impl fmt::Debug for NatsHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NatsHandle")
            .field("name", &self.name)
            .field("locked_by", &self.locked_by)
            .finish()
    }
}

#[async_trait]
impl LockHandle for NatsHandle {
    fn name(&self) -> &str {
        &self.name
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Client
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let mut released = self.released.lock().await;
        if *released {
            return Ok(false);
        }
        let err = |e| lock_error(e, Operation::Release, &self.name);
        let conn = &self.node.0.conn;
        let answer = async {
            let Some((value, revision)) = conn.get(&self.key).await.map_err(err)? else {
                return Ok(false);
            };
            let mut record = parse(&value, Operation::Release, &self.name)?;
            let now = self.node.now();
            if !self.node.owns(&record, &self.locked_by) || record.lock_until <= now {
                return Ok(false);
            }
            record.lock_until = now.max(record.locked_at.saturating_add(self.at_least_ms));
            record.token = Some(record.token.unwrap_or(revision));
            let json = serde_json::to_string(&record).expect("a record serializes");
            match conn.update(&self.key, &json, revision).await {
                Ok(_) => Ok(true),
                Err(KvError::WrongLastSequence) => Ok(false),
                Err(e) => Err(err(e)),
            }
        }
        .await;
        if answer.is_ok() {
            *released = true;
        }
        answer
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        if lock_at_most_for.is_zero() {
            return Err(
                LockConfiguration::new(self.name.as_str(), Duration::ZERO, Duration::ZERO)
                    .unwrap_err()
                    .into(),
            );
        }
        let released = self.released.lock().await;
        if *released {
            return Ok(false);
        }
        let err = |e| lock_error(e, Operation::Extend, &self.name);
        let conn = &self.node.0.conn;
        let Some((value, revision)) = conn.get(&self.key).await.map_err(err)? else {
            return Ok(false);
        };
        let mut record = parse(&value, Operation::Extend, &self.name)?;
        let now = self.node.now();
        if !self.node.owns(&record, &self.locked_by) || record.lock_until <= now {
            return Ok(false);
        }
        let until = now.saturating_add(ms_of(lock_at_most_for));
        record.lock_until = if self.node.is(NatsBug::ExtendNeverShortens) {
            until.max(record.lock_until)
        } else {
            until
        };
        record.token = Some(record.token.unwrap_or(revision));
        let json = serde_json::to_string(&record).expect("a record serializes");
        match conn.update(&self.key, &json, revision).await {
            Ok(_) => Ok(true),
            Err(KvError::WrongLastSequence) => Ok(false),
            Err(e) => Err(err(e)),
        }
    }
}

#[async_trait]
impl LockAdmin for NatsNode {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let err = |e| lock_error(e, Operation::List, "");
        let bug = self.0.bug;
        let key_prefix = key_for(&request.prefix, bug);
        let key_prefix = if request.prefix.is_empty() {
            KEY_PREFIX.to_owned()
        } else {
            key_prefix
        };
        let after = request.after.as_ref().map(|c| c.as_str().to_owned());
        let limit = request.limit.max(1);
        let (keys, next) = if self.is(NatsBug::ListingFilterAfterLimit) {
            let raw = self
                .0
                .conn
                .keys("", after.as_deref(), limit)
                .await
                .map_err(err)?;
            let last = raw.last().cloned();
            let keys: Vec<String> = raw
                .into_iter()
                .filter(|k| k.starts_with(&key_prefix))
                .collect();
            let next = if keys.len() == limit { last } else { None };
            (keys, next)
        } else {
            let keys = self
                .0
                .conn
                .keys(&key_prefix, after.as_deref(), limit)
                .await
                .map_err(err)?;
            let next = if keys.len() == limit {
                keys.last().cloned()
            } else {
                None
            };
            (keys, next)
        };
        let mut locks = Vec::new();
        for key in keys {
            let name = name_for(&key, bug);
            if let Some((value, revision)) = self.0.conn.get(&key).await.map_err(err)? {
                let record = parse(&value, Operation::List, &name)?;
                locks.push(self.info(name, &record, revision, self.now()));
            }
        }
        Ok(LockPage {
            locks,
            next: next.map(PageCursor::new),
        })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let err = |e| lock_error(e, Operation::Inspect, name);
        let Some((value, revision)) = self
            .0
            .conn
            .get(&key_for(name, self.0.bug))
            .await
            .map_err(err)?
        else {
            return Ok(None);
        };
        let record = parse(&value, Operation::Inspect, name)?;
        Ok(Some(self.info(
            name.to_owned(),
            &record,
            revision,
            self.now(),
        )))
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let err = |e| lock_error(e, Operation::ForceUnlock, name);
        let key = key_for(name, self.0.bug);
        for _ in 0..20 {
            let Some((value, revision)) = self.0.conn.get(&key).await.map_err(err)? else {
                return Ok(false);
            };
            let mut record = parse(&value, Operation::ForceUnlock, name)?;
            let now = self.now();
            let id = format!("{}@{}", record.locked_at, record.locked_by);
            if id != acquisition.as_str() || record.lock_until <= now {
                return Ok(false);
            }
            record.lock_until = now;
            record.token = Some(record.token.unwrap_or(revision));
            let json = serde_json::to_string(&record).expect("a record serializes");
            match self.0.conn.update(&key, &json, revision).await {
                Ok(_) => return Ok(true),
                Err(KvError::WrongLastSequence) => continue,
                Err(e) => return Err(err(e)),
            }
        }
        Err(LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            Operation::ForceUnlock,
            name,
            "too much contention",
        ))
    }
}
