//! MongoDB connection strings carry secrets in two places the shared redaction does not know
//! about, and the driver may quote a connection string it cannot parse: both are handled here,
//! so no password reaches a message, a log line or `Debug` output.

/// `url` with its password masked, and the value of `authMechanismProperties` too (it can hold
/// an AWS session token).
pub(crate) fn redact(url: &str) -> String {
    let redacted = shedlock_core::redact_url(url);
    let Some((head, query)) = redacted.split_once('?') else {
        return redacted;
    };
    let query: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((key, _)) if key.eq_ignore_ascii_case("authMechanismProperties") => {
                format!("{key}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{head}?{}", query.join("&"))
}

/// `message` (a driver's error text about `url`) with every secret of `url` taken out: its
/// user info, its password and the values of query parameters that hold secrets, raw or
/// percent-decoded, each replaced by `***`.
pub(crate) fn scrub(message: &str, url: &str) -> String {
    let mut secrets = Vec::new();
    if let Some((_, rest)) = url.split_once("://") {
        let (user_info, tail) = match rest.rsplit_once('@') {
            Some((user_info, tail)) => (Some(user_info), tail),
            None => (None, rest),
        };
        if let Some(user_info) = user_info {
            secrets.push(user_info.to_owned());
            if let Some((_, password)) = user_info.split_once(':') {
                secrets.push(password.to_owned());
            }
        }
        if let Some((_, query)) = tail.split_once('?') {
            secrets.extend(query.split('&').filter_map(|pair| {
                let (key, value) = pair.split_once('=')?;
                is_secret_parameter(key).then(|| value.to_owned())
            }));
        }
    }
    let decoded: Vec<String> = secrets
        .iter()
        .map(|secret| percent_decode(secret))
        .collect();
    secrets.extend(decoded);
    // Longest first, so a password inside the user info is not left half-masked.
    secrets.retain(|secret| secret.len() >= 3);
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    let mut scrubbed = message.replace(url, &redact(url));
    for secret in &secrets {
        scrubbed = scrubbed.replace(secret.as_str(), "***");
    }
    scrubbed
}

/// Query parameters whose values are secrets: passwords (`tlsCertificateKeyFilePassword`),
/// tokens and keys, and `authMechanismProperties`.
fn is_secret_parameter(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key == "authmechanismproperties"
        || ["pass", "secret", "token", "key"]
            .iter()
            .any(|word| key.contains(word))
}

/// Decodes `%XX` escapes, leaving anything malformed as it is.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escaped = (bytes[i] == b'%' && i + 2 < bytes.len())
            .then(|| std::str::from_utf8(&bytes[i + 1..i + 3]).ok())
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match escaped {
            Some(byte) => {
                out.push(byte);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
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
    fn masks_passwords_and_mechanism_properties() {
        assert_eq!(
            redact("mongodb://app:s3cret@h1:27017,h2:27017/db?replicaSet=rs0"),
            "mongodb://app:***@h1:27017,h2:27017/db?replicaSet=rs0"
        );
        assert_eq!(
            redact(
                "mongodb+srv://h/db?authMechanism=MONGODB-AWS&authMechanismProperties=AWS_SESSION_TOKEN:t0k"
            ),
            "mongodb+srv://h/db?authMechanism=MONGODB-AWS&authMechanismProperties=***"
        );
        assert_eq!(
            redact("mongodb://127.0.0.1:27017"),
            "mongodb://127.0.0.1:27017"
        );
    }

    #[test]
    fn scrubs_every_form_of_the_secret_from_a_message() {
        let url = "mongodb://app:p%40ss%3Aw0rd@host:99999/db?retryWrites=true&tlsCertificateKeyFilePassword=k3y";
        let message = format!(
            "invalid port in {url}: user app, password p@ss:w0rd, raw p%40ss%3Aw0rd, key k3y, true"
        );
        let scrubbed = scrub(&message, url);
        for secret in ["p@ss:w0rd", "p%40ss%3Aw0rd", "k3y"] {
            assert!(!scrubbed.contains(secret), "{scrubbed}");
        }
        assert!(scrubbed.contains("host:99999"), "{scrubbed}");
        assert!(
            scrubbed.ends_with(", true"),
            "other values are kept: {scrubbed}"
        );
    }
}
