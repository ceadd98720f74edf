//! The conformance harness for Redis, shared by the kit's runs (`tests/conformance.rs`) and
//! the fault suite (`tests/faults.rs`): the default configuration (no fencing: a plain
//! `SET NX PX` acquire, any name), fencing on (the acquire script with its counter, names
//! without `{`/`}`), and the runs through a Redis Cluster and a Redis Sentinel URL. Each node
//! is its own provider with its own connection, as a separate process would be; each run uses
//! its own env segment of the key, so runs can go at once on one server.

#[path = "topologies.rs"]
mod topologies;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use shedlock_conformance::backends::Backend;
use shedlock_conformance::faults::{FaultHarness, pause_command, restart_command, resume_command};
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait, backends,
};
use shedlock_redis::{RedisConnection, RedisLockProvider, RedisLockProviderBuilder};
use shedlock_test_support::settings;

/// What a run's URL connects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)] // Each conformance target runs one of them.
pub enum Topology {
    /// One server: `SHEDLOCK_TEST_REDIS_URL`.
    Server,
    /// A Redis Cluster: `SHEDLOCK_TEST_REDIS_CLUSTER_URL`.
    Cluster,
    /// The master of a Sentinel setup: `SHEDLOCK_TEST_REDIS_SENTINEL_URL`.
    Sentinel,
}

/// The provider configuration a run puts through the kit.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// [`RedisLockProviderBuilder::fencing`]: off is the default, what most applications run;
    /// on, the kit's fencing check runs too.
    pub fencing: bool,
    pub topology: Topology,
}

impl Settings {
    /// The report's file name, `<dir>/<name>.json`, and the start of the run's env segment,
    /// telling an operator which run left a key: the runs must not overwrite each other.
    fn report_name(self) -> &'static str {
        match (self.topology, self.fencing) {
            (Topology::Server, false) => "redis",
            (Topology::Server, true) => "redis-fencing",
            (Topology::Cluster, false) => "redis-cluster",
            (Topology::Cluster, true) => "redis-cluster-fencing",
            (Topology::Sentinel, false) => "redis-sentinel",
            (Topology::Sentinel, true) => "redis-sentinel-fencing",
        }
    }

    /// The run's URL, and the test's own connection to what it names (the master, for
    /// Sentinel).
    async fn backend(self) -> Result<(String, RedisConnection), SetupError> {
        Ok(match self.topology {
            Topology::Server => {
                let url = backends::redis_url().await?;
                let admin = redis::Client::open(url.as_str())?
                    .get_connection_manager()
                    .await?;
                (url, admin.into())
            }
            Topology::Cluster => {
                let url = settings::REDIS_CLUSTER.lookup().map_err(SetupError::new)?;
                let admin = topologies::cluster_admin(&url).await?;
                (url, admin.into())
            }
            Topology::Sentinel => {
                let url = settings::REDIS_SENTINEL.lookup().map_err(SetupError::new)?;
                let admin = topologies::master_admin(&url).await?;
                (url, admin.into())
            }
        })
    }

    /// A URL of the run's topology that nothing answers.
    fn unreachable_url(self) -> &'static str {
        match self.topology {
            Topology::Server => "redis://127.0.0.1:1",
            Topology::Cluster => "redis+cluster://127.0.0.1:1,127.0.0.1:2",
            Topology::Sentinel => "redis+sentinel://127.0.0.1:1,127.0.0.1:2/shedlock",
        }
    }
}

struct Harness {
    url: String,
    env: String,
    settings: Settings,
    admin: RedisConnection,
}

impl Harness {
    fn builder(&self) -> RedisLockProviderBuilder {
        RedisLockProvider::builder()
            .env(&self.env)
            .holder("conformance")
            .fencing(self.settings.fencing)
    }
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = RedisLockProvider;

    fn name(&self) -> &str {
        self.settings.report_name()
    }

