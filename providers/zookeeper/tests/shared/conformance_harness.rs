//! The conformance harness for ZooKeeper, shared by the kit's two runs against
//! `SHEDLOCK_TEST_ZOOKEEPER_URL`: `tests/conformance.rs` (the lock rules) and
//! `tests/faults.rs` (the fault suite: crashed holders, stalled networks, a restarted server, a
//! soak). Each node is its own provider with its own session, as a separate process would be.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use shedlock_conformance::backends::{self, Backend};
use shedlock_conformance::faults::{self, FaultHarness};
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_core::LockAdmin;
use shedlock_test_support::kv::conformance::{Failover, Suite, names_a_port};
use shedlock_test_support::settings;
use shedlock_zookeeper::{ZookeeperLockProvider, ZookeeperLockProviderBuilder};
use zookeeper_client::{Acls, Client, CreateMode};

/// How long a node reached through the kit's stalling proxy waits for an answer, and for a
/// session.
const STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// ZooKeeper's client port, when the connect string names none.
const DEFAULT_PORT: u16 = 2181;

/// How many writes [`ConformanceHarness::advance_fencing_tokens`] and
/// [`ConformanceHarness::cleanup`] keep in flight.
const ADVANCE_WRITERS: usize = 32;

/// How the cluster run fails the 3-server ensemble of `ci/start-clusters.sh` over: a follower
/// killed with SIGKILL, then the leader, each started again once the rest serves.
const FAILOVER: Failover = Failover {
    backend: Backend::Zookeeper,
    cluster: settings::ZOOKEEPER_ENSEMBLE,
    script: settings::ZOOKEEPER_FAILOVER,
    steps: &[
        "zookeeper-kill-follower",
        "zookeeper-restore",
        "zookeeper-kill-leader",
        "zookeeper-restore",
    ],
};

pub struct Harness {
    url: String,
    suite: Suite,
    root: String,
    admin: Client,
}

/// The harness of one run of `suite`: the body of each target's `main`.
pub async fn harness(suite: Suite) -> Result<Harness, SetupError> {
    let url = suite.url(&FAILOVER, backends::zookeeper_url()).await?;
    let admin = Client::connect(&url).await?;
    // Each run has a root of its own, deleted at the end; the fault suite's node processes find
    // it made.
    let root = format!("/shedlock-{}", suite.run_segment());
    admin
        .mkdir(&root, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
        .await?;
    Ok(Harness {
        url,
        suite,
        root,
        admin,
    })
}

impl Harness {
    fn builder(&self) -> ZookeeperLockProviderBuilder {
        ZookeeperLockProvider::builder().root(&self.root)
    }
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = ZookeeperLockProvider;

    fn name(&self) -> &str {
        match self.suite {
            Suite::Cluster => "zookeeper-cluster",
            Suite::Conformance | Suite::Faults => "zookeeper",
        }
    }

    /// The server's clock decides, learnt from the mtime of the node's own writes: the node's
    /// wall clock is not used for anything.
    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<ZookeeperLockProvider, SetupError> {
        Ok(self.builder().connect(&self.url).await?)
    }

    async fn unreachable_node(&self) -> Result<Support<ZookeeperLockProvider>, SetupError> {
        let node = self
            .builder()
            .connect_timeout(Duration::from_secs(2))
            .operation_timeout(Duration::from_secs(2))
            .connect_lazy("127.0.0.1:1")
            .await?;
        Ok(Support::Supported(node))
    }

    fn admin<'node>(&self, node: &'node ZookeeperLockProvider) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    fn clear_name_cache(&self, node: &ZookeeperLockProvider) -> Support<()> {
        node.clear_name_cache();
        Support::Supported(())
    }

    /// What Java ShedLock's Curator provider leaves: a persistent node whose data is the
    /// lock_until instant, and nothing else (it stores no locked_at or locked_by).
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        let node = self.builder().connect_lazy(&self.url).await?;
        let path = node.lock_path(&record.name)?;
        let data = DateTime::<Utc>::from(record.lock_until)
            .to_rfc3339_opts(SecondsFormat::Millis, true)
            .into_bytes();
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        match self.admin.create(&path, &data, &options).await {
            Ok(_) => {}
            Err(zookeeper_client::Error::NodeExists) => {
                self.admin.set_data(&path, &data, None).await?;
            }
            Err(error) => return Err(error.into()),
        }
        Ok(Support::Supported(()))
    }

    /// The token is the acquiring write's zxid, which every write to ZooKeeper raises: writes
    /// to a node of the run's own, beside the root, until the zxid stands past `past` (one write
    /// where it already does), several at a time so the server syncs them in batches.
    async fn advance_fencing_tokens(
        &self,
        _name: &str,
        past: u64,
    ) -> Result<Support<()>, SetupError> {
        let past = i64::try_from(past)?;
        let path = format!("{}-advance", self.root);
        let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
        let (stat, _) = self.admin.create(&path, &[], &options).await?;
        if stat.mzxid <= past {
            let mut writers = tokio::task::JoinSet::new();
            for _ in 0..ADVANCE_WRITERS {
                let admin = self.admin.clone();
                let path = path.clone();
                writers.spawn(async move {
                    loop {
                        let stat = admin.set_data(&path, &[], None).await?;
                        if stat.mzxid > past {
                            return Ok::<_, zookeeper_client::Error>(());
                        }
                    }
                });
            }
            while let Some(written) = writers.join_next().await {
                written.map_err(|error| SetupError::new(error.to_string()))??;
            }
        }
        self.admin.delete(&path, None).await?;
        Ok(Support::Supported(()))
    }

    /// Deletes this run's root and every lock node under it.
    /// ZooKeeper deletes one node per request: several at a time, as deep mode leaves 10,000.
    /// On a session of its own: the fault suite restarts the server, which expires the
    /// harness's first session (and the cleanup then failed, leaving the run's root behind).
    async fn cleanup(&self, _name_prefix: &str) -> Result<(), SetupError> {
        use futures_util::{StreamExt, TryStreamExt};
        let admin = Client::connect(&self.url).await?;
        let children = admin.list_children(&self.root).await?;
        futures_util::stream::iter(children)
            .map(|child| {
                let admin = &admin;
                async move { admin.delete(&format!("{}/{child}", self.root), None).await }
            })
            .buffer_unordered(ADVANCE_WRITERS)
            .try_collect::<()>()
            .await?;
        admin.delete(&self.root, None).await?;
        Ok(())
    }
}

