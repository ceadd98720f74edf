//! The `redis` crate's clients for each kind of URL (one server, a Redis Cluster, the master a
//! set of sentinels names), over TLS when the URL asks for it, and the first connection to them,
//! bounded by the operation timeout.

use redis::aio::ConnectionManagerConfig;
use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConfig};
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, ConnectionAddr};
use shedlock_core::{ErrorKind, LockError, Operation};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::PROVIDER;
use crate::builder::RedisLockProviderBuilder;
use crate::failure::{kind_of, refused_credentials};
use crate::scheme::UrlScheme;
use crate::sentinel::SentinelConnection;
use crate::topology::{self, Topology};

impl RedisLockProviderBuilder {
    /// Waits for `connecting` within the operation timeout, turning its failure into an error
    /// that names the redacted URL and what to check.
    ///
    /// `server`: the one server a `redis://` URL names, spoken to in plain RESP once when the
    /// connect fails without a reason of its own (no answer in time, a dropped connection, an
    /// answer the client could not read), to say what answers there instead: a server of
    /// another kind, or a Redis without TLS where the URL asked for TLS.
    pub(crate) async fn bounded_connect<T>(
        &self,
        endpoint: &str,
        scheme: UrlScheme,
        server: Option<&ConnectionAddr>,
        connecting: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, LockError> {
        let target = connect_target(scheme.topology);
        let started = Instant::now();
        let deadline = started + self.settings.operation_timeout();
        // A TLS handshake with a plain Redis never ends (Redis waits for the end of a command
        // that never comes), so a connect to one server that is slow to finish has the server
        // asked in plain RESP meanwhile, beside it: what answers may end the wait at once,
        // where it would time out. A Redis that is merely slow answers the probe as Redis, and
        // the connect goes on.
        let probe = async {
            tokio::time::sleep(PROBE_AFTER).await;
            what_answers(server, scheme.tls).await
        };
        let answered = tokio::select! {
            answered = tokio::time::timeout_at(deadline, connecting) => answered,
            Some(hint) = probe, if server.is_some() => {
                return Err(misconfigured(target, endpoint, started, hint));
            }
        };
        let Ok(answered) = answered else {
            return Err(LockError::backend_message(
                ErrorKind::Unreachable,
                PROVIDER,
                Operation::Connect,
                "",
                format!(
                    "{target} at {endpoint} did not answer within {:?}: is it running and \
                     reachable?",
                    self.settings.operation_timeout()
                ),
            ));
        };
        let error = match answered {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        let text = error.to_string();
        let hint = if refused_credentials(&error) {
            "it refused the credentials: check the user name and password in the URL"
        } else if scheme.tls && text.contains("certificate") {
            "its TLS certificate was not accepted (for a certificate a private CA signed, give \
             that CA to RedisLockProviderBuilder::tls_root_certificate)"
        } else if text.contains("DB index is out of range") {
            "the server has no database of the number the URL's path gives (it has 0 up to its \
             `databases` setting minus one, 16 by default)"
        } else if error.kind() == redis::ErrorKind::MasterNameNotFoundBySentinel {
            "the sentinels name no reachable master of that name: check the master name (the \
             URL's path) against SENTINEL MASTERS"
        } else if scheme.topology == Topology::Sentinel
            && error.kind() == redis::ErrorKind::InvalidClientConfig
        {
            // The redis crate's words for a listed host whose ROLE is not sentinel.
            "a listed host answered but is not a sentinel: check the ports (a sentinel's is \
             26379 unless set)"
        } else if scheme.topology == Topology::Cluster && text.contains("cluster support disabled")
        {
            "the server is not in cluster mode: use a redis:// URL for a single server"
        } else if let Some(hint) = what_answers(server, scheme.tls).await {
            return Err(misconfigured(target, endpoint, started, hint));
        } else {
            "is it running and reachable?"
        };
        Err(LockError::backend(
            kind_of(&error, Operation::Connect, false),
            PROVIDER,
            Operation::Connect,
            "",
            connect_failed(target, endpoint, started, hint),
            error,
        ))
    }

    pub(crate) fn client(
        &self,
        url: &str,
        endpoint: &str,
        tls: bool,
    ) -> Result<(redis::Client, ConnectionManagerConfig), LockError> {
        let client = self.open_client(url, tls).map_err(|error| {
            LockError::backend(
                ErrorKind::Configuration,
                PROVIDER,
                Operation::Connect,
                "",
                format!("invalid Redis URL {endpoint}: {error}"),
                error,
            )
        })?;
        let config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.settings.operation_timeout()))
            .set_connection_timeout(Some(self.settings.operation_timeout()))
            .set_number_of_retries(2);
        Ok((client, config))
    }

