//! The conformance harness for MongoDB, shared by the kit's two runs against
//! `SHEDLOCK_TEST_MONGO_URL` (else the official `mongo` image through testcontainers where
//! Docker runs): `tests/conformance.rs` (the lock rules) and `tests/faults.rs` (the fault
//! suite: crashed holders, stalled networks, a restarted server, a soak). Each node is its own
//! provider with its own client, as a separate process would be. Each run has a database of its
//! own, named after the fault suite's run id (which its node processes, building a harness of
//! their own, share), so every run starts where a new deployment does: its first nodes create
//! the database and the collection, at once.

use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::{DateTime, Regex, doc};
use mongodb::{Client, Collection, bson::Document};
use shedlock_conformance::backends::{self, Backend};
use shedlock_conformance::faults::{self, FaultHarness};
use shedlock_conformance::shedlock_core::LockAdmin;
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_mongo::{MongoLockProvider, MongoLockProviderBuilder};

const COLLECTION: &str = "shedLock";

/// How long a node reached through the kit's stalling proxy waits for an answer, and for a
/// server.
const STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// MongoDB's port, when the URL names none.
const DEFAULT_PORT: u16 = 27017;

const DIRECT_CONNECTION: &str = "directConnection";

pub struct Harness {
    url: String,
    database: String,
    admin: Collection<Document>,
}

/// The harness of a run: the body of each target's `main`.
pub async fn harness() -> Result<Harness, SetupError> {
    let url = backends::mongo_url().await?;
    let database = format!("shedlock_conformance_{}", faults::run_id());
    let admin = Client::with_uri_str(&url)
        .await?
        .database(&database)
        .collection(COLLECTION);
    Ok(Harness {
        url,
        database,
        admin,
    })
}

impl Harness {
    fn builder(&self) -> MongoLockProviderBuilder {
        MongoLockProvider::builder()
            .database(&self.database)
            .collection(COLLECTION)
            .holder("conformance")
    }
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = MongoLockProvider;

    fn name(&self) -> &str {
        "mongo"
    }

    /// The server's `$$NOW` decides: the node's clock is not used for anything.
    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<MongoLockProvider, SetupError> {
        Ok(self.builder().connect(&self.url).await?)
    }

    /// A closed port, with a password in the URL as a real deployment would have.
    async fn unreachable_node(&self) -> Result<Support<MongoLockProvider>, SetupError> {
        let node = self
            .builder()
            .server_selection_timeout(Duration::from_secs(2))
            .connect_lazy("mongodb://app:s3cret@127.0.0.1:1/?directConnection=true")
            .await?;
        Ok(Support::Supported(node))
    }

    fn admin<'node>(&self, node: &'node MongoLockProvider) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    fn clear_name_cache(&self, node: &MongoLockProvider) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    /// What Java ShedLock's `MongoLockProvider` leaves: three fields, dates and a host name,
    /// and no fencing counter.
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        self.admin
            .replace_one(
                doc! { "_id": &record.name },
                doc! {
                    "_id": &record.name,
                    "lockUntil": DateTime::from_system_time(record.lock_until),
                    "lockedAt": DateTime::from_system_time(record.locked_at),
                    "lockedBy": &record.locked_by,
                },
            )
            .upsert(true)
            .await?;
        Ok(Support::Supported(()))
    }

    /// An acquisition counts `fencingToken` up by one: an expired document whose counter says
    /// `past`.
    async fn advance_fencing_tokens(
        &self,
        name: &str,
        past: u64,
    ) -> Result<Support<()>, SetupError> {
        let now = std::time::SystemTime::now();
        let hour = Duration::from_secs(3600);
        self.admin
            .replace_one(
                doc! { "_id": name },
                doc! {
                    "_id": name,
                    "lockUntil": DateTime::from_system_time(now - hour),
                    "lockedAt": DateTime::from_system_time(now - 2 * hour),
                    "lockedBy": "conformance-kit",
                    "fencingToken": i64::try_from(past)?,
                },
            )
            .upsert(true)
            .await?;
        Ok(Support::Supported(()))
    }

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        let pattern = format!("^{}", regex_escape(name_prefix));
        self.admin
            .delete_many(doc! { "_id": Regex { pattern, options: String::new() } })
            .await?;
        Ok(())
    }
}

