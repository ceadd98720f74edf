//! Every Redis command and script this provider sends, and the key layout they act on.
//!
//! One lock is one string key, `<prefix>:<env>:<name>` (ShedLock's `job-lock:default:<name>`),
//! whose value is ShedLock's `ADDED:<ISO-8601 UTC, ms>@<holder>:<uuid>`, unique per
//! acquisition, and whose TTL is the lock's expiry. Redis counts the TTL, so no node's wall clock
//! takes part in any decision. Each operation is one command or one script on one key (two keys
//! in one hash slot when fencing is on), so it is atomic on a single server and in Redis Cluster.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Script};

/// The most milliseconds a duration may have here: Lua numbers are doubles, exact to 2^53, and
/// Redis refuses expiries past the year 292 million. About 285 years.
pub(crate) const MAX_TTL_MS: u64 = 1 << 53;

/// The key of lock `name`: `<prefix>:<env>:<name>`.
///
/// Neither `prefix` nor `env` may contain `:` (checked when the provider is built), so the key
/// determines prefix, env and name: distinct names stay distinct keys, including names that
/// contain `:` themselves, and no name of one env can collide with a name of another.
pub(crate) fn lock_key(prefix: &str, env: &str, name: &str) -> String {
    format!("{prefix}:{env}:{name}")
}

/// The key of the fencing counter of the lock whose key is `lock_key`: `{<lock key>}:fencing`.
///
/// Redis Cluster hashes only the part between the first `{` and the next `}` when a key has
/// one, so this key lands in the same slot as the lock key itself, which the acquire script
/// needs (a script may only touch keys of one slot). That holds only while the lock key has no
/// `{` or `}` of its own, which is why fencing refuses such names.
pub(crate) fn fencing_key(lock_key: &str) -> String {
    format!("{{{lock_key}}}:fencing")
}

/// The value of one acquisition: ShedLock's `ADDED:<ISO-8601 UTC, ms>@<holder>:<uuid>`.
///
/// The time is informational (ShedLock writes it too; nothing compares it). The UUID makes the
/// value unique per acquisition, so release and extend, which compare the whole value, only ever
/// touch the acquisition that wrote it.
pub(crate) fn lock_value(holder: &str) -> String {
    let added = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    format!("ADDED:{added}@{holder}:{}", uuid::Uuid::new_v4())
}

/// `duration` in whole milliseconds, rounded up (a sub-millisecond lock still holds for 1 ms),
/// or `None` past [`MAX_TTL_MS`].
pub(crate) fn ceil_millis(duration: Duration) -> Option<u64> {
    let millis = duration.as_nanos().div_ceil(1_000_000);
    u64::try_from(millis).ok().filter(|&ms| ms <= MAX_TTL_MS)
}

/// Acquire: ShedLock's `SET NX PX`, plus the fencing counter's `INCR` when fencing is on, and
/// on refusal the holder's value and remaining TTL, read in the same script so a skipped run
/// can say who holds the lock without another round trip.
///
/// `KEYS[1]` lock key, `KEYS[2]` (fencing only) its fencing counter (same hash slot);
/// `ARGV[1]` our value, `ARGV[2]` lock_at_most_for in ms. Returns `{1, token}` when the key was
/// set (token 0 without fencing), `{0, value, pttl}` when it exists, `{2, type}` when it exists
/// and is not a string (another application's key: nothing is read or written), and
/// `{3, type}` or `{4, value}` when the fencing counter is not a string, or not a decimal
/// counter of at most 18 digits (checked before the `SET`, so the refusal writes nothing). The
/// counter has no TTL and survives release, so tokens never repeat.
const ACQUIRE: &str = r"
if KEYS[2] then
  local counter = redis.pcall('GET', KEYS[2])
  if type(counter) == 'table' then
    return {3, redis.call('TYPE', KEYS[2]).ok}
  end
  if counter and not (string.match(counter, '^%d+$') and #counter <= 18) then
    return {4, counter}
  end
end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if KEYS[2] then
    return {1, redis.call('INCR', KEYS[2])}
  end
  return {1, 0}
end
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'string' then
  return {2, kind}
end
return {0, redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1])}
";

/// Extend: only while the key still holds our value, set its TTL to the new lock_at_most_for.
///
/// `KEYS[1]` lock key; `ARGV[1]` our value, `ARGV[2]` the new TTL in ms. Returns the TTL the key
/// had just before (ms, >= 0), which tells the caller how long the previous TTL ran on the
/// server's clock; -2 when the key is gone or holds another acquisition's value, or a value of
/// another type than a string (`pcall`: `GET` fails on a hash or a list, which is not ours).
const EXTEND: &str = r"
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return -2
end
local before = redis.call('PTTL', KEYS[1])
if before < 0 then before = 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return before
";

