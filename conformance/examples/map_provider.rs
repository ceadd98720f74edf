//! A whole lock provider for a key-value backend, written as a third party would write it
//! outside this workspace, and proven with the conformance kit.
//!
//! The file has three parts:
//!
//! - the provider: the provider crate's code, all of it. The backend is a versioned key-value map
//!   with compare-and-set, so the provider is a [`LockStorage`]: it connects, sends the two wire
//!   commands, maps lock records to and from map values, and turns I/O errors into
//!   [`LockError`]s. The lock algorithm (at-most, at-least, owner-checked release and extend, the
//!   name cache, operation timeouts) is [`StorageBasedLockProvider`]'s.
//! - `mod backend`: the stand-in for a real server, a `HashMap` behind a line protocol on
//!   127.0.0.1 (an ephemeral port), started by this program.
//! - the harness and `main`: the kit run against the provider, as `conformance/README.md` tells
//!   a third party to. The process exits non-zero when a check fails.
//!
//! Run it with `cargo test -p shedlock-conformance --example map_provider` (filters work as
//! for any test: `... --example map_provider -- at_most`).

// ---------------------------------------------------------------------------------------------
// The provider: everything a third party's crate holds.
// ---------------------------------------------------------------------------------------------

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use shedlock_core::{
    Capabilities, ErrorKind, LockError, LockHolder, Operation, TimeSource,
    raw::{HeldRecord, LockRecord, LockStorage, NodeTime, RecordOutcome, async_trait},
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;
use tokio::sync::Mutex;

const PROVIDER: &str = "map";

/// Locks in a key-value map server reached over TCP: one record per lock name, written only by
/// compare-and-set on the key's revision.
///
/// The map has no clock, so this provider uses client time: each node's own wall clock decides
/// expiry. Exclusion holds only while the nodes' clocks differ by less than `lock_at_most_for`
/// minus the task's run time. Fencing tokens are the map's revisions, which every write raises,
/// so they strictly increase per name, deletions included.
#[derive(Debug)]
pub struct MapStorage {
    address: SocketAddr,
    /// One connection per node, one request at a time; `None` until first used and after a
    /// failure, so the next request connects again.
    connection: Mutex<Option<BufStream<TcpStream>>>,
}

/// A lock record as the map stores it, times in nanoseconds since the Unix epoch.
struct Stored {
    lock_until: u128,
    locked_at: u128,
    locked_by: String,
}

impl MapStorage {
    /// A storage on the server at `address`. Nothing connects until the first lock call, so a
    /// node can be built while the server is down.
    pub fn new(address: SocketAddr) -> Self {
        Self {
            address,
            connection: Mutex::new(None),
        }
    }

    /// Sends one command line and reads its one-line answer.
    async fn call(&self, op: Operation, name: &str, command: String) -> Result<String, LockError> {
        let mut slot = self.connection.lock().await;
        // Taken out for the exchange: a request that fails, or is cancelled by the provider's
        // timeout, drops the connection instead of leaving a reply in flight.
        let mut connection = match slot.take() {
            Some(connection) => connection,
            None => TcpStream::connect(self.address)
                .await
                .map_err(|e| io_error(e, Operation::Connect, op, name))
                .map(BufStream::new)?,
        };
        let mut reply = String::new();
        let exchange = async {
            connection.write_all(command.as_bytes()).await?;
            connection.flush().await?;
            match connection.read_line(&mut reply).await? {
                0 => Err(io::Error::from(io::ErrorKind::UnexpectedEof)),
                _ => Ok(()),
            }
        };
        exchange.await.map_err(|e| io_error(e, op, op, name))?;
        *slot = Some(connection);
        Ok(reply.trim_end().to_owned())
    }

    /// The record of `name` and its revision, if there is one.
    async fn read(&self, op: Operation, name: &str) -> Result<Option<(u64, Stored)>, LockError> {
        let reply = self.call(op, name, format!("GET {}\n", key(name))).await?;
        let bad = || unexpected(op, name, &reply);
        match reply.split(' ').collect::<Vec<_>>()[..] {
            ["NONE"] => Ok(None),
            ["VALUE", revision, value] => {
                let revision = revision.parse().map_err(|_| bad())?;
                let stored = Stored::decode(value).ok_or_else(|| corrupt(op, name, value))?;
                Ok(Some((revision, stored)))
            }
            _ => Err(bad()),
        }
    }

    /// Writes `new` if `name`'s revision is still `revision` (0: no record yet): the new
    /// revision, or `None` if another write came first.
    async fn write(
        &self,
        op: Operation,
        name: &str,
        revision: u64,
        new: &Stored,
    ) -> Result<Option<u64>, LockError> {
        let command = format!("CAS {} {revision} {}\n", key(name), new.encode());
        let reply = self.call(op, name, command).await?;
        let bad = || unexpected(op, name, &reply);
        match reply.split(' ').collect::<Vec<_>>()[..] {
            ["CONFLICT"] => Ok(None),
            ["OK", revision] => Ok(Some(revision.parse().map_err(|_| bad())?)),
            _ => Err(bad()),
        }
    }

    /// Moves `lock_until` of `held`'s record to `until(now, locked_at)`, if this acquisition
    /// still holds it at `now`.
    async fn rewrite(
        &self,
        op: Operation,
        held: &HeldRecord,
        now: NodeTime,
        until: impl Fn(u128, u128) -> u128 + Send,
    ) -> Result<bool, LockError> {
        let now = nanos(node_now(now, op, &held.name)?);
        loop {
            let Some((revision, mut stored)) = self.read(op, &held.name).await? else {
                return Ok(false);
            };
            if stored.locked_by != held.locked_by || stored.lock_until <= now {
                return Ok(false);
            }
            stored.lock_until = until(now, stored.locked_at);
            let written = self.write(op, &held.name, revision, &stored).await?;
            if written.is_some() {
                return Ok(true);
            }
            // Another write came between the read and ours: judge again on what it left.
        }
    }
}

#[async_trait]
impl LockStorage for MapStorage {
    fn provider_name(&self) -> &'static str {
        PROVIDER
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(TimeSource::Client).with_fencing(true)
    }

    async fn insert_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        let new = Stored::held_by(record)?;
        // A record that exists, held or not, is refused: taking one over is the update's job.
        let written = self.write(Operation::Acquire, record.name, 0, &new).await?;
        Ok(written.map_or(RecordOutcome::NotAcquired(None), acquired))
    }

    async fn update_record(&self, record: &LockRecord<'_>) -> Result<RecordOutcome, LockError> {
        let (new, op) = (Stored::held_by(record)?, Operation::Acquire);
        loop {
            let Some((revision, stored)) = self.read(op, record.name).await? else {
                // Deleted behind the name cache's back: the provider inserts it again.
                return Ok(RecordOutcome::Missing);
            };
            if stored.lock_until > new.locked_at {
                return Ok(RecordOutcome::NotAcquired(Some(LockHolder {
                    held_until: time_of(stored.lock_until),
                    locked_by: Some(stored.locked_by),
                })));
            }
            if let Some(revision) = self.write(op, record.name, revision, &new).await? {
                return Ok(acquired(revision));
            }
            // Another write came first: read what it left, which may be a new holder.
        }
    }

    async fn extend(
        &self,
        held: &HeldRecord,
        at_most: Duration,
        now: NodeTime,
    ) -> Result<bool, LockError> {
        let at_most = at_most.as_nanos();
        self.rewrite(Operation::Extend, held, now, |now, _| now + at_most)
            .await
    }

    async fn unlock(&self, held: &HeldRecord, now: NodeTime) -> Result<bool, LockError> {
        // The record is kept and only its lock_until moves, as ShedLock's algorithm expects.
        let at_least = held.lock_at_least_for.as_nanos();
        let until = |now: u128, locked_at| now.max(locked_at + at_least);
        self.rewrite(Operation::Release, held, now, until).await
    }
}

