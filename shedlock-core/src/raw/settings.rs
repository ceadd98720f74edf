//! The settings that several providers' builders offer alike, each with its one rule and its
//! one explanation, and the one wording of a setting refused.
//!
//! A builder holds these values and keeps its own setters, each a one-line delegation whose
//! doc adds only what is its backend's own (the default, which client timeouts also take the
//! operation timeout); connecting checks them before anything is sent, so a bad setting is a
//! [`ErrorKind::Configuration`] error naming the setting, its value and the rule it broke.

use std::time::Duration;

use crate::storage::{DEFAULT_OPERATION_TIMEOUT, default_holder};
use crate::{ErrorKind, LockError, Operation};

/// Who this node is and how long one of its lock operations may take: the settings every
/// provider whose locks carry a holder offers.
#[derive(Debug, Clone)]
pub struct ProviderSettings {
    holder: String,
    operation_timeout: Duration,
}

impl Default for ProviderSettings {
    /// The host name as holder and [`DEFAULT_OPERATION_TIMEOUT`].
    fn default() -> Self {
        Self {
            holder: default_holder(),
            operation_timeout: DEFAULT_OPERATION_TIMEOUT,
        }
    }
}

impl ProviderSettings {
    /// Who this node is, written into each lock for people reading the storage (the host name
    /// unless set). Ownership does not depend on it: every acquisition also writes an id of
    /// its own, so two processes on one host never release each other's locks.
    pub fn with_holder(self, holder: impl Into<String>) -> Self {
        Self {
            holder: holder.into(),
            ..self
        }
    }

    /// The longest one lock operation may take before it fails with [`LockError::Timeout`]
    /// (default [`DEFAULT_OPERATION_TIMEOUT`]). It must be greater than zero, or no operation
    /// could ever answer.
    pub fn with_operation_timeout(self, timeout: Duration) -> Self {
        Self {
            operation_timeout: timeout,
            ..self
        }
    }

    /// The holder set with [`with_holder`](Self::with_holder).
    pub fn holder(&self) -> &str {
        &self.holder
    }

    /// The timeout set with [`with_operation_timeout`](Self::with_operation_timeout).
    pub fn operation_timeout(&self) -> Duration {
        self.operation_timeout
    }

    /// Refuses an operation timeout of zero, as `provider`'s error.
    pub fn check(&self, provider: &'static str) -> Result<(), LockError> {
        check_positive_duration(provider, "operation timeout", self.operation_timeout)
    }

    /// The holder, taken out for the provider the builder makes.
    pub fn into_holder(self) -> String {
        self.holder
    }
}

/// The first two segments of every key a key-value provider writes, `<prefix>:<env>:<name>`:
/// services that share a server but not their locks use different envs (or prefixes).
#[derive(Debug, Clone)]
pub struct KeyNamespace {
    prefix: String,
    env: String,
}

impl KeyNamespace {
    /// `prefix` and `env`, a provider's defaults (ShedLock's for its backend).
    pub fn new(prefix: &str, env: &str) -> Self {
        Self {
            prefix: prefix.to_owned(),
            env: env.to_owned(),
        }
    }

    /// The first segment of every key. It must not be empty or contain `:`, so that a key
    /// names exactly one prefix, env and lock.
    pub fn with_prefix(self, prefix: impl Into<String>) -> Self {
        Self {
            prefix: prefix.into(),
            ..self
        }
    }

    /// The environment segment, `default` as in ShedLock: services that share a server but
    /// not their locks use different envs. It must not be empty or contain `:`.
    pub fn with_env(self, env: impl Into<String>) -> Self {
        Self {
            env: env.into(),
            ..self
        }
    }

