//! What each lock operation costs on the wire to a real server (`SHEDLOCK_TEST_MONGO_URL`),
//! counted by the kit's `CountingProxy`.
//!
//! The driver keeps connections of its own beside the pool: a monitor per server (`hello`,
//! streamed or polled every 10 s) and a round-trip-time pinger (`hello` again). Their traffic
//! would land in an operation's count whenever a heartbeat falls inside it. So each connection
//! the driver opens gets a `CountingProxy` of its own, and the client's messages on it are read
//! on the way (the MongoDB wire protocol's header and the command name, the first key of the
//! command document): a connection that has only ever sent `hello` (or the legacy
//! `isMaster`) is monitoring and is left out; the round trips of every other connection (the
//! pool's, where the lock commands go) are the operation's. A pool connection opened during
//! an operation would count with its handshake, and the tests also assert that none is.

use shedlock_test_support::settings;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use mongodb::bson::{DateTime, Document, doc};
use shedlock_conformance::CountingProxy;
use shedlock_core::{
    Acquisition, LockAdmin, LockConfiguration, LockHandle, LockProvider, LockState, PageRequest,
};
use shedlock_mongo::MongoLockProvider;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const MINUTE: Duration = Duration::from_secs(60);

/// The `host:port` of the first host in a `mongodb://` URL.
fn upstream(url: &str) -> String {
    let rest = url.split_once("://").expect("a URL with a scheme").1;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    let hosts = rest.split(['/', '?']).next().unwrap();
    let host = hosts.split(',').next().unwrap();
    if host.contains(':') {
        host.to_owned()
    } else {
        format!("{host}:27017")
    }
}

/// One connection the driver opened, through a `CountingProxy` of its own.
struct Connection {
    proxy: CountingProxy,
    /// Whether the client has sent anything but `hello` on it: a pool connection.
    carries_commands: AtomicBool,
    /// The commands the client sent on it, in order.
    commands: Mutex<Vec<String>>,
}

/// Accepts the driver's connections and forwards each through its own `CountingProxy`.
struct Wire {
    url: String,
    connections: Arc<Mutex<Vec<Arc<Connection>>>>,
}

/// What the pool's connections showed between two moments.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    round_trips: Vec<u64>,
    commands: Vec<usize>,
}

/// What one operation cost on the pool's connections.
#[derive(Debug, PartialEq, Eq)]
struct Cost {
    round_trips: u64,
    commands: Vec<String>,
    new_connections: usize,
}

