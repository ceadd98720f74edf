//! Where a lock statement gets its connection: the application's pool, or connections the
//! provider opened itself from a URL and hands out without a health check.
//!
//! sqlx's pool costs two wire round trips per use on top of the statement: a ping before it
//! hands a connection out (`test_before_acquire`, which can be turned off) and a ping when the
//! connection goes back (`PoolConnection`'s drop handler, which cannot). A lock operation is
//! one statement, so on a pool it costs three round trips instead of one. Connections the
//! provider owns skip both: a broken connection is found by the statement itself, which then
//! fails (the operation fails closed) and takes the connection out of use, so the next
//! statement connects afresh.
//!
//! A scheduled job that runs hourly would otherwise find its connection older than
//! [`IDLE_LIMIT`] on every run and pay for a new session on the caller's path. So idle
//! connections are checked in the background: one idle for the check interval is pinged, which
//! keeps the flow alive through firewalls and finds a dead one; a dead one is replaced there,
//! off the caller's path.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use sqlx::pool::PoolConnection;
use sqlx::{ConnectOptions, Connection, Pool};
use tokio::sync::{Semaphore, SemaphorePermit};

use crate::backend::{ConnectOptionsOf, ConnectionOf, SqlBackend};

/// A connection idle for longer is closed rather than reused. Firewalls and NAT gateways drop
/// idle TCP flows without telling either end (some after about five minutes); a statement sent
/// on such a connection would wait for the operation timeout and fail, so a lock taken every
/// few minutes would fail every time. Reconnecting is cheaper than that.
pub(crate) const IDLE_LIMIT: Duration = Duration::from_secs(240);

/// The connections lock statements run on.
pub(crate) enum Connections<B: SqlBackend> {
    /// The application's pool, used as the application configured it, health checks included.
    Given(Pool<B::Database>),
    /// Connections this provider opened from a URL.
    Own(Arc<OwnConnections<B>>),
}

impl<B: SqlBackend> Connections<B> {
    /// A connection for one statement, waiting at most the connect timeout (own connections)
    /// or the pool's acquire timeout (a given pool).
    pub(crate) async fn checkout(&self) -> Result<Checkout<'_, B>, sqlx::Error> {
        match self {
            Connections::Given(pool) => Ok(Checkout::Pooled(pool.acquire().await?)),
            Connections::Own(own) => {
                own.start_idle_checks();
                own.checkout().await.map(Checkout::Own)
            }
        }
    }

    /// The application's pool, if there is one.
    pub(crate) fn pool(&self) -> Option<&Pool<B::Database>> {
        match self {
            Connections::Given(pool) => Some(pool),
            Connections::Own(_) => None,
        }
    }
}

/// At most `max` connections to one database, opened on demand and reused while they work.
pub(crate) struct OwnConnections<B: SqlBackend> {
    options: ConnectOptionsOf<B::Database>,
    operation_timeout: Duration,
    /// The bound on waiting for a free slot, and on opening a connection.
    connect_timeout: Duration,
    /// One permit per connection in use or being opened.
    slots: Semaphore,
    /// Connections not in use, the most recently used last, so the busiest stay warm and
    /// the others age out.
    idle: Mutex<Vec<(ConnectionOf<B>, Instant)>>,
    /// The longest a connection sits idle before the background check pings it, about.
    idle_check_interval: Duration,
    /// Whether the background check runs (it starts with the first statement, which runs on
    /// the application's runtime).
    idle_checks_started: AtomicBool,
}

impl<B: SqlBackend> OwnConnections<B> {
    /// Nothing is opened until the first statement, or [`adopt`](Self::adopt).
    pub(crate) fn new(
        options: ConnectOptionsOf<B::Database>,
        max_connections: u32,
        connect_timeout: Duration,
        operation_timeout: Duration,
        idle_check_interval: Duration,
    ) -> Self {
        Self {
            options,
            operation_timeout,
            connect_timeout,
            slots: Semaphore::new(max_connections.max(1) as usize),
            idle: Mutex::new(Vec::new()),
            idle_check_interval,
            idle_checks_started: AtomicBool::new(false),
        }
    }