#[async_trait]
impl FaultHarness for Harness {
    /// The connect string's one server: `127.0.0.1:2181` -> itself.
    fn backend_address(&self) -> Support<String> {
        match server_parts(&self.url) {
            Ok((_, address)) => Support::Supported(address),
            Err(reason) => Support::not_applicable(reason),
        }
    }

    /// A node like [`node`](ConformanceHarness::node), at `address` instead, whose sessions
    /// and operations give up after [`STALL_TIMEOUT`].
    async fn node_via(&self, address: &str) -> Result<ZookeeperLockProvider, SetupError> {
        let (before, _) = server_parts(&self.url).map_err(SetupError::new)?;
        Ok(self
            .builder()
            .connect_timeout(STALL_TIMEOUT)
            .operation_timeout(STALL_TIMEOUT)
            .connect(&format!("{before}{address}"))
            .await?)
    }

    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        self.suite.pause(&FAILOVER, limit).await
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        faults::resume_command(Backend::Zookeeper).await
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        self.suite.restart(&FAILOVER).await
    }
}

/// `connect_string` split into what comes before its one server (scheme and credentials) and
/// that server's `host:port` (with ZooKeeper's port when it names none). An error saying why
/// for several servers, a chroot, or TLS.
fn server_parts(connect_string: &str) -> Result<(&str, String), String> {
    let scheme_end = connect_string.find("://").map_or(0, |at| at + 3);
    if connect_string[..scheme_end].contains("tls") {
        return Err(
            "the connect string uses TLS, whose certificate names the server, not the kit's proxy"
                .to_owned(),
        );
    }
    let host_start = connect_string
        .rfind('@')
        .map_or(scheme_end, |at| at + 1)
        .max(scheme_end);
    let servers = &connect_string[host_start..];
    if servers.contains(',') {
        return Err(
            "the connect string names several servers: the kit stalls the network to one address"
                .to_owned(),
        );
    }
    if servers.contains('/') {
        return Err(
            "the connect string has a chroot: the kit's proxy address would have to keep it"
                .to_owned(),
        );
    }
    let address = if names_a_port(servers) {
        servers.to_owned()
    } else {
        format!("{servers}:{DEFAULT_PORT}")
    };
    Ok((&connect_string[..host_start], address))
}
