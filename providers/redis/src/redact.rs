//! Connection URLs with their secrets masked, for every error message, log line and `Debug`.

/// `url` with its password (and any secret query parameter) replaced by `***`.
///
/// `redis://user:secret@host:6379/0` becomes `redis://user:***@host:6379/0`; a user-info part
/// with no `:` (`redis://token@host`) is masked whole, since some servers take a token there;
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

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn masks_passwords_and_keeps_the_rest() {
        assert_eq!(
            redact_url("redis://user:s3cret@host:6379/2"),
            "redis://user:***@host:6379/2"
        );
        assert_eq!(
            redact_url("redis://:s3cret@127.0.0.1:6379"),
            "redis://:***@127.0.0.1:6379"
        );
        assert_eq!(redact_url("rediss://tok3n@host"), "rediss://***@host");
        assert_eq!(
            redact_url("redis+unix:///tmp/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
        // An `@` inside the password: everything up to the last `@` is user info.
        assert_eq!(redact_url("redis://u:p@ss@host/0"), "redis://u:***@host/0");
        assert_eq!(
            redact_url("redis://u:pa/ss?x@host/0"),
            "redis://u:***@host/0"
        );
        assert!(!redact_url("s3cret-without-scheme").contains("s3cret"));
    }
}
