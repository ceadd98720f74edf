//! The URL schemes this crate connects with, and the refusal of any other before anything
//! reads the URL.

use shedlock_core::{ErrorKind, LockError, Operation};

use crate::PROVIDER;
use crate::topology::Topology;

/// A URL scheme this crate connects with: what it names, and whether over TLS.
#[derive(Debug, Clone, Copy)]
pub(crate) struct UrlScheme {
    pub(crate) name: &'static str,
    pub(crate) topology: Topology,
    pub(crate) tls: bool,
}

const fn scheme(name: &'static str, topology: Topology, tls: bool) -> UrlScheme {
    UrlScheme {
        name,
        topology,
        tls,
    }
}

/// Every URL scheme accepted: the `redis` crate's own (one server over plain TCP, over TLS with
/// this crate's `tls-rustls` feature, or over a Unix socket), and this crate's cluster and
/// sentinel forms ([`topology`](crate::topology)), under Redis' and Valkey's names.
const URL_SCHEMES: &[UrlScheme] = &[
    scheme("redis", Topology::Server, false),
    scheme("rediss", Topology::Server, true),
    scheme("valkey", Topology::Server, false),
    scheme("valkeys", Topology::Server, true),
    scheme("redis+unix", Topology::Server, false),
    scheme("valkey+unix", Topology::Server, false),
    scheme("unix", Topology::Server, false),
    scheme("redis+cluster", Topology::Cluster, false),
    scheme("rediss+cluster", Topology::Cluster, true),
    scheme("valkey+cluster", Topology::Cluster, false),
    scheme("valkeys+cluster", Topology::Cluster, true),
    scheme("redis+sentinel", Topology::Sentinel, false),
    scheme("rediss+sentinel", Topology::Sentinel, true),
    scheme("valkey+sentinel", Topology::Sentinel, false),
    scheme("valkeys+sentinel", Topology::Sentinel, true),
];

/// The entry of [`URL_SCHEMES`] for `url`'s scheme, if it has one.
fn url_scheme(url: &str) -> Option<UrlScheme> {
    let (name, _) = url.split_once("://")?;
    URL_SCHEMES
        .iter()
        .find(|accepted| name.eq_ignore_ascii_case(accepted.name))
        .copied()
}

/// Refuses a URL meant for another backend before anything reads it, naming its scheme (never
/// the rest of the URL, which may hold a password) and the accepted ones; and a TLS URL when
/// this build has no TLS, naming the feature that adds it.
pub(crate) fn check_url_scheme(url: &str) -> Result<UrlScheme, LockError> {
    let name = url
        .split_once("://")
        .map(|(scheme, _)| scheme)
        .filter(|scheme| is_url_scheme(scheme));
    let refused = match (name, url_scheme(url)) {
        (Some(name), Some(scheme)) => {
            if scheme.tls && !cfg!(feature = "tls") {
                return Err(LockError::backend_message(
                    ErrorKind::Configuration,
                    PROVIDER,
                    Operation::Connect,
                    "",
                    format!(
                        "the URL's scheme {name:?} asks for TLS, which this build leaves out: \
                         enable the \"tls-rustls\" feature of shedlock-redis (on by default), or \
                         the \"rustls\" feature of shedlock"
                    ),
                ));
            }
            return Ok(scheme);
        }
        (Some(name), None) => format!("the URL's scheme is {name:?}"),
        (None, _) => "the text is not a URL (no scheme:// in front)".to_owned(),
    };
    Err(LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        format!(
            "{refused}, which is not a Redis URL: the redis provider accepts {}",
            URL_SCHEMES
                .iter()
                .map(|scheme| format!("{}://...", scheme.name))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    ))
}

/// Whether `text` has the form of a URL scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_url_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}
