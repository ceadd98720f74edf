//! Backend (a): an etcd-like store. Keys carry a create revision, a mod revision and a
//! version; every write transaction moves the cluster's single revision counter. A key can
//! be attached to a lease: a TTL in whole seconds, counted down by the server, that deletes
//! its keys when it runs out. Transactions compare revisions, versions or values and then
//! apply one of two branches atomically. Two members answer lease grants and hand out lease
//! ids of their own.
//!
//! The provider declares server time: the only clock that decides anything is the lease
//! countdown on the server. A lock is the key `shedlock/<name>` created under a lease of
//! `lock_at_most_for` (rounded up to whole seconds, so `time_precision` is 1 s); a release
//! within `lock_at_least_for` moves the key to a lease of the rest; an extend moves it to a
//! new lease. Fencing tokens are the revision of the acquiring transaction.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex, Weak};
use std::time::{Duration, Instant};

use shedlock_conformance::{Clock, ConformanceHarness, SetupError, Support, async_trait};
use shedlock_core::{
    Acquisition, AcquisitionId, Capabilities, ErrorKind, LockAdmin, LockConfiguration, LockError,
    LockHandle, LockHolder, LockInfo, LockPage, LockProvider, LockState, Operation, PageCursor,
    PageRequest, TimeSource, raw::default_holder,
};

use super::common::{Net, NetError, ceil_secs, unix_ms};

const PROVIDER: &str = "etcdish";
const KEY_ROOT: &str = "shedlock/";
/// etcd's `MaxLeaseTTL`.
const MAX_TTL_SECS: i64 = 9_000_000_000;
/// The id prefixes of the two members (the top 16 bits of a lease id).
const MEMBER_PREFIX: [u64; 2] = [0x694d << 48, 0x3f1a << 48];
/// `SessionLease`: the node's session TTL.
const SESSION_TTL_SECS: i64 = 10;

// ------------------------------------------------------------------------------------------
// The simulated server
// ------------------------------------------------------------------------------------------

/// One key as `range` returns it.
#[derive(Debug, Clone)]
pub struct Kv {
    pub key: Vec<u8>,
    pub value: String,
    pub create_revision: i64,
    pub mod_revision: i64,
    pub version: i64,
    pub lease: i64,
}

#[derive(Debug)]
struct Lease {
    ttl: i64,
    deadline: Instant,
    keys: BTreeSet<Vec<u8>>,
}

#[derive(Debug)]
struct EtcdState {
    revision: i64,
    kvs: BTreeMap<Vec<u8>, Kv>,
    leases: HashMap<i64, Lease>,
    member_counter: [u64; 2],
}

impl EtcdState {
    /// Revokes every lease whose deadline has passed, deleting its keys (one revision per
    /// revoked lease that had keys, as a revoke is one transaction).
    fn expire(&mut self, now: Instant) {
        let expired: Vec<i64> = self
            .leases
            .iter()
            .filter(|(_, lease)| lease.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in expired {
            self.revoke(id);
        }
    }

    fn revoke(&mut self, id: i64) -> bool {
        let Some(lease) = self.leases.remove(&id) else {
            return false;
        };
        if !lease.keys.is_empty() {
            self.revision += 1;
            for key in lease.keys {
                self.kvs.remove(&key);
            }
        }
        true
    }

    fn detach(&mut self, key: &[u8]) {
        if let Some(old) = self.kvs.get(key).map(|kv| kv.lease)
            && let Some(lease) = self.leases.get_mut(&old)
        {
            lease.keys.remove(key);
        }
    }
}

/// The shared etcd-like cluster.
#[derive(Debug)]
pub struct EtcdServer {
    state: StdMutex<EtcdState>,
}

impl EtcdServer {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            state: StdMutex::new(EtcdState {
                // A cluster that has been running for a while.
                revision: 48_211,
                kvs: BTreeMap::new(),
                leases: HashMap::new(),
                member_counter: [0x0000_1c2f_0000, 0x0000_8a11_0000],
            }),
        })
    }
}

/// What a transaction compares (for equality) on one key. A missing key has revisions and
/// version 0 and no value.
#[derive(Debug, Clone)]
pub enum Target {
    CreateRevision(i64),
    ModRevision(i64),
    Version(i64),
}

#[derive(Debug, Clone)]
pub struct Compare {
    pub key: Vec<u8>,
    pub target: Target,
}

