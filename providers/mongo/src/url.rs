//! Which connection strings the provider takes, and how one becomes the driver's options.

use std::time::Duration;

use mongodb::options::ClientOptions;
use shedlock_core::{ErrorKind, LockError, Operation};

use crate::credentials;
use crate::failure::{connect_error, kind_of};

/// Refuses a URL meant for another backend before the driver reads it, naming its scheme
/// (never the rest of the URL, which may hold a password) and the accepted ones.
pub(crate) fn check_url_scheme(url: &str) -> Result<(), LockError> {
    let refused = match url.split_once("://") {
        Some((scheme, _))
            if scheme.eq_ignore_ascii_case("mongodb")
                || scheme.eq_ignore_ascii_case("mongodb+srv") =>
        {
            return Ok(());
        }
        Some((scheme, _))
            if scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("the URL's scheme is {scheme:?}")
        }
        _ => "the text is not a URL (no scheme:// in front)".to_owned(),
    };
    Err(connect_error(
        ErrorKind::Configuration,
        format!(
            "{refused}, which is not a MongoDB connection string: the mongo provider accepts \
         mongodb://... or mongodb+srv://..."
        ),
    ))
}

/// Parses `url` into the driver's options, within `timeout`: only a `mongodb+srv://` URL takes
/// time, for its DNS lookup. Errors name the URL as `shown` (redacted) and quote the driver's
/// message with any secret scrubbed.
pub(crate) async fn parse(
    url: &str,
    shown: &str,
    timeout: Duration,
) -> Result<ClientOptions, LockError> {
    let parsing = ClientOptions::parse(url);
    match tokio::time::timeout(timeout, parsing).await {
        Ok(Ok(options)) => Ok(options),
        Ok(Err(error)) => {
            // A malformed string, or for mongodb+srv:// a DNS lookup that failed.
            Err(connect_error(
                kind_of(Operation::Connect, &error),
                format!(
                    "{shown} is not a usable MongoDB connection string: {}",
                    credentials::scrub(&error.to_string(), url)
                ),
            ))
        }
        Err(_) => {
            // Only a mongodb+srv:// URL takes time to parse: its DNS lookup did not end.
            Err(connect_error(
                ErrorKind::Unreachable,
                format!("resolving {shown} took longer than {:?}", timeout),
            ))
        }
    }
}
