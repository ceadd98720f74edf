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

/// How long a node reached through the kit's stalling proxy waits for an answer.
const STALL_TIMEOUT: Duration = Duration::from_secs(2);

/// How many puts [`ConformanceHarness::advance_fencing_tokens`] keeps in flight.
const ADVANCE_WRITERS: usize = 32;

/// Which suite a run puts the provider through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // Each target runs one of them.
pub enum Suite {
    /// The lock rules.
    Conformance,
    /// The fault suite, whose crash and soak checks start the test binary again as node
    /// processes: they build a harness of their own, which must use the same env segment.
    Faults,
    /// The fault suite against the 3-member cluster of `ci/start-clusters.sh` (`SHEDLOCK_TEST_ETCD_CLUSTER_URL`), whose "restart" is its leader killed with SIGKILL and, once a new leader serves, the member started again.
    Cluster,
}

/// The steps of `ci/failover.sh` (in `SHEDLOCK_TEST_ETCD_FAILOVER`) that fail the
/// cluster over and bring it back, for [`Suite::Cluster`].
const FAILOVER_STEPS: &[&str] = &["etcd-kill-leader", "etcd-restore"];

pub struct Harness {
    url: String,
    suite: Suite,
    env: String,
    admin: Client,
}

/// The harness of one run of `suite`: the body of each target's `main`.
pub async fn harness(suite: Suite) -> Result<Harness, SetupError> {
    let url = match suite {
        Suite::Cluster => std::env::var("SHEDLOCK_TEST_ETCD_CLUSTER_URL").map_err(|_| {
            SetupError::new(
                "SHEDLOCK_TEST_ETCD_CLUSTER_URL is not set: run ci/start-clusters.sh and set it to the cluster's URL (ci/test.sh does)",
            )
        })?,
        Suite::Conformance | Suite::Faults => backends::etcd_url().await?,
    };
    let endpoints: Vec<&str> = url.split(',').collect();
    let admin = Client::connect(endpoints, None).await?;
    // Each run has an env segment of its own, deleted at the end; the fault suite's is the
    // same in the test process and in the node processes it starts.
    let env = match suite {
        Suite::Conformance => format!("conformance-{}", uuid::Uuid::new_v4().simple()),
        Suite::Faults => format!("faults-{}", faults::run_id()),
        Suite::Cluster => format!("cluster-{}", faults::run_id()),
    };
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
        if self.suite == Suite::Cluster {
            return Ok(Support::not_applicable(
                "the cluster's members are not paused here: its failover is what backend_restart \
                 runs",
            ));
        }
        faults::pause_command(Backend::Etcd, limit).await
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        faults::resume_command(Backend::Etcd).await
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        if self.suite != Suite::Cluster {
            return faults::restart_command(Backend::Etcd, Duration::from_secs(120)).await;
        }
        for step in FAILOVER_STEPS {
            let done = faults::command_from_env(
                "SHEDLOCK_TEST_ETCD_FAILOVER",
                &[step],
                "the path of ci/failover.sh",
                Duration::from_secs(120),
            )
            .await?;
            if let Support::NotApplicable(reason) = done {
                return Ok(Support::NotApplicable(reason));
            }
        }
        Ok(Support::Supported(()))
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
    let has_port = address.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && port.parse::<u16>().is_ok()
            && (!host.contains(':') || host.ends_with(']'))
    });
    if !has_port {
        return Err(format!(
            "{shown} names no host:port the kit could put a proxy in front of"
        ));
    }
    Ok((&url[..host_start], address, &url[authority_end..]))
}