#[derive(Debug, Clone)]
pub enum Op {
    Put {
        key: Vec<u8>,
        value: String,
        lease: i64,
    },
    Get {
        key: Vec<u8>,
    },
    Delete {
        key: Vec<u8>,
    },
}

#[derive(Debug, Clone, Default)]
pub struct Txn {
    pub compares: Vec<Compare>,
    pub success: Vec<Op>,
    pub failure: Vec<Op>,
}

#[derive(Debug)]
pub struct TxnResponse {
    pub succeeded: bool,
    /// The store's revision after the transaction (the revision of its writes, if any).
    pub revision: i64,
    /// One entry per `Get` of the branch taken.
    pub gets: Vec<Option<Kv>>,
}

/// A failed request.
#[derive(Debug)]
pub enum EtcdError {
    Net(NetError),
    /// `etcdserver: requested lease not found` and the like.
    Server(String),
}

/// One client connection (a gRPC channel to both members).
#[derive(Debug)]
pub struct EtcdConn {
    server: Arc<EtcdServer>,
    net: Net,
    member: AtomicUsize,
}

impl EtcdConn {
    pub fn new(server: Arc<EtcdServer>, net: Net) -> Self {
        Self {
            server,
            net,
            member: AtomicUsize::new(0),
        }
    }

    async fn exec<R>(&self, f: impl FnOnce(&mut EtcdState, Instant) -> R) -> Result<R, EtcdError> {
        self.net.send().await.map_err(EtcdError::Net)?;
        let result = {
            let mut state = self.server.state.lock().unwrap();
            let now = Instant::now();
            state.expire(now);
            f(&mut state, now)
        };
        self.net.receive().await;
        Ok(result)
    }

    /// `LeaseGrant`: answered by the next member in turn, which picks the id.
    pub async fn grant(&self, ttl: i64) -> Result<i64, EtcdError> {
        let member = self.member.fetch_add(1, Ordering::Relaxed) % 2;
        self.exec(|s, now| {
            if ttl < 1 {
                return Err(EtcdError::Server(
                    "etcdserver: lease TTL must be positive".into(),
                ));
            }
            if ttl > MAX_TTL_SECS {
                return Err(EtcdError::Server("etcdserver: too large lease TTL".into()));
            }
            s.member_counter[member] += 1;
            let id = (MEMBER_PREFIX[member] | s.member_counter[member]) as i64;
            s.leases.insert(
                id,
                Lease {
                    ttl,
                    deadline: now + Duration::from_secs(ttl as u64),
                    keys: BTreeSet::new(),
                },
            );
            Ok(id)
        })
        .await?
    }

    /// `LeaseKeepAlive` (one round): the lease's TTL starts again from its granted value;
    /// 0 when the lease is gone.
    pub async fn keep_alive(&self, id: i64) -> Result<i64, EtcdError> {
        self.exec(|s, now| match s.leases.get_mut(&id) {
            Some(lease) => {
                lease.deadline = now + Duration::from_secs(lease.ttl as u64);
                lease.ttl
            }
            None => 0,
        })
        .await
    }

    /// `LeaseRevoke`: deletes the lease's keys.
    pub async fn revoke(&self, id: i64) -> Result<bool, EtcdError> {
        self.exec(|s, _| s.revoke(id)).await
    }

    /// `LeaseTimeToLive`: what is left of the lease, `None` when it is gone.
    pub async fn time_to_live(&self, id: i64) -> Result<Option<Duration>, EtcdError> {
        self.exec(|s, now| {
            s.leases
                .get(&id)
                .map(|lease| lease.deadline.saturating_duration_since(now))
        })
        .await
    }

