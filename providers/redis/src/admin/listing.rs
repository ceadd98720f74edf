//! Listing Redis locks page by page, for
//! [`LockAdmin::list_locks`](shedlock_core::LockAdmin::list_locks).
//!
//! Listing scans the keyspace with `SCAN <cursor> MATCH <prefix>* COUNT <n>` inside the page's
//! script, so a page is one round trip and never loads more than one page of keys. `SCAN` has
//! no order, and Redis guarantees only that a key present for the whole scan is returned at
//! least once: a key may come twice if the keyspace is resized during the listing. Fencing
//! counters (`{<lock key>}:fencing`) never match the pattern: they start with a `{` that no lock
//! key of a fencing provider has.
//!
//! A Redis Cluster spreads keys over masters, and `SCAN` sees one node's keys only. A listing
//! there goes master by master, each page's script routed to one master by a key of a slot it
//! serves; the cursor names that slot and the `SCAN` cursor on that master. Its first page
//! costs two round trips: the first script finds it runs on a cluster. A listing running while
//! slots move between masters may miss or repeat the keys that move.

use std::sync::LazyLock;
use std::time::SystemTime;

use redis::Script;
use redis::aio::ConnectionLike;
use shedlock_core::{LockError, LockPage, Operation, PageCursor, PageRequest};

use super::{StoredLock, server_time, unexpected};
use crate::{PROVIDER, RedisLockProvider, storage};

/// How many `SCAN` calls one page's script makes at most: a prefix matching few keys of a large
/// keyspace then yields short (even empty) pages instead of blocking Redis for a whole scan.
const MAX_SCANS_PER_PAGE: usize = 16;

