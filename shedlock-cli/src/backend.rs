//! From the command line's URL to a connected provider, within a bounded time, with errors that
//! say what to do in the CLI's terms.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use shedlock::scheme::{Backend, Scheme};
use shedlock::{AnyLockProvider, AnyLockProviderBuilder, ConnectError, redact_url};

use crate::Failure;
use crate::progress::Progress;

/// How long connecting, and then each backend request, may take unless `--timeout` says.
pub const DEFAULT_TIMEOUT: &str = "10s";

/// Which backend, and how long to wait for it.
// No `Debug`: the URL may hold a password.
#[derive(Clone, Args)]
pub struct BackendArgs {
    /// The backend's URL: sqlite:path, memory://name, postgres://, mysql://, mariadb://,
    /// redis://, rediss://, etcd://, etcds://, mongodb://, zk:// (see `shedlock --help` for the
    /// features each needs).
    // `hide_env_values`: `--help` must not print a password that SHEDLOCK_URL holds.
    #[arg(long, env = "SHEDLOCK_URL", hide_env_values = true, value_name = "URL")]
    pub url: String,
    /// How long connecting, and then each request to the backend, may take before it fails
    /// (`500ms`, `10s`, `PT1M`).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_TIMEOUT, value_parser = parse_timeout)]
    pub timeout: Duration,
    /// A PEM file of the CA that signed a rediss:// or etcds:// server's certificate, when a
    /// private CA did. (PostgreSQL, MySQL and MongoDB take theirs in the URL: sslrootcert=,
    /// ssl-ca=, tlsCAFile=.)
    #[arg(long, value_name = "PEM_FILE")]
    pub tls_ca_file: Option<PathBuf>,
}

/// A timeout of zero would fail everything at once: refused with the rule.
pub fn parse_timeout(text: &str) -> Result<Duration, String> {
    match shedlock::parse_duration(text) {
        Ok(duration) if duration.is_zero() => Err("a timeout must be longer than zero".to_owned()),
        Ok(duration) => Ok(duration),
        Err(error) => Err(error.to_string()),
    }
}

/// Connects to `url`, giving up after `timeout` whatever the provider's own bounds, with a
/// progress line on a terminal once it takes more than a second.
pub async fn connect(url: &str, args: &ConnectOptions) -> Result<AnyLockProvider, Failure> {
    let builder = builder(url, args)?;
    let progress = Progress::start(format!("connecting to {}", redact_url(url)));
    let connected = connect_with(builder, url, args.timeout).await;
    progress.finish();
    connected
}

/// The facade's builder for `url` with `args`, once this build is known to have its backend.
pub fn builder(url: &str, args: &ConnectOptions) -> Result<AnyLockProviderBuilder, Failure> {
    if let Some((scheme, feature)) = feature_left_out(url) {
        return Err(feature_disabled(&scheme, feature));
    }
    let builder = AnyLockProvider::builder().operation_timeout(args.timeout);
    let Some(path) = &args.tls_ca_file else {
        return Ok(builder);
    };
    let pem = std::fs::read(path).map_err(|error| {
        Failure::from_error(
            &format!(
                "cannot read the CA file {} given by --tls-ca-file: ",
                path.display()
            ),
            &error,
        )
    })?;
    Ok(builder.tls_root_certificate(pem))
}

/// Connects `builder` to `url` within `timeout`, with no progress line: for a command that
/// connects many nodes under a progress line of its own.
pub async fn connect_with(
    builder: AnyLockProviderBuilder,
    url: &str,
    timeout: Duration,
) -> Result<AnyLockProvider, Failure> {
    let shown = redact_url(url);
    let connected = tokio::time::timeout(timeout, builder.connect(url)).await;
    match connected {
        Err(_elapsed) => Err(Failure::Unavailable(format!(
            "no answer from {shown} within {timeout:?} (--timeout): is the host reachable and \
             the server up?"
        ))),
        Ok(Ok(provider)) => Ok(provider),
        Ok(Err(ConnectError::FeatureDisabled { scheme, feature })) => {
            Err(feature_disabled(&scheme, feature))
        }
        Ok(Err(error)) => Err(Failure::from_error("", &error)),
    }
}

/// What [`connect`] needs besides the URL: the part of [`BackendArgs`] a demo node also gets.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// See [`BackendArgs::timeout`].
    pub timeout: Duration,
    /// See [`BackendArgs::tls_ca_file`].
    pub tls_ca_file: Option<PathBuf>,
}

impl BackendArgs {
    /// Connects to the URL these arguments name.
    pub async fn connect(&self) -> Result<AnyLockProvider, Failure> {
        connect(
            &self.url,
            &ConnectOptions {
                timeout: self.timeout,
                tls_ca_file: self.tls_ca_file.clone(),
            },
        )
        .await
    }

    /// The URL as it may be shown.
    pub fn shown_url(&self) -> String {
        redact_url(&self.url)
    }
}

fn feature_disabled(scheme: &str, feature: &str) -> Failure {
    Failure::Error(format!(
        "{scheme}:// URLs need the {feature} backend, which this build of shedlock leaves \
         out: rebuild with `--features {feature}` (cargo install shedlock-cli --features \
         {feature}, or cargo run -p shedlock-cli --features {feature} -- ...)"
    ))
}

/// The scheme of `url` and the feature of this CLI it needs, when that feature is off.
///
/// Cargo builds the facade with every feature any crate of the build asks for, so in a
/// workspace build the facade may reach a backend that this CLI's own features leave out. The
/// CLI promises exactly its own features, so it checks them itself; an unknown scheme is left
/// to the facade, which lists the known ones.
fn feature_left_out(url: &str) -> Option<(String, &'static str)> {
    let scheme = Scheme::of_url(url)?;
    (!built_in(scheme.backend)).then(|| (scheme.name.to_owned(), scheme.backend.name()))
}

/// The backend `url` names, called as its feature is (`postgres` for `postgresql://` too);
/// `None` for a scheme no backend has.
pub fn backend_name(url: &str) -> Option<&'static str> {
    Scheme::of_url(url).map(|scheme| scheme.backend.name())
}

/// Whether this build of the CLI has `backend`'s feature.
fn built_in(backend: Backend) -> bool {
    match backend {
        Backend::Memory => cfg!(feature = "memory"),
        Backend::Sqlite => cfg!(feature = "sqlite"),
        Backend::Postgres => cfg!(feature = "postgres"),
        Backend::Mysql => cfg!(feature = "mysql"),
        Backend::Redis => cfg!(feature = "redis"),
        Backend::Etcd => cfg!(feature = "etcd"),
        Backend::Mongo => cfg!(feature = "mongo"),
        Backend::Zookeeper => cfg!(feature = "zookeeper"),
        // A backend newer than this CLI: it cannot have been built in.
        _ => false,
    }
}
