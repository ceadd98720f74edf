//! The URL a builder opens its pool from: its scheme checked against the backend's (a refusal
//! names the scheme alone, never the rest of the URL, which may hold a password), then parsed
//! into connect options with the backend's session settings.

use std::str::FromStr;
use std::time::Duration;

use shedlock_core::{ErrorKind, LockError, Operation};

use crate::backend::{ConnectOptionsOf, SqlBackend};
use crate::connect_failure::connect_error;

/// Makes ring the process's rustls crypto provider unless the application chose one. sqlx's
/// rustls asks rustls for the default provider when a URL asks for TLS, and a build in which
/// another dependency turns on aws-lc-rs too (zookeeper-client's TLS does) has two and no
/// default: rustls would panic inside the connect instead of answering.
#[cfg(feature = "tls")]
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Parses `url` into connect options with the backend's session settings.
pub(crate) fn url_options<B: SqlBackend>(
    url: &str,
    target: &str,
    operation_timeout: Duration,
) -> Result<ConnectOptionsOf<B::Database>, LockError> {
    check_url_scheme::<B>(url)?;
    #[cfg(feature = "tls")]
    install_ring_provider();
    let options = ConnectOptionsOf::<B::Database>::from_str(url).map_err(|e| {
        LockError::backend(
            ErrorKind::Configuration,
            B::PROVIDER,
            Operation::Connect,
            "",
            format!("{target} is not a valid {} URL", B::DATABASE_NAME),
            e,
        )
    })?;
    Ok(B::session_options(options, operation_timeout))
}

/// Refuses a URL whose scheme is not one of `B`'s, naming the scheme (never the rest of the URL,
/// which may hold a password) and the forms `B` accepts.
fn check_url_scheme<B: SqlBackend>(url: &str) -> Result<(), LockError> {
    let Some(refused) = scheme_refusal(url, B::URL_SCHEMES, B::ACCEPTS_FILE_PATH) else {
        return Ok(());
    };
    let mut accepted: Vec<String> = B::URL_SCHEMES
        .iter()
        .map(|scheme| format!("{scheme}://..."))
        .collect();
    if B::ACCEPTS_FILE_PATH {
        accepted.push("a file path".to_owned());
    }
    Err(connect_error::<B>(
        ErrorKind::Configuration,
        format!(
            "{refused}, which is not a {} URL: the {} provider accepts {}",
            B::DATABASE_NAME,
            B::PROVIDER,
            accepted.join(" or ")
        ),
    ))
}

/// What is wrong with `url` for a database whose client reads `schemes` (and file paths, when
/// `file_paths`), or `None` when nothing is.
///
/// The scheme is the text before `://`, or one of `schemes` followed by `:` alone
/// (`sqlite:locks.db`, `sqlite::memory:`). Any other text has none, and is a file path where
/// the database takes one (`locks.db`, `jobs:locks.db`, `C:\locks.db`).
fn scheme_refusal(url: &str, schemes: &[&str], file_paths: bool) -> Option<String> {
    let is_ours = |scheme: &str| {
        schemes
            .iter()
            .any(|accepted| scheme.eq_ignore_ascii_case(accepted))
    };
    let scheme = url
        .split_once("://")
        .map(|(scheme, _)| scheme)
        .or_else(|| {
            url.split_once(':')
                .map(|(scheme, _)| scheme)
                .filter(|scheme| is_ours(scheme))
        })
        .filter(|scheme| is_url_scheme(scheme));
    match scheme {
        Some(scheme) if is_ours(scheme) => None,
        None if file_paths => None,
        Some(scheme) => Some(format!("the URL's scheme is {scheme:?}")),
        None => Some("the URL has no scheme".to_owned()),
    }
}

/// Whether `text` has the form of a URL scheme: a letter, then letters, digits, `+`, `-`, `.`.
fn is_url_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

#[cfg(test)]
mod tests {
    use super::scheme_refusal;

    const POSTGRES: &[&str] = &["postgres", "postgresql"];
    const SQLITE: &[&str] = &["sqlite"];

    #[test]
    fn a_databases_own_schemes_pass_in_any_case_and_in_their_colon_form() {
        for url in [
            "postgres://app:pw@db/x",
            "POSTGRESQL://db",
            "postgres:///x?host=/run/postgresql",
            "postgres:x",
        ] {
            assert_eq!(scheme_refusal(url, POSTGRES, false), None, "{url}");
        }
        for url in ["sqlite://locks.db", "sqlite:locks.db", "sqlite::memory:"] {
            assert_eq!(scheme_refusal(url, SQLITE, true), None, "{url}");
        }
    }

    #[test]
    fn other_schemes_are_named_and_nothing_else_of_the_url() {
        for (url, scheme) in [
            ("redis://:pw@cache:6379", "redis"),
            ("mongodb+srv://app:pw@db/x", "mongodb+srv"),
            ("my-db.v2://db", "my-db.v2"),
            ("x1://db", "x1"),
        ] {
            let refusal = scheme_refusal(url, POSTGRES, false).unwrap();
            assert_eq!(refusal, format!("the URL's scheme is {scheme:?}"), "{url}");
            assert_eq!(scheme_refusal(url, SQLITE, true), Some(refusal), "{url}");
        }
    }

    #[test]
    fn text_without_a_scheme_is_a_file_path_only_where_the_database_takes_one() {
        for text in [
            "locks.db",
            "jobs:locks.db",
            "C:\\locks.db",
            "app:pw@db/x",
            "1x://db",
            "x_y://db",
            "://db",
        ] {
            assert_eq!(
                scheme_refusal(text, POSTGRES, false).as_deref(),
                Some("the URL has no scheme"),
                "{text}"
            );
            assert_eq!(scheme_refusal(text, SQLITE, true), None, "{text}");
        }
    }
}
