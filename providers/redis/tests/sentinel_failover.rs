//! A failover of the sentinels' master (`SENTINEL FAILOVER`), and a provider connected by a
//! `redis+sentinel://` URL that follows it to the new master instead of staying bound to the
//! old one, now a replica. Against the Sentinel setup of `ci/start-redis-topologies.sh`
//! (`SHEDLOCK_TEST_REDIS_SENTINEL_URL`); alone in its test target, since it moves the master
//! under everything else that uses the setup.

#[path = "shared/topologies.rs"]
mod topologies;

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use redis::AsyncCommands;
use shedlock_core::{Acquisition, LockConfiguration, LockProvider};
use shedlock_redis::RedisLockProvider;
use tokio::time::Instant;
use topologies::{current_master, hosts, master_name, sentinel_url};

/// Polls `check` every 100 ms until it holds, or fails naming `what` after `limit`.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, String>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(true) => return,
            Ok(false) => "not yet".to_owned(),
            Err(error) => error,
        };
        assert!(
            started.elapsed() < limit,
            "{what} did not happen within {limit:?} (last: {last})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn connection(address: &str) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    redis::Client::open(format!("redis://{address}"))?
        .get_multiplexed_async_connection()
        .await
}

/// `INFO REPLICATION` of the server at `address`, as fields.
async fn replication(address: &str) -> redis::RedisResult<HashMap<String, String>> {
    let info: String = redis::cmd("INFO")
        .arg("REPLICATION")
        .query_async(&mut connection(address).await?)
        .await?;
    Ok(info
        .lines()
        .filter_map(|line| line.trim().split_once(':'))
        .map(|(key, value)| (key.to_owned(), value.to_owned()))
        .collect())
}

/// Whether a failover can start now: the master has a replica whose link is up, and every
/// sentinel sees that replica healthy and has its quorum.
async fn ready_to_fail_over(url: &str) -> Result<bool, String> {
    let name = master_name(url);
    let master = current_master(url).await.map_err(|e| e.to_string())?;
    let info = replication(&master).await.map_err(|e| e.to_string())?;
    if info.get("role").map(String::as_str) != Some("master")
        || info.get("connected_slaves").map(String::as_str) != Some("1")
    {
        return Ok(false);
    }
    for sentinel in hosts(url) {
        let mut sentinel = connection(&sentinel).await.map_err(|e| e.to_string())?;
        let replicas: Vec<Vec<String>> = redis::cmd("SENTINEL")
            .arg("REPLICAS")
            .arg(&name)
            .query_async(&mut sentinel)
            .await
            .map_err(|e| e.to_string())?;
        let healthy = replicas.iter().any(|fields| {
            let fields: HashMap<&str, &str> = fields
                .chunks(2)
                .map(|pair| (pair[0].as_str(), pair[1].as_str()))
                .collect();
            fields.get("flags") == Some(&"slave") && fields.get("master-link-status") == Some(&"ok")
        });
        let quorum: redis::RedisResult<String> = redis::cmd("SENTINEL")
            .arg("CKQUORUM")
            .arg(&name)
            .query_async(&mut sentinel)
            .await;
        if !healthy || quorum.is_err() {
            return Ok(false);
        }
    }
    Ok(true)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_provider_follows_the_master_to_the_replica_promoted_by_a_failover() {
    let url = sentinel_url();
    let name = master_name(&url);
    let test = async {
        wait_for("a healthy replica", Duration::from_secs(15), || {
            ready_to_fail_over(&url)
        })
        .await;
        let provider = RedisLockProvider::builder()
            .env(format!("failover-{}", uuid::Uuid::new_v4().simple()))
            .operation_timeout(Duration::from_secs(2))
            .connect(&url)
            .await
            .unwrap();
        let config =
            LockConfiguration::new("after-failover", Duration::from_secs(30), Duration::ZERO)
                .unwrap();
        // Connected to the master before the failover.
        let before = current_master(&url).await.unwrap();
        let handle = provider
            .try_lock(&config)
            .await
            .unwrap()
            .into_handle()
            .unwrap();
        assert!(handle.unlock().await.unwrap());

        let mut sentinel = connection(&hosts(&url)[0]).await.unwrap();
        let asked = Instant::now();
        loop {
            let answer: redis::RedisResult<String> = redis::cmd("SENTINEL")
                .arg("FAILOVER")
                .arg(&name)
                .query_async(&mut sentinel)
                .await;
            match answer {
                Ok(_) => break,
                // Another failover still in progress, or the replica not seen healthy yet.
                Err(error) if matches!(error.code(), Some("INPROG" | "NOGOODSLAVE")) => {
                    assert!(asked.elapsed() < Duration::from_secs(10), "{error}");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(error) => panic!("SENTINEL FAILOVER {name}: {error}"),
            }
        }
        let switched = Instant::now();
        let after = loop {
            let now = current_master(&url).await.unwrap();
            if now != before {
                break now;
            }
            assert!(
                switched.elapsed() < Duration::from_secs(10),
                "the sentinels still name {before} 10 s after SENTINEL FAILOVER"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };

        // Until the sentinels demote the old master it still takes writes, and a node still
        // connected to it writes there (Redis' split-brain window, which the crate docs
        // describe): the provider is checked from the demotion on. The demotion also closes the
        // old master's client connections.
        wait_for("the old master's demotion", Duration::from_secs(15), || {
            let before = &before;
            async move {
                let info = replication(before).await.map_err(|e| e.to_string())?;
                Ok(info.get("role").map(String::as_str) == Some("slave"))
            }
        })
        .await;

        // The provider's next operations reach the new master within a bounded time, and no
        // acquire is ever answered "not acquired" (nobody holds this lock).
        let started = Instant::now();
        let mut errors = Vec::new();
        let handle = loop {
            match provider.try_lock(&config).await {
                Ok(Acquisition::Acquired(handle)) => break handle,
                Ok(other) => panic!("nobody holds the lock, yet: {other:?}"),
                Err(error) => {
                    errors.push(error.to_string());
                    assert!(
                        started.elapsed() < Duration::from_secs(10),
                        "still failing after 10 s: {errors:#?}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        assert!(
            errors.len() <= 2,
            "the provider should follow at once, failing at most the operation that met the \
             old master's closed connection: {errors:#?}"
        );
        let key = provider.lock_key("after-failover").unwrap();
        let mut new_master = connection(&after).await.unwrap();
        let value: String = new_master.get(&key).await.unwrap();
        assert!(value.starts_with("ADDED:"), "{key} on {after}: {value}");
        assert!(handle.unlock().await.unwrap(), "released on the new master");
        let exists: bool = new_master.exists(&key).await.unwrap();
        assert!(!exists, "{key} deleted from {after}");

        // The old master replicates the new one; wait until its link is up, so the setup is
        // ready for the next run.
        wait_for(
            "the old master to replicate the new one",
            Duration::from_secs(15),
            || {
                let before = &before;
                let after = &after;
                async move {
                    let info = replication(before).await.map_err(|e| e.to_string())?;
                    Ok(info.get("role").map(String::as_str) == Some("slave")
                        && info.get("master_port").map(String::as_str) == after.rsplit(':').next()
                        && info.get("master_link_status").map(String::as_str) == Some("up"))
                }
            },
        )
        .await;
    };
    tokio::time::timeout(Duration::from_secs(30), test)
        .await
        .expect("the failover test finishes within 30 s");
}