/// Release: only while the key still holds our value, keep it for the rest of
/// lock_at_least_for, else delete it.
///
/// The rest of lock_at_least_for is computed on the server's clock from the key's TTL: the TTL
/// last set was `ARGV[2]` ms, and at that moment `ARGV[3]` ms of lock_at_least_for remained
/// (both known exactly to the caller: they come from the acquire and from what extend returned).
/// What has run since is `ARGV[2] - PTTL`, so what remains is `ARGV[3] - (ARGV[2] - PTTL)`.
///
/// `KEYS[1]` lock key; `ARGV[1]` our value. Returns 1 when the lock was ours (now released,
/// kept for the remaining ms or deleted), 0 when it was not ours (another value, or another
/// type than a string, read with `pcall`) and nothing changed.
const RELEASE: &str = r"
if redis.pcall('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then ttl = 0 end
local remaining = tonumber(ARGV[3]) - (tonumber(ARGV[2]) - ttl)
if remaining > 0 then
  redis.call('PEXPIRE', KEYS[1], math.floor(remaining))
else
  redis.call('DEL', KEYS[1])
end
return 1
";

/// Compare-and-delete: removes the key only if it holds `ARGV[1]`. Used to clean up after an
/// acquire whose answer never came (the `SET` may or may not have been applied); the value is
/// ours alone, so this can never free another acquisition's lock. Returns 1 if deleted; 0 for
/// anything else, a key of another type included.
const DELETE_IF_OURS: &str = r"
if redis.pcall('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// The scripts, hashed once per provider so every call sends `EVALSHA` (the script text goes
/// over the wire only the first time a server sees it, after its `NOSCRIPT` answer).
#[derive(Clone)]
pub(crate) struct Scripts {
    acquire: Script,
    extend: Script,
    release: Script,
    delete_if_ours: Script,
    /// Whether the server takes `SET ... NX ... GET` (Redis 7.0 and later), until one answers
    /// that it does not: then every acquire of this provider runs [`ACQUIRE`].
    set_nx_get: Arc<AtomicBool>,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        Self {
            acquire: Script::new(ACQUIRE),
            extend: Script::new(EXTEND),
            release: Script::new(RELEASE),
            delete_if_ours: Script::new(DELETE_IF_OURS),
            set_nx_get: Arc::new(AtomicBool::new(true)),
        }
    }
}

/// How many replicas must acknowledge a lock's write, and how long the master waits for them:
/// Redis' `WAIT`, sent right behind the write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaWait {
    pub(crate) replicas: u32,
    pub(crate) timeout_ms: u64,
}

/// Runs `script` on `keys` and `args`. With `wait`, a `WAIT` follows in the same pipeline, so
/// the two are one round trip on one connection and the `WAIT` covers the script's writes;
/// the second value is then how many replicas acknowledged them.
///
/// A server that does not know the script yet answers `NOSCRIPT` without running it (nor
/// anything after it that could matter: `WAIT` only waits), so the script is loaded and the
/// pipeline sent again.
async fn evaluate<C: ConnectionLike + Send, T: FromRedisValue>(
    conn: &mut C,
    script: &Script,
    keys: &[&str],
    args: &[String],
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<(T, Option<u32>)> {
    let Some(wait) = wait else {
        let mut invocation = script.prepare_invoke();
        for key in keys {
            invocation.key(*key);
        }
        for arg in args {
            invocation.arg(arg);
        }
        return Ok((invocation.invoke_async(conn).await?, None));
    };
    let mut pipeline = redis::pipe();
    pipeline
        .cmd("EVALSHA")
        .arg(script.get_hash())
        .arg(keys.len())
        .arg(keys)
        .arg(args)
        .cmd("WAIT")
        .arg(wait.replicas)
        .arg(wait.timeout_ms);
    let (answer, acknowledged): (T, u32) = match pipeline.query_async(conn).await {
        Err(error) if error.code() == Some("NOSCRIPT") => {
            script.load_async(conn).await?;
            pipeline.query_async(conn).await?
        }
        answered => answered?,
    };
    Ok((answer, Some(acknowledged)))
}

/// What [`ACQUIRE`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// The key is ours; the new fencing token, when fencing is on.
    Acquired(Option<u64>),
    /// The key holds another acquisition's value, for this many more milliseconds (`None`
    /// when the key has no TTL, which only a hand-made key can lack).
    Held { value: String, ttl_ms: Option<u64> },
    /// The key exists and holds a Redis value of this type (`hash`, `list`...), not a string:
    /// no ShedLock lock, and nothing was written.
    OtherType(String),
    /// The fencing counter holds what this describes (`a Redis hash`, `"seven"`), not a
    /// decimal counter; nothing was written.
    BadCounter(String),
}