fn acquired(revision: u64) -> RecordOutcome {
    let fencing_token = Some(revision);
    RecordOutcome::Acquired { fencing_token }
}

impl Stored {
    fn held_by(record: &LockRecord<'_>) -> Result<Self, LockError> {
        let now = nanos(node_now(record.now, Operation::Acquire, record.name)?);
        let lock_until = now + record.lock_at_most_for.as_nanos();
        let locked_by = record.locked_by.to_owned();
        Ok(Self {
            lock_until,
            locked_at: now,
            locked_by,
        })
    }

    fn encode(&self) -> String {
        record_value(self.lock_until, self.locked_at, &self.locked_by)
    }

    /// The record in `value`; `None` if `value` is not one (another program's data).
    fn decode(value: &str) -> Option<Self> {
        let mut fields = value.split(':');
        let (until, at, by) = (fields.next()?, fields.next()?, fields.next()?);
        // Two hex digits a byte; an odd digit out or a non-digit makes it no record.
        let bytes = (0..by.len()).step_by(2).map(|i| by.get(i..i + 2));
        let bytes = bytes.map(|pair| u8::from_str_radix(pair?, 16).ok());
        Some(Self {
            lock_until: until.parse().ok()?,
            locked_at: at.parse().ok()?,
            locked_by: String::from_utf8(bytes.collect::<Option<_>>()?).ok()?,
        })
    }
}

