//! The connection behind a provider that [`connect`](crate::RedisLockProviderBuilder::connect)
//! made, whichever topology its URL named.

use std::fmt;

use redis::aio::{ConnectionLike, ConnectionManager};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use crate::sentinel::SentinelConnection;

/// The connection of a [`RedisLockProvider`](crate::RedisLockProvider) made from a URL: to one
/// server (a reconnecting [`ConnectionManager`]), to a Redis Cluster (a [`ClusterConnection`]
/// that follows slot moves and failovers), or to the master a set of sentinels names (asking
/// them again after a failover).
///
/// One type for the three, so a provider's type does not change with its URL. A connection
/// built by hand converts with `From` and goes to
/// [`RedisLockProviderBuilder::build`](crate::RedisLockProviderBuilder::build). Cheap to clone:
/// clones share the connection. Each command goes straight to the connection inside; the
/// single-server case costs no more than the [`ConnectionManager`] alone.
#[derive(Clone)]
pub struct RedisConnection {
    route: Route,
}

#[derive(Clone)]
enum Route {
    Server(ConnectionManager),
    Cluster(ClusterConnection),
    Sentinel(SentinelConnection),
}

impl From<ConnectionManager> for RedisConnection {
    fn from(connection: ConnectionManager) -> Self {
        Self {
            route: Route::Server(connection),
        }
    }
}

impl From<ClusterConnection> for RedisConnection {
    fn from(connection: ClusterConnection) -> Self {
        Self {
            route: Route::Cluster(connection),
        }
    }
}

impl RedisConnection {
    /// The connection to a sentinel-named master; not `From`, as that type is this crate's own.
    pub(crate) fn sentinel(connection: SentinelConnection) -> Self {
        Self {
            route: Route::Sentinel(connection),
        }
    }

    /// Whether a command may be sent again after its connection dropped before the answer
    /// came: the cluster client does that; a server's connection manager and the sentinel
    /// connection do not (the latter resends only a command a replica refused unrun).
    pub(crate) fn may_resend(&self) -> bool {
        matches!(self.route, Route::Cluster(_))
    }
}

/// Names the topology only: addresses and credentials are the provider's to show, redacted.
impl fmt::Debug for RedisConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let topology = match self.route {
            Route::Server(_) => "server",
            Route::Cluster(_) => "cluster",
            Route::Sentinel(_) => "sentinel",
        };
        f.debug_tuple("RedisConnection").field(&topology).finish()
    }
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match &mut self.route {
            Route::Server(connection) => connection.req_packed_command(cmd),
            Route::Cluster(connection) => connection.req_packed_command(cmd),
            Route::Sentinel(connection) => connection.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match &mut self.route {
            Route::Server(connection) => connection.req_packed_commands(pipeline, offset, count),
            Route::Cluster(connection) => connection.req_packed_commands(pipeline, offset, count),
            Route::Sentinel(connection) => connection.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match &self.route {
            Route::Server(connection) => connection.get_db(),
            Route::Cluster(connection) => connection.get_db(),
            Route::Sentinel(connection) => connection.get_db(),
        }
    }
}