    pub async fn txn(&self, txn: Txn) -> Result<TxnResponse, EtcdError> {
        self.exec(|s, _| {
            let holds = txn.compares.iter().all(|c| {
                let kv = s.kvs.get(&c.key);
                match c.target {
                    Target::CreateRevision(r) => kv.map_or(0, |kv| kv.create_revision) == r,
                    Target::ModRevision(r) => kv.map_or(0, |kv| kv.mod_revision) == r,
                    Target::Version(v) => kv.map_or(0, |kv| kv.version) == v,
                }
            });
            let ops = if holds { &txn.success } else { &txn.failure };
            for op in ops {
                if let Op::Put { lease, .. } = op
                    && *lease != 0
                    && !s.leases.contains_key(lease)
                {
                    return Err(EtcdError::Server(
                        "etcdserver: requested lease not found".into(),
                    ));
                }
            }
            let writes = ops.iter().any(|op| !matches!(op, Op::Get { .. }));
            if writes {
                s.revision += 1;
            }
            let revision = s.revision;
            let mut gets = Vec::new();
            for op in ops {
                match op {
                    Op::Get { key } => gets.push(s.kvs.get(key).cloned()),
                    Op::Delete { key } => {
                        s.detach(key);
                        s.kvs.remove(key);
                    }
                    Op::Put { key, value, lease } => {
                        s.detach(key);
                        let (create_revision, version) = match s.kvs.get(key) {
                            Some(kv) => (kv.create_revision, kv.version + 1),
                            None => (revision, 1),
                        };
                        s.kvs.insert(
                            key.clone(),
                            Kv {
                                key: key.clone(),
                                value: value.clone(),
                                create_revision,
                                mod_revision: revision,
                                version,
                                lease: *lease,
                            },
                        );
                        if let Some(l) = s.leases.get_mut(lease) {
                            l.keys.insert(key.clone());
                        }
                    }
                }
            }
            Ok(TxnResponse {
                succeeded: holds,
                revision,
                gets,
            })
        })
        .await?
    }

    /// `Range [start, end)` in key order, at most `limit`; `more` when keys were left.
    pub async fn range(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        limit: usize,
    ) -> Result<(Vec<Kv>, bool), EtcdError> {
        self.exec(|s, _| {
            if start >= end {
                return (Vec::new(), false);
            }
            let mut found: Vec<Kv> = s
                .kvs
                .range(start..end)
                .take(limit.saturating_add(1))
                .map(|(_, kv)| kv.clone())
                .collect();
            let more = found.len() > limit;
            found.truncate(limit);
            (found, more)
        })
        .await
    }

    /// `DeleteRange [start, end)`.
    pub async fn delete_range(&self, start: Vec<u8>, end: Vec<u8>) -> Result<usize, EtcdError> {
        self.exec(|s, _| {
            if start >= end {
                return 0;
            }
            let keys: Vec<Vec<u8>> = s.kvs.range(start..end).map(|(k, _)| k.clone()).collect();
            if !keys.is_empty() {
                s.revision += 1;
            }
            for key in &keys {
                s.detach(key);
                s.kvs.remove(key);
            }
            keys.len()
        })
        .await
    }
}

/// The first key after every key that starts with `prefix` (etcd's `GetPrefixRangeEnd`).
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: no end, the range runs to the last key.
    vec![0xff; prefix.len() + 8]
}

// ------------------------------------------------------------------------------------------
// The provider
// ------------------------------------------------------------------------------------------