    /// The `redis` crate's client for `url`, over TLS when `tls` (the URL's scheme asked for it).
    #[cfg(feature = "tls")]
    fn open_client(&self, url: &str, tls: bool) -> redis::RedisResult<redis::Client> {
        if tls {
            install_ring_provider();
        }
        match self.tls_certificates() {
            Some(certificates) => redis::Client::build_with_tls(url, certificates),
            None => redis::Client::open(url),
        }
    }

    /// The `redis` crate's client for `url`, which
    /// [`check_url_scheme`](crate::scheme::check_url_scheme) found not to ask for TLS: this
    /// build has none.
    #[cfg(not(feature = "tls"))]
    fn open_client(&self, url: &str, _tls: bool) -> redis::RedisResult<redis::Client> {
        redis::Client::open(url)
    }

    /// The CA given to [`tls_root_certificate`](Self::tls_root_certificate), as the `redis`
    /// crate takes it.
    #[cfg(feature = "tls")]
    fn tls_certificates(&self) -> Option<redis::TlsCertificates> {
        self.tls_root_certificate
            .as_ref()
            .map(|pem| redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.clone()),
            })
    }

    /// A cluster client for a `redis+cluster://` URL, with the operation timeout as each
    /// node's connection and response timeout and as the bound of a command with its retries.
    pub(crate) fn cluster_client(
        &self,
        url: &str,
        endpoint: &str,
        tls: bool,
    ) -> Result<(ClusterClient, ClusterConfig), LockError> {
        let parsed = topology::parse_cluster_url(url)
            .map_err(|rule| invalid_url(Topology::Cluster, endpoint, &rule))?;
        let seeds = parsed.seeds.into_iter().map(|node| address(node, tls));
        // The builder's response timeout also bounds a command's retries and redirects; the
        // config repeats both timeouts, as the connection takes its own over the builder's.
        let mut builder = ClusterClientBuilder::new(seeds)
            .connection_timeout(self.settings.operation_timeout())
            .response_timeout(self.settings.operation_timeout());
        if let Some(username) = &parsed.credentials.username {
            builder = builder.username(username);
        }
        if let Some(password) = &parsed.credentials.password {
            builder = builder.password(password);
        }
        #[cfg(feature = "tls")]
        if tls {
            install_ring_provider();
            if let Some(certificates) = self.tls_certificates() {
                builder = builder.certs(certificates);
            }
        }
        let client = builder
            .build()
            .map_err(|error| invalid_url_error(Topology::Cluster, endpoint, error))?;
        let config = ClusterConfig::new()
            .set_connection_timeout(self.settings.operation_timeout())
            .set_response_timeout(self.settings.operation_timeout());
        Ok((client, config))
    }

    /// The connection to the master a `redis+sentinel://` URL names, not connected yet.
    pub(crate) fn sentinel_connection(
        &self,
        url: &str,
        endpoint: &str,
        tls: bool,
    ) -> Result<SentinelConnection, LockError> {
        let parsed = topology::parse_sentinel_url(url)
            .map_err(|rule| invalid_url(Topology::Sentinel, endpoint, &rule))?;
        let sentinels = parsed.sentinels.into_iter().map(|node| address(node, tls));
        let mut builder =
            SentinelClientBuilder::new(sentinels, &parsed.master_name, SentinelServerType::Master)
                .map_err(|error| invalid_url_error(Topology::Sentinel, endpoint, error))?
                .set_client_to_redis_db(parsed.db);
        if let Some(username) = &parsed.master_credentials.username {
            builder = builder.set_client_to_redis_username(username);
        }
        if let Some(password) = &parsed.master_credentials.password {
            builder = builder.set_client_to_redis_password(password);
        }
        if let Some(username) = &parsed.sentinel_credentials.username {
            builder = builder.set_client_to_sentinel_username(username);
        }
        if let Some(password) = &parsed.sentinel_credentials.password {
            builder = builder.set_client_to_sentinel_password(password);
        }
        #[cfg(feature = "tls")]
        if tls {
            install_ring_provider();
            builder = builder.set_client_to_redis_tls_mode(redis::TlsMode::Secure);
            if let Some(certificates) = self.tls_certificates() {
                builder = builder
                    .set_client_to_redis_certificates(certificates.clone())
                    .set_client_to_sentinel_certificates(certificates);
            }
        }
        let client = builder
            .build()
            .map_err(|error| invalid_url_error(Topology::Sentinel, endpoint, error))?;
        let config = AsyncConnectionConfig::new()
            .set_response_timeout(Some(self.settings.operation_timeout()))
            .set_connection_timeout(Some(self.settings.operation_timeout()));
        Ok(SentinelConnection::new(client, config, parsed.db))
    }
}