    /// Each segment with the name of its setting, for a provider's own rules on them and for
    /// its errors.
    pub fn segments(&self) -> [(&'static str, &str); 2] {
        [("key prefix", &self.prefix), ("env", &self.env)]
    }

    /// Refuses an empty segment, and one with `:`: two different env and name pairs could
    /// then map to one key.
    pub fn check(&self, provider: &'static str) -> Result<(), LockError> {
        for (what, value) in self.segments() {
            let rule = if value.is_empty() {
                "it must not be empty"
            } else if value.contains(':') {
                "it must not contain ':', the separator of the key layout <prefix>:<env>:<name>; \
                 otherwise two different env/name pairs could map to one key"
            } else {
                continue;
            };
            return Err(invalid_setting(provider, what, value, rule));
        }
        Ok(())
    }

    /// The prefix and the env, taken out for the provider the builder makes.
    pub fn into_parts(self) -> (String, String) {
        (self.prefix, self.env)
    }
}

/// The error of a setting `provider`'s builder refuses: `what` the setting is, its `value`
/// (never a secret) and the `rule` it broke. Nothing was sent.
pub fn invalid_setting(provider: &'static str, what: &str, value: &str, rule: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        provider,
        Operation::Connect,
        "",
        format!("invalid {what} {value:?}: {rule}"),
    )
}

/// Refuses a `timeout` of zero for the setting `what`: nothing could answer within it.
pub fn check_positive_duration(
    provider: &'static str,
    what: &str,
    timeout: Duration,
) -> Result<(), LockError> {
    if timeout.is_zero() {
        return Err(invalid_setting(
            provider,
            what,
            "0s",
            "it must be greater than zero",
        ));
    }
    Ok(())
}

/// The error of a TLS root certificate given with `endpoint` (redacted), which does not use
/// TLS: the certificate would be silently ignored. `fix` says which URL would use it.
pub fn unused_tls_root_certificate(provider: &'static str, endpoint: &str, fix: &str) -> LockError {
    LockError::backend_message(
        ErrorKind::Configuration,
        provider,
        Operation::Connect,
        "",
        format!(
            "a TLS root certificate was set but {endpoint} does not use TLS: {fix}, or leave the \
             certificate out"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_settings_give_back_what_was_set() {
        let settings = ProviderSettings::default()
            .with_holder("node-7")
            .with_operation_timeout(Duration::from_secs(3));
        assert_eq!(settings.holder(), "node-7");
        assert_eq!(settings.operation_timeout(), Duration::from_secs(3));
        assert_eq!(settings.into_holder(), "node-7");
        let defaults = ProviderSettings::default();
        assert_eq!(defaults.operation_timeout(), DEFAULT_OPERATION_TIMEOUT);
        assert_eq!(defaults.into_holder(), default_holder());
    }

    #[test]
    fn a_refused_setting_names_itself_its_value_and_the_rule() {
        let zero = ProviderSettings::default()
            .with_operation_timeout(Duration::ZERO)
            .check("p")
            .expect_err("a zero timeout is refused");
        assert_eq!(zero.kind(), ErrorKind::Configuration);
        assert_eq!(
            zero.to_string(),
            "p: connect failed: invalid operation timeout \"0s\": it must be greater than zero"
        );
        let settings = ProviderSettings::default().with_holder("node-1");
        settings.check("p").expect("the defaults are valid");
        assert_eq!(settings.holder(), "node-1");
        assert_eq!(settings.operation_timeout(), DEFAULT_OPERATION_TIMEOUT);
    }

    #[test]
    fn a_key_segment_is_neither_empty_nor_split_by_the_separator() {
        let keys = KeyNamespace::new("shedlock", "default");
        keys.check("p").expect("the defaults are valid");
        assert_eq!(
            keys.clone().with_env("prod").into_parts(),
            ("shedlock".to_owned(), "prod".to_owned())
        );
        for (keys, message) in [
            (keys.clone().with_prefix(""), "invalid key prefix \"\""),
            (
                keys.clone().with_env("a:b"),
                "invalid env \"a:b\": it must not contain ':'",
            ),
        ] {
            let error = keys.check("p").expect_err("refused");
            assert_eq!(error.kind(), ErrorKind::Configuration);
            assert!(error.to_string().contains(message), "{error}");
        }
    }

    #[test]
    fn an_unused_tls_root_certificate_says_how_to_use_it() {
        let error = unused_tls_root_certificate("p", "redis://host", "use rediss://");
        assert_eq!(error.kind(), ErrorKind::Configuration);
        assert_eq!(
            error.to_string(),
            "p: connect failed: a TLS root certificate was set but redis://host does not use \
             TLS: use rediss://, or leave the certificate out"
        );
    }
}