#[async_trait]
impl FaultHarness for Harness {
    /// The URL's one host: `mongodb://127.0.0.1:27017` -> `127.0.0.1:27017`.
    fn backend_address(&self) -> Support<String> {
        match host_parts(&self.url) {
            Ok((_, address, _)) => Support::Supported(address),
            Err(reason) => Support::not_applicable(reason),
        }
    }

    /// A node like [`node`](ConformanceHarness::node), at `address` instead, whose operations
    /// and server selection give up after [`STALL_TIMEOUT`]. The URL keeps its path and
    /// options, with `directConnection=true`: without it the driver, told by the server's
    /// `hello` that it is a replica set member at its own address, would connect there and
    /// leave the proxy out.
    async fn node_via(&self, address: &str) -> Result<MongoLockProvider, SetupError> {
        let (before, _, after) = host_parts(&self.url).map_err(SetupError::new)?;
        let url = format!("{before}{address}{}", direct_connection(after));
        Ok(self
            .builder()
            .operation_timeout(STALL_TIMEOUT)
            .server_selection_timeout(STALL_TIMEOUT)
            .connect(&url)
            .await?)
    }

    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        faults::pause_command(Backend::Mongo, limit).await
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        faults::resume_command(Backend::Mongo).await
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        faults::restart_command(Backend::Mongo, Duration::from_secs(120)).await
    }
}

/// A `mongodb://` URL split around its one host: what comes before it (scheme and
/// credentials), its `host:port` (with MongoDB's port when it names none), and what follows
/// (path and options). An error saying why for another scheme or several hosts.
fn host_parts(url: &str) -> Result<(&str, String, &str), String> {
    const SCHEME: &str = "mongodb://";
    if !url
        .get(..SCHEME.len())
        .is_some_and(|scheme| scheme.eq_ignore_ascii_case(SCHEME))
    {
        return Err(
            "the URL is not a plain mongodb:// URL naming its host (mongodb+srv:// finds hosts through DNS): the kit cannot put a proxy in front of it"
                .to_owned(),
        );
    }
    let authority_end = url[SCHEME.len()..]
        .find(['/', '?'])
        .map_or(url.len(), |at| SCHEME.len() + at);
    let host_start = url[SCHEME.len()..authority_end]
        .rfind('@')
        .map_or(SCHEME.len(), |at| SCHEME.len() + at + 1);
    let hosts = &url[host_start..authority_end];
    if hosts.contains(',') {
        return Err(
            "the URL names several hosts: the kit stalls the network to one address".to_owned(),
        );
    }
    let has_port = hosts.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && port.parse::<u16>().is_ok()
            && (!host.contains(':') || host.ends_with(']'))
    });
    let address = if has_port {
        hosts.to_owned()
    } else {
        format!("{hosts}:{DEFAULT_PORT}")
    };
    Ok((&url[..host_start], address, &url[authority_end..]))
}

/// The path and options after a URL's hosts (`""`, `/db`, `/?w=1`, `/db?w=1`), with
/// `directConnection=true` in place of any `directConnection` option, the others kept in
/// their order.
fn direct_connection(after_hosts: &str) -> String {
    let (path, query) = after_hosts.split_once('?').unwrap_or((after_hosts, ""));
    let path = if path.is_empty() { "/" } else { path };
    let mut options: Vec<&str> = query
        .split('&')
        .filter(|option| {
            !option.is_empty()
                && !option
                    .split('=')
                    .next()
                    .is_some_and(|key| key.eq_ignore_ascii_case(DIRECT_CONNECTION))
        })
        .collect();
    let direct = format!("{DIRECT_CONNECTION}=true");
    options.push(&direct);
    format!("{path}?{}", options.join("&"))
}

/// `text` as a regular expression matching itself.
fn regex_escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| {
            let escape = "\\^$.|?*+()[]{}".contains(c).then_some('\\');
            escape.into_iter().chain([c])
        })
        .collect()
}
