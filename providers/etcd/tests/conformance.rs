//! The whole conformance kit against a real etcd (`SHEDLOCK_TEST_ETCD_URL`). Each node is its
//! own provider with its own client, as a separate process would be; each run uses its own env
//! segment of the key.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use etcd_client::{Client, DeleteOptions, PutOptions};
use shedlock_conformance::shedlock_core::LockAdmin;
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait, backends,
};
use shedlock_etcd::EtcdLockProvider;

struct Harness {
    url: String,
    env: String,
    admin: Client,
}

impl Harness {
    fn builder(&self) -> shedlock_etcd::EtcdLockProviderBuilder {
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
        "etcd"
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

    /// Deletes this run's lock keys (the env segment is the run's own).
    async fn cleanup(&self, _name_prefix: &str) -> Result<(), SetupError> {
        let mut admin = self.admin.clone();
        admin
            .delete(self.key(""), Some(DeleteOptions::new().with_prefix()))
            .await?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| async {
        let url = backends::etcd_url().await?;
        let admin = Client::connect([url.as_str()], None).await?;
        Ok(Harness {
            url,
            env: format!("conformance-{}", uuid::Uuid::new_v4().simple()),
            admin,
        })
    })
}