/// The map value of a record: `lock_until:locked_at:locked_by`, times in nanoseconds since the
/// Unix epoch, the holder hex-encoded (it may hold any character).
pub fn record_value(lock_until: u128, locked_at: u128, locked_by: &str) -> String {
    format!("{lock_until}:{locked_at}:{}", hex(locked_by))
}

/// The map key of a lock name: its UTF-8 bytes in hex, so every distinct name is a distinct key
/// and no name is syntax on the wire.
pub fn key(name: &str) -> String {
    hex(name)
}

fn hex(text: &str) -> String {
    text.bytes().map(|byte| format!("{byte:02x}")).collect()
}

/// Nanoseconds since the Unix epoch: exact, and room for 10,000-year locks.
pub fn nanos(time: SystemTime) -> u128 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos()
}

fn time_of(nanos: u128) -> Option<SystemTime> {
    let seconds = u64::try_from(nanos / 1_000_000_000).ok()?;
    UNIX_EPOCH.checked_add(Duration::new(seconds, (nanos % 1_000_000_000) as u32))
}

/// The node's clock. This storage declares client time, so the provider always hands it over;
/// guessing a time instead could free a held lock, so its absence is an error.
fn node_now(now: NodeTime, op: Operation, name: &str) -> Result<SystemTime, LockError> {
    let message = "a client-time storage was given no node time";
    let error =
        || LockError::backend_message(ErrorKind::Configuration, PROVIDER, op, name, message);
    now.client_time().ok_or_else(error)
}

/// An I/O error in `phase` (connect, or the request) of `op`: `of_io` tells a server that was
/// never reached from a request whose outcome is unknown.
fn io_error(error: io::Error, phase: Operation, op: Operation, name: &str) -> LockError {
    let kind = ErrorKind::of_io(error.kind(), phase);
    LockError::backend(kind, PROVIDER, op, name, format!("{phase} failed"), error)
}

/// A value under a lock's key that this provider did not write: nothing is overwritten.
fn corrupt(op: Operation, name: &str, value: &str) -> LockError {
    let message = format!("the value under this lock's key is no lock record: {value:?}");
    LockError::backend_message(ErrorKind::CorruptData, PROVIDER, op, name, message)
}

/// An answer this provider does not understand: whether the command took effect is unknown.
fn unexpected(op: Operation, name: &str, reply: &str) -> LockError {
    let message = format!("unexpected answer from the map server: {reply:?}");
    LockError::backend_message(ErrorKind::OutcomeUnknown, PROVIDER, op, name, message)
}

// ---------------------------------------------------------------------------------------------
// The backend: a stand-in for a real key-value server.
// ---------------------------------------------------------------------------------------------

mod backend {
    use std::collections::HashMap;
    use std::io;
    use std::net::SocketAddr;
    use std::sync::{Arc, Mutex, MutexGuard};

    use shedlock_core::CancellationToken;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    use tokio::net::{TcpListener, TcpStream};

    /// Key -> (revision of its last write, value). Keys and values are single words; the
    /// revision counts every write of the whole map, as etcd's does.
    #[derive(Debug, Default)]
    pub struct Map {
        revision: u64,
        entries: HashMap<String, (u64, String)>,
    }

    impl Map {
        /// `GET key` -> `VALUE revision value` or `NONE`;
        /// `CAS key expected_revision value` (0: no entry) -> `OK revision` or `CONFLICT`.
        fn apply(&mut self, line: &str) -> String {
            match line.split(' ').collect::<Vec<_>>()[..] {
                ["GET", key] => match self.entries.get(key) {
                    Some((revision, value)) => format!("VALUE {revision} {value}"),
                    None => "NONE".into(),
                },
                ["CAS", key, expected, value] => {
                    let current = self.entries.get(key).map_or(0, |(revision, _)| *revision);
                    match expected.parse::<u64>() {
                        Ok(expected) if expected == current => {
                            format!("OK {}", self.put(key, value))
                        }
                        Ok(_) => "CONFLICT".into(),
                        Err(_) => "ERR bad revision".into(),
                    }
                }
                _ => "ERR unknown command".into(),
            }
        }

        /// Writes `value` under `key` unconditionally; the new revision.
        pub fn put(&mut self, key: &str, value: &str) -> u64 {
            self.revision += 1;
            self.entries
                .insert(key.to_owned(), (self.revision, value.to_owned()));
            self.revision
        }