/// [`ACQUIRE`], with `counter_key` when fencing is on, and how many replicas acknowledged it
/// when `wait` asks.
pub(crate) async fn acquire<C: ConnectionLike + Send>(
    conn: &mut C,
    scripts: &Scripts,
    key: &str,
    counter_key: Option<&str>,
    value: &str,
    at_most_ms: u64,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<(AcquireReply, Option<u32>)> {
    if counter_key.is_none() && scripts.set_nx_get.load(Ordering::Relaxed) {
        match acquire_by_set_nx_get(conn, key, value, at_most_ms, wait).await? {
            Some(answer) => return Ok(answer),
            None => scripts.set_nx_get.store(false, Ordering::Relaxed),
        }
    }
    let keys: Vec<&str> = std::iter::once(key).chain(counter_key).collect();
    let args = [value.to_owned(), at_most_ms.to_string()];
    let (reply, acknowledged): (Vec<redis::Value>, _) =
        evaluate(conn, &scripts.acquire, &keys, &args, wait).await?;
    Ok((acquire_reply(reply, counter_key.is_some())?, acknowledged))
}

/// An acquire without fencing, where the script has nothing to add: ShedLock's `SET NX PX`
/// with `GET`, which also answers the value it found, and `PTTL`, pipelined (one round trip,
/// and no script to run: a refused attempt costs the server two plain commands where the
/// script made four calls). `None` when the server does not take `GET` beside `NX` (before
/// Redis 7.0): it answers an error and writes nothing.
async fn acquire_by_set_nx_get<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
    value: &str,
    at_most_ms: u64,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<Option<(AcquireReply, Option<u32>)>> {
    let mut pipeline = redis::pipe();
    pipeline
        .cmd("SET")
        .arg(key)
        .arg(value)
        .arg("NX")
        .arg("PX")
        .arg(at_most_ms)
        .arg("GET")
        .cmd("PTTL")
        .arg(key);
    if let Some(wait) = wait {
        pipeline.cmd("WAIT").arg(wait.replicas).arg(wait.timeout_ms);
    }
    // Each command's own answer, errors included, so the `SET`'s refusal is read as such.
    let replies: Vec<redis::Value> = pipeline.ignore_errors().query_async(conn).await?;
    let unexpected = || {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the acquire pipeline answered in an unexpected shape",
        ))
    };
    let mut replies = replies.into_iter();
    let (found, ttl) = (
        replies.next().ok_or_else(unexpected)?,
        replies.next().ok_or_else(unexpected)?,
    );
    let reply = match found {
        redis::Value::Nil => AcquireReply::Acquired(None),
        // A key of another type: nothing was written; its type names it in the error.
        redis::Value::ServerError(error) if error.code() == "WRONGTYPE" => {
            let kind: String = redis::cmd("TYPE").arg(key).query_async(conn).await?;
            return Ok(Some((AcquireReply::OtherType(kind), None)));
        }
        // A server before Redis 7.0 answers `ERR syntax error` (and servers that speak Redis'
        // protocol word it their own way); a `SET` that fails writes nothing, so the script,
        // which any of them runs, takes over and reports any other failure itself.
        redis::Value::ServerError(error) if error.code() == "ERR" => return Ok(None),
        redis::Value::ServerError(error) => return Err(error.into()),
        found => AcquireReply::Held {
            value: redis::from_redis_value(found)?,
            ttl_ms: u64::try_from(redis::from_redis_value::<i64>(ttl)?).ok(),
        },
    };
    let acknowledged = match (wait, replies.next()) {
        (Some(_), Some(count)) => Some(redis::from_redis_value(count)?),
        (None, None) => None,
        _ => return Err(unexpected()),
    };
    Ok(Some((reply, acknowledged)))
}

/// [`ACQUIRE`]'s answer, read.
fn acquire_reply(reply: Vec<redis::Value>, fencing: bool) -> redis::RedisResult<AcquireReply> {
    let unexpected = || {
        redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "the acquire script answered in an unexpected shape",
        ))
    };
    let mut fields = reply.into_iter();
    let outcome: i64 = redis::from_redis_value(fields.next().ok_or_else(unexpected)?)?;
    let fields: Vec<redis::Value> = fields.collect();
    match (outcome, <[redis::Value; 1]>::try_from(fields)) {
        (1, Ok([token])) => {
            let token: u64 = redis::from_redis_value(token)?;
            Ok(AcquireReply::Acquired(fencing.then_some(token)))
        }
        (2, Ok([kind])) => Ok(AcquireReply::OtherType(redis::from_redis_value(kind)?)),
        (3, Ok([kind])) => {
            let kind: String = redis::from_redis_value(kind)?;
            Ok(AcquireReply::BadCounter(format!("a Redis {kind}")))
        }
        (4, Ok([found])) => {
            let found: Vec<u8> = redis::from_redis_value(found)?;
            Ok(AcquireReply::BadCounter(quoted(&String::from_utf8_lossy(
                &found,
            ))))
        }
        (0, Err(fields)) => {
            let [held_by, ttl] = <[redis::Value; 2]>::try_from(fields).map_err(|_| unexpected())?;
            let ttl: i64 = redis::from_redis_value(ttl)?;
            Ok(AcquireReply::Held {
                value: redis::from_redis_value(held_by)?,
                ttl_ms: u64::try_from(ttl).ok(),
            })
        }
        _ => Err(unexpected()),
    }
}