    fn admin<'node>(
        &self,
        node: &'node RedisLockProvider,
    ) -> Support<&'node dyn shedlock_conformance::shedlock_core::LockAdmin> {
        Support::Supported(node)
    }

    /// Redis keeps time with TTLs: the node's clock is not used for anything.
    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<RedisLockProvider, SetupError> {
        Ok(self.builder().connect(&self.url).await?)
    }

    async fn unreachable_node(&self) -> Result<Support<RedisLockProvider>, SetupError> {
        let node = self
            .builder()
            .operation_timeout(Duration::from_secs(2))
            .connect_lazy(self.settings.unreachable_url())
            .await?;
        Ok(Support::Supported(node))
    }

    /// What Java ShedLock leaves: `SET job-lock:<env>:<name> "ADDED:<iso>@<host>:<uuid>"` with
    /// the rest of lock_until as TTL. A record whose lock_until has passed is, in Redis, a key
    /// that has expired: none.
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        let probe = self.builder().connect_lazy(&self.url).await?;
        let key = probe.lock_key(&record.name)?;
        let mut admin = self.admin.clone();
        match record.lock_until.duration_since(SystemTime::now()) {
            Ok(ttl) if !ttl.is_zero() => {
                let added = chrono::DateTime::<chrono::Utc>::from(record.locked_at)
                    .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
                let value = format!(
                    "ADDED:{added}@{}:{}",
                    record.locked_by,
                    uuid::Uuid::new_v4()
                );
                redis::cmd("SET")
                    .arg(&key)
                    .arg(value)
                    .arg("PX")
                    .arg(ttl.as_millis() as u64)
                    .query_async::<()>(&mut admin)
                    .await?;
            }
            _ => {
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<()>(&mut admin)
                    .await?;
            }
        }
        Ok(Support::Supported(()))
    }

    /// The acquire script increments `{<lock key>}:fencing`: set it to `past`.
    async fn advance_fencing_tokens(
        &self,
        name: &str,
        past: u64,
    ) -> Result<Support<()>, SetupError> {
        if !self.settings.fencing {
            return Ok(Support::not_applicable("fencing is off in this run"));
        }
        let key = self
            .builder()
            .connect_lazy(&self.url)
            .await?
            .fencing_key(name)?;
        let mut admin = self.admin.clone();
        redis::cmd("SET")
            .arg(&key)
            .arg(past)
            .query_async::<()>(&mut admin)
            .await?;
        Ok(Support::Supported(()))
    }

    /// Deletes this run's lock keys and fencing counters (the env segment is the run's own).
    /// `KEYS` goes to every master of a cluster; each key is deleted alone, as keys of
    /// different slots may not share a command there.
    async fn cleanup(&self, _name_prefix: &str) -> Result<(), SetupError> {
        let mut admin = self.admin.clone();
        for pattern in [
            format!("job-lock:{}:*", self.env),
            format!("{{job-lock:{}:*", self.env),
        ] {
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(&pattern)
                .query_async(&mut admin)
                .await?;
            for key in keys {
                redis::cmd("DEL")
                    .arg(&key)
                    .query_async::<()>(&mut admin)
                    .await?;
            }
        }
        Ok(())
    }
}

#[async_trait]
impl FaultHarness for Harness {
    fn backend_address(&self) -> Support<String> {
        match (self.settings.topology, self.url.strip_prefix("redis://")) {
            (Topology::Server, Some(rest)) => {
                let authority = rest.split(['/', '?']).next().unwrap_or_default();
                let host = authority.rsplit('@').next().unwrap_or_default();
                Support::Supported(if host.contains(':') {
                    host.to_owned()
                } else {
                    format!("{host}:6379")
                })
            }
            _ => Support::not_applicable(
                "the fault suite stalls one server's connection: a plain redis:// URL",
            ),
        }
    }

    async fn node_via(&self, address: &str) -> Result<RedisLockProvider, SetupError> {
        Ok(self
            .builder()
            .operation_timeout(Duration::from_secs(2))
            .connect(&format!("redis://{address}"))
            .await?)
    }

    async fn restart_backend(&self) -> Result<Support<()>, SetupError> {
        restart_command(Backend::Redis, Duration::from_secs(120)).await
    }

    async fn pause_backend(&self, limit: Duration) -> Result<Support<()>, SetupError> {
        pause_command(Backend::Redis, limit).await
    }

    async fn resume_backend(&self) -> Result<(), SetupError> {
        resume_command(Backend::Redis).await
    }

    /// The servers `ci/` starts keep nothing on disk (`--save "" --appendonly no`), as many
    /// cache deployments do: a restart loses every lock.
    fn locks_survive_restart(&self) -> bool {
        false
    }
}

/// Runs the fault suite (`shedlock_conformance::faults`) against one Redis server
/// (`SHEDLOCK_TEST_REDIS_URL`) with the given configuration: the body of `tests/faults.rs`.
#[allow(dead_code)] // Only the fault target runs it.
pub fn run_faults(settings: Settings) -> ExitCode {
    shedlock_conformance::faults::run(|| async move {
        let (url, admin) = settings.backend().await?;
        Ok(Harness {
            url,
            // The suite's node processes must share the test's key space.
            env: format!(
                "faults-{}-{}",
                settings.report_name(),
                shedlock_conformance::faults::run_id()
            ),
            settings,
            admin,
        })
    })
}

/// Runs the whole kit against real Redis topologies (the variable of each settings'
/// `topology`), once per configuration, in one test binary: the body of the conformance
/// target's `main`. Each configuration's checks are named `<name>::<check>` (an empty name
/// keeps the check's own).
#[allow(dead_code)] // The fault target runs `run_faults` instead.
pub fn run(configurations: &[(&'static str, Settings)]) -> ExitCode {
    shedlock_conformance::run_configurations(configurations.to_vec(), |settings| async move {
        let (url, admin) = settings.backend().await?;
        Ok(Harness {
            url,
            env: format!(
                "conformance-{}-{}",
                settings.report_name(),
                uuid::Uuid::new_v4().simple()
            ),
            settings,
            admin,
        })
    })
}