    /// Starts the background check of idle connections, once, on the current runtime. It
    /// holds the connections weakly and ends when the provider is gone. It runs every half
    /// interval and pings what has been idle for half an interval, so a connection goes about
    /// one interval between its last use or ping and the next ping.
    fn start_idle_checks(self: &Arc<Self>) {
        if self.idle_checks_started.swap(true, Ordering::Relaxed) {
            return;
        }
        let connections = Arc::downgrade(self);
        let every = self.idle_check_interval / 2;
        tokio::spawn(async move {
            // The first tick is at once, and finds nothing idle yet.
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(connections) = Weak::upgrade(&connections) else {
                    return;
                };
                connections.check_idle().await;
            }
        });
    }

    /// Pings each connection idle for half the check interval, oldest first, and keeps it if
    /// it answers within the operation timeout. One that does not is closed and replaced by a new
    /// one, so the next statement finds a connection ready; if that fails too (the server is
    /// down), the next statement connects and reports why. A connection under check holds a
    /// slot like one in use, so the checks never open more than `max_connections`; with no
    /// slot free the connections are busy, not idle, and the check waits for its next turn.
    async fn check_idle(&self) {
        loop {
            let Ok(_slot) = self.slots.try_acquire() else {
                return;
            };
            let Some(mut connection) = self.take_idle_since(self.idle_check_interval / 2) else {
                return;
            };
            let answered = tokio::time::timeout(self.operation_timeout, connection.ping()).await;
            if matches!(answered, Ok(Ok(()))) {
                self.adopt(connection);
                continue;
            }
            drop(connection);
            if let Ok(replacement) = self.open().await {
                self.adopt(replacement);
            }
        }
    }

    /// The connection idle the longest, if it has been idle for `at_least`.
    fn take_idle_since(&self, at_least: Duration) -> Option<ConnectionOf<B>> {
        let mut idle = self.idle();
        let (_, since) = idle.first()?;
        (since.elapsed() >= at_least).then(|| idle.remove(0).0)
    }

    /// Opens one connection with the backend's session setup, within the connect timeout.
    pub(crate) async fn open(&self) -> Result<ConnectionOf<B>, sqlx::Error> {
        let opening = async {
            let mut connection = self.options.connect().await?;
            B::prepare_connection(&mut connection, self.operation_timeout).await?;
            Ok(connection)
        };
        tokio::time::timeout(self.connect_timeout, opening)
            .await
            .unwrap_or(Err(sqlx::Error::PoolTimedOut))
    }

    /// The idle connections, locked. Nothing under this lock can leave the list half-changed
    /// (a push, a pop, a retain on age), so a panic elsewhere while it was held does not lock
    /// every later statement out: the mutex's poison flag is ignored.
    fn idle(&self) -> MutexGuard<'_, Vec<(ConnectionOf<B>, Instant)>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps a connection opened by [`open`](Self::open) for the statements.
    pub(crate) fn adopt(&self, connection: ConnectionOf<B>) {
        self.idle().push((connection, Instant::now()));
    }

    async fn checkout(&self) -> Result<Lease<'_, B>, sqlx::Error> {
        let slot = tokio::time::timeout(self.connect_timeout, self.slots.acquire())
            .await
            .map_err(|_| sqlx::Error::PoolTimedOut)?
            .map_err(|_| sqlx::Error::PoolClosed)?;
        let reusable = {
            let mut idle = self.idle();
            idle.retain(|(_, since)| since.elapsed() < IDLE_LIMIT);
            idle.pop().map(|(connection, _)| connection)
        };
        let connection = match reusable {
            Some(connection) => connection,
            // A slot was free, so a timeout here is the server's, not a wait for a busy
            // connection: say so rather than pass on `PoolTimedOut`, whose message blames a pool.
            None => self.open().await.map_err(|error| match error {
                sqlx::Error::PoolTimedOut => {
                    sqlx::Error::Io(opening_timed_out(self.connect_timeout))
                }
                other => other,
            })?,
        };
        Ok(Lease {
            owner: self,
            connection: Some(connection),
            _slot: slot,
        })
    }
}

/// Why opening a connection failed when it took longer than `timeout`.
fn opening_timed_out(timeout: Duration) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("opening a connection took longer than {timeout:?}"),
    )
}

/// One connection, lent for one statement. Dropped without [`Checkout::finish`] (the statement
/// was cancelled, for example by the operation timeout) it is closed: its state is unknown.
pub(crate) struct Lease<'a, B: SqlBackend> {
    owner: &'a OwnConnections<B>,
    connection: Option<ConnectionOf<B>>,
    _slot: SemaphorePermit<'a>,
}

/// A connection for one statement, from either source.
pub(crate) enum Checkout<'a, B: SqlBackend> {
    Pooled(PoolConnection<B::Database>),
    Own(Lease<'a, B>),
}

impl<B: SqlBackend> Checkout<'_, B> {
    pub(crate) fn connection(&mut self) -> &mut ConnectionOf<B> {
        match self {
            Checkout::Pooled(connection) => connection,
            Checkout::Own(lease) => lease
                .connection
                .as_mut()
                .expect("a lease holds its connection until finished"),
        }
    }

    /// Gives the connection back after its statement. A pooled one goes back to its pool,
    /// which tests it as the application configured. An own one is kept only if the
    /// statement worked: after a failure it may be broken, and so may the idle ones (a server
    /// restart or a network cut breaks them all), so they are all closed and the next
    /// statement connects afresh instead of failing again on a dead socket.
    pub(crate) fn finish(self, statement_worked: bool) {
        let Checkout::Own(mut lease) = self else {
            return;
        };
        if statement_worked {
            if let Some(connection) = lease.connection.take() {
                lease.owner.adopt(connection);
            }
        } else {
            lease.owner.idle().clear();
        }
    }
}