/// `text` quoted, cut to its first 80 characters when longer, for an error message.
pub(crate) fn quoted(text: &str) -> String {
    let head: String = text.chars().take(80).collect();
    if head.len() < text.len() {
        format!("{head:?}... ({} bytes)", text.len())
    } else {
        format!("{text:?}")
    }
}

/// [`EXTEND`]: `Some(ms the previous TTL had left)` when extended, `None` when not ours; and
/// how many replicas acknowledged it when `wait` asks.
pub(crate) async fn extend<C: ConnectionLike + Send>(
    conn: &mut C,
    scripts: &Scripts,
    key: &str,
    value: &str,
    new_ttl_ms: u64,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<(Option<u64>, Option<u32>)> {
    let args = [value.to_owned(), new_ttl_ms.to_string()];
    let (before, acknowledged): (i64, _) =
        evaluate(conn, &scripts.extend, &[key], &args, wait).await?;
    Ok((u64::try_from(before).ok(), acknowledged))
}

/// [`RELEASE`]: `true` when the lock was ours and is now released.
pub(crate) async fn release<C: ConnectionLike + Send>(
    conn: &mut C,
    scripts: &Scripts,
    key: &str,
    value: &str,
    last_ttl_ms: u64,
    least_remaining_at_last_ttl_ms: i64,
) -> redis::RedisResult<bool> {
    let released: i64 = scripts
        .release
        .key(key)
        .arg(value)
        .arg(last_ttl_ms)
        .arg(least_remaining_at_last_ttl_ms)
        .invoke_async(conn)
        .await?;
    Ok(released == 1)
}

/// [`DELETE_IF_OURS`]: `true` when the key held `value` and is now gone.
pub(crate) async fn delete_if_ours<C: ConnectionLike + Send>(
    conn: &mut C,
    scripts: &Scripts,
    key: &str,
    value: &str,
) -> redis::RedisResult<bool> {
    let deleted: i64 = scripts
        .delete_if_ours
        .key(key)
        .arg(value)
        .invoke_async(conn)
        .await?;
    Ok(deleted == 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_layout_is_shedlocks() {
        assert_eq!(
            lock_key("job-lock", "default", "report"),
            "job-lock:default:report"
        );
        assert_eq!(
            fencing_key("job-lock:default:report"),
            "{job-lock:default:report}:fencing"
        );
    }

    #[test]
    fn value_is_shedlocks_format_and_unique() {
        let a = lock_value("host-1");
        let b = lock_value("host-1");
        assert_ne!(a, b);
        let rest = a.strip_prefix("ADDED:").unwrap();
        let (added, holder_uuid) = rest.split_once('@').unwrap();
        chrono::DateTime::parse_from_rfc3339(added).unwrap();
        assert!(added.ends_with('Z') && added.len() == "2024-01-01T00:00:00.000Z".len());
        let (holder, uuid) = holder_uuid.rsplit_once(':').unwrap();
        assert_eq!(holder, "host-1");
        uuid::Uuid::parse_str(uuid).unwrap();
    }

    #[test]
    fn the_holder_shown_is_the_one_in_the_value() {
        assert_eq!(
            shedlock_core::raw::holder_of(&lock_value("host-1")),
            "host-1"
        );
    }

    #[test]
    fn millis_round_up_and_cap() {
        assert_eq!(ceil_millis(Duration::from_micros(1)), Some(1));
        assert_eq!(ceil_millis(Duration::from_millis(250)), Some(250));
        assert_eq!(ceil_millis(Duration::from_micros(250_001)), Some(251));
        assert_eq!(
            ceil_millis(Duration::from_millis(MAX_TTL_MS)),
            Some(MAX_TTL_MS)
        );
        assert_eq!(ceil_millis(Duration::from_millis(MAX_TTL_MS + 1)), None);
        assert_eq!(ceil_millis(Duration::MAX), None);
    }
}
