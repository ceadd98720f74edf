//! Connection URLs with their secrets masked: the one form in which a provider may put a URL
//! into an error, a log line or `Debug` output.

/// `url` with its password, and any query parameter that looks secret, replaced by `***`.
///
/// - `postgres://app:s3cret@db:5432/x` becomes `postgres://app:***@db:5432/x`;
/// - a user-info part with no `:` (`rediss://tok3n@host`) is masked whole, since servers take
///   tokens there;
/// - query parameters whose name contains `pass`, `secret`, `token` or `key`, and MongoDB's
///   `authMechanismProperties` (it can hold an AWS session token), are masked
///   (`?sslpassword=***`), in `sqlite:` URLs too;
/// - user info ends at the last `@` of the whole URL, so a password holding an unescaped `/`,
///   `?`, `#` or `@` is still masked;
/// - `sqlite:` paths, which have no place for a password, are kept (but for secret query
///   parameters); any other text that is not a URL is hidden whole, since nothing tells which
///   part of it is secret.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        if url.starts_with("sqlite:") {
            return match url.split_once('?') {
                Some((path, query)) => format!("{path}?{}", redact_query(query)),
                None => url.to_owned(),
            };
        }
        return "<not a URL; hidden in case it holds a password>".to_owned();
    };
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
    let tail = match tail.split_once('?') {
        Some((path, query)) => format!("{path}?{}", redact_query(query)),
        None => tail.to_owned(),
    };
    format!("{scheme}://{masked_user}{host}{tail}")
}

/// A URL's query with the value of every secret parameter replaced by `***`.
fn redact_query(query: &str) -> String {
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _value)) if is_secret_parameter(key) => format!("{key}=***"),
            _ => pair.to_owned(),
        })
        .collect();
    query.join("&")
}

/// Parameters whose value is a secret: a name containing `pass`, `secret`, `token` or `key`,
/// and MongoDB's `authMechanismProperties`, which can carry an AWS session token.
fn is_secret_parameter(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key == "authmechanismproperties"
        || ["pass", "secret", "token", "key"]
            .iter()
            .any(|word| key.contains(word))
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn masks_passwords_in_user_info() {
        for (url, redacted) in [
            (
                "postgres://app:s3cret@db:5432/x",
                "postgres://app:***@db:5432/x",
            ),
            (
                "redis://:s3cret@127.0.0.1:6379",
                "redis://:***@127.0.0.1:6379",
            ),
            (
                "http://root:s3cret@127.0.0.1:2379",
                "http://root:***@127.0.0.1:2379",
            ),
            ("rediss://tok3n@host", "rediss://***@host"),
            (
                "mysql://root@127.0.0.1:3306/test",
                "mysql://***@127.0.0.1:3306/test",
            ),
            ("mysql://u:p@ss@h/db", "mysql://u:***@h/db"),
            ("postgres://u:pa/ss@h/db", "postgres://u:***@h/db"),
            ("redis://u:pa/ss?x@host/0", "redis://u:***@host/0"),
        ] {
            assert_eq!(redact_url(url), redacted, "{url}");
        }
    }

    #[test]
    fn masks_secret_query_parameters_only() {
        assert_eq!(
            redact_url("postgres://app@db/x?sslpassword=k&sslmode=require"),
            "postgres://***@db/x?sslpassword=***&sslmode=require"
        );
        assert_eq!(
            redact_url("redis+unix:///tmp/redis.sock?db=1&pass=s3cret"),
            "redis+unix:///tmp/redis.sock?db=1&pass=***"
        );
        assert_eq!(
            redact_url(
                "mongodb://h/db?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:t0k"
            ),
            "mongodb://h/db?authMechanism=MONGODB-AWS&authMechanismProperties=***"
        );
        assert_eq!(
            redact_url("mongodb://h/db?AUTHMECHANISMPROPERTIES=SERVICE_NAME:s3cret&w=1"),
            "mongodb://h/db?AUTHMECHANISMPROPERTIES=***&w=1"
        );
        assert_eq!(
            redact_url("sqlite:/var/locks.db?mode=rwc&password=s3cret"),
            "sqlite:/var/locks.db?mode=rwc&password=***"
        );
    }

    #[test]
    fn keeps_what_holds_no_secret() {
        for url in [
            "mysql://127.0.0.1:3306/test",
            "redis://127.0.0.1:6379",
            "http://127.0.0.1:2379",
            "sqlite:///tmp/x.db",
            "sqlite:locks.db",
        ] {
            assert_eq!(redact_url(url), url);
        }
    }

    #[test]
    fn hides_text_that_is_not_a_url() {
        assert!(!redact_url("s3cret garbage").contains("s3cret"));
    }
}
