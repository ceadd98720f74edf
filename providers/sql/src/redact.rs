//! Connection URLs without their secrets, for errors, logs and `Debug`.

/// `url` with the password and any secret-looking query parameter replaced by `***`.
///
/// `postgres://app:s3cret@db:5432/x?sslpassword=k` becomes
/// `postgres://app:***@db:5432/x?sslpassword=***`. Text that is not a URL is kept only up to
/// its scheme, since it may be anything.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        if url.starts_with("sqlite:") {
            // A file path or `:memory:`, with no place for a password.
            return url.to_owned();
        }
        return "<not a URL>".to_owned();
    };
    let (before_query, query) = match rest.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = match before_query.find('/') {
        Some(slash) => before_query.split_at(slash),
        None => (before_query, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => format!("{userinfo}@{host}"),
        },
        None => authority.to_owned(),
    };
    let mut redacted = format!("{scheme}://{authority}{path}");
    if let Some(query) = query {
        let pairs: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((key, _value)) if is_secret_key(key) => format!("{key}=***"),
                _ => pair.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&pairs.join("&"));
    }
    redacted
}

fn is_secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    ["pass", "secret", "token", "key"]
        .iter()
        .any(|word| key.contains(word))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hides_passwords_in_userinfo_and_query() {
        assert_eq!(
            redact_url("postgres://app:s3cret@db:5432/x?sslpassword=k&sslmode=require"),
            "postgres://app:***@db:5432/x?sslpassword=***&sslmode=require"
        );
        assert_eq!(
            redact_url("mysql://root@127.0.0.1:3306/test"),
            "mysql://root@127.0.0.1:3306/test"
        );
        assert_eq!(
            redact_url("mysql://u:p@ss@h/db"),
            "mysql://u:***@h/db",
            "an '@' inside the password"
        );
        assert_eq!(redact_url("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
        assert_eq!(redact_url("sqlite:locks.db"), "sqlite:locks.db");
        assert_eq!(redact_url("s3cret garbage"), "<not a URL>");
    }
}
