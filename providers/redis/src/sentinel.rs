//! A connection to the master that a set of sentinels names, which asks them again once the
//! master may have changed, so a failover moves the provider to the new master instead of
//! leaving it bound to the old one.
//!
//! The `redis` crate's `SentinelClient` answers "which node is the master now" (asking each
//! sentinel in turn and checking the candidate's `ROLE`), but a connection it hands out stays on
//! the node it reached: after a failover that node is a replica (writes answer `READONLY`) or
//! gone. So the master's connection is kept here and forgotten when a command's failure says the
//! master may have moved; the next command asks the sentinels again. A steady state costs no
//! more than a plain connection: one command, one round trip.

use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::sentinel::SentinelClient;
use redis::{
    AsyncConnectionConfig, Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, RedisResult,
    ServerErrorKind, Value,
};

/// The master's connection, found through the sentinels; cheap to clone (clones share it).
#[derive(Clone)]
pub(crate) struct SentinelConnection {
    shared: Arc<Shared>,
}

struct Shared {
    /// Asked for the master; the lock also makes concurrent callers that all found no master
    /// ask once, not once each.
    sentinels: tokio::sync::Mutex<SentinelClient>,
    master: Mutex<Master>,
    /// The response and connection timeouts of the master's connection.
    config: AsyncConnectionConfig,
    db: i64,
}

/// The master's connection, if one is known, and which one it is: a command that failed on
/// connection `generation` forgets it only if no newer one replaced it meanwhile.
#[derive(Default)]
struct Master {
    connection: Option<MultiplexedConnection>,
    generation: u64,
}

impl SentinelConnection {
    /// A connection that asks `sentinels` for the master on first use.
    pub(crate) fn new(sentinels: SentinelClient, config: AsyncConnectionConfig, db: i64) -> Self {
        Self {
            shared: Arc::new(Shared {
                sentinels: tokio::sync::Mutex::new(sentinels),
                master: Mutex::default(),
                config,
                db,
            }),
        }
    }

    /// Asks the sentinels for the master and connects to it now, so that a wrong master name or
    /// unreachable sentinels show at start-up.
    pub(crate) async fn connect(&self) -> RedisResult<()> {
        self.master().await.map(drop)
    }

    /// The master's connection and its generation, asking the sentinels when none is known.
    async fn master(&self) -> RedisResult<(u64, MultiplexedConnection)> {
        if let Some(known) = self.shared.known_master() {
            return Ok(known);
        }
        let mut sentinels = self.shared.sentinels.lock().await;
        // Another caller may have found the master while this one waited for the lock.
        if let Some(known) = self.shared.known_master() {
            return Ok(known);
        }
        let connection = sentinels
            .get_async_connection_with_config(&self.shared.config)
            .await?;
        let mut master = self.shared.lock_master();
        master.generation += 1;
        master.connection = Some(connection.clone());
        Ok((master.generation, connection))
    }

    /// Runs `send` on the master's connection. A failure that says the master may have moved
    /// makes the next command ask the sentinels again; one that proves the command was not run
    /// (the node answered as a replica) asks them at once and sends it again, once.
    async fn send<T, F, Fut>(&self, mut send: F) -> RedisResult<T>
    where
        F: FnMut(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let mut resent = false;
        loop {
            let (generation, connection) = self.master().await?;
            let mut unanswered = ForgetIfUnanswered {
                shared: &self.shared,
                generation: Some(generation),
            };
            let result = send(connection).await;
            unanswered.generation = None;
            if let Err(error) = &result
                && master_may_have_moved(error)
            {
                self.shared.forget(generation);
                if !resent && answered_as_replica(error) {
                    resent = true;
                    continue;
                }
            }
            return result;
        }
    }
}

impl Shared {
    fn lock_master(&self) -> std::sync::MutexGuard<'_, Master> {
        self.master.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn known_master(&self) -> Option<(u64, MultiplexedConnection)> {
        let master = self.lock_master();
        let connection = master.connection.clone()?;
        Some((master.generation, connection))
    }

    fn forget(&self, generation: u64) {
        let mut master = self.lock_master();
        if master.generation == generation {
            master.connection = None;
        }
    }
}

/// Forgets the master's connection when a command on it is dropped before its answer came
/// (the caller's timeout ran out): a master that stopped answering may have been replaced, and
/// a provider that kept sending to it would time out forever.
struct ForgetIfUnanswered<'a> {
    shared: &'a Shared,
    /// `None` once the answer came.
    generation: Option<u64>,
}

impl Drop for ForgetIfUnanswered<'_> {
    fn drop(&mut self) {
        if let Some(generation) = self.generation {
            self.shared.forget(generation);
        }
    }
}

/// Whether `error` may mean the connected node is no longer the master: the connection broke
/// or timed out, or the node answered as a replica. An error reply of a master (a script's
/// error, `NOSCRIPT`) says nothing of the sort.
fn master_may_have_moved(error: &RedisError) -> bool {
    match error.kind() {
        ErrorKind::Server(kind) => matches!(
            kind,
            ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown | ServerErrorKind::BusyLoading
        ),
        _ => true,
    }
}

/// Whether the node refused the command as a replica (`READONLY`, or `MASTERDOWN` from a
/// replica cut off from its master): nothing was written, so the command may be sent again.
fn answered_as_replica(error: &RedisError) -> bool {
    matches!(
        error.kind(),
        ErrorKind::Server(ServerErrorKind::ReadOnly | ServerErrorKind::MasterDown)
    )
}

impl ConnectionLike for SentinelConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(
            self.send(
                move |mut connection| async move { connection.req_packed_command(cmd).await },
            ),
        )
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send(move |mut connection| async move {
            connection
                .req_packed_commands(pipeline, offset, count)
                .await
        }))
    }

    fn get_db(&self) -> i64 {
        self.shared.db
    }
}
