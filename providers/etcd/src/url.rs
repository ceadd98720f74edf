//! The endpoint URLs etcd is reached at: which schemes they may have, and how a
//! comma-separated list of them is taken apart.

use shedlock_core::{ErrorKind, LockError, Operation};

use crate::PROVIDER;
use crate::credentials::{self, Credentials};

/// The scheme of an endpoint over TLS, as `etcd-client` reads it.
pub(crate) const HTTPS: &str = "https://";

/// The endpoints of `url`, separated by commas (blanks around them ignored), each checked by
/// [`check_endpoint_scheme`] and without its user info, and the credentials of the first one
/// that has them.
pub(crate) fn split_endpoints(url: &str) -> Result<(Vec<String>, Option<Credentials>), LockError> {
    let mut credentials = None;
    let mut endpoints = Vec::new();
    for part in url
        .split(',')
        .map(str::trim)
        .filter(|part| !part.is_empty())
    {
        check_endpoint_scheme(part)?;
        let (bare, from_url) = credentials::split_credentials(part);
        if let Some((user, password)) = from_url {
            credentials.get_or_insert(Credentials { user, password });
        }
        endpoints.push(bare);
    }
    Ok((endpoints, credentials))
}

/// Refuses an endpoint meant for another backend before the client reads it, naming its scheme
/// (never the rest of the URL, which may hold a password). An endpoint without a scheme
/// (`host:2379`) is plain HTTP, as `etcd-client` reads it.
pub(crate) fn check_endpoint_scheme(endpoint: &str) -> Result<(), LockError> {
    let Some((scheme, _)) = endpoint.split_once("://") else {
        return Ok(());
    };
    let rule = if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") {
        return Ok(());
    } else {
        let scheme = if scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        {
            format!("{scheme:?}")
        } else {
            "not a URL scheme".to_owned()
        };
        format!(
            "the endpoint's scheme is {scheme}, which is not etcd's: the etcd provider accepts \
             http://host:port, https://host:port or host:port, several separated by commas"
        )
    };
    Err(LockError::backend_message(
        ErrorKind::Configuration,
        PROVIDER,
        Operation::Connect,
        "",
        rule,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_split_and_their_schemes_checked() {
        let (endpoints, credentials) =
            split_endpoints(" http://a:1 , ,https://u:p%40@b:2,c:3,http://v:q@d:4").unwrap();
        assert_eq!(
            endpoints,
            ["http://a:1", "https://b:2", "c:3", "http://d:4"]
        );
        let credentials = credentials.unwrap();
        assert_eq!((&*credentials.user, &*credentials.password), ("u", "p@"));
        assert!(!format!("{credentials:?}").contains("p@"));

        assert!(check_endpoint_scheme("HTTPS://a:1").is_ok());
        for (endpoint, named) in [
            ("redis://a:1", "\"redis\""),
            ("http://a:1,postgres://u:secret@b:2", "\"postgres\""),
            ("a b://secret@c:1", "not a URL scheme"),
        ] {
            let error = split_endpoints(endpoint).unwrap_err().to_string();
            assert!(error.contains(named), "{error}");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
