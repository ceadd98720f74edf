//! ZooKeeper's connect string has no place for credentials, so digest credentials written in
//! front of it (`user:password@host:2181`) are split off here, and the text kept for messages
//! has the password masked.

use std::fmt;

/// A user name and password for ZooKeeper's `digest` scheme, never printed.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct DigestCredentials {
    pub(crate) user: String,
    pub(crate) password: String,
}

impl DigestCredentials {
    /// What ZooKeeper's `addAuth("digest", ...)` takes: `user:password`.
    pub(crate) fn auth_bytes(&self) -> Vec<u8> {
        format!("{}:{}", self.user, self.password).into_bytes()
    }
}

impl fmt::Debug for DigestCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DigestCredentials")
            .field("user", &self.user)
            .field("password", &"***")
            .finish()
    }
}

/// A connect string taken apart: what the ZooKeeper client connects to, the credentials in
/// front of it if any, and the form that may be shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnectString {
    /// `host:port[,host:port...][/chroot]`, as the client takes it.
    pub(crate) servers: String,
    pub(crate) credentials: Option<DigestCredentials>,
    /// The string as given, with the password replaced by `***`.
    pub(crate) redacted: String,
    /// The scheme of a URL meant for another backend (`redis` in `redis://host`), which the
    /// provider refuses.
    pub(crate) foreign_scheme: Option<String>,
    /// Whether the scheme asks for TLS to every server (`zk+tls://`, `zookeeper+tls://`).
    pub(crate) tls: bool,
}

/// The schemes a connect string may start with, and whether each asks for TLS.
const SCHEMES: [(&str, bool); 4] = [
    ("zookeeper://", false),
    ("zk://", false),
    ("zookeeper+tls://", true),
    ("zk+tls://", true),
];

/// Takes `[zookeeper[+tls]://|zk[+tls]://][user:password@]host:port[,host:port...][/chroot]`
/// apart. The user information ends at the last `@`, so a password may hold any character;
/// `%XX` escapes in the user name and password are decoded.
pub(crate) fn parse(text: &str) -> ConnectString {
    let (scheme, tls, rest) = SCHEMES
        .iter()
        .find_map(|(scheme, tls)| text.strip_prefix(scheme).map(|rest| (*scheme, *tls, rest)))
        .unwrap_or(("", false, text));
    let foreign_scheme = match rest.split_once("://") {
        Some((other, _)) if scheme.is_empty() && is_url_scheme(other) => Some(other.to_owned()),
        _ => None,
    };
    let Some((user_info, servers)) = rest.rsplit_once('@') else {
        return ConnectString {
            servers: rest.to_owned(),
            credentials: None,
            redacted: text.to_owned(),
            foreign_scheme,
            tls,
        };
    };
    let (user, password) = user_info.split_once(':').unwrap_or((user_info, ""));
    let user = percent_decode(user);
    ConnectString {
        servers: servers.to_owned(),
        redacted: format!("{scheme}{user}:***@{servers}"),
        credentials: Some(DigestCredentials {
            user,
            password: percent_decode(password),
        }),
        foreign_scheme,
        tls,
    }
}

/// Whether `text` has the form of a URL scheme: a letter, then letters, digits, `+`, `-`, `.`.
/// A connect string's host list never does, as it holds a `:` before any `://`.
fn is_url_scheme(text: &str) -> bool {
    let mut chars = text.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Decodes `%XX` escapes, leaving anything malformed as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i + 1..i + 3)
            .and_then(|pair| std::str::from_utf8(pair).ok())
            .and_then(|pair| u8::from_str_radix(pair, 16).ok());
        match (bytes[i], escaped) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_connect_strings_are_kept() {
        for text in ["127.0.0.1:2181", "a:2181,b:2181/apps/locks"] {
            let parsed = parse(text);
            assert_eq!(parsed.servers, text);
            assert_eq!(parsed.redacted, text);
            assert_eq!(parsed.credentials, None);
        }
        assert_eq!(parse("zk://h:2181").servers, "h:2181");
        assert_eq!(parse("zk://h:2181").foreign_scheme, None);
        assert!(!parse("zk://h:2181").tls && !parse("h:2181").tls);
        assert_eq!(parse("u:p://w@h:2181").foreign_scheme, None);
    }

    #[test]
    fn the_tls_schemes_ask_for_tls_and_keep_their_scheme_in_the_redacted_form() {
        for text in ["zk+tls://h:2282/app", "zookeeper+tls://h:2282/app"] {
            let parsed = parse(text);
            assert!(parsed.tls, "{text}");
            assert_eq!(parsed.servers, "h:2282/app");
            assert_eq!(parsed.redacted, text);
            assert_eq!(parsed.foreign_scheme, None);
        }
        let parsed = parse("zk+tls://app:s3cret@h:2282");
        assert!(parsed.tls);
        assert_eq!(parsed.redacted, "zk+tls://app:***@h:2282");
    }

    #[test]
    fn urls_of_other_backends_are_recognised_by_their_scheme() {
        assert_eq!(
            parse("redis://:s3cret@h:6379").foreign_scheme.as_deref(),
            Some("redis")
        );
        assert_eq!(
            parse("mongodb+srv://h").foreign_scheme.as_deref(),
            Some("mongodb+srv")
        );
    }

    #[test]
    fn credentials_are_split_off_decoded_and_masked() {
        let parsed = parse("zookeeper://app:p%40ss:w/rd@a:2181,b:2181/chroot");
        assert_eq!(parsed.servers, "a:2181,b:2181/chroot");
        assert_eq!(parsed.redacted, "zookeeper://app:***@a:2181,b:2181/chroot");
        let credentials = parsed.credentials.unwrap();
        assert_eq!(credentials.user, "app");
        assert_eq!(credentials.password, "p@ss:w/rd");
        assert_eq!(credentials.auth_bytes(), b"app:p@ss:w/rd");
        assert!(!format!("{credentials:?}").contains("p@ss"));
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%4"), "%4");
    }
}