/// The one bug a broken etcdish provider has; `None` is the correct control.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EtcdBug {
    /// The node reuses one lease per TTL for its acquisitions ("a grant per lock is a raft
    /// round trip; reuse a live lease of the same TTL after a keep-alive"), and a release,
    /// as in the control, tidies up by revoking the lease it held. Revoking the shared lease
    /// also deletes the key of another lock the node holds under the same TTL, which another
    /// node then takes while its holder still runs. Breaks `[mutual-exclusion]`.
    LeaseReuse,
    /// Modelled on etcd's own `concurrency.Mutex`: the node opens one session lease (10 s,
    /// kept alive in the background while the node lives) and puts every lock key under it,
    /// so a lock whose holder dropped its handle is held as long as the node process runs,
    /// not `lock_at_most_for`. Breaks `[at-most]`.
    SessionLease,
    /// Release computes the rest of `lock_at_least_for` with `Duration::as_secs()` and puts
    /// the key under "no lease" (lease id 0) when that is 0 ("TTL 0 would be refused by the
    /// server"); only a rest of exactly zero deletes the key. A release with less than a
    /// second of at-least left makes the key permanent. Breaks `[at-least]`.
    ZeroLeaseForShortRest,
    /// Release deletes the key and revokes its lease at once, as etcd's `Unlock` does,
    /// ignoring `lock_at_least_for`. Breaks `[at-least]`.
    RevokeOnRelease,
    /// Release and extend compare the key's `version` (1 after the acquiring put) instead of
    /// its `mod_revision`. `version` starts again at 1 whenever the key is created again, so a
    /// stale handle whose lease ran out releases or extends the next holder's key. Breaks
    /// `[ownership]`. Plausible: version and mod_revision read alike in the API docs.
    CompareVersion,
    /// The fencing token is the key's `version` after the acquiring put ("the number of
    /// writes to the lock key, it only grows"). Every acquisition creates the key anew, so it
    /// is 1 each time. Breaks `[fencing]`.
    FenceFromVersion,
    /// The fencing token is the lease id ("unique per acquisition and issued by the
    /// cluster"). Ids come from whichever member answered the grant, each with its own
    /// prefix, so they jump back and forth. Breaks `[fencing]`.
    FenceIsLeaseId,
    /// Extend sends a lease keep-alive, etcd's natural "extend", which restarts the lease
    /// at its granted TTL: the argument of `extend` is ignored. Breaks `[extend]`.
    KeepAliveExtend,
    /// Extend revokes the old lease first ("so it cannot leak if the put fails"), not
    /// knowing that revoking a lease deletes its keys: the lock is freed and the put that
    /// follows finds the key gone, so extend answers `false`. Breaks `[extend]`.
    ExtendRevokesFirst,
    /// When an extend's comparison fails, the provider reads the key and answers an error
    /// ("lock key not found") if it is gone, `false` only if another holder has it. An
    /// expired lock is an answer, not an unknown outcome. Breaks `[three-outcomes]`.
    ExtendMissingIsError,
    /// When the cluster cannot be reached, try_lock answers acquired with a local handle
    /// and logs a warning ("degraded mode: better run twice than never"). Breaks
    /// `[fail-closed]`.
    FailOpen,
    /// Declares `time_precision` of 1 ms ("etcd's clock is precise"), while leases are whole
    /// seconds, rounded up: a 300 ms lock is held for a second. Breaks
    /// `[honest-capabilities]`.
    DeclaredMillisPrecision,
    /// The handle's `name()` returns the key (`shedlock/<name>`), which the author found more
    /// useful in logs. Breaks `[free-lock-is-taken]` (the handle reports the name it was
    /// asked for).
    HandleNameIsKey,
    /// Replaces `/` in names with `_` so lock keys stay one level below `shedlock/` (for a
    /// "directory" listing): `a/b` and `a_b` share a key. Breaks `[names-are-data]`.
    SlashToUnderscore,
    /// Also stores "held until" (the node's clock + `lock_at_most_for`) in the value and,
    /// finding a key whose stored deadline has passed on its own clock, takes it over with a
    /// compare on its mod_revision ("don't wait for a lease the server revokes late"). A node
    /// whose clock runs ahead takes held locks. Breaks `[server-time]`.
    ValueDeadlineTakeover,
    /// The admin listing's range end is `prefix + '\u{ff}'`, copied from a Go client where
    /// `"\xff"` is one byte; in Rust it is the two bytes `C3 BF`, so names whose next
    /// character is U+0100 or above are left out. Breaks `[admin]`.
    PrefixEndByChar,
    /// Remembers released names in a node-wide set (so clones of a handle agree), and never
    /// removes a name when it is acquired again: the node's next acquisition of that name
    /// answers `false` to its release and stays held until at-most. Breaks
    /// `[release-result]`.
    ReleasedSetByName,
}

/// The harness for etcdish providers.
pub struct EtcdHarness {
    name: String,
    server: Arc<EtcdServer>,
    bug: Option<EtcdBug>,
}

impl EtcdHarness {
    pub fn new(name: &str, bug: Option<EtcdBug>) -> Self {
        Self {
            name: name.to_owned(),
            server: EtcdServer::new(),
            bug,
        }
    }
}

#[async_trait]
impl ConformanceHarness for EtcdHarness {
    type Node = EtcdNode;

    fn name(&self) -> &str {
        &self.name
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<EtcdNode, SetupError> {
        // Server time: the clock is kept only for the bug that misuses it.
        Ok(EtcdNode::new(
            EtcdConn::new(self.server.clone(), Net::up()),
            clock,
            self.bug,
        ))
    }

    async fn unreachable_node(&self) -> Result<Support<EtcdNode>, SetupError> {
        Ok(Support::Supported(EtcdNode::new(
            EtcdConn::new(self.server.clone(), Net::down(Duration::from_secs(2))),
            Arc::new(shedlock_core::SystemClock),
            self.bug,
        )))
    }

    fn admin<'node>(&self, node: &'node EtcdNode) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        let conn = EtcdConn::new(self.server.clone(), Net::up());
        let start = format!("{KEY_ROOT}{name_prefix}").into_bytes();
        let end = prefix_end(&start);
        conn.delete_range(start, end)
            .await
            .map_err(|e| SetupError::new(format!("cleanup failed: {e:?}")))?;
        Ok(())
    }
}