/// How long a connect to one server may take before the server is asked, in plain RESP, what
/// it is (a Redis without TLS, for a TLS URL): far longer than a connect takes on a network
/// that works.
const PROBE_AFTER: Duration = Duration::from_millis(500);

/// How long [`what_answers`] waits for a server's first words, on top of a connect that has
/// already failed: a server that says nothing in this time is left unexplained.
const PROBE_LIMIT: Duration = Duration::from_secs(1);

/// What answers at `server` when spoken to in plain RESP (`PING`), as the hint of a connect
/// that failed without a reason of its own: `None` when that tells nothing more.
///
/// - A URL that asked for TLS (`tls`), answered in plain RESP: a Redis without TLS. Its TLS
///   handshake fails without a word (Redis reads the handshake as a command that never ends),
///   so the connect would otherwise only have timed out.
/// - A plain URL whose server answers other than RESP, or closes the connection: another kind
///   of server (PostgreSQL closes on an unknown startup packet, MySQL greets first), or a
///   Redis that takes TLS only.
async fn what_answers(server: Option<&ConnectionAddr>, tls: bool) -> Option<&'static str> {
    let (host, port) = match server? {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
            (host.as_str(), *port)
        }
        _ => return None,
    };
    let first_byte = async {
        let mut stream = TcpStream::connect((host, port)).await.ok()?;
        let mut byte = [0_u8; 1];
        // A server that closes at once may refuse the write: then it read nothing it took.
        let said = match stream.write_all(b"PING\r\n").await {
            Ok(()) => stream.read(&mut byte).await.unwrap_or(0),
            Err(_) => 0,
        };
        Some((said == 1).then_some(byte[0]))
    };
    let answer = tokio::time::timeout(PROBE_LIMIT, first_byte).await.ok()??;
    // RESP's answers to PING: `+PONG`, or an error (`-NOAUTH ...`).
    let speaks_resp = matches!(answer, Some(b'+' | b'-'));
    match (tls, speaks_resp) {
        (true, true) => Some(
            "it answers in plain Redis, without TLS: use a redis:// URL for it (rediss:// asks \
             for TLS), or turn TLS on in the server",
        ),
        (false, false) => Some(
            "something accepts connections there but does not answer as Redis does: check the \
             port (is it another server's, as PostgreSQL's 5432?), or use rediss:// if this \
             Redis takes TLS only",
        ),
        _ => None,
    }
}

/// A connect to `target` that gave up, `hint` saying what to check.
fn connect_failed(target: &str, endpoint: &str, started: Instant, hint: &str) -> String {
    format!(
        "could not connect to {target} at {endpoint} (gave up after {:?}): {hint}",
        started.elapsed()
    )
}

/// A connect that found a setting wrong, `hint` saying which.
fn misconfigured(target: &str, endpoint: &str, started: Instant, hint: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        connect_failed(target, endpoint, started, hint),
    )
}

/// What a URL of `topology` reaches, as the subject of a connection error.
fn connect_target(topology: Topology) -> &'static str {
    match topology {
        Topology::Server => "Redis",
        Topology::Cluster => "the Redis Cluster",
        Topology::Sentinel => "the Redis master named by the sentinels",
    }
}

/// A URL of `topology` that broke `rule`; nothing was connected.
fn invalid_url(topology: Topology, endpoint: &str, rule: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {} URL {endpoint}: {rule}", topology.what()),
    )
}

/// A URL of `topology` that the `redis` crate refused; nothing was connected.
fn invalid_url_error(topology: Topology, endpoint: &str, error: redis::RedisError) -> LockError {
    LockError::backend(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!("invalid {} URL {endpoint}: {error}", topology.what()),
        error,
    )
}

/// `node` as the `redis` crate addresses it; over TLS, the host name must match the node's
/// certificate.
fn address(node: topology::Node, tls: bool) -> ConnectionAddr {
    if tls {
        ConnectionAddr::TcpTls {
            host: node.host,
            port: node.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(node.host, node.port)
    }
}

/// Makes ring the process's rustls crypto provider unless the application chose one: the
/// `redis` crate asks rustls for the default one, and an application whose other dependencies
/// turn on aws-lc-rs too has two and no default, where rustls would panic.
#[cfg(feature = "tls")]
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
