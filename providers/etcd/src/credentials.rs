//! etcd takes its user name and password apart from the endpoint URL: they are split off here.

use std::fmt;

/// User name and password for etcd's authentication, never printed.
#[derive(Clone)]
pub(crate) struct Credentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

/// Splits `http://user:password@host:2379` into the endpoint without user info
/// (`http://host:2379`) and the percent-decoded user name and password, which etcd takes
/// separately. `None` when the URL has no user info.
pub(crate) fn split_credentials(url: &str) -> (String, Option<(String, String)>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_owned(), None);
    };
    let Some((user_info, host_and_tail)) = rest.rsplit_once('@') else {
        return (url.to_owned(), None);
    };
    let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    (
        format!("{scheme}://{host_and_tail}"),
        Some((percent_decode(user), percent_decode(password))),
    )
}

/// Decodes `%XX` escapes, leaving anything malformed as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && bytes[i + 1].is_ascii_hexdigit()
            && bytes[i + 2].is_ascii_hexdigit()
        {
            let hex = |b: u8| (b as char).to_digit(16).unwrap_or(0) as u8;
            out.push(hex(bytes[i + 1]) * 16 + hex(bytes[i + 2]));
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::split_credentials;

    #[test]
    fn splits_and_decodes_credentials() {
        assert_eq!(
            split_credentials("http://root:p%40ss%3Aw0rd@127.0.0.1:2379"),
            (
                "http://127.0.0.1:2379".to_owned(),
                Some(("root".to_owned(), "p@ss:w0rd".to_owned()))
            )
        );
        assert_eq!(
            split_credentials("http://127.0.0.1:2379"),
            ("http://127.0.0.1:2379".to_owned(), None)
        );
        assert_eq!(
            split_credentials("http://u:100%@h:1").1,
            Some(("u".to_owned(), "100%".to_owned()))
        );
    }
}
