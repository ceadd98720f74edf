//! What the etcd and ZooKeeper conformance harnesses share: which suite a run is, where its
//! server is, and how the fault suite pauses, restarts or fails over that server.

use std::time::Duration;

use shedlock_conformance::backends::Backend;
use shedlock_conformance::faults;
use shedlock_conformance::{SetupError, Support};

use crate::settings::Setting;

/// Which suite a run puts the provider through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// The lock rules.
    Conformance,
    /// The fault suite, whose crash and soak checks start the test binary again as node
    /// processes: they build a harness of their own, which must use the same key space.
    Faults,
    /// The fault suite against the 3-member cluster of `ci/start-clusters.sh`, whose "restart"
    /// is the failover the provider's [`Failover`] names.
    Cluster,
}

/// How the fault suite fails a provider's cluster over and brings it back.
pub struct Failover {
    /// The backend whose single server the fault suite pauses and restarts.
    pub backend: Backend,
    /// The cluster's URL.
    pub cluster: Setting,
    /// The path of the script that runs the failover steps.
    pub script: Setting,
    /// The steps of `ci/failover.sh` that fail the cluster over and bring it back, in order.
    pub steps: &'static [&'static str],
}

impl Suite {
    /// The run's own part of a key space, deleted at the end: new for each conformance run, the
    /// same in a fault run's test process and in the node processes it starts.
    pub fn run_segment(self) -> String {
        match self {
            Suite::Conformance => format!("conformance-{}", uuid::Uuid::new_v4().simple()),
            Suite::Faults => format!("faults-{}", faults::run_id()),
            Suite::Cluster => format!("cluster-{}", faults::run_id()),
        }
    }

    /// The run's URL: the cluster's for [`Suite::Cluster`], else `single` (the kit's lookup of
    /// the one server).
    pub async fn url<E>(
        self,
        failover: &Failover,
        single: impl Future<Output = Result<String, E>>,
    ) -> Result<String, SetupError>
    where
        SetupError: From<E>,
    {
        match self {
            Suite::Cluster => failover.cluster.lookup().map_err(SetupError::new),
            Suite::Conformance | Suite::Faults => Ok(single.await?),
        }
    }

    /// Pauses the one server; a cluster's members are not paused, its failover is what
    /// [`restart`](Self::restart) runs.
    pub async fn pause(
        self,
        failover: &Failover,
        limit: Duration,
    ) -> Result<Support<()>, SetupError> {
        if self == Suite::Cluster {
            return Ok(Support::not_applicable(
                "the cluster's members are not paused here: its failover is what backend_restart \
                 runs",
            ));
        }
        faults::pause_command(failover.backend, limit).await
    }

    /// Restarts the one server, or runs the cluster's failover steps one by one.
    pub async fn restart(self, failover: &Failover) -> Result<Support<()>, SetupError> {
        if self != Suite::Cluster {
            return faults::restart_command(failover.backend, Duration::from_secs(120)).await;
        }
        for step in failover.steps {
            let done = faults::command_from_env(
                failover.script.var,
                &[step],
                failover.script.what,
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

/// Whether `address` is `host:port` (an IPv6 host in brackets), one a proxy can stand in for.
pub fn names_a_port(address: &str) -> bool {
    address.rsplit_once(':').is_some_and(|(host, port)| {
        !host.is_empty()
            && port.parse::<u16>().is_ok()
            && (!host.contains(':') || host.ends_with(']'))
    })
}
