//! The whole conformance kit against a real ZooKeeper (`SHEDLOCK_TEST_ZOOKEEPER_URL`). Each
//! node is its own provider with its own session, as a separate process would be; each run
//! uses a root of its own, deleted at the end.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait, backends,
};
use shedlock_core::LockAdmin;
use shedlock_zookeeper::{ZookeeperLockProvider, ZookeeperLockProviderBuilder};
use zookeeper_client::{Acls, Client, CreateMode};

struct Harness {
    url: String,
    root: String,
    admin: Client,
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
        "zookeeper"
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
            .connect_lazy("127.0.0.1:1")?;
        Ok(Support::Supported(node))
    }

    fn admin<'node>(&self, node: &'node ZookeeperLockProvider) -> Support<&'node dyn LockAdmin> {
        Support::Supported(node)
    }

    fn clear_name_cache(&self, _node: &ZookeeperLockProvider) -> Support<()> {
        Support::not_applicable(
            "the ZooKeeper provider keeps no cache of lock names: every acquire reads the node first",
        )
    }

    /// What Java ShedLock's Curator provider leaves: a persistent node whose data is the
    /// lock_until instant, and nothing else (it stores no locked_at or locked_by).
    async fn write_record(&self, record: &PlantedRecord) -> Result<Support<()>, SetupError> {
        let node = ZookeeperLockProvider::builder()
            .root(&self.root)
            .connect_lazy(&self.url)?;
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

    /// Deletes this run's root and every lock node under it.
    async fn cleanup(&self, _name_prefix: &str) -> Result<(), SetupError> {
        for child in self.admin.list_children(&self.root).await? {
            let path = format!("{}/{child}", self.root);
            self.admin.delete(&path, None).await?;
        }
        self.admin.delete(&self.root, None).await?;
        Ok(())
    }
}

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| async {
        let url = backends::zookeeper_url().await?;
        let admin = Client::connect(&url).await?;
        let root = format!("/shedlock-conformance-{}", uuid::Uuid::new_v4().simple());
        admin
            .mkdir(&root, &CreateMode::Persistent.with_acls(Acls::anyone_all()))
            .await?;
        Ok(Harness { url, root, admin })
    })
}
