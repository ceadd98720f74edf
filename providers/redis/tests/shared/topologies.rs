//! Where the tests find the Redis Cluster and the Redis Sentinel setup that
//! `ci/start-redis-topologies.sh` starts, and the tests' own connections to them (to plant, read
//! and delete keys behind the provider's back).
//!
//! A missing variable is a failure naming it, never a skipped test.

#![allow(dead_code)] // Each test target uses its own part.

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

/// The `host:port` list of a cluster or sentinel URL without credentials (the test servers
/// have none).
pub fn hosts(url: &str) -> Vec<String> {
    let after_scheme = url.split_once("://").expect("a URL").1;
    let authority = after_scheme.split(['/', '?']).next().unwrap_or_default();
    authority.split(',').map(str::to_owned).collect()
}

/// The master name of a sentinel URL: its path's first segment.
pub fn master_name(url: &str) -> String {
    let after_scheme = url.split_once("://").expect("a URL").1;
    after_scheme
        .split_once('/')
        .map(|(_, path)| path.split(['/', '?']).next().unwrap_or_default().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| panic!("the sentinel URL names no master: {url}"))
}

/// A connection of the test's own to the cluster the URL seeds.
pub async fn cluster_admin(url: &str) -> redis::RedisResult<ClusterConnection> {
    let seeds: Vec<String> = hosts(url)
        .iter()
        .map(|host| format!("redis://{host}"))
        .collect();
    ClusterClient::new(seeds)?.get_async_connection().await
}

/// The `host:port` of the master, as the first sentinel of the URL that answers names it.
pub async fn current_master(url: &str) -> redis::RedisResult<String> {
    let name = master_name(url);
    let mut last_error = None;
    for sentinel in hosts(url) {
        let answer: redis::RedisResult<(String, u16)> = async {
            let mut connection = redis::Client::open(format!("redis://{sentinel}"))?
                .get_multiplexed_async_connection()
                .await?;
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&name)
                .query_async(&mut connection)
                .await
        }
        .await;
        match answer {
            Ok((host, port)) => return Ok(format!("{host}:{port}")),
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error.expect("a sentinel URL lists at least one sentinel"))
}

/// A connection of the test's own to the master the sentinels name now.
pub async fn master_admin(url: &str) -> redis::RedisResult<ConnectionManager> {
    let master = current_master(url).await?;
    redis::Client::open(format!("redis://{master}"))?
        .get_connection_manager()
        .await
}
