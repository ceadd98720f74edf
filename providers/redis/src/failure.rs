//! How a failed Redis call becomes a [`LockError`]: a timeout, or a backend error with its
//! [`ErrorKind`] and, in words, where the call went and what happened to it.

use std::any::Any;
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager};
use shedlock_core::raw::{bounded, failure_message};
use shedlock_core::{ErrorKind, LockError, Operation};
use tokio::time::Instant;

use crate::PROVIDER;
use crate::connection::RedisConnection;
use crate::provider::Inner;

impl<C> Inner<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Runs one Redis call bounded by the operation timeout, turning its failure into the
    /// [`LockError`] the caller reports. The client's own response timeout is a timeout too,
    /// after the time it took.
    pub(crate) async fn call<T>(
        &self,
        operation: Operation,
        name: &str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        let started = Instant::now();
        let error = match bounded(PROVIDER, operation, name, self.operation_timeout, call).await? {
            Ok(value) => return Ok(value),
            Err(error) if error.is_timeout() => {
                let after = Duration::from_millis(started.elapsed().as_millis() as u64);
                return Err(LockError::timeout(PROVIDER, operation, name, after));
            }
            Err(error) => error,
        };
        let cause = if refused_credentials(&error) {
            "refused the credentials (check the user name and password in the URL)"
        } else if has_code(&error, "READONLY") {
            "refused the write: it is a read-only replica now (give the master's address, or a \
             redis+sentinel:// URL to follow the master across failovers)"
        } else if error.is_io_error() || error.is_connection_refusal() {
            "is unreachable"
        } else {
            "failed"
        };
        let kind = kind_of(&error, operation, self.resends);
        Err(LockError::backend(
            kind,
            PROVIDER,
            operation,
            name,
            failure_message("Redis", &self.endpoint, cause, operation, kind),
            error,
        ))
    }
}

/// Whether `connection` may send a command again after its connection dropped before the
/// answer came, as the cluster client does: then a refused connection at the end does not prove
/// that the first attempt never ran. A connection type this crate does not know is assumed to.
pub(crate) fn may_resend<C: 'static>(connection: &C) -> bool {
    let connection: &dyn Any = connection;
    if let Some(connection) = connection.downcast_ref::<RedisConnection>() {
        return connection.may_resend();
    }
    !(connection.is::<ConnectionManager>() || connection.is::<redis::aio::MultiplexedConnection>())
}

/// What kind of failure the client error `error` is, met during `operation` on a connection
/// that [`may_resend`] (`resends`) commands: from the `redis` crate's error kinds and the
/// server's error codes. The message says the same in words; this is what callers branch on.
pub(crate) fn kind_of(error: &redis::RedisError, operation: Operation, resends: bool) -> ErrorKind {
    use redis::ErrorKind as Client;
    let text = error.to_string();
    let code = |code: &str| has_code(error, code);
    if refused_credentials(error) || code("NOPERM") {
        return ErrorKind::CredentialsRefused;
    }
    // A host name that resolves to nothing, which the redis crate words as a client setting
    // when the lookup answered no address.
    let unresolved = text.contains("failed to lookup address information")
        || text.contains("No address found for host");
    let misconfigured = matches!(
        error.kind(),
        Client::InvalidClientConfig | Client::EmptySentinelList | Client::RESP3NotSupported
    )
        // The URL's database past the server's `databases`, a cluster URL for a single server.
        || text.contains("DB index is out of range")
        || text.contains("cluster support disabled");
    // A replica refused the write: nothing was written, and every write there will be.
    if (misconfigured && !unresolved) || code("READONLY") {
        return ErrorKind::Configuration;
    }
    // Every command here acts on a lock key or its fencing counter, so a key of another type
    // is another application's data under the lock's key.
    if code("WRONGTYPE") {
        return ErrorKind::CorruptData;
    }
    if operation == Operation::Connect {
        return ErrorKind::Unreachable;
    }
    // No connection to send on: the connection manager's reconnect was refused, the cluster
    // has no node for the slot, the sentinels name no master.
    let unsent = unresolved
        || error.is_connection_refusal()
        || matches!(
            error.kind(),
            Client::ClusterConnectionNotFound
                | Client::MasterNameNotFoundBySentinel
                | Client::NoValidReplicasFoundBySentinel
        );
    if unsent && !resends {
        ErrorKind::Unreachable
    } else {
        ErrorKind::OutcomeUnknown
    }
}