/// An etcdish node.
#[derive(Clone)]
pub struct EtcdNode(Arc<EtcdInner>);

struct EtcdInner {
    conn: EtcdConn,
    clock: Arc<dyn Clock>,
    holder: String,
    bug: Option<EtcdBug>,
    /// `ReleasedSetByName`.
    released_names: StdMutex<HashSet<String>>,
    /// `SessionLease`: the node's session lease, once opened.
    session: tokio::sync::Mutex<Option<i64>>,
    /// `LeaseReuse`: TTL -> a lease of that TTL.
    pool: StdMutex<HashMap<i64, i64>>,
}

impl fmt::Debug for EtcdNode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdNode")
            .field("holder", &self.0.holder)
            .field("bug", &self.0.bug)
            .finish()
    }
}

static NODE_SEQ: AtomicU64 = AtomicU64::new(1);

fn lock_error(error: EtcdError, operation: Operation, name: &str) -> LockError {
    match error {
        EtcdError::Net(NetError::ConnectTimeout(after)) => LockError::Timeout {
            provider: PROVIDER,
            operation,
            name: name.to_owned(),
            after,
        },
        EtcdError::Server(message) => LockError::backend_message(
            ErrorKind::OutcomeUnknown,
            PROVIDER,
            operation,
            name,
            message,
        ),
    }
}

/// The holder part of a stored value (`ValueDeadlineTakeover` appends `@<deadline ms>`).
fn locked_by_of(value: &str) -> &str {
    value.rsplit_once('@').map_or(value, |(by, _)| by)
}

impl EtcdNode {
    fn new(conn: EtcdConn, clock: Arc<dyn Clock>, bug: Option<EtcdBug>) -> Self {
        let seq = NODE_SEQ.fetch_add(1, Ordering::Relaxed);
        Self(Arc::new(EtcdInner {
            conn,
            clock,
            holder: format!("{}-etcd{seq}", default_holder()),
            bug,
            released_names: StdMutex::new(HashSet::new()),
            session: tokio::sync::Mutex::new(None),
            pool: StdMutex::new(HashMap::new()),
        }))
    }

    fn is(&self, bug: EtcdBug) -> bool {
        self.0.bug == Some(bug)
    }

    fn key_for(&self, name: &str) -> Vec<u8> {
        let name = if self.is(EtcdBug::SlashToUnderscore) {
            name.replace('/', "_")
        } else {
            name.to_owned()
        };
        format!("{KEY_ROOT}{name}").into_bytes()
    }

    fn ttl_for(d: Duration) -> i64 {
        ceil_secs(d).min(MAX_TTL_SECS)
    }

