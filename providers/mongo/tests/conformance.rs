//! The whole conformance kit against a MongoDB server (`SHEDLOCK_TEST_MONGO_URL`, else the
//! official `mongo` image through testcontainers where Docker runs). Each node is its own
//! provider with its own client, as a separate process would be; all runs share one
//! collection, each with its own name prefix.

use std::sync::Arc;
use std::time::Duration;

use mongodb::bson::{DateTime, Regex, doc};
use mongodb::{Client, Collection, bson::Document};
use shedlock_conformance::shedlock_core::LockAdmin;
use shedlock_conformance::{
    Clock, ConformanceHarness, PlantedRecord, SetupError, Support, async_trait, backends,
};
use shedlock_mongo::{MongoLockProvider, MongoLockProviderBuilder};

const DATABASE: &str = "shedlock_conformance";
const COLLECTION: &str = "shedLock";

struct Harness {
    url: String,
    admin: Collection<Document>,
}

fn builder() -> MongoLockProviderBuilder {
    MongoLockProvider::builder()
        .database(DATABASE)
        .collection(COLLECTION)
        .holder("conformance")
}

#[async_trait]
impl ConformanceHarness for Harness {
    type Node = MongoLockProvider;

    fn name(&self) -> &str {
        "mongo"
    }

    /// The server's `$$NOW` decides: the node's clock is not used for anything.
    async fn node(&self, _clock: Arc<dyn Clock>) -> Result<MongoLockProvider, SetupError> {
        Ok(builder().connect(&self.url).await?)
    }

    /// A closed port, with a password in the URL as a real deployment would have.
    async fn unreachable_node(&self) -> Result<Support<MongoLockProvider>, SetupError> {
        let node = builder()
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

    async fn cleanup(&self, name_prefix: &str) -> Result<(), SetupError> {
        let pattern = format!("^{}", regex_escape(name_prefix));
        self.admin
            .delete_many(doc! { "_id": Regex { pattern, options: String::new() } })
            .await?;
        Ok(())
    }
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

fn main() -> std::process::ExitCode {
    shedlock_conformance::run(|| async {
        let url = backends::mongo_url().await?;
        let admin = Client::with_uri_str(&url)
            .await?
            .database(DATABASE)
            .collection(COLLECTION);
        Ok(Harness { url, admin })
    })
}