/// Whether the server answered with error `code`, as the reply's code or inside a script's
/// error (Redis before 7 words a script's failed call as `ERR Error running script ...:
/// WRONGTYPE ...`).
fn has_code(error: &redis::RedisError, code: &str) -> bool {
    error.code() == Some(code) || error.to_string().contains(code)
}

/// Whether Redis refused the URL's credentials (or asked for some): a wrong password is not
/// an unreachable server, and saying "is it running?" sends the operator the wrong way.
pub(crate) fn refused_credentials(error: &redis::RedisError) -> bool {
    error.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(error.code(), Some("WRONGPASS" | "NOAUTH"))
        // The cluster client reports its seeds' refusal as text only, the inner error's kind
        // flattened into the detail of an I/O error.
        || (error.kind() == redis::ErrorKind::Io
            && error
                .detail()
                .is_some_and(|detail| detail.contains("AuthenticationFailed")))
}

#[cfg(test)]
mod tests {
    use redis::aio::ConnectionManagerConfig;
    use redis::cluster::{ClusterClient, ClusterConfig};

    use super::*;

    fn io(kind: std::io::ErrorKind, text: &str) -> redis::RedisError {
        std::io::Error::new(kind, text.to_owned()).into()
    }

    fn server(code: &str, detail: &str) -> redis::RedisError {
        redis::make_extension_error(code.to_owned(), Some(detail.to_owned()))
    }

    #[test]
    fn client_errors_are_classified_by_what_happened() {
        let refused = || io(std::io::ErrorKind::ConnectionRefused, "refused");
        let reset = || io(std::io::ErrorKind::ConnectionReset, "reset by peer");
        let cases = [
            (
                server("WRONGPASS", "invalid username-password pair"),
                Operation::Acquire,
                false,
                ErrorKind::CredentialsRefused,
            ),
            (
                server(
                    "NOPERM",
                    "this user has no permissions to run the 'evalsha' command",
                ),
                Operation::Release,
                false,
                ErrorKind::CredentialsRefused,
            ),
            (
                redis::RedisError::from((redis::ErrorKind::AuthenticationFailed, "refused")),
                Operation::Connect,
                false,
                ErrorKind::CredentialsRefused,
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "Address does not point to a sentinel node",
                )),
                Operation::Connect,
                false,
                ErrorKind::Configuration,
            ),
            (
                server("ERR", "DB index is out of range"),
                Operation::Connect,
                false,
                ErrorKind::Configuration,
            ),
            (
                redis::RedisError::from((
                    redis::ErrorKind::InvalidClientConfig,
                    "No address found for host",
                )),
                Operation::Connect,
                false,
                ErrorKind::Unreachable,
            ),
            (
                server(
                    "WRONGTYPE",
                    "Operation against a key holding the wrong kind of value",
                ),
                Operation::Inspect,
                false,
                ErrorKind::CorruptData,
            ),
            (
                server(
                    "ERR",
                    "Error running script: @user_script:3: WRONGTYPE Operation",
                ),
                Operation::List,
                false,
                ErrorKind::CorruptData,
            ),
            (reset(), Operation::Connect, false, ErrorKind::Unreachable),
            // A reconnect refused: the command was never sent...
            (refused(), Operation::Acquire, false, ErrorKind::Unreachable),
            // ...unless the connection resends commands, as a cluster's does after a drop.
            (
                refused(),
                Operation::Acquire,
                true,
                ErrorKind::OutcomeUnknown,
            ),
            (
                reset(),
                Operation::Acquire,
                false,
                ErrorKind::OutcomeUnknown,
            ),
            (
                server("BUSY", "Redis is busy running a script"),
                Operation::Extend,
                false,
                ErrorKind::OutcomeUnknown,
            ),
        ];
        for (error, operation, resends, kind) in cases {
            assert_eq!(
                kind_of(&error, operation, resends),
                kind,
                "{error} during {operation} (resends: {resends})"
            );
        }
    }

    #[test]
    fn only_a_cluster_connection_or_an_unknown_one_may_resend() {
        let client = redis::Client::open("redis://127.0.0.1:1").unwrap();
        let cluster = ClusterClient::new(vec!["redis://127.0.0.1:1"]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let manager =
                ConnectionManager::new_lazy_with_config(client, ConnectionManagerConfig::new())
                    .unwrap();
            assert!(!may_resend(&manager));
            assert!(!may_resend(&RedisConnection::from(manager)));
            let cluster = cluster.get_pending_async_connection_with_config(ClusterConfig::new());
            assert!(may_resend(&cluster));
            assert!(may_resend(&RedisConnection::from(cluster)));
            assert!(may_resend(&"a connection of the application's own type"));
        });
    }
}