    /// The session lease, opened on first use and kept alive while the node lives.
    async fn session_lease(&self) -> Result<i64, EtcdError> {
        let mut session = self.0.session.lock().await;
        if let Some(id) = *session {
            return Ok(id);
        }
        let id = self.0.conn.grant(SESSION_TTL_SECS).await?;
        *session = Some(id);
        let weak: Weak<EtcdInner> = Arc::downgrade(&self.0);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let Some(inner) = weak.upgrade() else { return };
                if let Ok(0) = inner.conn.keep_alive(id).await {
                    *inner.session.lock().await = None;
                    return;
                }
            }
        });
        Ok(id)
    }

    /// The lease a new acquisition's key goes under.
    async fn lease_for_acquire(&self, ttl: i64) -> Result<i64, EtcdError> {
        if self.is(EtcdBug::SessionLease) {
            return self.session_lease().await;
        }
        if self.is(EtcdBug::LeaseReuse) {
            let pooled = self.0.pool.lock().unwrap().get(&ttl).copied();
            if let Some(id) = pooled
                && self.0.conn.keep_alive(id).await? > 0
            {
                return Ok(id);
            }
            let id = self.0.conn.grant(ttl).await?;
            self.0.pool.lock().unwrap().insert(ttl, id);
            return Ok(id);
        }
        self.0.conn.grant(ttl).await
    }

    /// Revokes a lease this node no longer needs; failures are left to the TTL.
    async fn tidy(&self, lease: i64) {
        if lease != 0 && !self.is(EtcdBug::SessionLease) {
            let _ = self.0.conn.revoke(lease).await;
        }
    }

    fn acquired(
        &self,
        name: &str,
        key: Vec<u8>,
        value: String,
        config: &LockConfiguration,
        revision: i64,
        lease: i64,
    ) -> Acquisition {
        let token = match self.0.bug {
            Some(EtcdBug::FenceFromVersion) => 1,
            Some(EtcdBug::FenceIsLeaseId) => lease as u64,
            _ => revision as u64,
        };
        Acquisition::Acquired(Box::new(EtcdHandle {
            node: self.clone(),
            name: name.to_owned(),
            key,
            value,
            token,
            at_least: config.lock_at_least_for(),
            acquired: Instant::now(),
            state: tokio::sync::Mutex::new(HandleState {
                released: false,
                mod_revision: revision,
                version: 1,
                lease,
            }),
        }))
    }

    async fn try_lock_inner(&self, config: &LockConfiguration) -> Result<Acquisition, EtcdError> {
        let name = config.name();
        let key = self.key_for(name);
        let ttl = Self::ttl_for(config.lock_at_most_for());
        let lease = self.lease_for_acquire(ttl).await?;
        let locked_by = format!("{}#{}", self.0.holder, uuid::Uuid::new_v4().simple());
        let value = if self.is(EtcdBug::ValueDeadlineTakeover) {
            let until = unix_ms(self.0.clock.now()).saturating_add(ttl.saturating_mul(1000));
            format!("{locked_by}@{until}")
        } else {
            locked_by
        };
        let response = self
            .0
            .conn
            .txn(Txn {
                compares: vec![Compare {
                    key: key.clone(),
                    target: Target::CreateRevision(0),
                }],
                success: vec![Op::Put {
                    key: key.clone(),
                    value: value.clone(),
                    lease,
                }],
                failure: vec![Op::Get { key: key.clone() }],
            })
            .await?;
        if response.succeeded {
            return Ok(self.acquired(name, key, value, config, response.revision, lease));
        }
        let existing = response.gets.into_iter().next().flatten();
        if self.is(EtcdBug::ValueDeadlineTakeover)
            && let Some(kv) = &existing
            && let Some((_, until)) = kv.value.rsplit_once('@')
            && until
                .parse::<i64>()
                .is_ok_and(|until| until <= unix_ms(self.0.clock.now()))
        {
            let takeover = self
                .0
                .conn
                .txn(Txn {
                    compares: vec![Compare {
                        key: key.clone(),
                        target: Target::ModRevision(kv.mod_revision),
                    }],
                    success: vec![Op::Put {
                        key: key.clone(),
                        value: value.clone(),
                        lease,
                    }],
                    failure: vec![],
                })
                .await?;
            if takeover.succeeded {
                return Ok(self.acquired(name, key, value, config, takeover.revision, lease));
            }
        }
        if !self.is(EtcdBug::LeaseReuse) {
            self.tidy(lease).await;
        }
        Ok(Acquisition::NotAcquired(Some(LockHolder {
            locked_by: existing.map(|kv| locked_by_of(&kv.value).to_owned()),
            held_until: None,
        })))
    }

    fn info(&self, kv: &Kv, remaining: Duration) -> LockInfo {
        let name = String::from_utf8_lossy(&kv.key[KEY_ROOT.len()..]).into_owned();
        let mut info = LockInfo::new(
            name,
            LockState::Held,
            AcquisitionId::new(kv.create_revision.to_string()),
        )
        .with_locked_by(locked_by_of(&kv.value))
        .with_fencing_token(kv.create_revision as u64);
        if !remaining.is_zero() {
            info = info.with_remaining(remaining);
        }
        info
    }
}

#[async_trait]
impl LockProvider for EtcdNode {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        let name = config.name();
        match self.try_lock_inner(config).await {
            Ok(acquisition) => Ok(acquisition),
            Err(EtcdError::Net(e)) if self.is(EtcdBug::FailOpen) => {
                eprintln!("etcdish: cluster unreachable ({e}); running {name:?} without a lock");
                let key = self.key_for(name);
                Ok(self.acquired(name, key, String::new(), config, 0, 0))
            }
            Err(e) => Err(lock_error(e, Operation::Acquire, name)),
        }
    }

    fn capabilities(&self) -> Capabilities {
        let precision = if self.is(EtcdBug::DeclaredMillisPrecision) {
            Duration::from_millis(1)
        } else {
            Duration::from_secs(1)
        };
        Capabilities::new(TimeSource::Server)
            .with_fencing(true)
            .with_extend(true)
            .with_time_precision(precision)
    }

    fn provider_name(&self) -> &'static str {
        PROVIDER
    }
}