        /// Deletes every key starting with `prefix`.
        pub fn remove_prefix(&mut self, prefix: &str) {
            self.entries.retain(|key, _| !key.starts_with(prefix));
        }
    }

    /// One map, reached through doors: a listening port per client, so a test can cut one
    /// client off as a network partition would, while the others keep working.
    #[derive(Debug, Default)]
    pub struct Backend {
        map: Arc<Mutex<Map>>,
    }

    impl Backend {
        /// The map itself, for a test's direct writes.
        pub fn map(&self) -> MutexGuard<'_, Map> {
            self.map.lock().unwrap()
        }

        /// A new door. Once its token is cancelled, each of its connections is closed at its
        /// next command, unanswered. The port stays bound, so no other door ever reuses it.
        pub async fn open_door(&self) -> io::Result<(SocketAddr, CancellationToken)> {
            let listener = TcpListener::bind("127.0.0.1:0").await?;
            let address = listener.local_addr()?;
            let (map, door) = (self.map.clone(), CancellationToken::new());
            let closed = door.clone();
            tokio::spawn(async move {
                while let Ok((socket, _)) = listener.accept().await {
                    tokio::spawn(serve(socket, map.clone(), closed.clone()));
                }
            });
            Ok((address, door))
        }
    }

    async fn serve(
        socket: TcpStream,
        map: Arc<Mutex<Map>>,
        closed: CancellationToken,
    ) -> io::Result<()> {
        let (reader, mut writer) = socket.into_split();
        let mut lines = BufReader::new(reader).lines();
        // Checked per command, not by a task woken on cancellation: a command sent after the
        // cut must never be applied, however the tasks are scheduled.
        while let Some(line) = lines.next_line().await?
            && !closed.is_cancelled()
        {
            let reply = map.lock().unwrap().apply(&line);
            writer.write_all(format!("{reply}\n").as_bytes()).await?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// The harness: the conformance kit run against the provider.
// ---------------------------------------------------------------------------------------------

use std::process::ExitCode;
use std::sync::Arc;

use shedlock_conformance::{Clock, ConformanceHarness, PlantedRecord, SetupError, Support};
use shedlock_core::{
    Acquisition, CancellationToken, LockConfiguration, LockProvider, raw::StorageBasedLockProvider,
};
use tokio::net::TcpListener;

use backend::Backend;

/// The kit's view of the backend: the map server, which this program runs.
struct Harness {
    backend: Backend,
}

/// A node as the kit sees it: the provider, and the door it reaches the map through (for
/// `cut_off`).
#[derive(Debug)]
struct Node {
    provider: StorageBasedLockProvider,
    door: CancellationToken,
}

#[async_trait]
impl LockProvider for Node {
    async fn try_lock(&self, config: &LockConfiguration) -> Result<Acquisition, LockError> {
        self.provider.try_lock(config).await
    }

    fn capabilities(&self) -> Capabilities {
        self.provider.capabilities()
    }

    fn provider_name(&self) -> &'static str {
        self.provider.provider_name()
    }
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = Node;

    fn name(&self) -> &str {
        "map-example"
    }

    async fn node(&self, clock: Arc<dyn Clock>) -> Result<Node, SetupError> {
        let (address, door) = self.backend.open_door().await?;
        let provider = StorageBasedLockProvider::new(MapStorage::new(address)).with_clock(clock);
        Ok(Node { provider, door })
    }

    async fn unreachable_node(&self) -> Result<Support<Node>, SetupError> {
        // A port that was open a moment ago: nothing listens there now.
        let closed = TcpListener::bind("127.0.0.1:0").await?.local_addr()?;
        let provider = StorageBasedLockProvider::new(MapStorage::new(closed));
        let door = CancellationToken::new();
        Ok(Support::Supported(Node { provider, door }))
    }

    async fn cut_off(&self, node: &Node) -> Result<Support<()>, SetupError> {
        node.door.cancel();
        Ok(Support::Supported(()))
    }

    fn clear_name_cache(&self, node: &Node) -> Support<()> {
        node.provider.clear_name_cache();
        Support::Supported(())
    }

    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        // Straight into the map, as another program would have left the record.
        let (until, at) = (nanos(record.lock_until), nanos(record.locked_at));
        let value = record_value(until, at, &record.locked_by);
        self.backend.map().put(&key(&record.name), &value);
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        // Keys are names in hex, two digits a byte, so a name prefix is a key prefix.
        self.backend.map().remove_prefix(&key(name_prefix));
        Ok(())
    }
}

fn main() -> ExitCode {
    shedlock_conformance::run(|| async {
        Ok(Harness {
            backend: Backend::default(),
        })
    })
}
