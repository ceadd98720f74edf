//! Connection URLs with their secrets masked, for every error message, log line and `Debug`.

/// `url` with its password (and any secret query parameter) replaced by `***`.
///
/// `http://user:secret@host:2379` becomes `http://user:***@host:2379`; a user-info part with
/// no `:` (`http://token@host`) is masked whole, since it may be a token;
/// `?password=...`, `?pass=...` and `?token=...` are masked too. Text that is not a URL at all is
/// replaced as a whole, because we cannot tell which part of it is secret.
pub(crate) fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return "<not a URL; hidden in case it holds a password>".to_owned();
    };
    // User info ends at the last `@`, searched in the whole rest: a password with an unescaped
    // `/`, `?` or `#` must still be masked (over-masking a path with `@` is harmless).
    let (masked_user, host_and_tail) = match rest.rsplit_once('@') {
        Some((user_info, host_and_tail)) => match user_info.split_once(':') {
            Some((user, _password)) => (format!("{user}:***@"), host_and_tail),
            None => ("***@".to_owned(), host_and_tail),
        },
        None => (String::new(), rest),
    };
    let authority_end = host_and_tail
        .find(['/', '?', '#'])
        .unwrap_or(host_and_tail.len());
    let (host, tail) = host_and_tail.split_at(authority_end);
    let authority = format!("{masked_user}{host}");
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((key, _))
                        if ["pass", "password", "token", "secret"]
                            .contains(&key.to_ascii_lowercase().as_str()) =>
                    {
                        format!("{key}=***")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_owned(),
    };
    format!("{scheme}://{authority}{tail}")
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
    use super::{redact_url, split_credentials};

    #[test]
    fn masks_passwords_and_keeps_the_rest() {
        assert_eq!(
            redact_url("http://root:s3cret@127.0.0.1:2379"),
            "http://root:***@127.0.0.1:2379"
        );
        assert_eq!(
            redact_url("https://tok3n@host:2379"),
            "https://***@host:2379"
        );
        assert_eq!(redact_url("http://127.0.0.1:2379"), "http://127.0.0.1:2379");
        assert_eq!(
            redact_url("http://u:pa/ss?x@host:2379"),
            "http://u:***@host:2379"
        );
        assert!(!redact_url("s3cret-without-scheme").contains("s3cret"));
    }

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