#[derive(Debug)]
struct HandleState {
    released: bool,
    /// The key's mod_revision as this acquisition last wrote it.
    mod_revision: i64,
    /// The key's version as this acquisition last wrote it (`CompareVersion`).
    version: i64,
    /// The lease the key is under.
    lease: i64,
}

/// One acquisition on etcdish.
pub struct EtcdHandle {
    node: EtcdNode,
    name: String,
    key: Vec<u8>,
    value: String,
    token: u64,
    at_least: Duration,
    /// When the acquire was answered, on the node's monotonic clock: the rest of at-least
    /// counted from here can only be longer than the server's.
    acquired: Instant,
    state: tokio::sync::Mutex<HandleState>,
}

impl fmt::Debug for EtcdHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdHandle")
            .field("name", &self.name)
            .field("token", &self.token)
            .finish()
    }
}

impl EtcdHandle {
    fn mine(&self, state: &HandleState) -> Compare {
        let target = if self.node.is(EtcdBug::CompareVersion) {
            Target::Version(state.version)
        } else {
            Target::ModRevision(state.mod_revision)
        };
        Compare {
            key: self.key.clone(),
            target,
        }
    }

    /// Moves the key to a new lease of `ttl` if it is still this acquisition's.
    async fn move_to_new_lease(
        &self,
        state: &mut HandleState,
        lease: i64,
    ) -> Result<bool, EtcdError> {
        let conn = &self.node.0.conn;
        let response = conn
            .txn(Txn {
                compares: vec![self.mine(state)],
                success: vec![Op::Put {
                    key: self.key.clone(),
                    value: self.value.clone(),
                    lease,
                }],
                failure: vec![Op::Get {
                    key: self.key.clone(),
                }],
            })
            .await;
        let response = match response {
            Ok(response) => response,
            Err(e) => {
                self.node.tidy(lease).await;
                return Err(e);
            }
        };
        if !response.succeeded {
            self.node.tidy(lease).await;
            if self.node.is(EtcdBug::ExtendMissingIsError)
                && matches!(response.gets.first(), Some(None))
            {
                return Err(EtcdError::Server(format!(
                    "lock key {:?} not found",
                    String::from_utf8_lossy(&self.key)
                )));
            }
            return Ok(false);
        }
        let old = std::mem::replace(&mut state.lease, lease);
        state.mod_revision = response.revision;
        state.version += 1;
        if old != lease {
            self.node.tidy(old).await;
        }
        Ok(true)
    }

    async fn release_once(&self, state: &mut HandleState) -> Result<bool, EtcdError> {
        let node = &self.node;
        let conn = &node.0.conn;
        let rest = self.at_least.saturating_sub(self.acquired.elapsed());
        if rest.is_zero() || node.is(EtcdBug::RevokeOnRelease) {
            let response = conn
                .txn(Txn {
                    compares: vec![self.mine(state)],
                    success: vec![Op::Delete {
                        key: self.key.clone(),
                    }],
                    failure: vec![],
                })
                .await?;
            if response.succeeded {
                node.tidy(state.lease).await;
            }
            return Ok(response.succeeded);
        }
        let lease = if node.is(EtcdBug::ZeroLeaseForShortRest) {
            match rest.as_secs() {
                0 => 0,
                secs => conn.grant(secs as i64).await?,
            }
        } else {
            conn.grant(EtcdNode::ttl_for(rest)).await?
        };
        // A failed compare here is an answer about the lock, not an error.
        match self.move_to_new_lease(state, lease).await {
            Err(EtcdError::Server(_)) if node.is(EtcdBug::ExtendMissingIsError) => Ok(false),
            other => other,
        }
    }
}

#[async_trait]
impl LockHandle for EtcdHandle {
    fn name(&self) -> &str {
        if self.node.is(EtcdBug::HandleNameIsKey) {
            std::str::from_utf8(&self.key).unwrap_or(&self.name)
        } else {
            &self.name
        }
    }

