//! The operator's view of Redis locks ([`LockAdmin`]): listing by `SCAN`, inspecting and
//! force-freeing one key, each in one script so what is shown was read at one moment.
//!
//! Time is Redis' own: a lock's state and time left come from its key's `PTTL`, and
//! `held_until` is the server's `TIME` plus that, read in the same script.
//!
//! Listing, page by page over one server or a cluster's masters, is in [`listing`].

mod listing;

use std::sync::LazyLock;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use redis::Script;
use redis::aio::ConnectionLike;
use shedlock_core::{
    AcquisitionId, ErrorKind, LockAdmin, LockError, LockInfo, LockPage, LockState, Operation,
    PageRequest,
};

use crate::{PROVIDER, RedisLockProvider, storage};

/// Inspect: the key's value and `PTTL`, the fencing counter when `KEYS[2]` is given, and the
/// server's `TIME`, at one moment. Returns `{seconds, microseconds}` when the key does not
/// exist, `{seconds, microseconds, type}` when it holds another type than a string (no lock of
/// ShedLock's), else `{seconds, microseconds, value, pttl, fencing counter or ''}`.
static INSPECT: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local time = redis.call('TIME')
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {time[1], time[2]} end
if kind ~= 'string' then return {time[1], time[2], kind} end
local value = redis.call('GET', KEYS[1])
local fence = ''
if KEYS[2] then fence = redis.call('GET', KEYS[2]) or '' end
return {time[1], time[2], value, redis.call('PTTL', KEYS[1]), fence}
",
    )
});

fn unexpected(what: &str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "a lock admin script answered in an unexpected shape",
        what.to_owned(),
    ))
}

/// The server's `TIME` reply, seconds and microseconds.
fn server_time(seconds: redis::Value, micros: redis::Value) -> redis::RedisResult<SystemTime> {
    let seconds: u64 = redis::from_redis_value(seconds)?;
    let micros: u64 = redis::from_redis_value(micros)?;
    Ok(SystemTime::UNIX_EPOCH + Duration::from_secs(seconds) + Duration::from_micros(micros))
}

/// One key as a script read it.
struct StoredLock {
    value: String,
    pttl_ms: i64,
    fencing_counter: String,
}

impl StoredLock {
    fn read(
        value: redis::Value,
        pttl: redis::Value,
        fencing_counter: redis::Value,
    ) -> redis::RedisResult<Self> {
        let value: Vec<u8> = redis::from_redis_value(value)?;
        Ok(Self {
            value: String::from_utf8_lossy(&value).into_owned(),
            pttl_ms: redis::from_redis_value(pttl)?,
            fencing_counter: redis::from_redis_value(fencing_counter)?,
        })
    }

    /// The lock `name` as read when the server's clock said `now`. The value is the
    /// acquisition: unique to each acquisition (its UUID here, its timestamp in Java's).
    fn info(self, name: String, now: SystemTime, fencing: bool) -> LockInfo {
        let mut info = LockInfo::new(
            name,
            LockState::Held,
            AcquisitionId::new(self.value.clone()),
        )
        .with_locked_by(&self.value);
        if let Some(locked_at) = locked_at(&self.value) {
            info = info.with_locked_at(locked_at);
        }
        if fencing && let Ok(token) = self.fencing_counter.parse::<u64>() {
            info = info.with_fencing_token(token);
        }
        match u64::try_from(self.pttl_ms) {
            Ok(pttl) => info.judged_at(now + Duration::from_millis(pttl), now),
            // -1: a key without a TTL, which only a hand-made key lacks; it holds until deleted.
            Err(_) => info,
        }
    }
}

/// The time of ShedLock's `ADDED:<ISO-8601>@...` value, when it has one.
fn locked_at(value: &str) -> Option<SystemTime> {
    let (added, _) = value.strip_prefix("ADDED:")?.split_once('@')?;
    chrono::DateTime::parse_from_rfc3339(added)
        .ok()
        .map(SystemTime::from)
}

#[async_trait]
impl<C> LockAdmin for RedisLockProvider<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// One page of `SCAN` (unordered); see the crate docs on listing.
    async fn list_locks(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        self.list_page(request).await
    }

    async fn inspect_lock(&self, name: &str) -> Result<Option<LockInfo>, LockError> {
        let key = self.lock_key(name)?;
        let inner = &self.inner;
        let mut connection = inner.connection.clone();
        let mut invocation = INSPECT.key(&key);
        if inner.fencing {
            invocation.key(storage::fencing_key(&key));
        }
        let reply: Vec<redis::Value> = inner
            .call(
                Operation::Inspect,
                name,
                invocation.invoke_async(&mut connection),
            )
            .await?;
        let shape = |error: redis::RedisError| {
            // The reply is not in the script's shape: an answer that cannot be trusted.
            LockError::backend(
                ErrorKind::OutcomeUnknown,
                PROVIDER,
                Operation::Inspect,
                name,
                format!("Redis at {} answered inspect unexpectedly", inner.endpoint),
                error,
            )
        };
        let mut fields = reply.into_iter();
        let (Some(seconds), Some(micros)) = (fields.next(), fields.next()) else {
            return Err(shape(unexpected("no server time")));
        };
        let now = server_time(seconds, micros).map_err(shape)?;
        let (value, pttl, fence) = (fields.next(), fields.next(), fields.next());
        let (Some(value), Some(pttl), Some(fence)) = (value.clone(), pttl, fence) else {
            let Some(kind) = value else {
                return Ok(None);
            };
            let kind: String = redis::from_redis_value(kind)
                .map_err(|error| shape(redis::RedisError::from(error)))?;
            return Err(LockError::backend_message(
                ErrorKind::CorruptData,
                PROVIDER,
                Operation::Inspect,
                name,
                format!(
                    "the key {key:?} at {} holds a Redis {kind}, not a ShedLock lock (a string): \
                     it is another application's key, and every acquire of this lock fails \
                     while it is there; nothing was changed",
                    inner.endpoint
                ),
            ));
        };
        let stored = StoredLock::read(value, pttl, fence).map_err(shape)?;
        Ok(Some(stored.info(name.to_owned(), now, inner.fencing)))
    }

    /// Deletes the key if it still holds exactly `acquisition`'s value (one script): the lock
    /// is free at once, whatever was left of `lock_at_least_for`. The fencing counter stays.
    async fn force_unlock(
        &self,
        name: &str,
        acquisition: &AcquisitionId,
    ) -> Result<bool, LockError> {
        let key = self.lock_key(name)?;
        if locked_at(acquisition.as_str()).is_none() {
            return Err(LockError::invalid_request(
                PROVIDER,
                Operation::ForceUnlock,
                name,
                format!(
                    "acquisition id {:?} is not a ShedLock lock value (ADDED:<RFC 3339 time>@<holder>, \
                     as every Rust and Java node writes it and a listing or inspect shows it); \
                     nothing was changed",
                    acquisition.as_str()
                ),
            ));
        }
        let inner = &self.inner;
        let mut connection = inner.connection.clone();
        inner
            .call(
                Operation::ForceUnlock,
                name,
                storage::delete_if_ours(
                    &mut connection,
                    &inner.scripts,
                    &key,
                    acquisition.as_str(),
                ),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_and_rust_values_have_a_time() {
        let at = locked_at("ADDED:2024-01-02T03:04:05.678Z@web-3").unwrap();
        assert_eq!(
            at,
            SystemTime::UNIX_EPOCH + Duration::from_millis(1_704_164_645_678)
        );
        assert!(locked_at(&storage::lock_value("host")).is_some());
        assert_eq!(locked_at("set by hand"), None);
    }
}
