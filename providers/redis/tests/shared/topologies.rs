//! Where the tests find the Redis Cluster and the Redis Sentinel setup that
//! `ci/start-redis-topologies.sh` starts, and the tests' own connections to them (to plant, read
//! and delete keys behind the provider's back).
//!
//! A missing variable is a failure naming it, never a skipped test.

#![allow(dead_code)] // Each test target uses its own part.

use redis::aio::ConnectionManager;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

/// The seed nodes of a Redis Cluster, as a `redis+cluster://` URL.
pub const CLUSTER_URL_VAR: &str = "SHEDLOCK_TEST_REDIS_CLUSTER_URL";

/// Sentinels and the master name they watch, as a `redis+sentinel://` URL.
pub const SENTINEL_URL_VAR: &str = "SHEDLOCK_TEST_REDIS_SENTINEL_URL";

/// The variable `var`'s URL, or a message naming it and how to set it.
pub fn env_url(var: &str) -> Result<String, String> {
    let example = if var == CLUSTER_URL_VAR {
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
    } else {
        "redis+sentinel://127.0.0.1:26390,127.0.0.1:26391,127.0.0.1:26392/shedlock"
    };
    match std::env::var(var) {
        Ok(url) if !url.trim().is_empty() => Ok(url.trim().to_owned()),
        _ => Err(format!(
            "{var} is not set: these tests need it, e.g. {var}={example} \
             (ci/start-redis-topologies.sh starts the servers, ci/test.sh sets the variable)"
        )),
    }
}

pub fn cluster_url() -> String {
    env_url(CLUSTER_URL_VAR).unwrap_or_else(|message| panic!("{message}"))
}

pub fn sentinel_url() -> String {
    env_url(SENTINEL_URL_VAR).unwrap_or_else(|message| panic!("{message}"))
}

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