    fn fencing_token(&self) -> Option<u64> {
        Some(self.token)
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    async fn unlock(&self) -> Result<bool, LockError> {
        let mut state = self.state.lock().await;
        if state.released {
            return Ok(false);
        }
        if self.node.is(EtcdBug::ReleasedSetByName)
            && self
                .node
                .0
                .released_names
                .lock()
                .unwrap()
                .contains(&self.name)
        {
            return Ok(false);
        }
        match self.release_once(&mut state).await {
            Ok(released) => {
                state.released = true;
                if self.node.is(EtcdBug::ReleasedSetByName) {
                    self.node
                        .0
                        .released_names
                        .lock()
                        .unwrap()
                        .insert(self.name.clone());
                }
                Ok(released)
            }
            Err(e) => Err(lock_error(e, Operation::Release, &self.name)),
        }
    }

    async fn extend(&self, lock_at_most_for: Duration) -> Result<bool, LockError> {
        let name = self.name.as_str();
        if lock_at_most_for.is_zero() {
            return Err(LockConfiguration::new(name, Duration::ZERO, Duration::ZERO)
                .unwrap_err()
                .into());
        }
        let mut state = self.state.lock().await;
        if state.released {
            return Ok(false);
        }
        let node = &self.node;
        let conn = &node.0.conn;
        let err = |e| lock_error(e, Operation::Extend, name);
        if node.is(EtcdBug::KeepAliveExtend) {
            return Ok(conn.keep_alive(state.lease).await.map_err(err)? > 0);
        }
        if node.is(EtcdBug::SessionLease) {
            // The session keeps the key alive: only check it is still ours.
            let response = conn
                .txn(Txn {
                    compares: vec![self.mine(&state)],
                    success: vec![],
                    failure: vec![],
                })
                .await
                .map_err(err)?;
            return Ok(response.succeeded);
        }
        if node.is(EtcdBug::ExtendRevokesFirst) {
            conn.revoke(state.lease).await.map_err(err)?;
        }
        let lease = conn
            .grant(EtcdNode::ttl_for(lock_at_most_for))
            .await
            .map_err(err)?;
        self.move_to_new_lease(&mut state, lease).await.map_err(err)
    }
}

#[async_trait]
impl LockAdmin for EtcdNode {
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let err = |e| lock_error(e, Operation::List, "");
        let prefix = format!("{KEY_ROOT}{}", request.prefix).into_bytes();
        let end = if self.is(EtcdBug::PrefixEndByChar) {
            format!("{KEY_ROOT}{}\u{ff}", request.prefix).into_bytes()
        } else {
            prefix_end(&prefix)
        };
        let start = match &request.after {
            Some(cursor) => {
                let mut after = format!("{KEY_ROOT}{}", cursor.as_str()).into_bytes();
                after.push(0);
                after.max(prefix)
            }
            None => prefix,
        };
        let limit = request.limit.max(1);
        let (kvs, more) = self.0.conn.range(start, end, limit).await.map_err(err)?;
        let mut locks = Vec::with_capacity(kvs.len());
        for kv in &kvs {
            // A key whose lease ran out between the two reads is gone: not listed.
            if let Some(remaining) = self.0.conn.time_to_live(kv.lease).await.map_err(err)? {
                locks.push(self.info(kv, remaining));
            }
        }
        let next = match (more, kvs.last()) {
            (true, Some(last)) => Some(PageCursor::new(
                String::from_utf8_lossy(&last.key[KEY_ROOT.len()..]).into_owned(),
            )),
            _ => None,
        };
        Ok(LockPage { locks, next })
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let err = |e| lock_error(e, Operation::Inspect, name);
        let key = self.key_for(name);
        let mut end = key.clone();
        end.push(0);
        let (kvs, _) = self.0.conn.range(key, end, 1).await.map_err(err)?;
        let Some(kv) = kvs.into_iter().next() else {
            return Ok(None);
        };
        let remaining = self.0.conn.time_to_live(kv.lease).await.map_err(err)?;
        Ok(remaining.map(|remaining| self.info(&kv, remaining)))
    }

    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let parsed = acquisition.as_str().parse::<i64>().ok().filter(|&r| r > 0);
        let Some(create_revision) = parsed else {
            return Err(LockError::invalid_request(
                PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "the acquisition id {:?} is not a create revision",
                    acquisition.as_str()
                ),
            ));
        };
        let key = self.key_for(name);
        let response = self
            .0
            .conn
            .txn(Txn {
                compares: vec![Compare {
                    key: key.clone(),
                    target: Target::CreateRevision(create_revision),
                }],
                success: vec![Op::Get { key: key.clone() }, Op::Delete { key }],
                failure: vec![],
            })
            .await
            .map_err(|e| lock_error(e, Operation::ForceUnlock, name))?;
        if let Some(Some(kv)) = response.gets.first() {
            self.tidy(kv.lease).await;
        }
        Ok(response.succeeded)
    }
}