/// The body of the page script, shared by its single-server and cluster forms.
///
/// `ARGV[1]` the `SCAN` cursor, `ARGV[2]` the `MATCH` pattern, `ARGV[3]` the page's limit,
/// `ARGV[4]` `1` to read fencing counters, `ARGV[5]` `1` when routed to one cluster master,
/// `ARGV[6]` the most `SCAN` calls, `ARGV[7..]` the keys earlier pages already took from the
/// batch this cursor returns (none, usually). Each `SCAN` asks for as many keys as the page
/// still lacks, but `COUNT` is a hint: one hash bucket can hold more matching keys than that. A
/// batch that would overflow a page that already has locks is left whole for the next page
/// (its cursor is not taken). A first batch larger than the page is sorted byte-wise and cut at
/// the limit; the next page runs the same cursor again and leaves out exactly the keys taken
/// so far. Leaving out a set, not "everything up to the last key taken", is what keeps the
/// promise of `SCAN` (a key present throughout is listed) when the keyspace shrinks between
/// the pages: the same cursor then covers more keys than it did, keys that no page took yet
/// and that may sort anywhere.
///
/// Returns `{'cluster'}` when not routed but on a cluster (where one node's `SCAN` would be a
/// partial listing); otherwise `{cursor, the keys taken from its batch so far (empty unless
/// cut), time seconds, time microseconds, this master's lowest slot or -1, the next master's
/// lowest slot or -1, then key, value, pttl, fencing counter ('') for each lock}`.
const LIST_BODY: &str = r"
local cursor, pattern = ARGV[1], ARGV[2]
local limit, fencing, routed = tonumber(ARGV[3]), ARGV[4] == '1', ARGV[5] == '1'
local taken, carried = {}, {}
for i = 7, #ARGV do
  taken[ARGV[i]] = true
  carried[#carried + 1] = ARGV[i]
end
if not routed and string.find(redis.call('INFO', 'cluster'), 'cluster_enabled:1', 1, true) then
  return {'cluster'}
end
local function bytewise_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end
local locks, cut = {}, false
for _ = 1, tonumber(ARGV[6]) do
  local reply = redis.call('SCAN', cursor, 'MATCH', pattern, 'COUNT', limit - #locks)
  local keys = {}
  for _, key in ipairs(reply[2]) do
    if not taken[key] and redis.call('TYPE', key).ok == 'string' then
      keys[#keys + 1] = key
    end
  end
  -- Only this first SCAN runs the cursor the taken keys came from.
  taken = {}
  if #locks + #keys > limit then
    if #locks > 0 then break end
    table.sort(keys, bytewise_before)
    for i = #keys, limit + 1, -1 do keys[i] = nil end
    for _, key in ipairs(keys) do carried[#carried + 1] = key end
    cut = true
  else
    carried = {}
  end
  for _, key in ipairs(keys) do
    local fence = ''
    if fencing and not string.find(key, '[{}]') then
      fence = redis.call('GET', '{' .. key .. '}:fencing') or ''
    end
    locks[#locks + 1] = {key, redis.call('GET', key), redis.call('PTTL', key), fence}
  end
  if cut then break end
  cursor = reply[1]
  if cursor == '0' or #locks >= limit then break end
end
local here, following = -1, -1
if routed then
  local me = redis.call('CLUSTER', 'MYID')
  local lowest = {}
  for _, range in ipairs(redis.call('CLUSTER', 'SLOTS')) do
    local id, first = range[3][3], range[1]
    if lowest[id] == nil or first < lowest[id] then lowest[id] = first end
  end
  if lowest[me] == nil then
    return redis.error_reply('the node the listing was routed to serves no slots')
  end
  here = lowest[me]
  if cursor == '0' and not cut then
    for _, first in pairs(lowest) do
      if first > here and (following == -1 or first < following) then following = first end
    end
  end
end
local time = redis.call('TIME')
local out = {cursor, carried, time[1], time[2], here, following}
for _, lock in ipairs(locks) do
  for _, field in ipairs(lock) do out[#out + 1] = field end
end
return out
";

/// The page script on one server (or a proxy): no flags, so it runs on Redis before 7 too.
static LIST: LazyLock<Script> = LazyLock::new(|| Script::new(LIST_BODY));

/// The page script on one cluster master. Its `KEYS[1]` only routes it there; the keys it reads
/// are that master's, of any slot, which a cluster allows a script only with
/// `allow-cross-slot-keys` (Redis 7 and later).
static LIST_ON_MASTER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "#!lua flags=no-writes,allow-cross-slot-keys\n{LIST_BODY}"
    ))
});

/// Where a listing goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Position {
    /// The cluster master the listing is on, named by the lowest slot it serves; `None` on one
    /// server.
    master: Option<u16>,
    /// The `SCAN` cursor there.
    scan: String,
    /// The keys earlier pages took from the batch `scan` returns, when that batch was larger
    /// than a page; empty otherwise.
    taken: Vec<Vec<u8>>,
}

impl Position {
    /// A listing's start on one server; on a cluster, the first page's script finds it is
    /// unrouted and the listing starts again at the master serving slot 0.
    fn start() -> Self {
        Self::at(None, "0")
    }

    fn at(master: Option<u16>, scan: &str) -> Self {
        Self {
            master,
            scan: scan.to_owned(),
            taken: Vec::new(),
        }
    }

    /// The cursor text: `[<slot>:]<scan cursor>[/<taken key, in hex>[,<taken key, in hex>...]]`.
    fn encode(&self) -> String {
        let mut text = match self.master {
            Some(slot) => format!("{slot}:{}", self.scan),
            None => self.scan.clone(),
        };
        for (n, key) in self.taken.iter().enumerate() {
            text.push(if n == 0 { '/' } else { ',' });
            for byte in key {
                text.push_str(&format!("{byte:02x}"));
            }
        }
        text
    }

    fn decode(text: &str) -> Option<Self> {
        let (place, taken) = match text.split_once('/') {
            None => (text, Vec::new()),
            Some((place, keys)) => (
                place,
                keys.split(',')
                    .map(decode_hex)
                    .collect::<Option<Vec<_>>>()?,
            ),
        };
        let (master, scan) = match place.split_once(':') {
            None => (None, place),
            Some((slot, scan)) => {
                let slot = slot.parse::<u16>().ok().filter(|&slot| slot < SLOTS)?;
                (Some(slot), scan)
            }
        };
        let is_cursor = !scan.is_empty() && scan.bytes().all(|b| b.is_ascii_digit());
        is_cursor.then(|| Self {
            master,
            scan: scan.to_owned(),
            taken,
        })
    }
}

/// Lowercase hex of a non-empty key back to its bytes.
fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.is_empty() || !hex.len().is_multiple_of(2) || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|at| {
            let pair = &hex[at..at + 2];
            pair.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
                .then(|| u8::from_str_radix(pair, 16).ok())
                .flatten()
        })
        .collect()
}

