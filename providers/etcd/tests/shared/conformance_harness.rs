//! The conformance harness for etcd, shared by the kit's two runs against
//! `SHEDLOCK_TEST_ETCD_URL`: `tests/conformance.rs` (the lock rules) and `tests/faults.rs` (the
//! fault suite: crashed holders, stalled networks, a restarted server, a soak). Each node is
//! its own provider with its own client, as a separate process would be.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Client, DeleteOptions, PutOptions};
use shedlock_conformance::backends::{self, Backend};
use shedlock_conformance::faults::{self, FaultHarness};
use shedlock_conformance::shedlock_core::LockAdmin;
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait,
};
use shedlock_etcd::{EtcdLockProvider, EtcdLockProviderBuilder};
use shedlock_test_support::kv::conformance::{Failover, Suite, names_a_port};
use shedlock_test_support::settings;

/// How long a node reached through the kit's stalling proxy waits for an answer.
const STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// How many puts [`ConformanceHarness::advance_fencing_tokens`] keeps in flight.
const ADVANCE_WRITERS: usize = 32;

/// How the cluster run fails the 3-member cluster of `ci/start-clusters.sh` over: its leader
/// killed with SIGKILL and, once a new leader serves, the member started again.
const FAILOVER: Failover = Failover {
    backend: Backend::Etcd,
    cluster: settings::ETCD_CLUSTER,
    script: settings::ETCD_FAILOVER,
    steps: &["etcd-kill-leader", "etcd-restore"],
};

pub struct Harness {
    url: String,
    suite: Suite,
    env: String,
    admin: Client,
}

/// The harness of one run of `suite`: the body of each target's `main`.
pub async fn harness(suite: Suite) -> Result<Harness, SetupError> {
    let url = suite.url(&FAILOVER, backends::etcd_url()).await?;
    let endpoints: Vec<&str> = url.split(',').collect();
    let admin = Client::connect(endpoints, None).await?;
    // Each run has an env segment of its own, deleted at the end.
    let env = suite.run_segment();
    Ok(Harness {
        url,
        suite,
        env,
        admin,
    })
}

impl Harness {
    fn builder(&self) -> EtcdLockProviderBuilder {
        EtcdLockProvider::builder()
            .env(&self.env)
            .holder("conformance")
    }

    fn key(&self, name: &str) -> String {
        format!("shedlock:{}:{name}", self.env)
    }
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = EtcdLockProvider;

    fn name(&self) -> &str {
        match self.suite {
            Suite::Cluster => "etcd-cluster",
            Suite::Conformance | Suite::Faults => "etcd",
        }
    }

    /// etcd keeps time with leases: the node's clock is not used for anything.
    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<EtcdLockProvider, SetupError> {
        Ok(self.builder().connect(&self.url).await?)
    }

    fn admin<'node>(&self, node: &'node EtcdLockProvider) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    async fn unreachable_node(&self) -> Result<Support<EtcdLockProvider>, SetupError> {
        let node = self
            .builder()
            .operation_timeout(Duration::from_secs(2))
            .connect_lazy("http://127.0.0.1:1")
            .await?;
        Ok(Support::Supported(node))
    }

    /// What Java ShedLock leaves: `shedlock:<env>:<name>` = `ADDED:<iso>@<host>` on a lease of
    /// the rest of lock_until. A record whose lock_until has passed is, in etcd, a key whose
    /// lease has ended: none.
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        let key = self.key(&record.name);
        let mut admin = self.admin.clone();
        match record.lock_until.duration_since(SystemTime::now()) {
            Ok(ttl) if !ttl.is_zero() => {
                let added = chrono::DateTime::<chrono::Utc>::from(record.locked_at)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                let lease = admin
                    .lease_grant(ttl.as_secs().max(1) as i64, None)
                    .await?
                    .id();
                admin
                    .put(
                        key,
                        format!("ADDED:{added}@{}", record.locked_by),
                        Some(PutOptions::new().with_lease(lease)),
                    )
                    .await?;
            }
            _ => {
                admin.delete(key, None).await?;
            }
        }
        Ok(Support::Supported(()))
    }

    /// The token is the acquiring put's revision, which every write to etcd raises: puts to a
    /// key of the run's own, outside the locks' prefix, until the revision stands past `past`
    /// (one put where it already does), several at a time so etcd syncs them in batches.
    async fn advance_fencing_tokens(
        &self,
        _name: &str,
        past: u64,
    ) -> Result<Support<()>, SetupError> {
        let past = i64::try_from(past)?;
        let key = format!("shedlock-conformance-advance:{}", self.env);
        let mut writers = tokio::task::JoinSet::new();
        for _ in 0..ADVANCE_WRITERS {
            let mut admin = self.admin.clone();
            let key = key.clone();
            writers.spawn(async move {
                loop {
                    let put = admin.put(key.as_str(), "", None).await?;
                    if put.header().is_some_and(|header| header.revision() > past) {
                        return Ok::<_, etcd_client::Error>(());
                    }
                }
            });
        }
        while let Some(written) = writers.join_next().await {
            written.map_err(|error| SetupError::new(error.to_string()))??;
        }
        self.admin.clone().delete(key, None).await?;
        Ok(Support::Supported(()))
    }

    /// Deletes this run's lock keys (the env segment is the run's own).
    async fn cleanup(&self, _name_prefix: &str) -> Result<(), SetupError> {
        let mut admin = self.admin.clone();
        admin
            .delete(self.key(""), Some(DeleteOptions::new().with_prefix()))
            .await?;
        Ok(())
    }
}

#[async_trait]
impl FaultHarness for Harness {
    /// The one endpoint's `host:port`: `http://127.0.0.1:2379` -> `127.0.0.1:2379`.
    fn backend_address(&self) -> Support<String> {
        match endpoint_parts(&self.url) {
            Ok((_, address, _)) => Support::Supported(address.to_owned()),
            Err(reason) => Support::not_applicable(reason),
        }
    }

    /// A node like [`node`](ConformanceHarness::node), at `address` instead, whose operations
    /// give up after [`STALL_TIMEOUT`].
    async fn node_via(&self, address: &str) -> Result<EtcdLockProvider, SetupError> {
        let (before, _, after) = endpoint_parts(&self.url).map_err(SetupError::new)?;
        Ok(self
            .builder()
            .operation_timeout(STALL_TIMEOUT)
            .connect(&format!("{before}{address}{after}"))
            .await?)
    }

    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        self.suite.pause(&FAILOVER, limit).await
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        faults::resume_command(Backend::Etcd).await
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        self.suite.restart(&FAILOVER).await
    }
}

/// `url` split around the `host:port` of its one endpoint: what comes before it (scheme and
/// credentials), the address, and what follows it. An error saying why for a URL with several
/// endpoints or without a port.
fn endpoint_parts(url: &str) -> Result<(&str, &str, &str), String> {
    let shown = shedlock_conformance::shedlock_core::redact_url(url);
    if url.contains(',') {
        return Err(format!(
            "{shown} names several etcd endpoints: the kit stalls the network to one address"
        ));
    }
    let after_scheme = url.find("://").map_or(0, |at| at + 3);
    let authority_end = url[after_scheme..]
        .find(['/', '?', '#'])
        .map_or(url.len(), |at| after_scheme + at);
    let host_start = url[after_scheme..authority_end]
        .rfind('@')
        .map_or(after_scheme, |at| after_scheme + at + 1);
    let address = &url[host_start..authority_end];
    if !names_a_port(address) {
        return Err(format!(
            "{shown} names no host:port the kit could put a proxy in front of"
        ));
    }
    Ok((&url[..host_start], address, &url[authority_end..]))
}
