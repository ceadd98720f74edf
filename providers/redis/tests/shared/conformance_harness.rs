//! The conformance harness for Redis, shared by the kit's two runs: `tests/conformance.rs`
//! with the default configuration (no fencing: a plain `SET NX PX` acquire, any name) and
//! `tests/conformance_fencing.rs` with fencing on (the acquire script with its counter, names
//! without `{`/`}`). Each node is its own provider with its own connection, as a separate
//! process would be; each run uses its own env segment of the key, so both runs can go at
//! once on one server.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use redis::aio::ConnectionManager;
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait, backends,
};
use shedlock_redis::{RedisLockProvider, RedisLockProviderBuilder};

/// The provider configuration a run puts through the kit.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// [`RedisLockProviderBuilder::fencing`]: off is the default, what most applications run;
    /// on, the kit's fencing check runs too.
    pub fencing: bool,
}

impl Settings {
    /// The report's file name, `<dir>/<name>.json`: the two runs must not overwrite each other.
    fn report_name(self) -> &'static str {
        if self.fencing {
            "redis-fencing"
        } else {
            "redis"
        }
    }

    /// The start of the run's env segment, telling an operator which run left a key.
    fn env_label(self) -> &'static str {
        if self.fencing {
            "conformance-fencing"
        } else {
            "conformance"
        }
    }
}

struct Harness {
    url: String,
    env: String,
    settings: Settings,
    admin: ConnectionManager,
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

    /// Redis keeps time with TTLs: the node's clock is not used for anything.
    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<RedisLockProvider, SetupError> {
        Ok(self.builder().connect(&self.url).await?)
    }

    async fn unreachable_node(&self) -> Result<Support<RedisLockProvider>, SetupError> {
        let node = self
            .builder()
            .operation_timeout(Duration::from_secs(2))
            .connect_lazy("redis://127.0.0.1:1")?;
        Ok(Support::Supported(node))
    }

    /// What Java ShedLock leaves: `SET job-lock:<env>:<name> "ADDED:<iso>@<host>:<uuid>"` with
    /// the rest of lock_until as TTL. A record whose lock_until has passed is, in Redis, a key
    /// that has expired: none.
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        let probe = self.builder().connect_lazy(&self.url)?;
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

    /// Deletes this run's lock keys and fencing counters (the env segment is the run's own).
    async fn cleanup(&self, _name_prefix: &str) -> Result<(), SetupError> {
        let mut admin = self.admin.clone();
        for pattern in [
            format!("job-lock:{}:*", self.env),
            format!("{{job-lock:{}:*", self.env),
        ] {
            let mut cursor: u64 = 0;
            loop {
                let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
                    .arg(cursor)
                    .arg("MATCH")
                    .arg(&pattern)
                    .arg("COUNT")
                    .arg(1000)
                    .query_async(&mut admin)
                    .await?;
                if !keys.is_empty() {
                    redis::cmd("DEL")
                        .arg(&keys)
                        .query_async::<()>(&mut admin)
                        .await?;
                }
                if next == 0 {
                    break;
                }
                cursor = next;
            }
        }
        Ok(())
    }
}

/// Runs the whole kit against a real Redis (`SHEDLOCK_TEST_REDIS_URL`) with the given
/// configuration: the body of each conformance target's `main`.
pub fn run(settings: Settings) -> ExitCode {
    shedlock_conformance::run(|| async move {
        let url = backends::redis_url().await?;
        let admin = redis::Client::open(url.as_str())?
            .get_connection_manager()
            .await?;
        Ok(Harness {
            url,
            env: format!("{}-{}", settings.env_label(), uuid::Uuid::new_v4().simple()),
            settings,
            admin,
        })
    })
}