/// Redis Cluster's hash slots.
const SLOTS: u16 = 16384;

/// CRC16/XMODEM, the hash Redis Cluster maps keys to slots with (`CRC16(key) mod 16384`).
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A key of `slot`, never written: it routes the page script to the master serving `slot`.
/// Its hash tag is the first decimal number whose hash is that slot: some thousands of tries
/// on average, and every slot has one below 110,000.
fn routing_key(slot: u16) -> Option<String> {
    (0u32..110_000)
        .find(|n| crc16(n.to_string().as_bytes()) % SLOTS == slot)
        .map(|n| format!("shedlock-admin-route:{{{n}}}"))
}

/// `text` as a `SCAN MATCH` pattern matching itself only: glob metacharacters escaped.
fn glob_literal(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// One page as the page script read it.
struct ScannedPage {
    /// Where the listing goes on; `None` at its end.
    next: Option<Position>,
    now: SystemTime,
    locks: Vec<(String, StoredLock)>,
}

/// What the page script answered: a page, or that it ran unrouted on a cluster.
enum ListReply {
    Page(ScannedPage),
    Cluster,
}

impl<C> RedisLockProvider<C>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    /// Runs the page script from `position`.
    async fn scan_page(
        &self,
        position: &Position,
        pattern: &str,
        limit: usize,
    ) -> redis::RedisResult<ListReply> {
        let inner = &self.inner;
        let mut connection = inner.connection.clone();
        let (script, routing) = match position.master {
            None => (&*LIST, None),
            Some(slot) => {
                let key = routing_key(slot).ok_or_else(|| unexpected("no routing key"))?;
                (&*LIST_ON_MASTER, Some(key))
            }
        };
        let mut invocation = script.prepare_invoke();
        if let Some(key) = &routing {
            invocation.key(key);
        }
        let reply: Vec<redis::Value> = invocation
            .arg(&position.scan)
            .arg(pattern)
            .arg(limit)
            .arg(if inner.fencing { "1" } else { "0" })
            .arg(if routing.is_some() { "1" } else { "0" })
            .arg(MAX_SCANS_PER_PAGE)
            .arg(&position.taken)
            .invoke_async(&mut connection)
            .await?;
        if reply.len() == 1 {
            return Ok(ListReply::Cluster);
        }
        let mut fields = reply.into_iter();
        let mut field = || fields.next().ok_or_else(|| unexpected("a page too short"));
        let cursor: String = redis::from_redis_value(field()?)?;
        let taken: Vec<Vec<u8>> = redis::from_redis_value(field()?)?;
        let now = server_time(field()?, field()?)?;
        let here: i64 = redis::from_redis_value(field()?)?;
        let following: i64 = redis::from_redis_value(field()?)?;
        let slot = |slot: i64| u16::try_from(slot).map_err(|_| unexpected("a slot"));
        let master = match routing {
            None => None,
            Some(_) => Some(slot(here)?),
        };
        let next = if !taken.is_empty() {
            Some(Position {
                taken,
                ..Position::at(master, &cursor)
            })
        } else if cursor != "0" {
            Some(Position::at(master, &cursor))
        } else if following >= 0 {
            Some(Position::at(Some(slot(following)?), "0"))
        } else {
            None
        };
        let rest: Vec<redis::Value> = fields.collect();
        if !rest.len().is_multiple_of(4) {
            return Err(unexpected("a lock of other than four fields"));
        }
        let mut locks = Vec::with_capacity(rest.len() / 4);
        let mut rest = rest.into_iter();
        while let (Some(key), Some(value), Some(pttl), Some(fence)) =
            (rest.next(), rest.next(), rest.next(), rest.next())
        {
            let key: Vec<u8> = redis::from_redis_value(key)?;
            locks.push((
                String::from_utf8_lossy(&key).into_owned(),
                StoredLock::read(value, pttl, fence)?,
            ));
        }
        Ok(ListReply::Page(ScannedPage { next, now, locks }))
    }

    /// One page of the listing `request` asks for: the body of
    /// [`LockAdmin::list_locks`](shedlock_core::LockAdmin::list_locks).
    pub(super) async fn list_page(&self, request: &PageRequest) -> Result<LockPage, LockError> {
        let inner = &self.inner;
        let position = match &request.after {
            None => Position::start(),
            Some(after) => Position::decode(after.as_str()).ok_or_else(|| {
                LockError::invalid_request(
                    PROVIDER,
                    Operation::List,
                    "",
                    format!(
                        "the page cursor {:?} is not one this provider made: it is a SCAN \
                         cursor, <slot>:<SCAN cursor> on a Redis Cluster, either followed by \
                         /<hex key>[,<hex key>...] within a large batch",
                        after.as_str()
                    ),
                )
            })?,
        };
        let key_start = storage::lock_key(&inner.key_prefix, &inner.env, "");
        let pattern = format!(
            "{}*",
            glob_literal(&format!("{key_start}{}", request.prefix))
        );
        let limit = request.limit.max(1);
        let page = inner
            .call(Operation::List, &request.prefix, async {
                match self.scan_page(&position, &pattern, limit).await? {
                    ListReply::Page(page) => Ok(page),
                    ListReply::Cluster => {
                        if position != Position::start() {
                            return Err(unexpected(
                                "a single-server cursor given to a Redis Cluster",
                            ));
                        }
                        let first = Position::at(Some(0), "0");
                        match self.scan_page(&first, &pattern, limit).await? {
                            ListReply::Page(page) => Ok(page),
                            ListReply::Cluster => Err(unexpected("a routed page")),
                        }
                    }
                }
            })
            .await?;
        let locks = page
            .locks
            .into_iter()
            .filter_map(|(key, stored)| {
                let name = key.strip_prefix(&key_start)?;
                (!name.is_empty()).then(|| stored.info(name.to_owned(), page.now, inner.fencing))
            })
            .collect();
        Ok(LockPage {
            locks,
            next: page.next.map(|next| PageCursor::new(next.encode())),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_redis_clusters() {
        // The reference value of Redis Cluster's specification.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        for slot in [0, 1, 5460, 5461, 10922, 16383] {
            let key = routing_key(slot).unwrap();
            let tag = key.split_once('{').unwrap().1.trim_end_matches('}');
            assert_eq!(crc16(tag.as_bytes()) % SLOTS, slot, "{key}");
        }
    }

    #[test]
    fn glob_characters_match_themselves() {
        assert_eq!(glob_literal(r"a*b?c[d]e\f-g^h"), r"a\*b\?c\[d\]e\\f-g^h");
    }

    #[test]
    fn cursors_round_trip_and_refuse_anything_else() {
        let taken = |keys: &[&[u8]]| Position {
            taken: keys.iter().map(|key| key.to_vec()).collect(),
            ..Position::at(Some(5461), "0")
        };
        for position in [
            Position::start(),
            Position::at(None, "123"),
            Position::at(Some(5461), "77"),
            taken(&[b"job:/a:b"]),
            taken(&[&[0, 0xff, b'/'], b"a,b", b"c"]),
        ] {
            assert_eq!(Position::decode(&position.encode()), Some(position));
        }
        assert_eq!(taken(&[b"a/"]).encode(), "5461:0/612f");
        assert_eq!(taken(&[b"a", b"b,"]).encode(), "5461:0/61,622c");
        for text in [
            "", "x", "1:", ":1", "16384:0", "1:2:3", "-1", "0/", "0/1", "0/zz", "0/AB", "/61",
            "0/é1", "0/61,", "0/,61", "0/61,,62", "0/61,6",
        ] {
            assert_eq!(Position::decode(text), None, "{text:?}");
        }
    }
}