impl Wire {
    async fn start() -> Self {
        let upstream = upstream(&settings::MONGO.value());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        // A direct connection: told the replica set's member addresses, the driver would
        // otherwise go around the proxy to them.
        let url = format!(
            "mongodb://{}/?directConnection=true",
            listener.local_addr().unwrap()
        );
        let connections: Arc<Mutex<Vec<Arc<Connection>>>> = Arc::default();
        let accepted = connections.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let proxy = CountingProxy::start(&upstream).await.unwrap();
                let server = TcpStream::connect(proxy.local_addr()).await.unwrap();
                let connection = Arc::new(Connection {
                    proxy,
                    carries_commands: AtomicBool::new(false),
                    commands: Mutex::new(Vec::new()),
                });
                accepted.lock().unwrap().push(connection.clone());
                let (mut client_read, mut client_write) = client.into_split();
                let (mut server_read, mut server_write) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut server_read, &mut client_write).await;
                });
                tokio::spawn(async move {
                    let mut messages = MessageReader::default();
                    let mut buffer = vec![0u8; 64 * 1024];
                    while let Ok(read) = client_read.read(&mut buffer).await {
                        if read == 0 {
                            break;
                        }
                        // Read before forwarding, so an answered command is always recorded.
                        for command in messages.commands_in(&buffer[..read]) {
                            if !is_hello(&command) {
                                connection.carries_commands.store(true, Ordering::SeqCst);
                            }
                            connection.commands.lock().unwrap().push(command);
                        }
                        if server_write.write_all(&buffer[..read]).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Self { url, connections }
    }

    async fn provider(&self) -> MongoLockProvider {
        MongoLockProvider::builder()
            .database("shedlock_round_trips")
            .collection(format!("wire_{}", uuid::Uuid::new_v4().simple()))
            .connect(&self.url)
            .await
            .unwrap()
    }

    fn snapshot(&self) -> Snapshot {
        let connections = self.connections.lock().unwrap();
        Snapshot {
            round_trips: connections.iter().map(|c| c.proxy.round_trips()).collect(),
            commands: connections
                .iter()
                .map(|c| c.commands.lock().unwrap().len())
                .collect(),
        }
    }

    /// The pool's round trips and commands since `before`.
    fn cost_since(&self, before: &Snapshot) -> Cost {
        let connections = self.connections.lock().unwrap();
        let mut cost = Cost {
            round_trips: 0,
            commands: Vec::new(),
            new_connections: 0,
        };
        for (index, connection) in connections.iter().enumerate() {
            if !connection.carries_commands.load(Ordering::SeqCst) {
                continue;
            }
            let known = index < before.round_trips.len();
            if !known {
                cost.new_connections += 1;
            }
            let round_trips_before = if known { before.round_trips[index] } else { 0 };
            let commands_before = if known { before.commands[index] } else { 0 };
            cost.round_trips += connection.proxy.round_trips() - round_trips_before;
            cost.commands
                .extend_from_slice(&connection.commands.lock().unwrap()[commands_before..]);
        }
        cost
    }

    /// Runs `operation` and returns its answer and what it cost on the pool's connections.
    async fn measure<T>(&self, operation: impl Future<Output = T>) -> (T, Cost) {
        let before = self.snapshot();
        let answer = operation.await;
        (answer, self.cost_since(&before))
    }
}

fn is_hello(command: &str) -> bool {
    command.eq_ignore_ascii_case("hello") || command.eq_ignore_ascii_case("ismaster")
}

/// Splits the client's byte stream into wire protocol messages across reads, and names the
/// command each carries.
#[derive(Default)]
struct MessageReader {
    pending: Vec<u8>,
}

impl MessageReader {
    const OP_MSG: i32 = 2013;
    const OP_QUERY: i32 = 2004;

    fn commands_in(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut commands = Vec::new();
        while self.pending.len() >= 16 {
            let length = i32_at(&self.pending, 0) as usize;
            if self.pending.len() < length {
                break;
            }
            let message: Vec<u8> = self.pending.drain(..length).collect();
            commands.push(command_name(&message).unwrap_or_else(|| "<unreadable>".to_owned()));
        }
        commands
    }
}

fn i32_at(bytes: &[u8], at: usize) -> i32 {
    i32::from_le_bytes(bytes[at..at + 4].try_into().unwrap())
}

/// The first key of the message's command document.
fn command_name(message: &[u8]) -> Option<String> {
    let body = match i32_at(message, 12) {
        // flagBits, then sections; the command document is the section of kind 0.
        MessageReader::OP_MSG => {
            let mut at = 20;
            loop {
                let kind = *message.get(at)?;
                if kind == 0 {
                    break &message[at + 1..];
                }
                at += 1 + i32_at(message, at + 1) as usize;
            }
        }
        // flags, collection name, skip and return counts, then the query document.
        MessageReader::OP_QUERY => {
            let name_end = 20 + message[20..].iter().position(|&b| b == 0)?;
            &message[name_end + 1 + 8..]
        }
        _ => return None,
    };
    // A document: its length, then elements of a type byte and a NUL-terminated key.
    let key = &body[5..];
    let end = key.iter().position(|&b| b == 0)?;
    Some(String::from_utf8_lossy(&key[..end]).into_owned())
}

fn config(name: &str, at_least: Duration) -> LockConfiguration {
    LockConfiguration::new(name, MINUTE, at_least).unwrap()
}

fn acquired(acquisition: Acquisition) -> Box<dyn LockHandle> {
    match acquisition {
        Acquisition::Acquired(handle) => handle,
        Acquisition::NotAcquired(holder) => panic!("not acquired: held by {holder:?}"),
    }
}

/// One `findAndModify`, one round trip, on a connection the pool already had.
fn assert_one_command(cost: Cost, what: &str) {
    assert_eq!(
        cost,
        Cost {
            round_trips: 1,
            commands: vec!["findAndModify".to_owned()],
            new_connections: 0,
        },
        "{what}"
    );
}

/// Nothing sent: the handle answered from what it knew.
fn assert_unasked(cost: Cost, what: &str) {
    assert_eq!(
        cost,
        Cost {
            round_trips: 0,
            commands: Vec::new(),
            new_connections: 0,
        },
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn every_lock_operation_is_one_find_and_modify_and_one_round_trip() {
    let wire = Wire::start().await;
    let holder = wire.provider().await;
    let contender = holder.node();

    // The pool opens its connection on the first command; the counts below are of a warm pool.
    let warm_up = acquired(
        holder
            .try_lock(&config("warm-up", Duration::ZERO))
            .await
            .unwrap(),
    );
    assert!(warm_up.extend(MINUTE).await.unwrap());
    assert!(warm_up.unlock().await.unwrap());

    let (handle, cost) = wire
        .measure(holder.try_lock(&config("job", Duration::ZERO)))
        .await;
    assert_one_command(cost, "acquire of a name never seen");
    let handle = acquired(handle.unwrap());

    let (refused, cost) = wire
        .measure(contender.try_lock(&config("job", Duration::ZERO)))
        .await;
    assert!(!refused.unwrap().is_acquired(), "held, so refused");
    assert_one_command(cost, "refused acquire");

    let (extended, cost) = wire.measure(handle.extend(MINUTE)).await;
    assert!(extended.unwrap());
    assert_one_command(cost, "extend");

    let (released, cost) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_one_command(cost, "release");

    let (handle, cost) = wire
        .measure(contender.try_lock(&config("job", Duration::from_secs(30))))
        .await;
    assert_one_command(cost, "acquire of a known, free name");
    let handle = acquired(handle.unwrap());

    let (released, cost) = wire.measure(handle.unlock()).await;
    assert!(released.unwrap());
    assert_one_command(cost, "release within lock_at_least_for");

    // A restarted node knows no names; the acquire costs the same.
    holder.clear_name_cache();
    let (refused, cost) = wire
        .measure(holder.try_lock(&config("job", Duration::ZERO)))
        .await;
    assert!(
        !refused.unwrap().is_acquired(),
        "held for lock_at_least_for"
    );
    assert_one_command(cost, "refused acquire after a restart");

    // A released handle answers from memory; an expired one must ask the server.
    let (extended, cost) = wire.measure(handle.extend(MINUTE)).await;
    assert!(!extended.unwrap(), "released, so not extended");
    assert_unasked(cost, "a released handle answers without asking");
    let short =
        LockConfiguration::new("short", Duration::from_millis(100), Duration::ZERO).unwrap();
    let expired = acquired(holder.try_lock(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (released, cost) = wire.measure(expired.unlock()).await;
    assert!(!released.unwrap(), "expired, so not released");
    assert_one_command(cost, "release of an expired lock");
    let expired = acquired(holder.try_lock(&short).await.unwrap());
    tokio::time::sleep(Duration::from_millis(400)).await;
    let (extended, cost) = wire.measure(expired.extend(MINUTE)).await;
    assert!(!extended.unwrap(), "expired, so not extended");
    assert_one_command(cost, "extend of an expired lock");
    // The extend's `false` ended the acquisition: the release knows without asking.
    let (released, cost) = wire.measure(expired.unlock()).await;
    assert!(!released.unwrap(), "expired, so not released");
    assert_unasked(
        cost,
        "a handle whose extend answered false answers without asking",
    );

    let monitoring = wire
        .connections
        .lock()
        .unwrap()
        .iter()
        .filter(|c| !c.carries_commands.load(Ordering::SeqCst))
        .count();
    assert!(
        monitoring >= 1,
        "the driver's monitoring connections were seen and left out"
    );
    holder.collection().drop().await.unwrap();
}

/// One `command`, one round trip, on a connection the pool already had, and nothing after it
/// (no `getMore`, no `killCursors` of a cursor left open).
async fn assert_alone<T>(wire: &Wire, operation: impl Future<Output = T>, command: &str) -> T {
    let before = wire.snapshot();
    let answer = operation.await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        wire.cost_since(&before),
        Cost {
            round_trips: 1,
            commands: vec![command.to_owned()],
            new_connections: 0,
        },
        "one {command}"
    );
    answer
}

#[tokio::test(flavor = "multi_thread")]
async fn every_admin_operation_is_one_command_and_one_round_trip() {
    let wire = Wire::start().await;
    let operator = wire.provider().await;
    let holder = operator.node();
    let handle = acquired(
        holder
            .try_lock(&config("held", Duration::ZERO))
            .await
            .unwrap(),
    );
    // More documents than a first batch holds by default (101), all on one page.
    let now = DateTime::now();
    let documents: Vec<Document> = (0..150)
        .map(|i| doc! { "_id": format!("bulk-{i:03}"), "lockUntil": now, "lockedAt": now, "lockedBy": "java-host" })
        .collect();
    operator.collection().insert_many(documents).await.unwrap();

    let page = assert_alone(
        &wire,
        operator.list_locks(&PageRequest::first("bulk-").with_limit(200)),
        "aggregate",
    )
    .await
    .unwrap();
    assert_eq!((page.locks.len(), page.next), (150, None));
    let page = assert_alone(
        &wire,
        operator.list_locks(&PageRequest::first("bulk-").with_limit(100)),
        "aggregate",
    )
    .await
    .unwrap();
    assert_eq!(page.locks.len(), 100);
    assert!(page.next.is_some());

    let seen = assert_alone(&wire, operator.inspect_lock("held"), "aggregate")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(seen.state, LockState::Held);
    let freed = assert_alone(
        &wire,
        operator.force_unlock("held", &seen.acquisition),
        "findAndModify",
    )
    .await;
    assert!(freed.unwrap());
    let stale = assert_alone(
        &wire,
        operator.force_unlock("held", &seen.acquisition),
        "findAndModify",
    )
    .await;
    assert!(!stale.unwrap());
    assert!(!handle.unlock().await.unwrap());
    operator.collection().drop().await.unwrap();
}

#[test]
fn command_names_are_read_from_op_msg_and_op_query() {
    // OP_MSG: header, flagBits 0, a kind-0 section holding {findAndModify: "c"}.
    let document = [
        &22i32.to_le_bytes()[..],
        &[2],
        b"findAndModify\0",
        &2i32.to_le_bytes(),
        b"c\0",
        &[0],
    ]
    .concat();
    let mut message = Vec::new();
    let length = 16 + 4 + 1 + document.len();
    message.extend_from_slice(&(length as i32).to_le_bytes());
    message.extend_from_slice(&[0; 8]);
    message.extend_from_slice(&2013i32.to_le_bytes());
    message.extend_from_slice(&[0; 4]);
    message.push(0);
    message.extend_from_slice(&document);
    let mut reader = MessageReader::default();
    // Split across reads, as TCP may deliver it.
    assert!(reader.commands_in(&message[..10]).is_empty());
    assert_eq!(reader.commands_in(&message[10..]), ["findAndModify"]);

    // OP_QUERY: header, flags, "admin.$cmd", skip, return, {isMaster: 1}.
    let document = [
        &19i32.to_le_bytes()[..],
        &[16],
        b"isMaster\0",
        &1i32.to_le_bytes(),
        &[0],
    ]
    .concat();
    let mut message = Vec::new();
    let length = 16 + 4 + 11 + 8 + document.len();
    message.extend_from_slice(&(length as i32).to_le_bytes());
    message.extend_from_slice(&[0; 8]);
    message.extend_from_slice(&2004i32.to_le_bytes());
    message.extend_from_slice(&[0; 4]);
    message.extend_from_slice(b"admin.$cmd\0");
    message.extend_from_slice(&[0; 8]);
    message.extend_from_slice(&document);
    assert_eq!(reader.commands_in(&message), ["isMaster"]);
    assert!(is_hello("isMaster") && is_hello("hello") && !is_hello("findAndModify"));
}
